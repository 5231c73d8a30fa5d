// SPDX-License-Identifier: GPL-2.0
//! One attached address space: its /dev/nvidia-uvm file, its engine and its
//! counters.

use kernel::prelude::*;

use crate::abi::SpaceStats;
use crate::engine::Engine;
use crate::glue::{FileRef, Owner, PinnedPage};
use crate::gpus::SpaceGpus;
use crate::params::Params;
use crate::pump::Pump;

/// The engine of one space, over kernel-allocated storage.
pub(crate) type SpaceEngine = Engine<VVec<u64>>;

/// An address space attached with ATTACH.
pub(crate) struct Space {
    /// The handle ATTACH returned (never 0, never reused while loaded).
    pub(crate) handle: u64,
    /// Its slot in `State::spaces` and in the ring's attached table.
    pub(crate) slot: usize,
    /// The process that owns the space (SET_EXEC_ID / MARK_* / SET_GPU
    /// check it): a `struct pid`, so a reused number is not the owner.
    pub(crate) owner: Owner,
    /// Where prefetches of blocks no GPU fault named go (SET_GPU, or the
    /// `gpu_uuid` parameter): the one-GPU fallback.
    pub(crate) gpu: Gpu,
    /// The GPUs its faults came from, and which GPU each block goes to
    /// (gpus.rs): where prefetches go first. Boxed: `State` holds
    /// `MAX_SPACES` spaces and is built on the stack at load.
    pub(crate) gpus: KBox<SpaceGpus>,
    /// The driver's perf-events pointer of this space, learnt from its
    /// first fault (eviction events carry only this).
    pub(crate) events: u64,
    /// Our reference on the space's file: migrations go through it, and it
    /// keeps the driver's `uvm_va_space_t` alive while we are attached.
    pub(crate) file: FileRef,
    /// Boxed: an engine is ~1.8 KB, and a stack holding `MAX_SPACES` of
    /// them (SET_PARAMS builds every new engine before it swaps any) would
    /// overflow the kernel's 16 KB stack.
    pub(crate) engine: KBox<SpaceEngine>,
    /// This space's counters in GET_STATS.
    pub(crate) st: SpaceStats,
    /// The shared host loop's candidates, kept between rounds.
    pub(crate) pump: Pump,
    /// The runtime's execution-id page (SET_EXEC_PAGE), published to the
    /// fault path in `feed::FEEDS` while set. While a space has one, its
    /// engine runs in execution-id mode.
    pub(crate) exec: Option<PinnedPage>,
}

/// The fallback prefetch destination of a space: for blocks whose faults
/// named no GPU (gpus.rs says where the others go).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gpu {
    /// No GPU UUID given: such blocks are not prefetched.
    Unknown,
    /// The driver's processor UUID of the GPU (SET_GPU).
    Set([u8; 16]),
    /// The driver answered NV_ERR_INVALID_DEVICE for that UUID: no
    /// prefetch until SET_GPU again.
    Rejected,
}

impl Gpu {
    /// The GET_STATS value (`abi::GPU_*`).
    pub(crate) fn abi(self) -> u64 {
        match self {
            Gpu::Unknown => crate::abi::GPU_UNKNOWN,
            Gpu::Set(_) => crate::abi::GPU_SET,
            Gpu::Rejected => crate::abi::GPU_REJECTED,
        }
    }
}

impl Space {
    /// The driver's `uvm_va_space_t *`, the space's identity in faults.
    pub(crate) fn va_space(&self) -> u64 {
        self.file.va_space()
    }
}

/// A fresh engine with its tables, sized by `p`; ENOMEM if the storage or
/// the box cannot be allocated (or `p` does not fit the engine).
pub(crate) fn new_engine(p: &Params) -> Result<KBox<SpaceEngine>> {
    let storage = VVec::from_elem(0u64, p.storage_words(), GFP_KERNEL).map_err(|_| ENOMEM)?;
    let engine = Engine::new(*p, storage).map_err(|_| ENOMEM)?;
    KBox::new(engine, GFP_KERNEL).map_err(|_| ENOMEM)
}
