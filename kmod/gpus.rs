// SPDX-License-Identifier: GPL-2.0
//! A space's GPUs: which GPU each prefetch goes to.
//!
//! A process's VA space registers every GPU it can see, so one fixed
//! destination per space sends every prefetch of an 8-GPU node's workers to
//! one GPU. Instead each GPU fault names its GPU: the fault event carries
//! the faulting processor's id, and uvm.c maps it to that GPU's UUID
//! through what the driver holds for the fault's VA space (the space's
//! registered-GPU mask, then 550's per-space GPU table or, on 580, the
//! fault entry's own `uvm_gpu_t`), on the fault path, under the driver's
//! locks. Nothing here is a fixed table.
//!
//! Per-GPU state of a space ([`SpaceGpus`]):
//! - the GPUs its faults came from, at most [`MAX_SPACE_GPUS`]: processor
//!   id, UUID, and whether the driver refused that UUID for this space
//!   (NV_ERR_INVALID_DEVICE: the GPU left the space; its next fault, which
//!   proves it is back, clears that);
//! - per block, the GPU that last faulted on it (a bounded map of
//!   [`BLOCK_MAP`] entries, [`PROBE`] probes: a block that falls out has no
//!   GPU of its own and takes the next rule);
//! - the GPU that faulted last.
//!
//! A prefetch of a block goes to the GPU that last faulted on it: a block
//! faulted from two GPUs follows the driver's own choice for a fault
//! without read duplication (the faulting processor becomes the block's
//! residency, so the last faulting GPU wins), as the user-space backend
//! does (daemon/src/userspace/route.rs). A block no GPU has faulted on goes
//! to the GPU that faulted last (the fault stream the prediction came
//! from). A fault the fault path could not attribute (no layout for it, a
//! processor outside the space's mask) leaves its block and the "last" GPU
//! unknown, and such blocks go to SET_GPU's destination (or the `gpu_uuid`
//! parameter): the one-GPU fallback. A GPU the space does not use is
//! never a destination: only the driver's answer for this space names one.

use kernel::prelude::*;

/// GPUs one space tracks; faults of more GPUs are treated as unattributed.
pub(crate) const MAX_SPACE_GPUS: usize = 16;
/// Entries of a space's block-to-GPU map (a power of two): 32 KiB.
const BLOCK_MAP: usize = 4096;
/// Slots probed per lookup (bounded work per fault and per prefetch).
const PROBE: usize = 4;

/// The faulting GPU as the fault path named it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FaultGpu {
    /// The driver's processor id (`uvm_processor_id_t`, CPU = 0).
    pub(crate) proc: u32,
    /// The GPU's UUID, as UVM_MIGRATE_PARAMS names a destination.
    pub(crate) uuid: [u8; 16],
}

impl FaultGpu {
    /// The UUID as two native-endian words (the ring's encoding).
    pub(crate) fn uuid_words(&self) -> (u64, u64) {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&self.uuid[..8]);
        hi.copy_from_slice(&self.uuid[8..]);
        (u64::from_ne_bytes(lo), u64::from_ne_bytes(hi))
    }

    /// The inverse of [`FaultGpu::uuid_words`].
    pub(crate) fn from_words(proc: u32, lo: u64, hi: u64) -> Self {
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&lo.to_ne_bytes());
        uuid[8..].copy_from_slice(&hi.to_ne_bytes());
        FaultGpu { proc, uuid }
    }
}

/// One GPU of the space.
#[derive(Clone, Copy)]
struct GpuEntry {
    gpu: FaultGpu,
    /// The driver refused this UUID for the space (NV_ERR_INVALID_DEVICE).
    rejected: bool,
}

/// A space's per-GPU state (see the module comment).
pub(crate) struct SpaceGpus {
    gpus: [Option<GpuEntry>; MAX_SPACE_GPUS],
    /// `block << 8 | (index + 1)`; 0 = empty.
    blocks: VVec<u64>,
    /// Index of the GPU that faulted last; None if unknown.
    last: Option<u8>,
}

/// The home slot of `block` in the map.
fn home(block: u64) -> usize {
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (BLOCK_MAP - 1)
}

impl SpaceGpus {
    /// No GPU known; the block map allocated (ENOMEM).
    pub(crate) fn new() -> Result<Self> {
        Ok(SpaceGpus {
            gpus: [None; MAX_SPACE_GPUS],
            blocks: VVec::from_elem(0u64, BLOCK_MAP, GFP_KERNEL).map_err(|_| ENOMEM)?,
            last: None,
        })
    }

    /// GPUs the space's faults came from.
    pub(crate) fn count(&self) -> usize {
        self.gpus.iter().flatten().count()
    }

    /// True if some GPU can take prefetches.
    pub(crate) fn any_usable(&self) -> bool {
        self.gpus.iter().flatten().any(|g| !g.rejected)
    }

    /// The index of `g`, added if new (None: the table is full).
    fn index_of(&mut self, g: FaultGpu) -> Option<u8> {
        if let Some(i) = self
            .gpus
            .iter()
            .position(|e| e.is_some_and(|e| e.gpu.proc == g.proc))
        {
            // A fault proves the GPU is the space's now (a processor id the
            // driver gave to another GPU takes that GPU's UUID).
            self.gpus[i] = Some(GpuEntry {
                gpu: g,
                rejected: false,
            });
            return Some(i as u8);
        }
        let i = self.gpus.iter().position(Option::is_none)?;
        self.gpus[i] = Some(GpuEntry {
            gpu: g,
            rejected: false,
        });
        Some(i as u8)
    }

    /// A fault on `block`, from `gpu` if the fault path named it.
    pub(crate) fn fault(&mut self, block: u64, gpu: Option<FaultGpu>) {
        let idx = gpu.and_then(|g| self.index_of(g));
        self.last = idx;
        let h = home(block);
        let mut free = None;
        for k in 0..PROBE {
            let j = (h + k) & (BLOCK_MAP - 1);
            let e = self.blocks[j];
            if e != 0 && e >> 8 == block {
                self.blocks[j] = idx.map_or(0, |i| (block << 8) | (u64::from(i) + 1));
                return;
            }
            if e == 0 && free.is_none() {
                free = Some(j);
            }
        }
        if let Some(i) = idx {
            self.blocks[free.unwrap_or(h)] = (block << 8) | (u64::from(i) + 1);
        }
    }

    /// Where a prefetch of `block` goes: (GPU index, UUID), or None if no
    /// GPU of the space is known for it (the caller falls back to SET_GPU).
    pub(crate) fn destination(&self, block: u64) -> Option<(u8, [u8; 16])> {
        let h = home(block);
        let own = (0..PROBE).find_map(|k| {
            let e = self.blocks[(h + k) & (BLOCK_MAP - 1)];
            (e != 0 && e >> 8 == block).then(|| (e & 0xff) as u8 - 1)
        });
        let i = own.or(self.last)?;
        let e = self.gpus.get(usize::from(i)).copied().flatten()?;
        (!e.rejected).then_some((i, e.gpu.uuid))
    }

    /// The driver refused GPU `i`'s UUID for this space.
    pub(crate) fn reject(&mut self, i: u8) {
        if let Some(Some(e)) = self.gpus.get_mut(usize::from(i)) {
            if !e.rejected {
                kernel::pr_warn!(
                    "the driver refused the UUID of GPU (processor {}) for a space (NV_ERR_INVALID_DEVICE): no prefetch to it until it faults there again\n",
                    e.gpu.proc
                );
            }
            e.rejected = true;
        }
    }
}
