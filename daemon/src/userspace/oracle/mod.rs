//! `--mode oracle --plan FILE`: the mechanism's ceiling on the real driver.
//! The plan (plan.rs) is a recorded run's block sequence (record.rs,
//! `--record-plan`); replayed on the next run of the same workload, each
//! block is prefetched in order just ahead of its recorded use, and under
//! the budget the victim is Belady's (belady.rs), through the same ledger,
//! routing and migration workers as the prescient mode.
//!
//! The plan follows the job's real progress, not the clock: the cursor
//! moves to each fault's next recorded use (a fault says the GPU is there
//! now). Until the process's managed ranges (maps.rs) match the plan's the
//! budget is kept as the driver-like mode keeps it; ranges that cannot
//! become the plan's (more of them, more bytes, or standing still without
//! matching) end the loop with one line.

pub mod belady;
pub mod maps;
pub mod plan;
pub mod record;

use super::policy::{budget_blocks, DriverLike, Policy};
use super::pump::prefetch_jobs;
use super::state::Process;
use belady::{Ledger, Moved, Schedule};
use maps::Range;
use plan::Plan;
use prescient_core::BLOCK_BYTES;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the ranges are read again while the plan does not apply yet.
const RECHECK: Duration = Duration::from_millis(50);
/// Ranges unchanged this long while the GPU faults, and still not the
/// plan's: the plan is of another workload or size.
const SETTLED: Duration = Duration::from_secs(5);
/// How often the window is looked at again when nothing changed.
const RETRY: Duration = Duration::from_millis(1);

/// The oracle's counters (in the stats JSON).
#[derive(Serialize, Default, Clone, Debug)]
pub struct OracleStats {
    pub plan_entries: u64,
    /// Seconds from the loop's start until the plan applied.
    pub applied_after_s: Option<f64>,
    pub cursor: u64,
    /// Prefetch depth: distinct blocks ahead of the cursor.
    pub ahead_blocks: u64,
    pub faults_ahead: u64,
    pub faults_here: u64,
    pub faults_far: u64,
    pub faults_unplanned: u64,
    pub prefetched_blocks: u64,
    /// Victims made for a prefetch, and to bring the ledger under the budget.
    pub victims_for_prefetch: u64,
    pub victims_over_budget: u64,
    /// Windows stopped because every resident block is needed sooner.
    pub no_room: u64,
    /// Prefetched blocks evicted before the cursor reached their use.
    pub evicted_before_use: u64,
    /// Window looks that passed over a block because the CPU took it
    /// since the cursor last moved (one block counts once per look).
    pub held_for_cpu: u64,
}

/// What the oracle is told.
#[derive(Clone, Debug)]
pub struct OracleConfig {
    pub plan: Arc<Plan>,
    /// Distinct blocks ahead of the cursor to prefetch (None: 1/8 of the budget).
    pub ahead: Option<u32>,
}

/// The plan mapped onto the process, once its ranges match.
struct Active {
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

pub(super) struct Oracle {
    cfg: OracleConfig,
    active: Option<Active>,
    last_check: Option<Instant>,
    /// The range sizes last read, since when, and the faults seen then.
    sizes: (Vec<u64>, Instant, u64),
    start: Instant,
    stats: OracleStats,
}

impl Oracle {
    pub(super) fn new(cfg: OracleConfig) -> Oracle {
        let stats = OracleStats {
            plan_entries: cfg.plan.seq.len() as u64,
            ..Default::default()
        };
        Oracle {
            cfg,
            active: None,
            last_check: None,
            sizes: (Vec::new(), Instant::now(), 0),
            start: Instant::now(),
            stats,
        }
    }

