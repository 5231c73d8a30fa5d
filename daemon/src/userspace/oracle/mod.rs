//! `--mode oracle --plan FILE`: the mechanism's ceiling on the real driver.
//! The plan (plan.rs) is a recorded run's block sequence (record.rs,
//! `--record-plan`); replayed on the next run of the same workload, each
//! block is prefetched in order just ahead of its recorded use, and under
//! the budget the victim is Belady's (belady.rs), through the same ledger,
//! routing and migration workers as the prescient mode. It runs on the
//! process's lane (lanes.rs; the policy is replay.rs): a plan is one GPU's
//! faults, so a process that computes on a second GPU is refused.
//!
//! The plan follows the job's real progress, not the clock: the cursor
//! moves to each fault's next recorded use (a fault says the GPU is there
//! now). Until the GPU has faulted on every managed range (maps.rs) the
//! plan needs, binding them by size and address rank (bind.rs,
//! `Plan::bind`), the budget is kept as the driver-like mode keeps it;
//! ranges that cannot become the plan's (more of them or more bytes than
//! recorded, a size faulted on more often than in the plan, or no new
//! range faulted on for `SETTLED` while the GPU faults) end the loop with
//! one line.

pub mod belady;
pub mod bind;
pub mod maps;
pub mod plan;
pub mod record;
mod replay;

pub(super) use replay::Oracle;

use plan::Plan;
use prescient_core::BLOCK_BYTES;
use serde::Serialize;
use std::sync::Arc;

/// The oracle's counters (in the stats JSON).
#[derive(Serialize, Default, Clone, Debug)]
pub struct OracleStats {
    pub plan_entries: u64,
    /// Seconds from the loop's start until the plan applied.
    pub applied_after_s: Option<f64>,
    /// The plan position the cursor started at (the last needed range's
    /// first use).
    pub applied_at: u64,
    /// The cursor reached the plan's last entry: the lane is driver-like
    /// from then on (replay.rs, `end_if_over`), this many seconds in.
    pub plan_over: bool,
    pub over_after_s: Option<f64>,
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
    /// Window blocks held back because their room was still leaving the
    /// GPU (evictions not completed), summed over the looks.
    pub waiting: u64,
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
