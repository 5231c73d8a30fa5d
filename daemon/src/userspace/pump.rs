//! The prescient policy's host loop: pre-evict down to a limit, then bring
//! in what must come back and what the engine predicts, making room one
//! victim at a time. `pump` is the whole loop; everything daemon-specific
//! it needs (the ledger, the back-off's admission, the uncertain and
//! discarded sets, the block log, the workers) is behind `Host`, so the
//! loop can be swapped for a shared one without touching the bookkeeping.

use super::backoff::Backoff;
use super::blocklog::BlockLog;
use super::discard::Leaving;
use super::migrator::{runs, sorted_runs, Job, Migrator};
use super::residency::Residency;
use super::snapshot::Snapshot;
use prescient_core::{ChainState, Engine, Prefetch, Victim, BLOCK_BYTES};
use std::collections::HashSet;

/// Pre-eviction rounds per turn, at most.
const PRE_EVICT_ROUNDS: u32 = 16;

/// The daemon's side of the host loop: what `pump` moves blocks through.
pub(super) struct Host<'a> {
    pub(super) residency: &'a mut Residency,
    /// Victims of this turn, on their way out.
    pub(super) leaving: &'a mut Leaving,
    /// Dead victims may be discarded rather than evicted.
    pub(super) discard: bool,
    pub(super) uncertain: &'a mut HashSet<u64>,
    pub(super) discarded: &'a mut HashSet<u64>,
    pub(super) backoff: Option<&'a mut Backoff>,
    pub(super) log: &'a mut BlockLog,
    pub(super) snap: &'a mut Snapshot,
    pub(super) migrator: &'a Migrator,
    /// Longest run of blocks in one UVM_MIGRATE.
    pub(super) max_run: u64,
}

impl Host<'_> {
    /// Takes one victim the engine chose off the ledger.
    fn evict(&mut self, engine: &mut Engine<Vec<u64>>, v: &Victim) {
        take_victim(self.residency, engine, v, self.discard, self.leaving);
    }

    /// Room under `limit` for one more block; false when there is none.
    fn make_room(&mut self, engine: &mut Engine<Vec<u64>>, limit: u64) -> bool {
        make_room(self.residency, engine, limit, self.discard, self.leaving)
    }

    /// Whether a predicted, non-resident block `b` is prefetched: blocks
    /// of uncertain residency always are, the others as the back-off says.
    fn admit(&mut self, b: u64) -> bool {
        let was_uncertain = self.uncertain.remove(&b);
        self.discarded.remove(&b);
        match self.backoff.as_mut() {
            Some(bo) => was_uncertain || bo.admit(b, self.snap.fault_blocks),
            None => true,
        }
    }

    /// Counts `b` as resident (it is on its way to the GPU).
    fn bring_in(&mut self, engine: &mut Engine<Vec<u64>>, b: u64) {
        if self.residency.add(b, BLOCK_BYTES) {
            engine.migrated_in(b);
        }
    }

    /// Queues `(start, count)` runs to the GPU.
    fn submit(&self, runs: Vec<(u64, u64)>) {
        for (s, l) in runs {
            self.migrator.submit(Job::blocks(s, l, true));
        }
    }
}

/// One turn of the host loop: pre-evicts down to `limit` (None: no
/// budget), brings back the discarded blocks in `refetch`, then, when
/// `predict`, issues the engine's prefetches; each block brought in gets
/// room made for it first, one victim at a time (faults count at once, so
/// the ledger sits at the limit), as the simulator's make_room does.
pub(super) fn pump(
    engine: &mut Engine<Vec<u64>>,
    limit: Option<u64>,
    predict: bool,
    refetch: &mut Vec<u64>,
    host: &mut Host,
    victims: &mut [Victim],
    prefetches: &mut [Prefetch],
) {
    if let Some(limit) = limit {
        let mut rounds = 0;
        while host.residency.blocks() > limit && rounds < PRE_EVICT_ROUNDS {
            rounds += 1;
            let want = ((host.residency.blocks() - limit) as usize).min(victims.len());
            let k = engine.victims(&mut victims[..want]);
            if k == 0 {
                break;
            }
            for v in &victims[..k] {
                host.evict(engine, v);
            }
        }
    }
    // Discarded blocks marked alive: back to the GPU (no copy). Without
    // room they come back all the same: they are about to be used.
    for (s, l) in sorted_runs(refetch, host.max_run) {
        for b in s..s + l {
            if let Some(limit) = limit {
                host.make_room(engine, limit);
            }
            host.bring_in(engine, b);
        }
        host.submit(vec![(s, l)]);
    }
    if !(predict || engine.chain_state() == ChainState::Running) {
        return;
    }
    let k = engine.prefetches(prefetches);
    let mut issued = Vec::new();
    for p in &prefetches[..k] {
        let b = p.block;
        if host.residency.get(b) >= BLOCK_BYTES {
            host.snap.prefetch_resident += 1;
            continue;
        }
        if limit.is_some_and(|limit| !host.make_room(engine, limit)) {
            // Everything resident is predicted.
            host.snap.prefetch_no_room += 1;
            break;
        }
        if !host.admit(b) {
            continue;
        }
        host.bring_in(engine, b);
        host.log.prefetch(b);
        issued.push(b);
    }
    host.submit(runs(issued, host.max_run));
}

/// Takes a victim the engine chose off the ledger and queues it in `out`.
fn take_victim(
    ledger: &mut Residency,
    engine: &mut Engine<Vec<u64>>,
    v: &Victim,
    discard: bool,
    out: &mut Leaving,
) {
    ledger.sub(v.block, BLOCK_BYTES);
    engine.evicted(v.block);
    if v.discard && discard {
        out.dead.push(v.block);
    } else {
        out.evict.push(v.block);
    }
}

/// Room under `limit` for one more block: at the limit, the engine's first
/// victim is taken. False when there is neither room nor a victim (every
/// resident block is predicted).
fn make_room(
    ledger: &mut Residency,
    engine: &mut Engine<Vec<u64>>,
    limit: u64,
    discard: bool,
    out: &mut Leaving,
) -> bool {
    if ledger.blocks() < limit {
        return true;
    }
    let mut v = [Victim::default()];
    if engine.victims(&mut v) == 0 {
        return false;
    }
    take_victim(ledger, engine, &v[0], discard, out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::config::base_params;
    use crate::userspace::residency::fault_in;
    use crate::userspace::residency::tests::B;

    /// Faults count their blocks at once, so between two pre-eviction rounds
    /// more blocks than the budget are resident. Every one of them must be
    /// in the engine's ledger, or pre-eviction never sees it: it would stay
    /// resident for good and shrink the budget left to everything else.
    #[test]
    fn blocks_past_the_budget_stay_visible_to_pre_eviction() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Residency::default();
        // A burst of 40 faults in one turn, five times the budget.
        for b in 0..40 {
            fault_in(&mut l, &mut e, B + b);
        }
        assert_eq!((l.blocks(), e.resident_blocks()), (40, 40));
        assert_eq!(e.stats().ledger_overflow, 0);
        // Pre-eviction brings it back under the budget.
        let mut out = Leaving::default();
        while l.blocks() > 8 {
            assert!(make_room(&mut l, &mut e, 8, false, &mut out));
        }
        assert_eq!((l.blocks(), e.resident_blocks()), (8, 8));
        assert_eq!(out.evict.len(), 32);
    }
}
