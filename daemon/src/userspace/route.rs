//! Which GPU each block goes to: the process's processor table (index to
//! UUID) and, per block, the GPU that last faulted on it.
//!
//! A process's VA space registers every GPU it can see, so "the first GPU
//! of the table" sends every worker's prefetches of an 8-GPU node to GPU 0.
//! Instead each GPU fault event names its processor (`gpuIndex`, the id
//! value the table is indexed by), and a block's prefetches go to the GPU
//! that faulted on it.
//!
//! A block faulted from two GPUs follows the driver's own choice for a
//! fault without read duplication: the faulting processor becomes the
//! block's residency, so the last faulting GPU wins and later prefetches of
//! that block go there. A block an engine predicts but no GPU has faulted
//! on yet goes to the GPU of that engine (lanes.rs: each GPU's engine
//! learns that GPU's fault stream). Evictions need no GPU: UVM_MIGRATE to
//! the CPU moves a block from wherever it is.

use prescient_uvm::{Gpu, ProcessorTable};
use std::collections::HashMap;

/// What a fault's processor index turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Learnt {
    /// A GPU of the table: the block now goes there.
    Gpu(Gpu),
    /// An index the table has no GPU at, even after reading it again: the
    /// block keeps no destination (never a guess).
    Unknown,
}

/// The process's GPUs and the destination of each block faulted on.
#[derive(Debug, Default)]
pub(super) struct Route {
    table: ProcessorTable,
    /// Block to the processor index of the GPU that last faulted on it.
    block_gpu: HashMap<u64, u16>,
    /// Bumped whenever a new table is taken (lanes.rs drops the lanes of
    /// GPUs that left it).
    generation: u64,
    /// The last (index, block) learnt: a fault batch names one block many
    /// times (one event per faulting page), and the map need not see them.
    last_fault: Option<(u16, u64)>,
    /// Faults whose index was in no table (counted, warned once per index).
    pub(super) unknown_faults: u64,
    warned: Vec<u16>,
}

impl Route {
    /// A route over `table`, no block faulted yet.
    pub(super) fn new(table: ProcessorTable) -> Route {
        Route {
            table,
            ..Default::default()
        }
    }

    /// The table in use.
    pub(super) fn table(&self) -> &ProcessorTable {
        &self.table
    }

    /// A fault of processor `index` on `block`. An index the table does
    /// not know is a GPU the process registered after the table was read:
    /// `reread` reads the driver's table again (once per such fault).
    pub(super) fn fault(
        &mut self,
        index: u16,
        block: u64,
        reread: impl FnOnce() -> anyhow::Result<ProcessorTable>,
    ) -> Learnt {
        if self.last_fault == Some((index, block)) {
            if let Some(g) = self.table.gpu(index) {
                return Learnt::Gpu(g);
            }
        }
        if self.table.gpu(index).is_none() {
            match reread() {
                Ok(t) => self.replace(t),
                Err(e) => tracing::warn!("processor table not read again: {e:#}"),
            }
        }
        let Some(gpu) = self.table.gpu(index) else {
            self.unknown(index);
            return Learnt::Unknown;
        };
        self.block_gpu.insert(block, index);
        self.last_fault = Some((index, block));
        Learnt::Gpu(gpu)
    }

    #[cold]
    fn unknown(&mut self, index: u16) {
        self.unknown_faults += 1;
        if !self.warned.contains(&index) {
            self.warned.push(index);
            tracing::warn!(
                index,
                "a GPU fault from processor index {index}, which the process's processor table does not have: its blocks get no prefetch until a fault from a known GPU"
            );
        }
    }

    /// Takes a newly read table. Every GPU that left it (a reset, a MIG
    /// reconfiguration, a process that dropped it) loses its blocks: they
    /// are never prefetched to a GPU the process no longer uses.
    pub(super) fn replace(&mut self, table: ProcessorTable) {
        let old = std::mem::take(&mut self.table);
        self.last_fault = None;
        self.generation += 1;
        for g in old.gpus() {
            if table.gpu(g.index) != Some(*g) {
                self.gone(*g);
            }
        }
        for g in table.gpus() {
            if old.gpu(g.index).is_none() {
                tracing::info!(index = g.index, gpu = %g, "GPU registered in the process's VA space");
            }
        }
        self.table = table;
    }

    #[cold]
    fn gone(&mut self, g: Gpu) {
        let before = self.block_gpu.len();
        self.block_gpu.retain(|_, i| *i != g.index);
        tracing::warn!(
            index = g.index,
            gpu = %g,
            blocks = before - self.block_gpu.len(),
            "GPU left the process's processor table: no more prefetches to it"
        );
    }

    /// Where a prefetch of `block` that the engine of the GPU at index
    /// `asking` predicted goes: the GPU that last faulted on it, else
    /// `asking`'s; None when that GPU is not in the table.
    pub(super) fn destination(&self, block: u64, asking: u16) -> Option<Gpu> {
        self.table.gpu(self.owner(block).unwrap_or(asking))
    }

    /// The index of the GPU that last faulted on `block`, if any did.
    pub(super) fn owner(&self, block: u64) -> Option<u16> {
        self.block_gpu.get(&block).copied()
    }

    /// How many tables have been taken since the first.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use prescient_uvm::ioctl as uvm;

