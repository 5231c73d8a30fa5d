//! The daemon's side of the shared host loop (prescient_core::pump): the
//! ledger it counts against, the back-off's admission, the uncertain and
//! discarded sets, the block log and the migration workers. The loop
//! itself (settle under the limit, then prefetch making room one victim at
//! a time) is core's, the same as prescient.ko's and the simulator's.

use super::backoff::Backoff;
use super::blocklog::BlockLog;
use super::discard::Leaving;
use super::mechanism::Tracker;
use super::migrator::{runs, Job, Migrator};
use super::residency::{fault_in, Residency};
use super::route::Route;
use super::shared::SharedBlocks;
use super::snapshot::Snapshot;
use prescient_core::pump::{self, Admit, Why};
use prescient_core::{Block, Engine, Limit, Prefetch, Pump, Room, Victim, BLOCK_BYTES};
use prescient_uvm::Gpu;
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
    /// Which GPU faulted on each block last.
    pub(super) route: &'a Route,
    /// The GPU of this lane: its engine's predictions go there.
    pub(super) gpu: Gpu,
    /// Predictions declined because another GPU faulted on them last.
    pub(super) other_gpu: &'a mut u64,
    /// Longest run of blocks in one UVM_MIGRATE.
    pub(super) max_run: u64,
    /// Prefetches of this turn, submitted in runs at its end.
    pub(super) issued: Vec<u64>,
    /// The mechanism's counters: prefetches are followed for churn.
    pub(super) mech: &'a mut Tracker,
    /// Blocks kept in host memory: never prefetched (shared.rs).
    pub(super) shared: &'a mut SharedBlocks,
}

