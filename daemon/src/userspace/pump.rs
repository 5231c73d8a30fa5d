//! The daemon's side of the shared host loop (prescient_core::pump): the
//! ledger it counts against, the back-off's admission, the uncertain and
//! discarded sets, the block log and the migration workers. The loop
//! itself (settle under the limit, then prefetch making room one victim at
//! a time) is core's, the same as prescient.ko's and the simulator's.

use super::backoff::Backoff;
use super::blocklog::BlockLog;
use super::discard::Leaving;
use super::mechanism::Tracker;
use super::migrator::{runs, sorted_runs, Job, Migrator};
use super::residency::{fault_in, Residency};
use super::route::Route;
use super::snapshot::Snapshot;
use prescient_core::pump::{self, Admit, Why};
use prescient_core::{Block, Engine, Limit, Prefetch, Pump, Victim, BLOCK_BYTES};
use std::collections::HashSet;

/// The daemon's bookkeeping, as the shared host loop sees it.
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
    /// Which GPU each prefetch goes to.
    pub(super) route: &'a Route,
    /// Longest run of blocks in one UVM_MIGRATE.
    pub(super) max_run: u64,
    /// Prefetches of this turn, submitted in runs at its end.
    pub(super) issued: Vec<u64>,
    /// The mechanism's counters: prefetches are followed for churn.
    pub(super) mech: &'a mut Tracker,
}

impl prescient_core::Host for Host<'_> {
    fn resident_blocks(&self, _engine_count: u32) -> u64 {
        self.residency.blocks()
    }

    fn is_resident(&self, block: Block, _engine_says: bool) -> bool {
        self.residency.get(block) >= BLOCK_BYTES
    }

    /// Takes the victim off the ledger and queues it: dead blocks are
    /// discarded, the others evicted, at the end of the turn.
    fn evict(&mut self, v: Victim, _why: Why) -> bool {
        self.residency.sub(v.block, BLOCK_BYTES);
        if v.discard && self.discard {
            self.leaving.dead.push(v.block);
        } else {
            self.leaving.evict.push(v.block);
        }
        true
    }

    /// Blocks of uncertain residency always come in, the others as the
    /// back-off says; never a block with no GPU to go to (route.rs).
    fn prefetch(&mut self, p: Prefetch) -> Admit {
        let b = p.block;
        if self.route.destination(b).is_none() {
            self.snap.prefetch_no_gpu += 1;
            return Admit::Declined;
        }
        let was_uncertain = self.uncertain.remove(&b);
        self.discarded.remove(&b);
        let admitted = match self.backoff.as_mut() {
            Some(bo) => was_uncertain || bo.admit(b, self.snap.fault_blocks),
            None => true,
        };
        if !admitted {
            return Admit::Declined;
        }
        self.residency.add(b, BLOCK_BYTES);
        self.log.prefetch(b);
        self.mech.prefetched(b);
        self.issued.push(b);
        Admit::Issued
    }
}

impl Host<'_> {
    /// Queues `blocks` (in the engine's order) to their GPUs.
    fn submit(&self, blocks: Vec<u64>) {
        for j in prefetch_jobs(&blocks, self.route, self.max_run) {
            self.migrator.submit(j);
        }
    }
}

/// The UVM_MIGRATE jobs of `blocks`: runs of consecutive blocks of one
/// destination GPU, at most `max` long, in the blocks' order; a block with
/// no destination (its GPU left the table) is left out.
pub(super) fn prefetch_jobs(blocks: &[u64], route: &Route, max: u64) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let dest = route.destination(blocks[i]);
        let same = blocks[i..]
            .iter()
            .take_while(|&&b| route.destination(b) == dest)
            .count();
        if let Some(g) = dest {
            for (s, l) in runs(blocks[i..i + same].iter().copied(), max) {
                jobs.push(Job::to_gpu(s, l, g.uuid));
            }
        }
        i += same;
    }
    jobs
}

