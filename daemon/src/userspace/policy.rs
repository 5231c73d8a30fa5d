//! What a process's loop does each turn once its events and marks are in,
//! as the simulator's policies (sim/src/model.rs `Policy`) are written:
//! observe (nothing), driver-like (evict the oldest block over the budget)
//! and prescient (pre-evict, prefetch, discard; the host loop is pump.rs).
//! Both act per GPU (lanes.rs): each GPU's blocks against its own budget.

use super::ahead::issue;
use super::ahead::order;
use super::ahead::queue::Upcoming;
use super::ahead::sweep::Sweep;
use super::ahead::MAX_UPCOMING;
use super::backoff::Backoff;
use super::blocklog::BlockLog;
use super::config::Config;
use super::discard::discard_blocks;
use super::lanes::{Lane, Lanes};
use super::mechanism::Tracker;
use super::migrator::{Job, Migrator};
use super::pump::{turn, Host};
use super::residency::fault_in;
use super::route::Route;
use super::shared::SharedBlocks;
use super::snapshot::Snapshot;
use super::state::Process;
use prescient_core::{ChainState, Engine, Limit, BLOCK_SHIFT};
use std::collections::HashSet;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

/// Prefetches one turn issues at most (the engine is asked again next turn).
const PREFETCHES_PER_TURN: usize = 256;

/// One policy of the per-process loop.
pub(super) trait Policy {
    /// One turn's decisions, after its events and marks (each lane says
    /// whether its engine learnt a fault this turn).
    fn step(&mut self, p: &mut Process);
}

/// A lane's budget in 2 MB blocks.
pub(super) fn budget_blocks(l: &Lane) -> Option<u64> {
    l.budget.map(|b| b >> BLOCK_SHIFT)
}

/// The upcoming blocks a turn may use: the largest window of any lane
/// (`--footprint-window-pct` of its budget or size, never less than its
/// turn's share of its limit), or the whole list where a pass orders it
/// (the next-use order's, by default) or a large window may take the
/// running launches'.
fn upcoming_needed(lanes: &Lanes, cfg: &Config) -> usize {
    if cfg.reads_whole_queue() {
        return MAX_UPCOMING;
    }
    let pct = u64::from(cfg.footprint_window_pct.min(100));
    let window = |l: &Lane| {
        let capacity = budget_blocks(l).unwrap_or(u64::from(l.gpu_blocks)).max(1);
        capacity.saturating_mul(pct) / 100
    };
    let most = lanes.iter().map(window).max().unwrap_or(0);
    usize::try_from(most)
        .unwrap_or(MAX_UPCOMING)
        .min(MAX_UPCOMING)
}

/// Counts events only; issues nothing.
pub(super) struct Observe;

impl Policy for Observe {
    fn step(&mut self, _p: &mut Process) {}
}

/// No prefetch; over a GPU's budget, evicts that GPU's block resident
/// longest.
pub(super) struct DriverLike;

impl Policy for DriverLike {
    fn step(&mut self, p: &mut Process) {
        for l in p.lanes.iter_mut() {
            let Some(bb) = budget_blocks(l) else { continue };
            // Blocks leaving already count until they are gone, but need
            // no second eviction.
            while l.residency.staying_blocks() > bb {
                let Some(v) = l.residency.pop_oldest() else {
                    break;
                };
                if !l.residency.leave(v) {
                    continue;
                }
                l.pre_evicted_blocks += 1;
                p.log.victim(v);
                p.migrator.submit(Job::to_cpu(v, 1, l.gpu.uuid));
            }
        }
    }
}

/// Engine-driven prefetch and pre-eviction under each GPU's budget, with
/// dead victims discarded: the shared host loop, once per lane.
pub(super) struct Prescient;

impl Policy for Prescient {
    fn step(&mut self, p: &mut Process) {
        let mut sent = Vec::new();
        // The blocks of the launches to come (--footprints), lent by the
        // ring's reader for the turn.
        let upcoming = p.ahead.as_mut().map(|a| {
            if p.cfg.cyclic_victims {
                a.track_left();
            }
            if p.cfg.next_use_victims && !p.cfg.cyclic_victims {
                a.track_next_use();
            }
            if p.cfg.reads_whole_queue() {
                a.track_running();
            }
            a.take_upcoming(upcoming_needed(&p.lanes, &p.cfg))
        });
        let none = Upcoming::default();
        let mut ahead = Vec::new();
        for l in p.lanes.iter_mut() {
            let issued = lane_turn(
                l,
                &mut Shared {
                    upcoming: upcoming.as_ref().unwrap_or(&none),
                    ahead: &mut ahead,
                    cfg: &p.cfg,
                    fd: p.fd.as_raw_fd(),
                    discard_ok: p.discard_ok,
                    discarded: &mut p.discarded,
                    backoff: p.backoff.as_mut(),
                    log: &mut p.log,
                    snap: &mut p.snap,
                    migrator: &p.migrator,
                    route: &p.route,
                    mech: &mut p.mech,
                    host_blocks: &mut p.shared,
                },
            );
            sent.push((l.gpu.index, issued));
        }
        if let (Some(a), Some(u)) = (p.ahead.as_mut(), upcoming) {
            let window = ahead.iter().map(|d: &Issued| d.window).max().unwrap_or(0);
            let done: Vec<_> = ahead.iter().map(|d| d.done).collect();
            a.put_back(u, &done, window);
            a.stats.sweep_orders += ahead.iter().map(|d| d.sweep_orders).sum::<u64>();
            a.stats.sweep_asides += ahead.iter().map(|d| d.sweep_asides).sum::<u64>();
        }
        // Our prefetches took their blocks to one GPU: off the others.
        for (index, blocks) in sent {
            for b in blocks {
                p.lanes.moved_to(index, b);
            }
        }
    }
}