    /// A driver-shaped raw table (`UVM_ID_MAX_PROCESSORS` = 257 entries,
    /// the CPU's UUID at 0, each non-MIG GPU of parent index `p` at id
    /// value `1 + 8 * p`, as uvm_tools.c fills it), read as prescientd does.
    pub(crate) fn table(parents: &[u16]) -> ProcessorTable {
        let mut raw = vec![[0u8; 16]; 32 * 8 + 1];
        raw[0] = uvm::CPU_UUID;
        for &p in parents {
            raw[usize::from(index(p))] = uuid(p);
        }
        ProcessorTable::from_raw(&raw)
    }

    /// The processor index of parent GPU `p` (no MIG).
    pub(crate) fn index(p: u16) -> u16 {
        1 + 8 * p
    }

    pub(crate) fn uuid(p: u16) -> [u8; 16] {
        let mut u = [0x5au8; 16];
        u[15] = p as u8;
        u
    }

    fn no_reread() -> anyhow::Result<ProcessorTable> {
        panic!("the table was read again for a known index")
    }

    #[test]
    fn a_block_goes_to_the_gpu_that_faulted_on_it_among_one_two_or_eight() {
        for n in [1u16, 2, 8] {
            let parents: Vec<u16> = (0..n).collect();
            let mut r = Route::new(table(&parents));
            for p in 0..n {
                let learnt = r.fault(index(p), 100 + u64::from(p), no_reread);
                assert_eq!(learnt, Learnt::Gpu(r.table().gpu(index(p)).unwrap()));
            }
            for p in 0..n {
                // Whichever GPU's engine predicts it, the faulting GPU gets it.
                let d = r.destination(100 + u64::from(p), index(0)).unwrap();
                assert_eq!(d.uuid, uuid(p), "{n} GPUs, block of GPU {p}");
            }
        }
    }

    #[test]
    fn faults_from_gpu_2_send_its_blocks_to_gpu_2_not_the_first() {
        let mut r = Route::new(table(&[0, 1, 2, 3]));
        r.fault(index(2), 7, no_reread);
        assert_eq!(r.destination(7, index(0)).unwrap().uuid, uuid(2));
        // A predicted block no GPU faulted on: the predicting engine's GPU.
        assert_eq!(r.destination(8, index(3)).unwrap().uuid, uuid(3));
        assert_eq!(r.destination(8, index(2)).unwrap().uuid, uuid(2));
    }

    #[test]
    fn the_last_gpu_to_fault_on_a_block_wins() {
        let mut r = Route::new(table(&[0, 1]));
        r.fault(index(0), 7, no_reread);
        r.fault(index(1), 7, no_reread);
        assert_eq!(r.destination(7, index(0)).unwrap().uuid, uuid(1));
        r.fault(index(0), 7, no_reread);
        assert_eq!(r.destination(7, index(0)).unwrap().uuid, uuid(0));
    }

    #[test]
    fn a_late_registered_gpu_is_found_by_reading_the_table_again() {
        let mut r = Route::new(table(&[0]));
        let mut reads = 0;
        let learnt = r.fault(index(1), 9, || {
            reads += 1;
            Ok(table(&[0, 1]))
        });
        assert_eq!(reads, 1);
        assert_eq!(learnt, Learnt::Gpu(r.table().gpu(index(1)).unwrap()));
        assert_eq!(r.destination(9, index(1)).unwrap().uuid, uuid(1));
        assert_eq!(r.unknown_faults, 0);
    }

    #[test]
    fn an_index_in_no_table_gets_no_destination() {
        let mut r = Route::new(table(&[0]));
        let learnt = r.fault(index(3), 9, || Ok(table(&[0])));
        assert_eq!(learnt, Learnt::Unknown);
        assert_eq!(r.owner(9), None, "no GPU faulted yet: no guess");
        // Nor is an engine of a GPU outside the table ever a destination.
        assert_eq!(r.destination(9, index(3)), None);
        assert_eq!(r.unknown_faults, 1);
        // A failed read is no GPU either.
        let learnt = r.fault(index(3), 9, || Err(anyhow::anyhow!("ENODEV")));
        assert_eq!((learnt, r.unknown_faults), (Learnt::Unknown, 2));
    }

    #[test]
    fn a_gpu_that_leaves_the_table_gets_no_more_prefetches() {
        let mut r = Route::new(table(&[0, 1]));
        r.fault(index(0), 5, no_reread);
        r.fault(index(1), 6, no_reread);
        let g = r.generation();
        r.replace(table(&[0]));
        assert_eq!(r.generation(), g + 1);
        assert_eq!(r.destination(5, index(0)).unwrap().uuid, uuid(0));
        // Block 6's GPU is gone: nothing goes there (its lane, dropped
        // with it, would ask in vain), and the block is no GPU's any more.
        assert_eq!(r.destination(6, index(1)), None);
        assert_eq!(r.owner(6), None);
        assert_eq!(r.destination(6, index(0)).unwrap().uuid, uuid(0));
        // A GPU reset that came back under another UUID at the same index
        // is a different GPU: its old blocks are dropped as well.
        r.fault(index(0), 5, no_reread);
        let mut raw = vec![[0u8; 16]; 32 * 8 + 1];
        raw[usize::from(index(0))] = [0x77; 16];
        r.replace(ProcessorTable::from_raw(&raw));
        assert_eq!(r.owner(5), None);
        assert_eq!(r.destination(5, index(0)).unwrap().uuid, [0x77; 16]);
    }
}