    /// Maps the plan onto the process when its ranges match; a mismatch
    /// that cannot resolve ends the loop (`Process::fatal`).
    fn try_apply(&mut self, p: &mut Process) {
        let due = self.last_check.is_none_or(|t| t.elapsed() >= RECHECK);
        if !due && p.turn_faults.is_empty() {
            return;
        }
        self.last_check = Some(Instant::now());
        let now = match maps::read(p.snap.pid) {
            Ok(r) => r,
            Err(e) => return tracing::debug!(pid = p.snap.pid, "oracle: /proc maps: {e}"),
        };
        match self.cfg.plan.translate(&now) {
            Ok(None) => self.wait_or_refuse(p, &now),
            Ok(Some(t)) => {
                let budget = budget_blocks(p).unwrap_or(u64::from(p.cfg.gpu_blocks));
                let ahead = self.ahead(budget) as u32;
                // Jumps of at most four windows; uses stay in use for two.
                let mut schedule = Schedule::new(t.blocks, 4 * ahead, 2 * ahead);
                // The driver-like fallback's arrivals are stale: start
                // from what the ledger holds now.
                while p.residency.pop_oldest().is_some() {}
                for b in p.residency.resident() {
                    if whole(&t.ranges, b) {
                        schedule.track(b);
                    }
                }
                self.stats.applied_after_s = Some(self.start.elapsed().as_secs_f64());
                tracing::info!(
                    pid = p.snap.pid,
                    entries = schedule.entries(),
                    "oracle: the plan applies"
                );
                self.active = Some(Active {
                    schedule,
                    ranges: t.ranges,
                    prefetched: Default::default(),
                    cpu_held: Default::default(),
                    next_look: Instant::now(),
                });
            }
            Err(e) => {
                // The one line is the error; the sizes, for whoever asks.
                tracing::debug!(pid = p.snap.pid, now = ?now.iter().map(Range::size).collect::<Vec<_>>(),
                    plan = ?self.cfg.plan.ranges.iter().map(|r| r.size).collect::<Vec<_>>(), "oracle: ranges");
                p.fatal = Some(e);
            }
        }
    }

    /// The ranges do not match the plan yet: wait while they change (the
    /// job is still allocating), refuse once they have stood still for
    /// `SETTLED` with the GPU faulting meanwhile.
    fn wait_or_refuse(&mut self, p: &mut Process, now: &[Range]) {
        let sizes: Vec<u64> = now.iter().map(Range::size).collect();
        let faults = p.snap.fault_blocks;
        if sizes != self.sizes.0 {
            self.sizes = (sizes, Instant::now(), faults);
        } else if self.sizes.1.elapsed() >= SETTLED && faults > self.sizes.2 {
            tracing::debug!(pid = p.snap.pid, now = ?self.sizes.0,
                plan = ?self.cfg.plan.ranges.iter().map(|r| r.size).collect::<Vec<_>>(), "oracle: ranges");
            p.fatal = Some(self.cfg.plan.mismatch(now));
        }
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
    fn step(&mut self, p: &mut Process, faulted: bool) {
        if self.active.is_none() {
            self.try_apply(p);
        }
        let budget = budget_blocks(p).unwrap_or(u64::from(p.cfg.gpu_blocks));
        let ahead = self.ahead(budget);
        let Some(a) = self.active.as_mut() else {
            p.turn_faults.clear();
            p.turn_cpu_taken.clear();
            return DriverLike.step(p, faulted);
        };
        let s = &mut self.stats;
        s.ahead_blocks = ahead as u64;
        let mut changed = a.arrivals(p);
        changed |= a.follow_faults(p, s);
        a.cpu_held.extend(p.turn_cpu_taken.drain(..));
        let look = changed || Instant::now() >= a.next_look;
        a.act(p, budget, ahead, s, look);
        if look {
            a.next_look = Instant::now() + RETRY;
        }
        s.cursor = u64::from(a.schedule.cursor());
        for &v in &p.leaving.evict {
            p.mech.evicted(v);
        }
        p.leaving
            .submit_evictions(p.cfg.max_coalesce_blocks, &p.migrator);
        p.snap.oracle = Some(s.clone());
    }
}

/// Whether block `b` lies wholly inside one of `ranges` (by address).
fn whole(ranges: &[Range], b: u64) -> bool {
    maps::find(ranges, b << prescient_core::BLOCK_SHIFT).is_some_and(|i| ranges[i].holds_block(b))
}

impl Active {
    /// Tracks the blocks that became resident since the last turn (faults,
    /// the driver's migrations, our prefetches); true if any did.
    fn arrivals(&mut self, p: &mut Process) -> bool {
        let mut any = false;
        while let Some(b) = p.residency.pop_oldest() {
            if p.residency.get(b) > 0 && whole(&self.ranges, b) {
                self.schedule.track(b);
                any = true;
            }
        }
        any
    }