/// What one lane's round of upcoming launches did, its window, whether
/// it ordered a sweep's blocks (1) or not (0), and whether the sweep
/// stood aside in it (1).
struct Issued {
    done: issue::Issued,
    window: u64,
    sweep_orders: u64,
    sweep_asides: u64,
}

/// What every lane's turn shares: the process's settings, sets and workers.
struct Shared<'a> {
    /// The blocks of the launches to come (empty without --footprints),
    /// and what each lane's round of them did.
    upcoming: &'a Upcoming,
    ahead: &'a mut Vec<Issued>,
    cfg: &'a Config,
    fd: RawFd,
    discard_ok: bool,
    discarded: &'a mut HashSet<u64>,
    backoff: Option<&'a mut Backoff>,
    log: &'a mut BlockLog,
    snap: &'a mut Snapshot,
    migrator: &'a Migrator,
    route: &'a Route,
    mech: &'a mut Tracker,
    /// Blocks kept in host memory (shared.rs): never prefetched.
    host_blocks: &'a mut SharedBlocks,
}

/// One lane's turn of the shared host loop under its own budget (or its
/// GPU's size); returns the blocks it sent to its GPU.
fn lane_turn(l: &mut Lane, s: &mut Shared) -> Vec<u64> {
    let faulted = std::mem::take(&mut l.faulted);
    if faulted {
        // A fault started a new window: what was queued is stale.
        l.pump.restart();
    }
    let limit = Limit {
        capacity_blocks: budget_blocks(l).unwrap_or(u64::from(l.gpu_blocks)),
        watermark_pct: s.cfg.watermark_pct(),
    };
    // Blocks an alive mark brought back before its reply (alive.rs): on
    // the GPU already; the round below makes room for them.
    for b in l.populated.drain(..) {
        fault_in(&mut l.residency, &mut l.engine, b);
        s.snap.alive_populated_blocks += 1;
    }
    let predicting =
        faulted || l.pump.queued() > 0 || l.engine.chain_state() == ChainState::Running;
    let max_prefetches = if predicting { PREFETCHES_PER_TURN } else { 0 };
    let max_run = s.cfg.max_coalesce_blocks;
    let mut host = Host {
        residency: &mut l.residency,
        leaving: &mut l.leaving,
        discard: s.discard_ok,
        uncertain: &mut l.uncertain,
        discarded: s.discarded,
        backoff: s.backoff.as_deref_mut(),
        log: s.log,
        snap: s.snap,
        migrator: s.migrator,
        route: s.route,
        gpu: l.gpu,
        other_gpu: &mut l.prefetch_other_gpu,
        max_run,
        issued: Vec::new(),
        mech: s.mech,
        shared: s.host_blocks,
    };
    if !s.upcoming.blocks.is_empty() {
        let ahead = Ahead {
            engine: &mut l.engine,
            ordered: &mut l.upcoming_ordered,
            next_use_ordered: &mut l.next_use_ordered,
            large_sent: &mut l.large_sent,
            sweep: &mut l.sweep,
            faults: &l.turn_faults,
            cfg: s.cfg,
            up: s.upcoming,
        };
        s.ahead.push(issue_upcoming(ahead, limit, &mut host));
    }
    l.turn_faults.clear();
    let sent = turn(
        &mut l.pump,
        &mut l.engine,
        limit,
        max_prefetches,
        &mut l.refetch,
        &mut host,
    );
    discard_dead_victims(l, s, max_run);
    for &v in &l.leaving.evict {
        s.log.victim(v);
        s.mech.evicted(v);
    }
    l.pre_evicted_blocks += l.leaving.evict.len() as u64;
    l.leaving.submit_evictions(max_run, s.migrator, l.gpu.uuid);
    log_thrash_guard(l);
    sent
}

/// Discards the turn's dead victims; one the driver refuses, or that an
/// answered alive mark holds (alive.rs), is evicted instead. The others
/// are gone once UVM_DISCARD returned, here.
fn discard_dead_victims(l: &mut Lane, s: &mut Shared, max_run: u64) {
    let dead = l.leaving.dead.clone();
    let gate = s.cfg.marks.as_ref().map(|m| m.gate());
    let refused = discard_blocks(
        s.fd,
        &mut l.leaving.dead,
        max_run,
        s.discarded,
        s.snap,
        gate,
        s.log,
    );
    for b in dead.into_iter().filter(|b| !refused.contains(b)) {
        l.residency.left(b, true);
    }
    l.leaving.evict.extend(refused);
}

/// Logs the lane's thrash guard turning on or off (core engine/thrash.rs):
/// it changes what the lane does, so a user reading the log should see it.
fn log_thrash_guard(l: &mut Lane) {
    let on = l.engine.thrash_guarded();
    if on == l.guarded {
        return;
    }
    l.guarded = on;
    let st = l.engine.stats();
    if on {
        tracing::info!(
            gpu = %l.gpu,
            victims = st.victims_evict,
            refaults = st.refaults,
            "thrash guard on: most pre-evicted blocks came straight back; no reserve, no room made for prefetches"
        );
    } else {
        tracing::info!(gpu = %l.gpu, "thrash guard off: the engine's reserve and prefetching are back");
    }
}

