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
//! grow into the plan's end the loop with one line.

pub mod belady;
pub mod maps;
pub mod plan;
pub mod record;

use super::policy::{budget_blocks, DriverLike, Policy};
use super::pump::prefetch_jobs;
use super::state::Process;
use belady::{Moved, Schedule};
use maps::Range;
use plan::Plan;
use prescient_core::BLOCK_BYTES;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the ranges are read again while the plan does not apply yet.
const RECHECK: Duration = Duration::from_millis(50);
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
}

/// What the oracle is told.
#[derive(Clone)]
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
    prefetched: std::collections::HashMap<u64, u32>,
    next_look: Instant,
}

pub(super) struct Oracle {
    cfg: OracleConfig,
    active: Option<Active>,
    last_check: Option<Instant>,
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
            Ok(None) => {}
            Ok(Some(t)) => {
                let budget = budget_blocks(p).unwrap_or(u64::from(p.cfg.gpu_blocks));
                let max_jump = (2 * budget).clamp(1024, u64::from(u32::MAX / 2)) as u32;
                let mut schedule = Schedule::new(t.blocks, max_jump);
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
                    entries = schedule.len(),
                    "oracle: the plan applies"
                );
                self.active = Some(Active {
                    schedule,
                    ranges: t.ranges,
                    prefetched: Default::default(),
                    next_look: Instant::now(),
                });
            }
            Err(e) => p.fatal = Some(e),
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
            return DriverLike.step(p, faulted);
        };
        let s = &mut self.stats;
        s.ahead_blocks = ahead as u64;
        let mut changed = a.arrivals(p);
        changed |= a.follow_faults(p, s);
        changed |= a.settle(p, budget, s);
        if changed || Instant::now() >= a.next_look {
            a.prefetch(p, budget, ahead, s);
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
        for b in p.turn_faults.drain(..) {
            match self.schedule.fault(b) {
                Moved::Ahead => {
                    s.faults_ahead += 1;
                    moved = true;
                }
                Moved::Here => s.faults_here += 1,
                Moved::Far => s.faults_far += 1,
                Moved::Unplanned => s.faults_unplanned += 1,
            }
        }
        moved
    }

    /// Takes `v` off the ledger and queues its eviction.
    fn evict(&mut self, p: &mut Process, v: u64, s: &mut OracleStats) {
        if p.residency.get(v) == 0 {
            return; // gone already (the driver, or the CPU, moved it)
        }
        p.residency.sub(v, BLOCK_BYTES);
        p.leaving.evict.push(v);
        p.log.victim(v);
        if let Some(pos) = self.prefetched.remove(&v) {
            if pos >= self.schedule.cursor() {
                s.evicted_before_use += 1;
            }
        }
    }

    /// Evicts Belady's victims while the ledger is over the budget (faults
    /// bring blocks in beyond it); true if any went.
    fn settle(&mut self, p: &mut Process, budget: u64, s: &mut OracleStats) -> bool {
        let mut any = false;
        while p.residency.blocks() > budget {
            let Some((v, _)) = self.schedule.take_victim() else {
                break;
            };
            if p.residency.get(v) > 0 {
                s.victims_over_budget += 1;
                any = true;
            }
            self.evict(p, v, s);
        }
        any
    }

    /// Prefetches the missing blocks of the window in order, each making
    /// room with a victim used after it; stops at the first that has none.
    fn prefetch(&mut self, p: &mut Process, budget: u64, ahead: usize, s: &mut OracleStats) {
        let mut issued = Vec::new();
        'window: for (pos, b) in self.schedule.window(ahead, ahead * 64) {
            if p.residency.get(b) >= BLOCK_BYTES || !whole(&self.ranges, b) {
                continue;
            }
            if p.route.destination(b).is_none() {
                p.snap.prefetch_no_gpu += 1;
                continue;
            }
            while p.residency.blocks() >= budget {
                let Some((v, _)) = self.schedule.take_victim_after(pos) else {
                    s.no_room += 1;
                    break 'window;
                };
                if p.residency.get(v) > 0 {
                    s.victims_for_prefetch += 1;
                }
                self.evict(p, v, s);
            }
            p.residency.add(b, BLOCK_BYTES);
            self.schedule.track(b);
            self.prefetched.insert(b, pos);
            p.log.prefetch(b);
            p.mech.prefetched(b);
            issued.push(b);
        }
        s.prefetched_blocks += issued.len() as u64;
        // Prefetches first: the copies the GPU waits for lead the queue.
        for j in prefetch_jobs(&issued, &p.route, p.cfg.max_coalesce_blocks) {
            p.migrator.submit(j);
        }
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
