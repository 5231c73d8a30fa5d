//! The oracle's policy (`--mode oracle`, the module's doc says what it
//! does): it runs on the process's one lane (lanes.rs), the lane's ledger
//! kept with Belady's victims, its prefetches sent to the lane's GPU. A
//! plan is one GPU's faults: a process that computes on a second GPU is
//! refused in one line.

use super::belady::{Ledger, Moved, Schedule};
use super::bind::Faulted;
use super::maps::{self, Range};
use super::plan::Translated;
use super::{OracleConfig, OracleStats};
use crate::userspace::blocklog::BlockLog;
use crate::userspace::lanes::{Lane, Lanes};
use crate::userspace::mechanism::Tracker;
use crate::userspace::migrator::Migrator;
use crate::userspace::policy::{budget_blocks, DriverLike, Policy};
use crate::userspace::pump::prefetch_jobs;
use crate::userspace::residency::Residency;
use crate::userspace::route::Route;
use crate::userspace::snapshot::Snapshot;
use crate::userspace::state::Process;
use prescient_core::{Limit, BLOCK_BYTES, BLOCK_SHIFT};
use prescient_uvm::Gpu;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// No new range faulted on this long while the GPU faults, and the plan
/// still not bound: it is of another workload or size. Generous: a job's
/// first step may be long, and binding waits for its last new range.
const SETTLED: Duration = Duration::from_secs(10);
/// How often the window is looked at again when nothing changed.
const RETRY: Duration = Duration::from_millis(1);

/// The plan mapped onto the process's lane, once bound (`Plan::bind`).
struct Active {
    /// The GPU of the lane it runs on.
    gpu: Gpu,
    schedule: Schedule,
    ranges: Vec<Range>,
    /// Prefetched blocks not evicted yet, with the position prefetched for.
    prefetched: HashMap<u64, u32>,
    /// Blocks the CPU faulted away since the cursor last moved: the plan
    /// knows only the GPU's uses, and prefetching a block the CPU is
    /// writing (a job's next input) would only bounce it back and forth.
    /// Released when the GPU moves on (its next fault ahead in the plan).
    cpu_held: HashSet<u64>,
    next_look: Instant,
}

pub(in crate::userspace) struct Oracle {
    cfg: OracleConfig,
    active: Option<Active>,
    /// The ranges the GPU faulted on before the plan applied.
    faulted: Faulted,
    /// When a range faulted on was last new, and the faults seen then.
    since: (Instant, u64),
    start: Instant,
    stats: OracleStats,
}

impl Oracle {
    pub(in crate::userspace) fn new(cfg: OracleConfig) -> Oracle {
        let stats = OracleStats {
            plan_entries: cfg.plan.seq.len() as u64,
            ..Default::default()
        };
        Oracle {
            cfg,
            active: None,
            faulted: Faulted::default(),
            since: (Instant::now(), 0),
            start: Instant::now(),
            stats,
        }
    }

    /// Maps the plan onto the process's lane once the GPU has faulted on
    /// every range it needs (this turn's faults tell which); ranges that
    /// cannot be the plan's end the loop (`Process::fatal`).
    fn try_apply(&mut self, p: &mut Process) {
        let pid = p.snap.pid;
        let mut added = false;
        for &a in &p.turn_faults {
            added |= self.faulted.note(a);
        }
        if self.faulted.wants_read() {
            match maps::read(pid) {
                Ok(now) => {
                    if let Err(e) = self.cfg.plan.check_now(&now) {
                        p.fatal = Some(e);
                        return;
                    }
                    added |= self.faulted.reread(now);
                }
                Err(e) => tracing::debug!(pid, "oracle: /proc maps: {e}"),
            }
        }
        let faults = p.snap.fault_blocks;
        if !added {
            if self.since.0.elapsed() >= SETTLED && faults > self.since.1 {
                p.fatal = Some(self.cfg.plan.mismatch_faulted(self.faulted.ranges()));
            }
            return;
        }
        self.since = (Instant::now(), faults);
        match self.cfg.plan.bind(self.faulted.ranges()) {
            Ok(None) => {}
            Ok(Some(t)) => self.apply(p, t),
            Err(e) => {
                // The one line is the error; the sizes, for whoever asks.
                tracing::debug!(pid, faulted = ?self.faulted.ranges().iter().map(Range::size).collect::<Vec<_>>(),
                    plan = ?self.cfg.plan.ranges.iter().map(|r| r.size).collect::<Vec<_>>(), "oracle: ranges");
                p.fatal = Some(e);
            }
        }
    }