/// A lane's parts the launches to come use, beside its host, and the
/// launches (`Shared`'s).
struct Ahead<'a> {
    engine: &'a mut Engine<Vec<u64>>,
    ordered: &'a mut Option<Instant>,
    next_use_ordered: &'a mut u64,
    large_sent: &'a mut issue::Once,
    sweep: &'a mut Sweep,
    /// The lane's faults since its last turn, oldest first.
    faults: &'a [u64],
    cfg: &'a Config,
    up: &'a Upcoming,
}

/// The launches to come first, in their order: known, not guessed
/// (ahead/issue.rs). Returns what the round did.
fn issue_upcoming(a: Ahead, limit: Limit, host: &mut Host) -> Issued {
    let lb = limit.blocks(a.engine.free_target());
    let large = !order::may_order(a.up, lb);
    if large && a.cfg.host_shared {
        // What does not fit may be read and written in host memory instead
        // (shared.rs): a measured trial, as for the CPU's rewrites.
        host.shared
            .overflow(a.up.generation, &a.up.running_ranges, lb);
    }
    let mut swept = false;
    let (mut sweep_orders, mut sweep_asides) = (0, 0);
    if a.cfg.sweep_victims() && large {
        let sweep = a.sweep.at(a.up.generation, &a.up.running_ranges);
        let was_aside = sweep.stands_aside();
        for &b in a.faults {
            sweep.fault(b);
        }
        swept = !sweep.stands_aside();
        sweep_asides = u64::from(!was_aside && !swept);
        if swept {
            sweep_orders = order_sweep(a.engine, a.ordered, a.next_use_ordered, sweep, a.up);
        }
    } else if a.cfg.orders_queue() && !large {
        order_queue(a.engine, a.ordered, a.next_use_ordered, a.cfg, a.up);
    }
    let (pct, large_pct) = (a.cfg.footprint_window_pct, a.cfg.large_window_pct);
    let (w, large) = if swept {
        let part = issue::part(lb, a.cfg.sweep_window_pct);
        (a.sweep.window(a.up.running(), part), false)
    } else {
        issue::window(a.up, lb, pct, large_pct)
    };
    let once = large.then(|| a.large_sent.at(a.up.generation));
    let done = issue::issue(a.engine, limit, host, w, PREFETCHES_PER_TURN, once);
    Issued {
        done,
        window: w.len() as u64,
        sweep_orders,
        sweep_asides,
    }
}

/// The whole-queue pass the configuration asks for, at most every
/// `order::ORDER_EVERY`.
fn order_queue(
    engine: &mut Engine<Vec<u64>>,
    ordered: &mut Option<Instant>,
    next_use_ordered: &mut u64,
    cfg: &Config,
    up: &Upcoming,
) {
    let Some(now) = order::due(*ordered) else {
        return;
    };
    *ordered = Some(now);
    match (&up.left, &up.next_use) {
        (Some(left), _) if cfg.cyclic_victims => {
            order::order_cyclic(engine, left, &up.blocks);
        }
        // Only when the next uses were computed again: a pass touches
        // every resident block (0.3 ms at 3,000), and blocks migrated in
        // since went to the most recent end, where blocks in use belong.
        (_, Some(next)) if cfg.next_use_victims => {
            if *next_use_ordered != next.generation {
                *next_use_ordered = next.generation;
                order::order_next_use(engine, &next.farthest_first, &up.blocks);
            }
        }
        _ => {
            order::order_upcoming(engine, &up.blocks);
        }
    }
}