impl prescient_core::Host for Host<'_> {
    /// Every block the ledger counts: prefetches issued and evictions not
    /// completed included.
    fn resident_blocks(&self, _engine_count: u32) -> u64 {
        self.residency.blocks()
    }

    fn leaving_blocks(&self) -> u64 {
        self.residency.leaving_blocks()
    }

    /// A leaving block counts as resident: prefetching it while its
    /// eviction is queued would race that eviction (the workers take
    /// prefetches first), and the ledger would keep a block the CPU has.
    fn is_resident(&self, block: Block, _engine_says: bool) -> bool {
        self.residency.get(block) >= BLOCK_BYTES
    }

    /// Marks the victim leaving and queues it: dead blocks are discarded
    /// (their room is free once UVM_DISCARD returns, this turn), the others
    /// evicted by the workers (free once their UVM_MIGRATE returns).
    fn evict(&mut self, v: Victim, _why: Why) -> bool {
        if !self.residency.leave(v.block) {
            // Not counted (a fault of another GPU took it), or leaving
            // already: nothing to free here.
            return self.residency.get(v.block) == 0;
        }
        if v.discard && self.discard {
            self.leaving.dead.push(v.block);
        } else {
            self.leaving.evict.push(v.block);
        }
        true
    }

    /// Blocks of uncertain residency always come in, the others as the
    /// back-off says; never a block with no GPU to go to, nor one another
    /// GPU faulted on last (route.rs: the last faulting GPU wins).
    fn prefetch(&mut self, p: Prefetch) -> Admit {
        let b = p.block;
        if self.shared.is_host(b << prescient_core::BLOCK_SHIFT) {
            self.shared.stats.prefetches_declined += 1;
            return Admit::Declined;
        }
        match self.route.destination(b, self.gpu.index) {
            Some(g) if g == self.gpu => {}
            Some(_) => {
                *self.other_gpu += 1;
                self.snap.prefetch_other_gpu += 1;
                return Admit::Declined;
            }
            None => {
                self.snap.prefetch_no_gpu += 1;
                return Admit::Declined;
            }
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

/// Brings back the discarded blocks of `refetch` that fit, in block
/// order, making room for each: they are about to be used. Those without
/// room now wait in `refetch` for a later turn (their fault, if it comes
/// first, brings them; they are then resident and dropped here). Returns
/// the blocks sent to the lane's GPU.
fn refetch(
    engine: &mut Engine<Vec<u64>>,
    limit: Limit,
    refetch: &mut Vec<u64>,
    host: &mut Host,
) -> Vec<u64> {
    // A block with no GPU to go to stays where it is (its fault brings it).
    let before = refetch.len();
    let (route, gpu) = (host.route, host.gpu);
    refetch.retain(|&b| route.destination(b, gpu.index) == Some(gpu));
    host.snap.prefetch_no_gpu += (before - refetch.len()) as u64;
    refetch.sort_unstable();
    refetch.dedup();
    let mut admitted = Vec::new();
    let mut kept = Vec::new();
    for b in refetch.drain(..) {
        if host.residency.get(b) >= BLOCK_BYTES {
            continue;
        }
        if !kept.is_empty() || pump::make_room(engine, limit, host) != Room::Free {
            kept.push(b);
            continue;
        }
        fault_in(host.residency, engine, b);
        admitted.push(b);
    }
    *refetch = kept;
    for (s, l) in runs(admitted.iter().copied(), host.max_run) {
        host.migrator.submit(Job::to_gpu(s, l, gpu.uuid));
    }
    admitted
}

/// The UVM_MIGRATE jobs of `blocks` (in the engine's order) to `gpu`:
/// runs of consecutive blocks, at most `max` long.
pub(super) fn prefetch_jobs(blocks: &[u64], gpu: Gpu, max: u64) -> Vec<Job> {
    runs(blocks.iter().copied(), max)
        .into_iter()
        .map(|(s, l)| Job::to_gpu(s, l, gpu.uuid))
        .collect()
}

/// One turn of one lane: brings back the discarded blocks in `refetch`
/// (`refetch`), then one round of the shared loop under `limit`, up to
/// `max_prefetches`; the prefetches go to the workers in runs of
/// consecutive blocks, to the lane's GPU. Returns the blocks sent there.
pub(super) fn turn(
    pump: &mut Pump,
    engine: &mut Engine<Vec<u64>>,
    limit: Limit,
    max_prefetches: usize,
    refetch: &mut Vec<u64>,
    host: &mut Host,
) -> Vec<u64> {
    let mut sent = self::refetch(engine, limit, refetch, host);
    let done = pump.round(engine, limit, max_prefetches, host);
    host.snap.prefetch_resident += u64::from(done.already_resident);
    if done.guarded {
        // The thrash guard made no room.
        host.snap.prefetch_guarded += 1;
    } else if done.no_room {
        // Everything resident is predicted.
        host.snap.prefetch_no_room += 1;
    }
    if done.waiting {
        host.snap.prefetch_wait_evictions += 1;
    }
    let issued = std::mem::take(&mut host.issued);
    for j in prefetch_jobs(&issued, host.gpu, host.max_run) {
        host.migrator.submit(j);
    }
    sent.extend(issued);
    sent
}

#[cfg(test)]
pub(super) mod tests {
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
        let (mut parts, route) = (parts(), Route::default());
        let gpu = prescient_uvm::Gpu {
            index: 1,
            uuid: [1; 16],
        };
        let mut host = host(&mut parts, &mut l, &route, gpu);
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
        // The victims are on their way out: they count until they are gone.
        let stay = l.staying_blocks();
        assert!(stay <= 8, "{stay} blocks stay");
        assert_eq!(l.blocks(), 40);
        assert_eq!(e.resident_blocks() as u64, stay);
        let evict = std::mem::take(&mut parts.leaving.evict);
        assert_eq!(evict.len() as u64, 40 - stay);
        for &b in &evict {
            assert_eq!(l.left(b, true), crate::userspace::residency::Left::Gone);
        }
        assert_eq!(l.blocks(), stay);
    }

    /// A host over `l` for the lane of `gpu` (no workers: the queue only
    /// fills): the daemon's tests of a turn share it.
    pub(in crate::userspace) fn host<'a>(
        parts: &'a mut Parts,
        l: &'a mut Residency,
        route: &'a Route,
        gpu: Gpu,
    ) -> Host<'a> {
        Host {
            residency: l,
            leaving: &mut parts.leaving,
            discard: false,
            uncertain: &mut parts.uncertain,
            discarded: &mut parts.discarded,
            backoff: None,
            log: &mut parts.log,
            snap: &mut parts.snap,
            migrator: &parts.migrator,
            route,
            gpu,
            other_gpu: &mut parts.other,
            max_run: 16,
            issued: Vec::new(),
            mech: &mut parts.mech,
            shared: &mut parts.shared,
        }
    }

    /// What a test host borrows besides the ledger.
    pub(in crate::userspace) struct Parts {
        pub(in crate::userspace) leaving: Leaving,
        uncertain: HashSet<u64>,
        discarded: HashSet<u64>,
        log: BlockLog,
        snap: Snapshot,
        migrator: Migrator,
        other: u64,
        mech: Tracker,
        shared: SharedBlocks,
    }

    pub(in crate::userspace) fn parts() -> Parts {
        let null = std::fs::File::open("/dev/null").unwrap();
        Parts {
            leaving: Leaving::default(),
            uncertain: HashSet::new(),
            discarded: HashSet::new(),
            log: BlockLog::off(),
            snap: Snapshot::default(),
            migrator: Migrator::start(Arc::new(null.into()), 0, 0, 0, 0),
            other: 0,
            mech: Tracker::default(),
            shared: SharedBlocks::default(),
        }
    }

    /// On an 8-GPU node, GPU 2's engine predicts blocks GPU 2 faulted on,
    /// one GPU 5 faulted on last, and one no GPU faulted on: the first and
    /// the last go to GPU 2 in runs, GPU 5's block stays with GPU 5.
    #[test]
    fn a_lanes_prefetches_go_to_its_gpu_never_to_a_block_another_gpu_holds() {
        use crate::userspace::route::tests::{index, table, uuid};
        let mut r = Route::new(table(&[0, 1, 2, 3, 4, 5, 6, 7]));
        let known = || -> anyhow::Result<prescient_uvm::ProcessorTable> {
            panic!("every index is in the table")
        };
        for b in [10, 11, 12] {
            r.fault(index(2), b, known);
        }
        r.fault(index(5), 13, known);
        let g2 = r.table().gpu(index(2)).unwrap();
        let (mut parts, mut l) = (parts(), Residency::default());
        let mut h = host(&mut parts, &mut l, &r, g2);
        let admitted: Vec<u64> = [10, 11, 12, 13, 14]
            .into_iter()
            .filter(|&b| {
                let p = Prefetch {
                    block: b,
                    ..Default::default()
                };
                prescient_core::Host::prefetch(&mut h, p) == Admit::Issued
            })
            .collect();
        assert_eq!(admitted, [10, 11, 12, 14]);
        let jobs = prefetch_jobs(&h.issued, g2, 16);
        assert_eq!(
            jobs,
            vec![Job::to_gpu(10, 3, uuid(2)), Job::to_gpu(14, 1, uuid(2))]
        );
        assert!(
            jobs.iter().all(|j| j.dest() == uuid(2)),
            "never the first GPU"
        );
        assert_eq!((parts.other, parts.snap.prefetch_other_gpu), (1, 1));
        assert_eq!(l.blocks(), 4);
    }

    /// GPU 5 leaves the table: GPU 5's lane (were it still asked) sends
    /// nothing anywhere, and nothing goes to a GPU the process lost.
    #[test]
    fn no_prefetch_to_a_gpu_that_left_the_table() {
        use crate::userspace::route::tests::{index, table};
        let mut r = Route::new(table(&[0, 5]));
        r.fault(index(5), 3, || anyhow::bail!("not read"));
        let g5 = r.table().gpu(index(5)).unwrap();
        r.replace(table(&[0]));
        let (mut parts, mut l) = (parts(), Residency::default());
        let mut h = host(&mut parts, &mut l, &r, g5);
        for b in [3, 4] {
            let p = Prefetch {
                block: b,
                ..Default::default()
            };
            assert_eq!(prescient_core::Host::prefetch(&mut h, p), Admit::Declined);
        }
        assert_eq!(parts.snap.prefetch_no_gpu, 2);
        assert_eq!(l.blocks(), 0);
    }

    /// A block of an allocation on trial in host memory (shared.rs) is
    /// never prefetched: the GPU reads it there; a block outside goes as
    /// usual.
    #[test]
    fn a_block_kept_in_host_memory_is_not_prefetched() {
        use crate::userspace::oracle::maps::Range;
        use crate::userspace::route::tests::{index, table};
        use crate::userspace::shared::Action;
        let mut r = Route::new(table(&[0]));
        r.fault(index(0), 3, || anyhow::bail!("not read"));
        let g = r.table().gpu(index(0)).unwrap();
        let (mut parts, mut l) = (parts(), Residency::default());
        let t0 = std::time::Instant::now();
        for step in 0..3u32 {
            for id in 0..4 {
                let at = t0 + std::time::Duration::from_millis(u64::from(100 * step + id));
                parts.shared.kernel_start(u64::from(id), at);
            }
        }
        for _ in 0..2 {
            parts.shared.cpu_took(3);
            parts.shared.gpu_had(3);
        }
        let input = Range {
            start: 0,
            end: 64 * BLOCK_BYTES,
        };
        let action = parts.shared.decide(|_| Some(input));
        assert_eq!(action, Some(Action::Advise(vec![input])));
        let mut h = host(&mut parts, &mut l, &r, g);
        let p = |block| Prefetch {
            block,
            ..Default::default()
        };
        assert_eq!(
            prescient_core::Host::prefetch(&mut h, p(3)),
            Admit::Declined
        );
        assert_eq!(prescient_core::Host::prefetch(&mut h, p(64)), Admit::Issued);
        assert_eq!(h.issued, [64]);
        assert_eq!(parts.shared.stats.prefetches_declined, 1);
        assert_eq!(l.blocks(), 1);
    }

    /// A one-GPU process: every prefetch goes to its only GPU, in runs, as
    /// before lanes.
    #[test]
    fn one_gpu_gets_every_prefetch_in_runs() {
        use crate::userspace::route::tests::{index, table, uuid};
        let mut r = Route::new(table(&[3]));
        r.fault(index(3), 1, || anyhow::bail!("not read"));
        let g = r.table().gpu(index(3)).unwrap();
        let jobs = prefetch_jobs(&[1, 2, 3, 9], g, 2);
        assert_eq!(
            jobs,
            vec![
                Job::to_gpu(1, 2, uuid(3)),
                Job::to_gpu(3, 1, uuid(3)),
                Job::to_gpu(9, 1, uuid(3))
            ]
        );
    }
}