    /// Starts the plan `t` on the process's lane, its cursor where the
    /// job is (the last needed range's first use).
    fn apply(&mut self, p: &mut Process, t: Translated) {
        let gpu_blocks = u64::from(p.cfg.gpu_blocks);
        let Some(l) = p.lanes.iter_mut().next() else {
            return;
        };
        let ahead = self.ahead(budget_blocks(l).unwrap_or(gpu_blocks)) as u32;
        // Jumps of at most four windows; uses stay in use for two.
        let mut schedule = Schedule::new(t.blocks, 4 * ahead, 2 * ahead);
        schedule.start_at(t.start);
        // The driver-like fallback's arrivals are stale: start from what
        // the lane's ledger holds now.
        while l.residency.pop_oldest().is_some() {}
        for b in l.residency.resident() {
            if whole(&t.ranges, b) {
                schedule.track(b);
            }
        }
        self.stats.applied_after_s = Some(self.start.elapsed().as_secs_f64());
        self.stats.applied_at = u64::from(t.start);
        tracing::info!(pid = p.snap.pid, gpu = %l.gpu, entries = schedule.entries(), at = t.start,
            ranges = t.ranges.len(), "oracle: the plan applies");
        self.active = Some(Active {
            gpu: l.gpu,
            schedule,
            ranges: t.ranges,
            prefetched: Default::default(),
            cpu_held: Default::default(),
            next_look: Instant::now(),
        });
    }

    /// The prefetch depth: `--oracle-ahead`, else 1/8 of the budget, at
    /// least 4 blocks and less than the budget.
    fn ahead(&self, budget: u64) -> usize {
        let a = self
            .cfg
            .ahead
            .map_or(budget / 8, u64::from)
            .clamp(4, budget.saturating_sub(1).max(1));
        a as usize
    }
}

impl Policy for Oracle {
    /// One turn on the process's one lane: no lane yet (no GPU has
    /// faulted) is nothing to do; a second lane ends the loop (a plan is
    /// one GPU's faults, `refuse_gpus`).
    fn step(&mut self, p: &mut Process) {
        if p.lanes.len() > 1 {
            return refuse_gpus(p);
        }
        let lane_gpu = p.lanes.iter().next().map(|l| l.gpu);
        if self
            .active
            .as_ref()
            .is_some_and(|a| lane_gpu.is_some_and(|g| g != a.gpu))
        {
            // The lane was dropped (its GPU left the table) and made again.
            self.active = None;
        }
        if let Some(l) = p.lanes.iter_mut().next() {
            if self.end_if_over(&mut l.residency) {
                p.snap.oracle = Some(self.stats.clone());
            }
        }
        if self.active.is_none() && !self.stats.plan_over && p.lanes.len() == 1 {
            self.try_apply(p);
        }
        if self.active.is_none() {
            p.turn_faults.clear();
            p.turn_cpu_taken.clear();
            return DriverLike.step(p);
        }
        self.turn(p);
    }
}

impl Oracle {
    /// Ends the plan once the cursor is at its last entry: past it nothing
    /// says what comes next (every block's next use is "never", so
    /// Belady's victim is any block, those the job uses now included: GPU
    /// run 53, dnn with 8 workers, a last iteration of 100 s, faulting and
    /// evicting in a loop). The lane `res` is kept driver-like from then
    /// on, its resident blocks queued for it in no particular order. True
    /// if it ended now.
    fn end_if_over(&mut self, res: &mut Residency) -> bool {
        let over = (self.active.as_ref())
            .is_some_and(|a| a.schedule.cursor() as usize + 1 >= a.schedule.entries());
        if !over {
            return false;
        }
        self.active = None;
        self.stats.plan_over = true;
        self.stats.over_after_s = Some(self.start.elapsed().as_secs_f64());
        res.requeue();
        tracing::info!("oracle: the plan is over; driver-like from here");
        true
    }

