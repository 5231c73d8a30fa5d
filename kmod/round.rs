// SPDX-License-Identifier: GPL-2.0
//! One prefetch round for one space: the host loop prescientd and the
//! simulator share (core/src/pump.rs), with the space's /dev/nvidia-uvm file
//! as its hands.
//!
//! The module keeps no ledger of its own: the engine's ledger is the count
//! ([`Host::resident_blocks`] and [`Host::is_resident`] return the engine's
//! answers).

use crate::abi::{SpaceStats, StatsHead};
use crate::discarded::Discarded;
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
    discarded: &'a mut Discarded,
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
            self.discarded.insert(v.block);
        } else {
            self.st.pre_evictions += 1;
            self.head.pre_evictions += 1;
        }
        true
    }

    /// To the GPU that last faulted on the block (gpus.rs), else to the
    /// space's fallback (SET_GPU); nowhere if neither is known.
    fn prefetch(&mut self, p: Prefetch) -> Admit {
        let Some(to) = destination(self.gpus, *self.gpu, p.block) else {
            return Admit::Failed;
        };
        let moved = self.file.migrate(
            p.block << BLOCK_SHIFT,
            BLOCK_BYTES,
            Destination::Gpu(&to.uuid),
        );
        match moved {
            Ok(()) => {
                self.st.prefetched += 1;
                self.head.blocks_prefetched += 1;
                self.discarded.take(p.block);
                Admit::Issued
            }
            Err(e) => {
                self.st.migrate_errors += 1;
                self.head.migrate_errors += 1;
                refused(e, to, self.gpus, self.gpu);
                Admit::Failed
            }
        }
    }
}

/// Where a block goes on the GPU: its UUID, and the index in [`SpaceGpus`]
/// when a fault named it (None: the space's fallback).
#[derive(Clone, Copy, PartialEq, Eq)]
struct To {
    uuid: [u8; 16],
    per_gpu: Option<u8>,
}

/// To the GPU that last faulted on `block`, else to the space's fallback
/// (SET_GPU); None if neither is known.
fn destination(gpus: &SpaceGpus, gpu: Gpu, block: Block) -> Option<To> {
    match (gpus.destination(block), gpu) {
        (Some((i, uuid)), _) => Some(To {
            uuid,
            per_gpu: Some(i),
        }),
        (None, Gpu::Set(uuid)) => Some(To {
            uuid,
            per_gpu: None,
        }),
        (None, _) => None,
    }
}

/// A migration to `to` failed with `e`: NV_ERR_INVALID_DEVICE means the
/// driver does not know that GPU in this space, so stop sending there.
fn refused(e: NvError, to: To, gpus: &mut SpaceGpus, gpu: &mut Gpu) {
    if e == NvError::InvalidDevice {
        match to.per_gpu {
            Some(i) => gpus.reject(i),
            None => rejected_uuid(gpu),
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
        discarded: &mut sp.discarded,
        discard: lim.discard,
        st: &mut sp.st,
        head,
    };
    sp.pump
        .round(&mut *sp.engine, lim.limit, max, &mut host)
        .more
}

/// Blocks one MARK_ALIVE populates per hold of the State mutex at most
/// (128 MiB): bounds the migrations issued under it.
pub(crate) const POPULATE_RUN: usize = 64;

/// Brings `blocks` (discarded, alive again, ascending) back to the GPU
/// before MARK_ALIVE returns: one UVM_MIGRATE per run of consecutive blocks
/// with one destination. Discarded pages come in writable and are not
/// copied (module docs of [`crate::discarded`]). Blocks with no known GPU,
/// or whose migration the driver refused, are left to fault as before.
pub(crate) fn populate(sp: &mut Space, blocks: &[Block]) -> Populated {
    let mut done = Populated::default();
    let mut i = 0;
    while i < blocks.len() {
        let to = destination(&sp.gpus, sp.gpu, blocks[i]);
        let mut n = 1;
        while i + n < blocks.len()
            && blocks[i + n] == blocks[i] + n as u64
            && destination(&sp.gpus, sp.gpu, blocks[i + n]) == to
        {
            n += 1;
        }
        if let Some(to) = to {
            populate_run(sp, &blocks[i..i + n], to, &mut done);
        }
        i += n;
    }
    done
}

/// What one [`populate`] did, for the module-wide counters.
#[derive(Default)]
pub(crate) struct Populated {
    /// Blocks now on the GPU.
    pub(crate) blocks: u64,
    /// UVM_MIGRATE calls the driver refused.
    pub(crate) errors: u64,
}

/// One UVM_MIGRATE of consecutive `run` to `to`; the engine counts the
/// blocks resident (its next round makes room for them).
fn populate_run(sp: &mut Space, run: &[Block], to: To, done: &mut Populated) {
    let len = run.len() as u64 * BLOCK_BYTES;
    match sp
        .file
        .migrate(run[0] << BLOCK_SHIFT, len, Destination::Gpu(&to.uuid))
    {
        Ok(()) => {
            for &b in run {
                sp.engine.migrated_in(b);
            }
            sp.st.populated += run.len() as u64;
            done.blocks += run.len() as u64;
        }
        Err(e) => {
            sp.st.migrate_errors += 1;
            done.errors += 1;
            refused(e, to, &mut sp.gpus, &mut sp.gpu);
        }
    }
}