    /// Moves the cursor with this turn's faults; true if it moved.
    fn follow_faults(&mut self, p: &mut Process, s: &mut OracleStats) -> bool {
        let mut moved = false;
        let res = &p.residency;
        for b in p.turn_faults.drain(..) {
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

    /// Evicts Belady's victims while over the budget (faults bring blocks
    /// in beyond it), then prefetches the window; true if anything moved.
    fn act(&mut self, p: &mut Process, budget: u64, ahead: usize, s: &mut OracleStats, look: bool) {
        let mut l = OnProcess {
            p,
            ranges: &self.ranges,
            cpu_held: &self.cpu_held,
            prefetched: &mut self.prefetched,
            cursor: self.schedule.cursor(),
            s,
            issued: Vec::new(),
        };
        let over = self.schedule.settle(&mut l, budget);
        l.s.victims_over_budget += over;
        if look || over > 0 {
            let f = self.schedule.fill(&mut l, budget, ahead);
            l.s.victims_for_prefetch += f.victims;
            l.s.prefetched_blocks += f.prefetched;
            l.s.no_room += u64::from(f.no_room);
        }
        let (p, issued) = (l.p, l.issued);
        // Prefetches first: the copies the GPU waits for lead the queue.
        for j in prefetch_jobs(&issued, &p.route, p.cfg.max_coalesce_blocks) {
            p.migrator.submit(j);
        }
    }
}

/// The daemon's ledger, workers' bookkeeping and counters as the
/// schedule sees them.
struct OnProcess<'a> {
    p: &'a mut Process,
    ranges: &'a [Range],
    cpu_held: &'a HashSet<u64>,
    prefetched: &'a mut HashMap<u64, u32>,
    cursor: u32,
    s: &'a mut OracleStats,
    issued: Vec<u64>,
}

impl Ledger for OnProcess<'_> {
    fn blocks(&self) -> u64 {
        self.p.residency.blocks()
    }

    fn resident(&self, b: u64) -> bool {
        self.p.residency.get(b) >= BLOCK_BYTES
    }

    /// Only whole blocks of a managed range, with a GPU to go to, and not
    /// while the CPU is taking them.
    fn movable(&mut self, b: u64) -> bool {
        if !whole(self.ranges, b) {
            return false;
        }
        if self.p.route.destination(b).is_none() {
            self.p.snap.prefetch_no_gpu += 1;
            return false;
        }
        if self.cpu_held.contains(&b) {
            self.s.held_for_cpu += 1;
            return false;
        }
        true
    }

    /// Takes `v` off the ledger and queues its eviction (at the turn's end).
    fn evict(&mut self, v: u64) -> bool {
        let p = &mut *self.p;
        if p.residency.get(v) == 0 {
            return false; // gone already (the driver, or the CPU, moved it)
        }
        p.residency.sub(v, BLOCK_BYTES);
        p.leaving.evict.push(v);
        p.log.victim(v);
        if let Some(pos) = self.prefetched.remove(&v) {
            if pos >= self.cursor {
                self.s.evicted_before_use += 1;
            }
        }
        true
    }

    fn prefetch(&mut self, b: u64, pos: u32) {
        let p = &mut *self.p;
        p.residency.add(b, BLOCK_BYTES);
        p.log.prefetch(b);
        p.mech.prefetched(b);
        self.prefetched.insert(b, pos);
        self.issued.push(b);
    }
}

/// Checks `--budget` against a plan before attaching: more than the
/// recorded footprint, or less than one block, is a mistake.
pub fn check_budget(budget: u64, plan: &Plan) -> Result<(), String> {
    let foot = plan.footprint_blocks() * BLOCK_BYTES;
    if budget < BLOCK_BYTES {
        return Err(format!(
            "--budget {budget} is smaller than one 2 MB block ({BLOCK_BYTES} bytes)"
        ));
    }
    if budget > foot {
        return Err(format!(
            "--budget {budget} is larger than the plan's footprint ({foot} bytes in {} blocks): nothing would ever be evicted",
            plan.footprint_blocks()
        ));
    }
    Ok(())
}
