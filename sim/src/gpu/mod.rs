//! Recorded GPU runs (sim/gpu-runs/runs.json) replayed by the simulator:
//! `prescient-sim check-gpu` compares, per run, the measured time ratio
//! (driver-like over Prescient, median GPU phase) and Prescient's fault
//! blocks per iteration with what the cost model predicts for the same
//! workload, budget and link speeds.

pub mod fit;
pub mod umbench;

pub use fit::fit;

use crate::model::{replay, CostModel};
use crate::plan::Plan;
use crate::policy::{Driver, Prescient};
use crate::report::PolicyReport;
use anyhow::{bail, Context, Result};
use prescient_core::{Mode, Params, BLOCK_SHIFT};
use serde::{Deserialize, Serialize};

/// The recorded runs shipped with the simulator.
pub const RUNS_JSON: &str = include_str!("../../gpu-runs/runs.json");

/// Iterations each GPU run made (bench/gpu/run.sh ITERS=10).
const ITERATIONS: usize = 10;
/// The GPU phase medians leave out the first two iterations.
const WARM_UP: usize = 2;
/// The H100's memory, in 2 MB blocks (the engine's ledger is sized for it).
const H100_BLOCKS: u32 = 80 * 1024 / 2;

/// One recorded run: what ran, where the numbers come from, and what was
/// measured (sim/gpu-runs/extract.py writes these from bench/gpu/results).
#[derive(Clone, Debug, Deserialize)]
pub struct RecordedRun {
    pub name: String,
    pub workload: String,
    pub command: String,
    pub budget_bytes: u64,
    pub source: String,
    pub h2d_gbps: f64,
    pub d2h_gbps: f64,
    pub driverlike_gpu_ms: f64,
    pub prescient_gpu_ms: f64,
    pub driverlike_fault_blocks: f64,
    pub prescient_fault_blocks: f64,
    pub held_out: bool,
}

#[derive(Deserialize)]
struct RunsFile {
    runs: Vec<RecordedRun>,
}

/// Reads a runs file (the shipped one when `text` is [`RUNS_JSON`]).
pub fn parse_runs(text: &str) -> Result<Vec<RecordedRun>> {
    let f: RunsFile = serde_json::from_str(text).context("recorded GPU runs: bad JSON")?;
    Ok(f.runs)
}

/// The GPU-side parameters of the cost model (docs/cost-model.md says how
/// they were fitted and on which runs).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct GpuParams {
    /// Time the driver takes per fault batch (fault, service, replay).
    pub fault_latency_s: f64,
    /// 64 KiB granule faults one batch services.
    pub fault_batch: u32,
    /// Delay from a fault to prescientd learning of it (measured).
    pub event_latency_s: f64,
    /// Grid-stride steps a launch's thread blocks run ahead while its
    /// faults are served (their faults share the batches).
    pub wave_skew: u32,
    /// Largest region (64 KiB granules) the in-block prefetch fills.
    pub fill_max: u32,
}

/// The fitted values (`prescient-sim check-gpu --fit` finds them again;
/// docs/cost-model.md gives each one's source).
pub const FITTED: GpuParams = GpuParams {
    fault_latency_s: 175e-6,
    fault_batch: 12,
    event_latency_s: 64e-6,
    wave_skew: 1,
    fill_max: 16,
};

/// prescientd's migration workers in the recorded runs (its default then).
const WORKERS: u32 = 4;
/// UVM_MIGRATE with 4 threads, measured (GPU run 57, migbench into an idle
/// CUDA process; BENCHMARKS-gpu.md): to the host 18.1 GB/s against
/// cudaMemcpy's 55.15 D2H in the same call; to the GPU 49.4 GB/s against
/// 54.54 H2D, an ASYNC call's p50 32 us per 2 MB. The rates scale with
/// each recorded run's own cudaMemcpy speeds.
const EVICT_FRAC: f64 = 18.1 / 55.15;
const MIGRATE_H2D_FRAC: f64 = 49.4 / 54.54;
const WORKER_CALL_S: f64 = 32e-6;

/// One line of `check-gpu`'s report; the field names are its interface.
#[derive(Clone, Debug, Serialize)]
pub struct CheckRow {
    pub name: String,
    pub measured_ratio: f64,
    pub predicted_ratio: f64,
    pub measured_faults: f64,
    pub predicted_faults: f64,
    pub held_out: bool,
    /// Relative errors of the predicted steady iteration times (driver-like,
    /// Prescient); not part of the JSON interface.
    #[serde(skip)]
    pub time_errors: [f64; 2],
    /// Predicted steady iteration times in ms (driver-like, Prescient).
    #[serde(skip)]
    pub predicted_ms: [f64; 2],
    /// Measured GPU-phase medians in ms (driver-like, Prescient).
    #[serde(skip)]
    pub measured_ms: [f64; 2],
}