    /// One turn of the applied plan on the process's lane.
    fn turn(&mut self, p: &mut Process) {
        let Process {
            lanes,
            log,
            mech,
            route,
            snap,
            migrator,
            cfg,
            turn_faults,
            turn_cpu_taken,
            ..
        } = p;
        let Some(lane) = lanes.iter_mut().next() else {
            return;
        };
        self.on_lane(Pieces {
            lane,
            log,
            mech,
            route,
            snap,
            migrator,
            max_run: cfg.max_coalesce_blocks,
            gpu_blocks: u64::from(cfg.gpu_blocks),
            watermark_pct: cfg.watermark_pct(),
            faults: turn_faults,
            cpu_taken: turn_cpu_taken,
        });
    }

    /// One turn of the applied plan on lane `q.lane`: arrivals, the
    /// cursor, Belady's victims and the window, then the jobs to the
    /// lane's GPU (prefetches first) and to the CPU.
    fn on_lane(&mut self, q: Pieces) {
        let budget = budget_blocks(q.lane).unwrap_or(q.gpu_blocks);
        let ahead = self.ahead(budget);
        // Prescient's reserve, so that both move blocks through the same
        // machinery under the same limit (policy.rs `lane_turn`).
        let keep = Limit {
            capacity_blocks: budget,
            watermark_pct: q.watermark_pct,
        }
        .blocks(q.lane.engine.free_target());
        let (Some(a), s) = (self.active.as_mut(), &mut self.stats) else {
            return;
        };
        s.ahead_blocks = ahead as u64;
        // An eviction that completed freed room a waiting block can take.
        let mut changed = std::mem::take(&mut q.lane.evictions_ended);
        changed |= a.arrivals(&mut q.lane.residency);
        changed |= a.follow_faults(q.faults, &q.lane.residency, s);
        a.cpu_held.extend(q.cpu_taken.drain(..));
        let look = changed || Instant::now() >= a.next_look;
        let (max_run, migrator) = (q.max_run, q.migrator);
        let mut on = OnLane {
            lane: q.lane,
            log: q.log,
            mech: q.mech,
            route: q.route,
            snap: q.snap,
            ranges: &a.ranges,
            cpu_held: &a.cpu_held,
            prefetched: &mut a.prefetched,
            cursor: a.schedule.cursor(),
            s,
            issued: Vec::new(),
        };
        a.schedule.turn(&mut on, budget, keep, ahead, look);
        // Prefetches first: the copies the GPU waits for lead the queue.
        for j in prefetch_jobs(&on.issued, on.lane.gpu, max_run) {
            migrator.submit(j);
        }
        let l = &mut *on.lane;
        for &v in &l.leaving.evict {
            on.mech.evicted(v);
        }
        l.pre_evicted_blocks += l.leaving.evict.len() as u64;
        l.leaving.submit_evictions(max_run, migrator, l.gpu.uuid);
        on.s.cursor = u64::from(a.schedule.cursor());
        on.snap.oracle = Some(on.s.clone());
        if look {
            a.next_look = Instant::now() + RETRY;
        }
    }
}

/// What one oracle turn works on: the lane, and the process's pieces it
/// shares with the other policies.
struct Pieces<'a> {
    lane: &'a mut Lane,
    log: &'a mut BlockLog,
    mech: &'a mut Tracker,
    route: &'a Route,
    snap: &'a mut Snapshot,
    migrator: &'a Migrator,
    max_run: u64,
    gpu_blocks: u64,
    /// The resident-block watermark the engine's pump keeps (`Limit`).
    watermark_pct: u32,
    /// This turn's fault addresses and blocks the CPU took from the GPU.
    faults: &'a mut Vec<u64>,
    cpu_taken: &'a mut Vec<u64>,
}

/// The process computes on more than one GPU: the oracle replays one
/// GPU's plan on one lane, so the loop ends with one line.
fn refuse_gpus(p: &mut Process) {
    p.fatal = refusal(&p.lanes);
}