/// One turn: brings back the discarded blocks in `refetch` (room made for
/// each, but never refused: they are about to be used), then one round of
/// the shared loop under `limit`, up to `max_prefetches`; the prefetches go
/// to the workers in runs of consecutive blocks.
pub(super) fn turn(
    pump: &mut Pump,
    engine: &mut Engine<Vec<u64>>,
    limit: Limit,
    max_prefetches: usize,
    refetch: &mut Vec<u64>,
    host: &mut Host,
) {
    // A block with no GPU to go to stays where it is (its fault brings it).
    let before = refetch.len();
    refetch.retain(|&b| host.route.destination(b).is_some());
    host.snap.prefetch_no_gpu += (before - refetch.len()) as u64;
    for (s, l) in sorted_runs(refetch, host.max_run) {
        for b in s..s + l {
            pump::make_room(engine, limit, host);
            fault_in(host.residency, engine, b);
        }
        host.submit((s..s + l).collect());
    }
    let done = pump.round(engine, limit, max_prefetches, host);
    host.snap.prefetch_resident += u64::from(done.already_resident);
    if done.no_room {
        // Everything resident is predicted.
        host.snap.prefetch_no_room += 1;
    }
    let issued = std::mem::take(&mut host.issued);
    host.submit(issued);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::config::base_params;
    use crate::userspace::residency::fault_in;
    use crate::userspace::residency::tests::B;
    use std::sync::Arc;

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
        // One turn of pre-eviction brings both back under the budget.
        let null = std::fs::File::open("/dev/null").unwrap();
        let migrator = Migrator::start(Arc::new(null.into()), 0, 0);
        let (mut leaving, mut log, mut snap) =
            (Leaving::default(), BlockLog::off(), Snapshot::default());
        let (mut uncertain, mut discarded) = (HashSet::new(), HashSet::new());
        let mut host = Host {
            residency: &mut l,
            leaving: &mut leaving,
            discard: false,
            uncertain: &mut uncertain,
            discarded: &mut discarded,
            backoff: None,
            log: &mut log,
            snap: &mut snap,
            migrator: &migrator,
            route: &Route::default(),
            max_run: 16,
            issued: Vec::new(),
            mech: &mut Tracker::default(),
        };
        let limit = Limit {
            capacity_blocks: 8,
            watermark_pct: 100,
        };
        turn(
            &mut Pump::new(),
            &mut e,
            limit,
            0,
            &mut Vec::new(),
            &mut host,
        );
        let left = l.blocks();
        assert!(left <= 8, "{left} blocks resident");
        assert_eq!(e.resident_blocks() as u64, left);
        assert_eq!(leaving.evict.len() as u64, 40 - left);
    }

    /// On an 8-GPU node, the blocks GPU 2 faulted on go to GPU 2's UUID,
    /// GPU 5's to GPU 5's, in runs that never mix two GPUs; a predicted
    /// block no GPU faulted on goes to the GPU that faulted last.
    #[test]
    fn prefetches_go_to_the_gpu_that_faulted_in_runs_of_one_gpu() {
        use crate::userspace::route::tests::{index, table, uuid};
        let mut r = Route::new(table(&[0, 1, 2, 3, 4, 5, 6, 7]));
        let known = |_: ()| -> anyhow::Result<prescient_uvm::ProcessorTable> {
            panic!("every index is in the table")
        };
        for b in 10..14 {
            r.fault(index(2), b, || known(()));
        }
        for b in 14..16 {
            r.fault(index(5), b, || known(()));
        }
        let jobs = prefetch_jobs(&[10, 11, 12, 13, 14, 15, 16], &r, 16);
        let want = vec![Job::to_gpu(10, 4, uuid(2)), Job::to_gpu(14, 3, uuid(5))];
        assert_eq!(jobs, want);
        assert!(
            jobs.iter().all(|j| j.dest() != uuid(0)),
            "never the first GPU"
        );
        // GPU 5 leaves: its blocks, and the unfaulted one, are left out.
        r.replace(table(&[0, 1, 2, 3, 4, 6, 7]));
        let jobs = prefetch_jobs(&[10, 14, 15, 16, 11], &r, 16);
        assert_eq!(
            jobs,
            vec![Job::to_gpu(10, 1, uuid(2)), Job::to_gpu(11, 1, uuid(2))]
        );
    }

    /// A one-GPU process: every prefetch goes to its only GPU, as before.
    #[test]
    fn one_gpu_gets_every_prefetch_in_runs() {
        use crate::userspace::route::tests::{index, table, uuid};
        let mut r = Route::new(table(&[3]));
        r.fault(index(3), 1, || anyhow::bail!("not read"));
        let jobs = prefetch_jobs(&[1, 2, 3, 9], &r, 2);
        assert_eq!(
            jobs,
            vec![
                Job::to_gpu(1, 2, uuid(3)),
                Job::to_gpu(3, 1, uuid(3)),
                Job::to_gpu(9, 1, uuid(3))
            ]
        );
        assert!(prefetch_jobs(&[1], &Route::new(table(&[3])), 2).is_empty());
    }
}