impl CheckRow {
    /// Relative error of the predicted time ratio.
    pub fn ratio_error(&self) -> f64 {
        (self.predicted_ratio / self.measured_ratio - 1.0).abs()
    }

    /// Relative error of the predicted fault blocks.
    pub fn fault_error(&self) -> f64 {
        (self.predicted_faults / self.measured_faults.max(1.0) - 1.0).abs()
    }
}

/// The workload a run's command names, rebuilt from bench/gpu/umbench.cu.
pub fn workload_plan(run: &RecordedRun) -> Result<Plan> {
    let args: Vec<u64> = run
        .command
        .split_whitespace()
        .skip(2)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: bad command {:?}", run.name, run.command))?;
    match (run.workload.as_str(), &args[..]) {
        ("dnn", [_iters, in_mb, layers, layer_mb]) => umbench::dnn(*in_mb, *layers, *layer_mb),
        ("stream", [_iters, nbuf, buf_mb]) => umbench::stream(*nbuf, *buf_mb),
        (w, _) => bail!(
            "{}: no trace for workload {w:?} ({})",
            run.name,
            run.command
        ),
    }
}

/// The machine of one run under `p`: the budget as the GPU's memory, the
/// link speeds cudaMemcpy measured in the same run.
pub fn run_model(run: &RecordedRun, p: GpuParams) -> CostModel {
    CostModel {
        gpu_bytes: run.budget_bytes,
        h2d_bps: run.h2d_gbps * 1e9,
        d2h_bps: run.d2h_gbps * 1e9,
        fault_latency_s: p.fault_latency_s,
        fault_batch: p.fault_batch,
        event_latency_s: p.event_latency_s,
        partial: true,
        soft_budget: true,
        wave_skew: p.wave_skew,
        fill_max: p.fill_max,
        workers: WORKERS,
        worker_call_s: WORKER_CALL_S,
        migrate_h2d_bps: run.h2d_gbps * 1e9 * MIGRATE_H2D_FRAC,
        evict_bps: run.d2h_gbps * 1e9 * EVICT_FRAC,
        ..CostModel::g10()
    }
}

/// Mean of the iterations after the warm-up, as the GPU medians are taken.
fn after_warm_up(v: &[f64]) -> f64 {
    let s = if v.len() > WARM_UP { &v[WARM_UP..] } else { v };
    s.iter().sum::<f64>() / s.len().max(1) as f64
}

/// Replays one run's driver-like and Prescient cases (prescientd under a
/// budget: transparent mode, `Params::for_budget`, the regret window).
pub fn check_run(run: &RecordedRun, plan: &Plan, p: GpuParams) -> Result<CheckRow> {
    let m = run_model(run, p);
    let budget_blocks = (run.budget_bytes >> BLOCK_SHIFT) as u32;
    let params = Params {
        mode: Mode::Transparent,
        ..Params::for_budget(budget_blocks, H100_BLOCKS)
    };
    let ideal = plan.ideal_s();
    let driver = PolicyReport::new(
        replay(plan, m, ITERATIONS, &mut Driver::new(plan.blocks)),
        ideal,
    );
    let mut pol = Prescient::new(params, plan, m.gpu_blocks())?.with_regret_window();
    let prescient = PolicyReport::new(replay(plan, m, ITERATIONS, &mut pol), ideal);
    let fb: Vec<f64> = prescient.fault_blocks.iter().map(|&f| f as f64).collect();
    let (d_s, p_s) = (
        after_warm_up(&driver.iteration_s),
        after_warm_up(&prescient.iteration_s),
    );
    Ok(CheckRow {
        name: run.name.clone(),
        measured_ratio: run.driverlike_gpu_ms / run.prescient_gpu_ms,
        predicted_ratio: d_s / p_s,
        measured_faults: run.prescient_fault_blocks,
        predicted_faults: after_warm_up(&fb),
        held_out: run.held_out,
        time_errors: [
            (d_s * 1e3 / run.driverlike_gpu_ms - 1.0).abs(),
            (p_s * 1e3 / run.prescient_gpu_ms - 1.0).abs(),
        ],
        predicted_ms: [d_s * 1e3, p_s * 1e3],
        measured_ms: [run.driverlike_gpu_ms, run.prescient_gpu_ms],
    })
}

/// Replays every run under `p`.
pub fn check(runs: &[RecordedRun], p: GpuParams) -> Result<Vec<CheckRow>> {
    let mut plans: Vec<(String, Plan)> = Vec::new();
    let mut rows = Vec::new();
    for run in runs {
        if !plans.iter().any(|(c, _)| *c == run.command) {
            plans.push((run.command.clone(), workload_plan(run)?));
        }
        let plan = &plans
            .iter()
            .find(|(c, _)| *c == run.command)
            .expect("added above")
            .1;
        rows.push(check_run(run, plan, p)?);
    }
    Ok(rows)
}