/// The one line that refuses a process with several lanes; None for one.
fn refusal(lanes: &Lanes) -> Option<String> {
    let gpus: Vec<String> = lanes
        .iter()
        .map(|l| format!("{}={}", l.gpu.index, l.gpu))
        .collect();
    (gpus.len() > 1).then(|| format!(
        "--mode oracle: the process computes on {} GPUs ({}); a plan replays one GPU's faults, so oracle mode needs a process that computes on one GPU",
        gpus.len(),
        gpus.join(",")
    ))
}

/// Whether block `b` lies wholly inside one of `ranges` (by address).
fn whole(ranges: &[Range], b: u64) -> bool {
    maps::find(ranges, b << prescient_core::BLOCK_SHIFT).is_some_and(|i| ranges[i].holds_block(b))
}

impl Active {
    /// Tracks the blocks that became resident on the lane since the last
    /// turn (faults, the driver's migrations, our prefetches); true if any
    /// did.
    fn arrivals(&mut self, res: &mut Residency) -> bool {
        let mut any = false;
        while let Some(b) = res.pop_oldest() {
            if res.get(b) > 0 && whole(&self.ranges, b) {
                self.schedule.track(b);
                any = true;
            }
        }
        any
    }

    /// Moves the cursor with this turn's faults; true if it moved.
    fn follow_faults(
        &mut self,
        faults: &mut Vec<u64>,
        res: &Residency,
        s: &mut OracleStats,
    ) -> bool {
        let mut moved = false;
        for b in faults.drain(..).map(|a| a >> BLOCK_SHIFT) {
            match self.schedule.fault(b, |x| res.get(x) >= BLOCK_BYTES) {
                Moved::Ahead => {
                    s.faults_ahead += 1;
                    moved = true;
                    self.cpu_held.clear();
                }
                Moved::Here => s.faults_here += 1,
                Moved::Far => s.faults_far += 1,
                Moved::Unplanned => s.faults_unplanned += 1,
            }
        }
        moved
    }
}

impl Schedule {
    /// Evicts Belady's victims while over the budget (faults bring blocks
    /// in beyond it), then, when `look`, prefetches the window, evicting
    /// until fewer than `keep` blocks stay (`fill`).
    fn turn(&mut self, l: &mut OnLane, budget: u64, keep: u64, ahead: usize, look: bool) {
        let over = self.settle(l, budget);
        l.s.victims_over_budget += over;
        if look || over > 0 {
            let f = self.fill(l, budget, keep, ahead);
            l.s.victims_for_prefetch += f.victims;
            l.s.prefetched_blocks += f.prefetched;
            l.s.no_room += u64::from(f.no_room);
            l.s.waiting += f.waiting;
        }
    }
}

/// The lane's ledger, the process's block log, routing and counters as
/// the schedule sees them.
struct OnLane<'a> {
    lane: &'a mut Lane,
    log: &'a mut BlockLog,
    mech: &'a mut Tracker,
    route: &'a Route,
    snap: &'a mut Snapshot,
    ranges: &'a [Range],
    cpu_held: &'a HashSet<u64>,
    prefetched: &'a mut HashMap<u64, u32>,
    cursor: u32,
    s: &'a mut OracleStats,
    issued: Vec<u64>,
}