/// The sweep order (order.rs `order_sweep`) of running launches larger
/// than the limit, when a front moved or the next uses were computed
/// again, at most every `order::ORDER_EVERY`. Returns 1 if it ran.
fn order_sweep(
    engine: &mut Engine<Vec<u64>>,
    ordered: &mut Option<Instant>,
    next_use_ordered: &mut u64,
    sweep: &mut Sweep,
    up: &Upcoming,
) -> u64 {
    let Some(now) = order::due(*ordered) else {
        return 0;
    };
    let next = up.next_use.as_ref();
    let renewed = next.is_some_and(|n| n.generation != *next_use_ordered);
    // Both are asked: `moved` records the fronts it compared.
    if !(sweep.moved() | renewed) {
        return 0;
    }
    *ordered = Some(now);
    if let Some(n) = next {
        *next_use_ordered = n.generation;
    }
    let farthest = next.map_or(&[][..], |n| &n.farthest_first[..]);
    order::order_sweep(engine, farthest, sweep, up.running());
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::discard::Leaving;
    use crate::userspace::lanes::tests::config;
    use crate::userspace::lanes::Lanes;
    use crate::userspace::migrator::Evicted;
    use crate::userspace::pump::turn;
    use crate::userspace::residency::{fault_in, Left, Residency};
    use crate::userspace::route::tests::{index, table};
    use prescient_core::DEFAULT_WATERMARK_PCT;
    use prescient_core::{Engine, Pump};
    use std::sync::Arc;

    /// The process's pieces every lane shares, with no workers (their
    /// queue only fills) and no discards.
    struct World {
        cfg: Config,
        discarded: HashSet<u64>,
        log: BlockLog,
        snap: Snapshot,
        migrator: Migrator,
        route: Route,
        mech: Tracker,
        shared: SharedBlocks,
    }

    impl World {
        /// The lane of GPU 0 with blocks 0-63 faulted in: full under the
        /// 128M budget the tests that use it give.
        fn full_lane(&mut self) -> Lane {
            let gpu = self.route.table().gpu(index(0)).unwrap();
            let mut lane = Lane::new(gpu, self.cfg.budget_of(&gpu), &self.cfg, false).unwrap();
            for b in 0..64 {
                self.route.fault(index(0), b, || anyhow::bail!("known"));
                lane.fault(b, false, false);
            }
            lane
        }

        fn new(cfg: Config, parents: &[u16]) -> World {
            let null = std::fs::File::open("/dev/null").unwrap();
            World {
                cfg,
                discarded: HashSet::new(),
                log: BlockLog::off(),
                snap: Snapshot::default(),
                migrator: Migrator::start(Arc::new(null.into()), 0, 0, 0, 0),
                route: Route::new(table(parents)),
                mech: Tracker::default(),
                shared: SharedBlocks::default(),
            }
        }

        /// The evictions queued so far, ended as the workers end them.
        fn evicted(&mut self) -> Vec<Evicted> {
            self.migrator.run_queued();
            self.migrator.take_evicted()
        }

        /// Ends the queued evictions on `lanes`.
        fn complete(&mut self, lanes: &mut [Lane]) {
            let done = self.evicted();
            for l in lanes {
                for e in &done {
                    l.eviction_ended(e);
                }
            }
        }

        fn turn(&mut self, l: &mut Lane) -> Vec<u64> {
            self.turn_ahead(l, &[], &mut Vec::new())
        }

        /// A turn with the blocks of the launches to come.
        fn turn_ahead(
            &mut self,
            l: &mut Lane,
            upcoming: &[u64],
            ahead: &mut Vec<Issued>,
        ) -> Vec<u64> {
            let up = Upcoming {
                blocks: upcoming.to_vec(),
                ..Upcoming::default()
            };
            self.turn_with(l, &up, ahead)
        }

        /// A turn with the blocks of the launches to come and the running
        /// ones' (`queue::Upcoming::running`).
        fn turn_running(
            &mut self,
            l: &mut Lane,
            upcoming: &[u64],
            running: &[u64],
            ahead: &mut Vec<Issued>,
        ) -> Vec<u64> {
            let up = Upcoming {
                blocks: upcoming.to_vec(),
                running: Some(running.to_vec()),
                ..Upcoming::default()
            };
            self.turn_with(l, &up, ahead)
        }

        /// A turn with `up`.
        fn turn_with(&mut self, l: &mut Lane, up: &Upcoming, ahead: &mut Vec<Issued>) -> Vec<u64> {
            lane_turn(
                l,
                &mut Shared {
                    upcoming: up,
                    ahead,
                    cfg: &self.cfg,
                    fd: -1,
                    discard_ok: false,
                    discarded: &mut self.discarded,
                    backoff: None,
                    log: &mut self.log,
                    snap: &mut self.snap,
                    migrator: &self.migrator,
                    route: &self.route,
                    mech: &mut self.mech,
                    host_blocks: &mut self.shared,
                },
            )
        }
    }

    /// With launches queued ahead of the GPU, a lane's turn sends their
    /// blocks first, in launch order, as many as the window (25% of a
    /// 64-block limit: 16) and never more, while its engine, which has
    /// learnt nothing, sends nothing.
    #[test]
    fn a_lane_sends_the_window_of_upcoming_blocks_first() {
        let mut w = World::new(config("128M", &[0]), &[0]);
        assert_eq!(w.cfg.footprint_window_pct, 25);
        let gpu = w.route.table().gpu(index(0)).unwrap();
        let mut lane = Lane::new(gpu, w.cfg.budget_of(&gpu), &w.cfg, false).unwrap();
        let upcoming: Vec<u64> = (0..40).map(|i| 7000 - 3 * i).collect();
        let mut ahead = Vec::new();
        let sent = w.turn_ahead(&mut lane, &upcoming, &mut ahead);
        let limit = Limit {
            capacity_blocks: 64,
            watermark_pct: DEFAULT_WATERMARK_PCT,
        };
        let n = (limit.blocks(lane.engine.free_target()) * 25 / 100) as usize;
        assert_eq!(sent, upcoming[..n], "in launch order, the window only");
        assert_eq!(ahead.len(), 1);
        assert_eq!(
            (ahead[0].done.prefetched, ahead[0].window),
            (n as u64, n as u64)
        );
        // Resident now: the next turn sends nothing again.
        let again = w.turn_ahead(&mut lane, &upcoming, &mut ahead);
        assert!(again.is_empty());
        assert_eq!(ahead[1].done.resident, n as u64);
    }

    /// `--large-window-pct 75`: a running launch of 100 blocks under a
    /// 64-block limit gets as window the first 75% of the limit of its
    /// blocks in `running`'s order (the ones later launches use first),
    /// not 25% of the upcoming list; one of 10 blocks gets the plain
    /// window, and so does the large one with the knob off.
    #[test]
    fn a_running_launch_larger_than_the_limit_keeps_most_of_it() {
        let mut w = World::new(
            Config {
                large_window_pct: 75,
                ..config("128M", &[0])
            },
            &[0],
        );
        let gpu = w.route.table().gpu(index(0)).unwrap();
        let mut lane = Lane::new(gpu, w.cfg.budget_of(&gpu), &w.cfg, false).unwrap();
        let lb = Limit {
            capacity_blocks: 64,
            watermark_pct: DEFAULT_WATERMARK_PCT,
        }
        .blocks(lane.engine.free_target());
        let upcoming: Vec<u64> = (5000..5100).chain(6000..6020).collect();
        let mut running: Vec<u64> = (5090..5100).collect();
        running.extend(5000..5090);
        let mut ahead = Vec::new();
        let sent = w.turn_running(&mut lane, &upcoming, &running, &mut ahead);
        let n = (lb * 75 / 100) as usize;
        assert!(n > 16 && n < 64, "{n}");
        assert_eq!(sent, running[..n], "the blocks used later first");
        assert_eq!(ahead[0].window, n as u64);
        let mut lane = Lane::new(gpu, w.cfg.budget_of(&gpu), &w.cfg, false).unwrap();
        let small: Vec<u64> = (5000..5010).collect();
        let sent = w.turn_running(&mut lane, &upcoming, &small, &mut ahead);
        assert_eq!(sent, upcoming[..(lb * 25 / 100) as usize]);
        // Off, and the sweep off: the plain window, whatever runs.
        let cfg = Config {
            sweep_victims: false,
            ..config("128M", &[0])
        };
        let mut w = World::new(cfg, &[0]);
        let mut lane = Lane::new(gpu, w.cfg.budget_of(&gpu), &w.cfg, false).unwrap();
        let sent = w.turn_running(&mut lane, &upcoming, &running, &mut ahead);
        assert_eq!(sent, upcoming[..(lb * 25 / 100) as usize]);
    }

    /// The sweep (the default): a full lane (0-63 resident under 64
    /// blocks) runs a launch over 0-47 and 1000-1047 side by side. A fault
    /// at 1012 puts the GPU a quarter in, so 0-11 are passed: victims are
    /// the resident blocks the launch does not use (48-63), then the
    /// passed ones from the one passed last (11 first), then the ones
    /// ahead from the one reached last; the window is the blocks ahead in
    /// the order the GPU reaches them (12 and 1012 side by side). Without
    /// it (`--no-sweep-victims`) the engine's order stands: the launch's
    /// own blocks go before 48-63.
    #[test]
    fn a_sweep_larger_than_the_limit_keeps_what_the_gpu_has_not_reached() {
        for on in [true, false] {
            let cfg = Config {
                sweep_victims: on,
                ..config("128M", &[0])
            };
            let mut w = World::new(cfg, &[0]);
            let mut lane = w.full_lane();
            // The faults that filled it were a launch before this one.
            lane.turn_faults.clear();
            w.route.fault(index(0), 1012, || anyhow::bail!("known"));
            lane.fault(1012, false, false);
            let ranges = [(0, 48), (1000, 48)];
            let running: Vec<u64> = (0..48).chain(1000..1048).collect();
            let up = Upcoming {
                blocks: running.clone(),
                running: Some(running.clone()),
                running_ranges: ranges.to_vec(),
                ..Upcoming::default()
            };
            let mut ahead = Vec::new();
            let sent = w.turn_with(&mut lane, &up, &mut ahead);
            // Either way, 96 blocks under the 64-block budget: the first range
            // (48 blocks, 96 MB) is offered to be tried in host memory.
            assert_eq!(w.shared.stats.overflow_candidates, 1);
            let mut out = [prescient_core::Victim::default(); 96];
            let n = lane.engine.victims(&mut out);
            let victims: Vec<u64> = out[..n].iter().map(|v| v.block).collect();
            if !on {
                assert_eq!(ahead[0].sweep_orders, 0);
                // Least recently migrated, past the plain window (0-14):
                // a block the launch uses before the ones it does not.
                assert!(victims[0] < 48, "{victims:?}");
                continue;
            }
            assert_eq!(ahead[0].sweep_orders, 1);
            let lb = Limit {
                capacity_blocks: 64,
                watermark_pct: DEFAULT_WATERMARK_PCT,
            }
            .blocks(lane.engine.free_target());
            assert_eq!(ahead[0].window, lb * 25 / 100, "--sweep-window-pct 25");
            // 48-52 went for the first prefetches.
            assert_eq!(victims[..11], (53..64).collect::<Vec<u64>>()[..]);
            assert_eq!(victims[11..23], [11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
            assert_eq!(victims[23..26], [47, 46, 45]);
            // The room for 1013 is still leaving the GPU: nothing sent yet.
            assert!(sent.is_empty() && ahead[0].done.waiting);
            assert_eq!(lane.sweep.window(&running, 4), [12, 1012, 13, 1013]);
        }
    }

    /// `--order-queue`: a full lane's turn with launches to come that use
    /// resident blocks 40, 20 and 30 (in that order, beyond a 16-block
    /// window of blocks not resident) leaves them the last victims, 30
    /// before 20 before 40; with no pass (`--no-next-use-victims`, and
    /// it off) the engine's order stands, least recently migrated first.
    #[test]
    fn with_order_queue_the_queued_blocks_go_last_the_one_used_last_first() {
        for on in [false, true] {
            let cfg = Config {
                order_queue: on,
                next_use_victims: false,
                ..config("128M", &[0])
            };
            let mut w = World::new(cfg, &[0]);
            let mut lane = w.full_lane();
            let mut upcoming: Vec<u64> = (1000..1016).collect();
            upcoming.extend([40, 20, 30]);
            w.turn_ahead(&mut lane, &upcoming, &mut Vec::new());
            let mut out = [prescient_core::Victim::default(); 64];
            let n = lane.engine.victims(&mut out);
            let order: Vec<u64> = out[..n].iter().map(|v| v.block).collect();
            let at = |b: u64| order.iter().position(|&x| x == b);
            if on {
                assert_eq!(&order[n - 3..], [30, 20, 40], "{order:?}");
            } else {
                assert!(at(20) < at(30) && at(30) < at(40), "{order:?}");
            }
        }
    }

    /// The next-use order (the default) runs only when the next uses were
    /// computed again: in a full lane (blocks 0-63), next uses with 5
    /// soonest, then 7, then 3 make them the last victims, 5 the very
    /// last; a second turn with another order but the same generation
    /// changes nothing; a new generation orders them again.
    #[test]
    fn the_next_use_order_runs_when_the_next_uses_change() {
        use crate::userspace::ahead::queue::NextUses;
        let mut w = World::new(config("128M", &[0]), &[0]);
        let mut lane = w.full_lane();
        let tail = |w: &mut World, lane: &mut Lane, order: [u64; 3], generation| {
            // Past ORDER_EVERY since the last turn.
            std::thread::sleep(std::time::Duration::from_millis(3));
            let up = Upcoming {
                blocks: (1000..1016).collect(),
                next_use: Some(NextUses {
                    farthest_first: order.iter().rev().map(|&b| (b * 10, b)).collect(),
                    now: 0,
                    generation,
                }),
                ..Upcoming::default()
            };
            w.turn_with(lane, &up, &mut Vec::new());
            let mut out = [prescient_core::Victim::default(); 64];
            let n = lane.engine.victims(&mut out);
            out[..n]
                .iter()
                .map(|v| v.block)
                .rev()
                .take(3)
                .collect::<Vec<u64>>()
        };
        // The last three victims, the very last first.
        assert_eq!(tail(&mut w, &mut lane, [5, 7, 3], 1), [5, 7, 3]);
        assert_eq!(
            tail(&mut w, &mut lane, [3, 7, 5], 1),
            [5, 7, 3],
            "same generation"
        );
        assert_eq!(tail(&mut w, &mut lane, [3, 7, 5], 2), [3, 7, 5]);
    }

    /// Without a pass over the whole queue (`--no-next-use-victims`), the
    /// list of upcoming blocks is bounded by the largest lane's window
    /// (25% of 64 and of 32 blocks: 16), by a wider window, and not at all
    /// (past MAX_UPCOMING) when a pass orders the whole queue, as the
    /// default's does; no lane yet, nothing; a lane's window never
    /// outgrows the bound.
    #[test]
    fn the_upcoming_list_is_bounded_by_the_largest_window() {
        let t = table(&[0, 1]);
        let g = |p: u16| t.gpu(index(p)).unwrap();
        let mk = || Config {
            next_use_victims: false,
            ..config(&format!("128M,{}=64M", g(1)), &[0, 1])
        };
        let cfg = mk();
        let mut lanes = Lanes::default();
        assert_eq!(upcoming_needed(&lanes, &cfg), 0);
        for p in 0..2 {
            lanes.get_or_make(g(p), &cfg, false).unwrap();
        }
        assert_eq!(upcoming_needed(&lanes, &cfg), 16);
        for l in lanes.iter() {
            let lb = Limit {
                capacity_blocks: budget_blocks(l).unwrap(),
                watermark_pct: DEFAULT_WATERMARK_PCT,
            }
            .blocks(l.engine.free_target());
            let up = Upcoming {
                blocks: vec![0; 100],
                ..Upcoming::default()
            };
            let (w, _) = issue::window(&up, lb, cfg.footprint_window_pct, 0);
            assert!(w.len() <= 16, "{}", w.len());
        }
        let wide = Config {
            footprint_window_pct: 50,
            ..mk()
        };
        assert_eq!(upcoming_needed(&lanes, &wide), 32);
        for on in [
            Config {
                order_queue: true,
                ..mk()
            },
            Config {
                cyclic_victims: true,
                ..mk()
            },
            config(&format!("128M,{}=64M", g(1)), &[0, 1]),
            Config {
                large_window_pct: 50,
                ..mk()
            },
        ] {
            assert_eq!(upcoming_needed(&lanes, &on), MAX_UPCOMING);
        }
    }

    /// `--order-queue` with running launches that alone use more blocks
    /// than the limit (70 of 64): the pass stands aside, and the engine's
    /// order (least recently migrated first) stands as without the flag.
    #[test]
    fn the_pass_stands_aside_while_a_running_launch_exceeds_the_limit() {
        let cfg = Config {
            order_queue: true,
            ..config("128M", &[0])
        };
        let mut w = World::new(cfg, &[0]);
        let mut lane = w.full_lane();
        let running: Vec<u64> = (1000..1070).collect();
        let mut upcoming = running.clone();
        upcoming.extend([40, 20, 30]);
        w.turn_running(&mut lane, &upcoming, &running, &mut Vec::new());
        let mut out = [prescient_core::Victim::default(); 64];
        let n = lane.engine.victims(&mut out);
        let order: Vec<u64> = out[..n].iter().map(|v| v.block).collect();
        let at = |b: u64| order.iter().position(|&x| x == b);
        assert!(at(20) < at(30) && at(30) < at(40), "{order:?}");
    }

    /// UVM_MIGRATE as a worker sees it, from the driver's source: to the
    /// CPU the call returns only once the copy is done (uvm_migrate.c adds
    /// CPU mappings, and uvm_va_block.c's `block_map_cpu_page_to` waits on
    /// the block's tracker first: "Don't map the CPU until prior copies
    /// ... finish"); to the GPU with UVM_MIGRATE_FLAG_ASYNC it returns once
    /// the copies are pushed. Here each call to the CPU waits for a permit
    /// from the test (the copy finishing), and is counted when it returns.
    struct SlowCpu {
        permits: std::sync::mpsc::Sender<()>,
        returned: Arc<std::sync::atomic::AtomicU64>,
    }

    /// One GPU under a 64 MB budget (32 blocks) with no reserve, its lane
    /// holding blocks 0-31 from their faults: full.
    fn full_lane() -> (World, prescient_uvm::Gpu, Lanes) {
        let cfg = Config {
            reserve_pct: 1,
            ..config("64M", &[0])
        };
        let mut w = World::new(cfg, &[0]);
        let gpu = w.route.table().gpu(index(0)).unwrap();
        let mut lanes = Lanes::default();
        for b in 0..32 {
            w.route.fault(index(0), b, || anyhow::bail!("known"));
            lanes
                .get_or_make(gpu, &w.cfg, false)
                .unwrap()
                .fault(b, false, false);
        }
        (w, gpu, lanes)
    }

    fn slow_cpu_migrator() -> (Migrator, SlowCpu) {
        use std::sync::atomic::Ordering::SeqCst;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Mutex::new(rx);
        let returned = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r = returned.clone();
        let mover: crate::userspace::migrator::Move = Arc::new(move |j: &Job| {
            if !j.goes_to_gpu() {
                rx.lock().unwrap().recv().unwrap();
                r.fetch_add(j.blocks(), SeqCst);
            }
            Ok(())
        });
        let m = Migrator::start_with(mover, 1, 0, 0);
        (
            m,
            SlowCpu {
                permits: tx,
                returned,
            },
        )
    }

    /// The budget holds on the GPU, not only in the ledger: a full lane
    /// (32 blocks of a 64 MB budget) gets 8 upcoming blocks; each needs a
    /// victim, and no prefetch is issued before the eviction that makes
    /// its room has returned. At every moment the blocks on the GPU (the
    /// 32, plus every block sent there, minus every eviction returned)
    /// stay within the budget. (Counting a victim gone when its eviction
    /// was queued sent all 8 at once: 40 blocks on the GPU.)
    #[test]
    fn prefetches_wait_until_the_evictions_making_their_room_return() {
        use std::sync::atomic::Ordering::SeqCst;
        // No reserve (1% of 32 blocks: 0), as the engine's own 2.5% gives
        // here: each prefetch then needs exactly one eviction to return,
        // which the steps below release one at a time.
        let (mut w, gpu, mut lanes) = full_lane();
        let (m, slow) = slow_cpu_migrator();
        w.migrator = m;
        let upcoming: Vec<u64> = (100..108).collect();
        let mut sent = Vec::new();
        let on_gpu = |sent: &Vec<u64>| 32 + sent.len() as u64 - slow.returned.load(SeqCst);
        for step in 0..40 {
            let l = lanes.at(gpu.index).unwrap();
            sent.extend(w.turn_ahead(l, &upcoming, &mut Vec::new()));
            assert!(
                on_gpu(&sent) <= 32,
                "step {step}: {} blocks on the GPU",
                on_gpu(&sent)
            );
            if sent.len() == upcoming.len() {
                break;
            }
            // One eviction's copy finishes; the loop sees it return.
            let before = slow.returned.load(SeqCst);
            slow.permits.send(()).unwrap();
            let t = std::time::Instant::now();
            while slow.returned.load(SeqCst) == before {
                assert!(t.elapsed().as_secs() < 10, "the worker never returned");
                std::thread::yield_now();
            }
            let mut done = Vec::new();
            while done.is_empty() {
                done = w.migrator.take_evicted();
            }
            lanes.evictions_ended(&done);
        }
        assert_eq!(sent, upcoming, "every upcoming block went, in order");
        let l = lanes.at(gpu.index).unwrap();
        // 8 in, 8 victims out, each returned before its block went.
        assert_eq!(
            (l.residency.blocks(), l.residency.leaving_blocks()),
            (32, 0)
        );
        assert_eq!(slow.returned.load(SeqCst), 8);
        drop(slow.permits);
        w.migrator.finish();
    }

    /// Blocks an alive mark brought back before its reply (alive.rs) are
    /// counted on the GPU at the lane's next turn, not migrated again, and
    /// that turn makes room for them: at the budget, as many victims leave.
    #[test]
    fn populated_blocks_count_at_once_and_the_turn_makes_room_for_them() {
        let (mut w, gpu, mut lanes) = full_lane();
        let l = lanes.at(gpu.index).unwrap();
        assert_eq!(l.residency.blocks(), 32);
        l.populated.extend([200, 201, 202, 203]);
        let sent = w.turn(l);
        assert!(sent.is_empty(), "nothing migrated for them: {sent:?}");
        assert!(l.populated.is_empty());
        assert_eq!(w.snap.alive_populated_blocks, 4);
        assert!((200..204).all(|b| l.residency.get(b) == prescient_core::BLOCK_BYTES));
        assert_eq!(l.residency.blocks(), 36, "counted, leaving ones included");
        assert_eq!(
            l.residency.leaving_blocks(),
            4,
            "four victims on their way out"
        );
        w.migrator.finish();
    }

    /// A loop over 3 passes of 40 blocks: a stream the engine learns.
    fn stream() -> Vec<u64> {
        (0..3).flat_map(|_| 1000..1040).collect()
    }

    /// A one-GPU process behaves as it did with one engine per process:
    /// the same prefetches, the same ledger and the same engine counters,
    /// turn by turn, as the step before lanes (the engine learns the
    /// fault, the ledger counts it, then one `turn` of the shared loop
    /// under the budget, its pump restarted by a fault).
    #[test]
    fn one_gpu_is_the_one_engine_loop_it_was() {
        let cfg = config("16M", &[0]);
        let mut w = World::new(cfg, &[0]);
        let gpu = w.route.table().gpu(index(0)).unwrap();
        let mut lane = Lane::new(gpu, w.cfg.budget_of(&gpu), &w.cfg, false).unwrap();
        // The reference: the pieces the process held before lanes.
        let params =
            crate::userspace::config::engine_params(&w.cfg, Some(16 << 20), lane.gpu_blocks, false)
                .unwrap();
        let mut engine = Engine::new(params, vec![0u64; params.storage_words()]).unwrap();
        engine.set_regret_window(w.cfg.regret_window);
        let (mut ledger, mut pump, mut leaving) =
            (Residency::default(), Pump::new(), Leaving::default());
        let (mut unc, mut disc, mut log, mut snap) = (
            HashSet::new(),
            HashSet::new(),
            BlockLog::off(),
            Snapshot::default(),
        );
        let limit = Limit {
            capacity_blocks: 8,
            watermark_pct: DEFAULT_WATERMARK_PCT,
        };
        let mut ref_evicted = 0;
        for b in stream() {
            w.route.fault(index(0), b, || anyhow::bail!("known"));
            assert!(lane.fault(b, true, false).is_some());
            let got = w.turn(&mut lane);
            // The reference turn.
            engine.fault(b);
            fault_in(&mut ledger, &mut engine, b);
            pump.restart();
            let want = turn(
                &mut pump,
                &mut engine,
                limit,
                PREFETCHES_PER_TURN,
                &mut Vec::new(),
                &mut Host {
                    residency: &mut ledger,
                    leaving: &mut leaving,
                    discard: false,
                    uncertain: &mut unc,
                    discarded: &mut disc,
                    backoff: None,
                    log: &mut log,
                    snap: &mut snap,
                    migrator: &w.migrator,
                    route: &w.route,
                    gpu,
                    other_gpu: &mut 0,
                    max_run: w.cfg.max_coalesce_blocks,
                    issued: Vec::new(),
                    mech: &mut Tracker::default(),
                    shared: &mut SharedBlocks::default(),
                },
            );
            assert_eq!(got, want, "prefetches after the fault on {b}");
            // Both turns' evictions complete before the next fault.
            let evicted: Vec<u64> = std::mem::take(&mut leaving.evict);
            ref_evicted += evicted.len() as u64;
            for b in evicted {
                assert_ne!(ledger.left(b, true), Left::Moot);
            }
            w.complete(std::slice::from_mut(&mut lane));
            assert_eq!(lane.residency.blocks(), ledger.blocks(), "after {b}");
            assert_eq!(lane.engine.stats(), engine.stats(), "after {b}");
            assert_eq!(lane.pre_evicted_blocks, ref_evicted, "after {b}");
        }
        let st = lane.engine.stats();
        assert!(
            st.prefetches > 0 && st.history_hits > 0,
            "the loop was learnt: {st:?}"
        );
        assert!(lane.residency.blocks() <= 8 + 1, "the budget was kept");
    }

    /// Two GPUs of one process under budgets of their own: each is kept
    /// under its own, a full GPU 0 never evicts GPU 1's blocks, and each
    /// lane's prefetches are its own GPU's blocks.
    #[test]
    fn two_gpus_each_keep_their_own_budget() {
        let u1 = table(&[0, 1]).gpu(index(1)).unwrap().to_string();
        let mut w = World::new(config(&format!("16M,{u1}=32M"), &[0, 1]), &[0, 1]);
        let t = w.route.table().clone();
        let (g0, g1) = (t.gpu(index(0)).unwrap(), t.gpu(index(1)).unwrap());
        let mut lanes = Lanes::default();
        let mut sent: Vec<(u16, u64)> = Vec::new();
        for (b0, b1) in (0..3).flat_map(|_| (0..40).map(|i| (1000 + i, 5000 + i))) {
            for (g, b) in [(g0, b0), (g1, b1)] {
                w.route.fault(g.index, b, || anyhow::bail!("known"));
                lanes.moved_to(g.index, b);
                lanes
                    .get_or_make(g, &w.cfg, false)
                    .unwrap()
                    .fault(b, true, false);
                // The turn after the fault; its evictions end, and the loop
                // turns again before the next fault (the room is free now).
                for _ in 0..2 {
                    let l = lanes.at(g.index).unwrap();
                    sent.extend(w.turn(l).into_iter().map(|x| (g.index, x)));
                    lanes.evictions_ended(&w.evicted());
                }
            }
        }
        let l0 = lanes.at(g0.index).unwrap();
        assert_eq!(l0.budget, Some(16 << 20));
        assert!(l0.residency.blocks() <= 8 + 1, "{}", l0.residency.blocks());
        assert!(l0.pre_evicted_blocks > 0);
        let (r0, p0) = (l0.residency.blocks(), l0.pre_evicted_blocks);
        let l1 = lanes.at(g1.index).unwrap();
        assert_eq!(l1.budget, Some(32 << 20));
        assert!(l1.residency.blocks() <= 16 + 1, "{}", l1.residency.blocks());
        // 120 faults each: what is not resident was pre-evicted by its own lane.
        assert!(r0 + p0 >= 40 && l1.residency.blocks() + l1.pre_evicted_blocks >= 40);
        assert!(
            sent.iter().any(|(g, _)| *g == g0.index) && sent.iter().any(|(g, _)| *g == g1.index)
        );
        for (g, b) in sent {
            assert_eq!(
                g == g0.index,
                b < 5000,
                "block {b} sent by the lane of index {g}"
            );
        }
    }
}
