// SPDX-License-Identifier: GPL-2.0
//! One attached address space: its /dev/nvidia-uvm file, its engine and its
//! counters.

use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

use crate::abi::SpaceStats;
use crate::discarded::Discarded;
use crate::engine::Engine;
use crate::glue::{FileRef, Owner, PinnedPage};
use crate::gpus::SpaceGpus;
use crate::params::Params;
use crate::pump::Pump;

/// The engine of one space, over kernel-allocated storage.
pub(crate) type SpaceEngine = Engine<Storage>;

/// Bytes of every engine's storage that exists now: the spaces' and those
/// being built outside the lock (SET_PARAMS, SET_EXEC_PAGE).
///
/// `max_table_mib` bounds the spaces' tables, but each SET_PARAMS builds
/// its new tables before it swaps the old ones out, with no lock held, so
/// several callers at once held several times the limit: the ioctl fuzz's
/// four processes drove a 1 GB VM into the OOM killer (vm-tests, CI of
/// 2026-11-27). Counting every engine alive, the total stays under twice
/// the parameter (the old tables and one set of new ones); a build past it
/// fails with ENOMEM, which every caller can be given.
static ENGINE_BYTES: AtomicU64 = AtomicU64::new(0);

/// An engine's storage, counted in [`ENGINE_BYTES`] while it lives.
pub(crate) struct Storage(VVec<u64>);

impl Storage {
    /// `words` zeroed words, if the count stays under the limit and the
    /// memory is there; ENOMEM otherwise.
    fn new(words: usize) -> Result<Storage> {
        let bytes = (words as u64).saturating_mul(8);
        let limit = crate::glue::max_table_bytes_param().saturating_mul(2);
        ENGINE_BYTES
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                now.checked_add(bytes).filter(|&t| t <= limit)
            })
            .map_err(|_| ENOMEM)?;
        match VVec::from_elem(0u64, words, GFP_KERNEL) {
            Ok(v) => Ok(Storage(v)),
            Err(_) => {
                ENGINE_BYTES.fetch_sub(bytes, Ordering::Relaxed);
                Err(ENOMEM)
            }
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        ENGINE_BYTES.fetch_sub(self.0.len() as u64 * 8, Ordering::Relaxed);
    }
}

impl Deref for Storage {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        &self.0
    }
}

impl DerefMut for Storage {
    fn deref_mut(&mut self) -> &mut [u64] {
        &mut self.0
    }
}

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
    /// (gpus.rs): where prefetches go first. Boxed: it is large, and a
    /// `Space` is built on the stack in ATTACH.
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
    /// Blocks the module discarded here that nothing has brought back:
    /// MARK_ALIVE populates them on the GPU (discarded.rs).
    pub(crate) discarded: Discarded,
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
/// the box cannot be allocated, if the storage would take every engine
/// past twice `max_table_mib` ([`ENGINE_BYTES`]), or if `p` does not fit
/// the engine.
pub(crate) fn new_engine(p: &Params) -> Result<KBox<SpaceEngine>> {
    let storage = Storage::new(p.storage_words())?;
    let engine = Engine::new(*p, storage).map_err(|_| ENOMEM)?;
    KBox::new(engine, GFP_KERNEL).map_err(|_| ENOMEM)
}
