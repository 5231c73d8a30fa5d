// SPDX-License-Identifier: GPL-2.0
//! One prefetch round for one space: the host loop prescientd and the
//! simulator share (core/src/pump.rs), with the space's /dev/nvidia-uvm file
//! as its hands.
//!
//! The module keeps no ledger of its own: the engine's ledger is the count
//! ([`Host::resident_blocks`] and [`Host::is_resident`] return the engine's
//! answers).

use crate::abi::{SpaceStats, StatsHead};
use crate::engine::{Prefetch, Victim};
use crate::glue::{Destination, FileRef, NvError};
use crate::gpus::SpaceGpus;
use crate::pump::{Admit, Host, Limit, Why};
use crate::space::{Gpu, Space};
use crate::{Block, BLOCK_BYTES, BLOCK_SHIFT};

/// Prefetches per round at most, whatever `inflight_limit` says: bounds the
/// migrations the worker issues under the state lock between two records.
const MAX_PER_ROUND: usize = 16;

/// The limits of one round, the same for every space.
pub(crate) struct Limits {
    /// Resident blocks stay under this (budget, else the GPU; watermark).
    pub(crate) limit: Limit,
    /// Prefetches per round (`inflight_limit`).
    pub(crate) per_round: usize,
    /// False in observe mode: pre-evict only, never prefetch.
    pub(crate) prefetch: bool,
    /// The driver branch has uvm_api_discard; without it dead victims are
    /// migrated to the CPU like live ones.
    pub(crate) discard: bool,
}

/// The space's file and counters, as the shared loop sees them.
struct SpaceHost<'a> {
    file: &'a FileRef,
    gpu: &'a mut Gpu,
    gpus: &'a mut SpaceGpus,
    discard: bool,
    st: &'a mut SpaceStats,
    head: &'a mut StatsHead,
}

impl Host for SpaceHost<'_> {
    fn resident_blocks(&self, engine_count: u32) -> u64 {
        u64::from(engine_count)
    }

    fn is_resident(&self, _block: Block, engine_says: bool) -> bool {
        engine_says
    }

    /// Discards a dead victim, migrates a live one to the CPU. Whatever the
    /// driver answers, the block stops counting as ours (true).
    fn evict(&mut self, v: Victim, _why: Why) -> bool {
        let base = v.block << BLOCK_SHIFT;
        let discard = v.discard && self.discard;
        let done = if discard {
            self.file.discard(base, BLOCK_BYTES)
        } else {
            self.file.migrate(base, BLOCK_BYTES, Destination::Cpu)
        };
        if done.is_err() {
            self.st.migrate_errors += 1;
            self.head.migrate_errors += 1;
        } else if discard {
            self.st.discards += 1;
            self.head.discards += 1;
        } else {
            self.st.pre_evictions += 1;
            self.head.pre_evictions += 1;
        }
        true
    }

    /// To the GPU that last faulted on the block (gpus.rs), else to the
    /// space's fallback (SET_GPU); nowhere if neither is known.
    fn prefetch(&mut self, p: Prefetch) -> Admit {
        let (per_gpu, uuid) = match (self.gpus.destination(p.block), *self.gpu) {
            (Some((i, u)), _) => (Some(i), u),
            (None, Gpu::Set(u)) => (None, u),
            (None, _) => return Admit::Failed,
        };
        let moved = self
            .file
            .migrate(p.block << BLOCK_SHIFT, BLOCK_BYTES, Destination::Gpu(&uuid));
        match moved {
            Ok(()) => {
                self.st.prefetched += 1;
                self.head.blocks_prefetched += 1;
                Admit::Issued
            }
            Err(e) => {
                self.st.migrate_errors += 1;
                self.head.migrate_errors += 1;
                if e == NvError::InvalidDevice {
                    match per_gpu {
                        Some(i) => self.gpus.reject(i),
                        None => rejected_uuid(self.gpu),
                    }
                }
                Admit::Failed
            }
        }
    }
}

/// The driver does not know the space's GPU UUID: stop prefetching (said
/// once per SET_GPU).
#[cold]
fn rejected_uuid(gpu: &mut Gpu) {
    *gpu = Gpu::Rejected;
    kernel::pr_warn!("the driver refused the GPU UUID (NV_ERR_INVALID_DEVICE): prefetching stops for this space until SET_GPU\n");
}

/// Runs one round on `sp`. True if another round would do more (candidates
/// are queued or the chain runs, and there was room).
pub(crate) fn round(sp: &mut Space, lim: &Limits, head: &mut StatsHead) -> bool {
    let max = if lim.prefetch && (matches!(sp.gpu, Gpu::Set(_)) || sp.gpus.any_usable()) {
        lim.per_round.min(MAX_PER_ROUND)
    } else {
        0
    };
    let mut host = SpaceHost {
        file: &sp.file,
        gpu: &mut sp.gpu,
        gpus: &mut *sp.gpus,
        discard: lim.discard,
        st: &mut sp.st,
        head,
    };
    sp.pump
        .round(&mut *sp.engine, lim.limit, max, &mut host)
        .more
}
