// SPDX-License-Identifier: GPL-2.0
//! One prefetch round for one space: pre-evict down to a limit, then issue
//! the engine's prefetches, making room one block at a time.
//!
//! This is the module's host loop, kept apart so that it can be replaced by
//! the loop the daemon and the simulator share (`core/src/pump.rs`): it
//! takes a [`Space`] and the [`Limits`], and touches nothing else but the
//! stats counters.

use crate::abi::StatsHead;
use crate::engine::{ChainState, Prefetch, Victim};
use crate::glue::Destination;
use crate::space::Space;
use crate::{BLOCK_BYTES, BLOCK_SHIFT};

/// Prefetches asked of the engine per round at most (the buffer's size).
const MAX_PER_ROUND: usize = 16;

/// The limits of one round, the same for every space.
pub(crate) struct Limits {
    /// The watermark's share of the budget: resident blocks are kept at or
    /// below this.
    pub(crate) watermark_blocks: u32,
    /// The residency budget in blocks.
    pub(crate) budget_blocks: u32,
    /// Prefetches asked of the engine per round (`inflight_limit`).
    pub(crate) per_round: usize,
    /// False in observe mode: pre-evict only, never prefetch.
    pub(crate) prefetch: bool,
}

/// Runs one round on `sp`. True if its chain still has work (another round
/// would prefetch more).
pub(crate) fn round(sp: &mut Space, lim: &Limits, head: &mut StatsHead) -> bool {
    // The engine's free target grows with every eviction the driver had to
    // make (memory was full) and shrinks on refaults.
    let limit = lim
        .watermark_blocks
        .min(lim.budget_blocks.saturating_sub(sp.engine.free_target()))
        .max(1);
    while sp.engine.resident_blocks() > limit {
        if !evict_one(sp, head) {
            break;
        }
    }
    if !lim.prefetch {
        return false;
    }
    let mut buf = [Prefetch::default(); MAX_PER_ROUND];
    let n = sp
        .engine
        .prefetches(&mut buf[..lim.per_round.min(MAX_PER_ROUND)]);
    for p in &buf[..n] {
        if sp.engine.is_resident(p.block) {
            continue;
        }
        if !make_room(sp, limit, head) {
            break;
        }
        let moved = sp
            .file
            .migrate(p.block << BLOCK_SHIFT, BLOCK_BYTES, Destination::Gpu);
        if moved.is_ok() {
            sp.engine.migrated_in(p.block);
            sp.st.prefetched += 1;
            head.blocks_prefetched += 1;
        } else {
            sp.st.migrate_errors += 1;
            head.migrate_errors += 1;
        }
    }
    sp.engine.chain_state() == ChainState::Running
}

/// Evicts until one more block fits under `limit`. False if the engine has
/// no victim left to give.
fn make_room(sp: &mut Space, limit: u32, head: &mut StatsHead) -> bool {
    while sp.engine.resident_blocks() >= limit {
        if !evict_one(sp, head) {
            return false;
        }
    }
    true
}

/// Takes one victim off the GPU (discarded if its data is dead, migrated to
/// the CPU otherwise). False if the engine has none to give.
fn evict_one(sp: &mut Space, head: &mut StatsHead) -> bool {
    let mut v = [Victim::default(); 1];
    if sp.engine.victims(&mut v) == 0 {
        return false;
    }
    let base = v[0].block << BLOCK_SHIFT;
    let done = if v[0].discard {
        sp.file.discard(base, BLOCK_BYTES)
    } else {
        sp.file.migrate(base, BLOCK_BYTES, Destination::Cpu)
    };
    // Whatever the driver answered, stop counting the block as ours.
    sp.engine.evicted(v[0].block);
    if done.is_err() {
        sp.st.migrate_errors += 1;
        head.migrate_errors += 1;
    } else if v[0].discard {
        sp.st.discards += 1;
        head.discards += 1;
    } else {
        sp.st.pre_evictions += 1;
        head.pre_evictions += 1;
    }
    true
}
