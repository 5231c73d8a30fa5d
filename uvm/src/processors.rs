//! The target's processor table: which GPU each processor index of a tools
//! event names, as UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2 reports it.
//!
//! The driver (uvm_tools.c, `uvm_tools_get_processor_uuid_table_common`)
//! fills `UVM_ID_MAX_PROCESSORS` (32 * 8 + 1 = 257) UUIDs: the CPU's at
//! index 0 and each GPU of the VA space at its id value, which is also the
//! `gpuIndex` of that GPU's V2 fault events. A GPU's id value is
//! `1 + parent index * 8 + MIG sub-index`, so without MIG the GPUs sit at
//! 1, 9, 17, ... and the indices a process sees depend on the node, not on
//! `CUDA_VISIBLE_DEVICES` (which hides GPUs, leaving holes).

use crate::ioctl as uvm;

/// A GPU of the target's VA space, as tools events and UVM_MIGRATE name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Its processor index in tools events (the CPU is [`uvm::CPU_INDEX`]).
    pub index: u16,
    /// Its UUID, the destination UVM_MIGRATE takes.
    pub uuid: [u8; 16],
}

impl std::fmt::Display for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&uvm::uuid_string(&self.uuid))
    }
}

/// `UVM_ID_MAX_PROCESSORS` of the V2 ABI: the CPU and 32 GPUs of 8 MIG
/// sub-processors each.
pub const MAX_PROCESSORS: usize = 32 * 8 + 1;

/// The GPUs registered in one VA space, by processor index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessorTable {
    /// Sorted by index; the CPU is never in it.
    gpus: Vec<Gpu>,
}

impl ProcessorTable {
    /// Reads the driver's raw table: every non-zero UUID past the CPU's
    /// index is a GPU. Entries past [`MAX_PROCESSORS`] are ignored (the
    /// buffer we hand the driver is larger than what it writes).
    pub fn from_raw(raw: &[[u8; 16]]) -> ProcessorTable {
        let gpus = raw
            .iter()
            .enumerate()
            .take(MAX_PROCESSORS)
            .skip(usize::from(uvm::CPU_INDEX) + 1)
            .filter(|(_, u)| u.iter().any(|&b| b != 0))
            .map(|(i, u)| Gpu {
                index: i as u16,
                uuid: *u,
            })
            .collect();
        ProcessorTable { gpus }
    }

    /// The table of these GPUs (tests, and callers that learnt them elsewhere).
    pub fn of(gpus: impl IntoIterator<Item = Gpu>) -> ProcessorTable {
        let mut gpus: Vec<Gpu> = gpus
            .into_iter()
            .filter(|g| g.index != uvm::CPU_INDEX)
            .collect();
        gpus.sort_by_key(|g| g.index);
        gpus.dedup_by_key(|g| g.index);
        ProcessorTable { gpus }
    }

    /// The GPU at processor index `index`, if the VA space has one there.
    pub fn gpu(&self, index: u16) -> Option<Gpu> {
        self.gpus
            .binary_search_by_key(&index, |g| g.index)
            .ok()
            .map(|i| self.gpus[i])
    }

    /// The GPUs, by index.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// The GPU of the lowest index (what a one-destination consumer such as
    /// prescient.ko's SET_GPU takes today).
    pub fn first(&self) -> Option<Gpu> {
        self.gpus.first().copied()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A driver-shaped raw table (`UVM_ID_MAX_PROCESSORS` entries, the CPU
    /// at 0) with `n` non-MIG GPUs of parent indices `0..n`, each at id
    /// value `1 + 8 * parent`, UUID bytes `[0xg0 + parent, ...]`.
    pub(crate) fn raw_table(parents: &[u16]) -> Vec<[u8; 16]> {
        let mut t = vec![[0u8; 16]; MAX_PROCESSORS];
        t[0] = uvm::CPU_UUID;
        for &p in parents {
            t[usize::from(1 + 8 * p)] = uuid_of(p);
        }
        t
    }

    pub(crate) fn uuid_of(parent: u16) -> [u8; 16] {
        let mut u = [0x11u8; 16];
        u[0] = 0xa0;
        u[15] = parent as u8;
        u
    }

    #[test]
    fn tables_of_one_two_and_eight_gpus_name_each_gpu_at_its_id_value() {
        for n in [1u16, 2, 8] {
            let parents: Vec<u16> = (0..n).collect();
            let t = ProcessorTable::from_raw(&raw_table(&parents));
            assert_eq!(t.gpus().len(), usize::from(n));
            for p in 0..n {
                assert_eq!(t.gpu(1 + 8 * p).map(|g| g.uuid), Some(uuid_of(p)));
            }
            assert_eq!(t.gpu(uvm::CPU_INDEX), None, "the CPU is not a GPU");
            assert_eq!(t.gpu(2), None, "a hole between GPUs");
            assert_eq!(t.first().map(|g| g.index), Some(1));
        }
    }

    #[test]
    fn hidden_gpus_leave_holes_and_an_empty_table_has_none() {
        // CUDA_VISIBLE_DEVICES=2,5: the VA space registers two GPUs only.
        let t = ProcessorTable::from_raw(&raw_table(&[5, 2]));
        let idx: Vec<u16> = t.gpus().iter().map(|g| g.index).collect();
        assert_eq!(idx, vec![17, 41]);
        assert_eq!(t.first().map(|g| g.uuid), Some(uuid_of(2)));
        assert_eq!(ProcessorTable::from_raw(&raw_table(&[])).first(), None);
        // A buffer larger than the driver's table: the tail is not read.
        let mut big = raw_table(&[0]);
        big.resize(1024, [0xff; 16]);
        assert_eq!(ProcessorTable::from_raw(&big).gpus().len(), 1);
    }
}