impl Ledger for OnLane<'_> {
    fn blocks(&self) -> u64 {
        self.lane.residency.blocks()
    }

    fn leaving(&self) -> u64 {
        self.lane.residency.leaving_blocks()
    }

    fn resident(&self, b: u64) -> bool {
        self.lane.residency.get(b) >= BLOCK_BYTES
    }

    /// Only whole blocks of a managed range, bound for the lane's GPU
    /// (route.rs), and not while the CPU is taking them.
    fn movable(&mut self, b: u64) -> bool {
        if !whole(self.ranges, b) {
            return false;
        }
        match self.route.destination(b, self.lane.gpu.index) {
            Some(g) if g == self.lane.gpu => {}
            Some(_) => {
                self.lane.prefetch_other_gpu += 1;
                self.snap.prefetch_other_gpu += 1;
                return false;
            }
            None => {
                self.snap.prefetch_no_gpu += 1;
                return false;
            }
        }
        if self.cpu_held.contains(&b) {
            self.s.held_for_cpu += 1;
            return false;
        }
        true
    }

    /// Marks `v` leaving and queues its eviction (at the turn's end); it
    /// counts until the eviction completes (residency.rs).
    fn evict(&mut self, v: u64) -> bool {
        let l = &mut *self.lane;
        if !l.residency.leave(v) {
            return false; // gone already (the driver, or the CPU, moved it)
        }
        l.leaving.evict.push(v);
        self.log.victim(v);
        if let Some(pos) = self.prefetched.remove(&v) {
            if pos >= self.cursor {
                self.s.evicted_before_use += 1;
            }
        }
        true
    }

    fn prefetch(&mut self, b: u64, pos: u32) {
        self.lane.residency.add(b, BLOCK_BYTES);
        self.log.prefetch(b);
        self.mech.prefetched(b);
        self.prefetched.insert(b, pos);
        self.issued.push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan::{Plan, PlanRange};
    use super::*;
    use crate::userspace::lanes::tests::config;
    use crate::userspace::migrator::Job;
    use crate::userspace::route::tests::{index, table};
    use prescient_core::DEFAULT_WATERMARK_PCT;
    use std::sync::Arc;

    /// Oracle mode runs through the lane of the one GPU a process computes
    /// on (here GPU 5 of a node of 8, as a DDP worker): a simulated GPU
    /// walks the plan three times, faulting on what the lane's ledger does
    /// not hold; the oracle prefetches ahead of it to that GPU only, keeps
    /// the lane under the lane's budget with Belady's victims, and counts
    /// them in the lane's counters.
    #[test]
    fn the_oracle_runs_on_the_lane_of_the_gpu_the_process_computes_on() {
        let all: Vec<u16> = (0..8).collect();
        let cfg = config("32M", &all); // 16 blocks
        let mut route = Route::new(table(&all));
        let gpu = route.table().gpu(index(5)).unwrap();
        let mut lanes = Lanes::default();
        lanes.get_or_make(gpu, &cfg, false).unwrap();
        let (first, n) = (1000u64, 40u64);
        let seq: Vec<u64> = (0..3).flat_map(|_| first..first + n).collect();
        let plan = Plan {
            ranges: vec![PlanRange {
                size: n << BLOCK_SHIFT,
                misalign: 0,
            }],
            seq: seq.iter().map(|b| (0, b - first)).collect(),
        };
        let mut o = Oracle::new(OracleConfig {
            plan: Arc::new(plan),
            ahead: Some(4),
        });
        o.active = Some(Active {
            gpu,
            schedule: Schedule::new(seq.clone(), 16, 8),
            ranges: vec![Range {
                start: first << BLOCK_SHIFT,
                end: (first + n) << BLOCK_SHIFT,
            }],
            prefetched: HashMap::new(),
            cpu_held: HashSet::new(),
            next_look: Instant::now(),
        });
        let null = std::fs::File::open("/dev/null").unwrap();
        let migrator = Migrator::start(Arc::new(null.into()), 0, 0, 0, 0);
        let (mut log, mut mech, mut snap) =
            (BlockLog::off(), Tracker::default(), Snapshot::default());
        let (mut faults, mut jobs) = (0, Vec::new());
        for (i, &b) in seq.iter().enumerate() {
            let mut turn_faults = Vec::new();
            let lane = lanes.at(gpu.index).unwrap();
            if lane.residency.get(b) < BLOCK_BYTES {
                route.fault(gpu.index, b, || anyhow::bail!("known"));
                lane.fault(b, false, false);
                turn_faults.push(b << BLOCK_SHIFT);
                faults += 1;
            }
            // A turn after the fault, the workers ending its evictions,
            // and one more turn before the GPU's next access (the loop
            // turns far more often than a GPU faults).
            for faults in [&mut turn_faults, &mut Vec::new()] {
                o.on_lane(Pieces {
                    lane,
                    log: &mut log,
                    mech: &mut mech,
                    route: &route,
                    snap: &mut snap,
                    migrator: &migrator,
                    max_run: 16,
                    gpu_blocks: 4096,
                    watermark_pct: DEFAULT_WATERMARK_PCT,
                    faults,
                    cpu_taken: &mut Vec::new(),
                });
                // Only the fault's block goes past the budget, and only
                // until its victim has left.
                let r = &lane.residency;
                assert!(
                    r.staying_blocks() <= 16 && r.blocks() <= 17,
                    "over the lane's budget at {i}"
                );
                jobs.extend(migrator.run_queued());
                for e in migrator.take_evicted() {
                    lane.eviction_ended(&e);
                }
                assert!(lane.residency.blocks() <= 16, "at {i}");
            }
        }
        let lane = lanes.at(gpu.index).unwrap();
        let st = snap.oracle.clone().unwrap();
        assert!(st.prefetched_blocks > 0 && st.faults_ahead > 0, "{st:?}");
        // 120 uses of 40 blocks in a loop under a budget of 16 (a trail of
        // 8 blocks in use, 4 ahead): demand paging with LRU faults on every
        // use; here fewer faults than one pass has blocks (27 when written).
        assert!(faults < 40, "{faults} faults {st:?}");
        assert!(lane.pre_evicted_blocks > 0);
        jobs.extend(migrator.drain());
        let (to_gpu, to_cpu): (Vec<&Job>, Vec<&Job>) = jobs.iter().partition(|j| j.goes_to_gpu());
        assert!(!to_gpu.is_empty() && !to_cpu.is_empty());
        assert!(
            to_gpu.iter().all(|j| j.dest() == gpu.uuid),
            "prefetches go to the lane's GPU"
        );
        assert!(
            to_cpu.iter().all(|j| j.chosen_by() == gpu.uuid),
            "evictions are the lane's"
        );
    }

    /// At the plan's last entry the oracle hands the lane back to the
    /// driver-like order: every resident block can be its victim again.
    #[test]
    fn at_the_plans_end_the_lane_is_kept_driver_like() {
        let seq: Vec<u64> = vec![10, 11, 12];
        let mut o = Oracle::new(OracleConfig {
            plan: Arc::new(Plan {
                ranges: vec![PlanRange {
                    size: 20 << BLOCK_SHIFT,
                    misalign: 0,
                }],
                seq: seq.iter().map(|&b| (0, b)).collect(),
            }),
            ahead: Some(4),
        });
        let gpu = table(&[0]).gpu(index(0)).unwrap();
        o.active = Some(Active {
            gpu,
            schedule: Schedule::new(seq, 16, 8),
            ranges: vec![Range {
                start: 0,
                end: 20 << BLOCK_SHIFT,
            }],
            prefetched: HashMap::new(),
            cpu_held: HashSet::new(),
            next_look: Instant::now(),
        });
        let mut res = Residency::default();
        for b in [10, 11, 12] {
            res.add(b, BLOCK_BYTES);
        }
        while res.pop_oldest().is_some() {} // the oracle's arrivals took them
        assert!(!o.end_if_over(&mut res), "the cursor is at the start");
        let a = o.active.as_mut().unwrap();
        assert_eq!(a.schedule.fault(12, |_| true), Moved::Ahead);
        assert!(o.end_if_over(&mut res));
        assert!(o.active.is_none() && o.stats.plan_over);
        let mut queued: Vec<u64> = std::iter::from_fn(|| res.pop_oldest()).collect();
        queued.sort_unstable();
        assert_eq!(queued, [10, 11, 12]);
        assert_eq!(res.blocks(), 3);
    }

    /// One lane is the oracle's; a second GPU's lane is refused with one
    /// line naming both GPUs.
    #[test]
    fn a_second_gpu_lane_is_refused_in_one_line() {
        let cfg = config("16M", &[0, 1]);
        let t = table(&[0, 1]);
        let mut lanes = Lanes::default();
        lanes
            .get_or_make(t.gpu(index(0)).unwrap(), &cfg, false)
            .unwrap();
        assert_eq!(refusal(&lanes), None);
        lanes
            .get_or_make(t.gpu(index(1)).unwrap(), &cfg, false)
            .unwrap();
        let e = refusal(&lanes).unwrap();
        assert!(
            e.contains("--mode oracle") && e.contains("2 GPUs") && e.contains("one GPU"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
