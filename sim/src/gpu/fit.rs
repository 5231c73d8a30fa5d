//! `check-gpu --fit`: the grid search for [`GpuParams`] on the recorded
//! runs that are not held out (docs/cost-model.md states the grid, the
//! fixed values and what each is measured from).

use super::{check, GpuParams, RecordedRun};
use anyhow::{Context, Result};

/// The grid: fault latency (us) per batch, granule faults per batch,
/// steps thread blocks run ahead, the largest region the in-block prefetch
/// fills (granules). The workers' rates are measured, not fitted.
const LATENCY_US: [f64; 5] = [150.0, 175.0, 200.0, 225.0, 250.0];
const BATCH: [u32; 3] = [10, 12, 14];
const SKEW: [u32; 3] = [0, 1, 2];
const FILL_MAX: [u32; 2] = [16, 32];
/// Measured, not fitted: a fault's event reaches prescientd 64 us (p50)
/// after the driver takes it (BENCHMARKS-gpu.md, run 41).
const EVENT_LATENCY_S: f64 = 64e-6;

/// The fit's error over `runs`: the largest of any run's time-ratio
/// error, fault error and half the error of each predicted iteration time
/// (the parameters should give the times, not only their ratio).
fn worst(runs: &[RecordedRun], p: GpuParams) -> Result<f64> {
    let s = largest_errors(runs, p)?;
    Ok(s.ratio.max(s.faults).max(0.5 * s.times))
}

/// Every point of the grid.
fn grid() -> impl Iterator<Item = GpuParams> {
    LATENCY_US.iter().flat_map(|&l| {
        BATCH.iter().flat_map(move |&fault_batch| {
            SKEW.iter().flat_map(move |&wave_skew| {
                FILL_MAX.iter().map(move |&fill_max| GpuParams {
                    fault_latency_s: l * 1e-6,
                    fault_batch,
                    event_latency_s: EVENT_LATENCY_S,
                    wave_skew,
                    fill_max,
                })
            })
        })
    })
}

/// The grid point whose worst error over the runs not held out is
/// smallest, with that error.
pub fn fit(runs: &[RecordedRun]) -> Result<(GpuParams, f64)> {
    let fitting: Vec<RecordedRun> = runs.iter().filter(|r| !r.held_out).cloned().collect();
    let mut best: Option<(GpuParams, f64)> = None;
    for p in grid() {
        let w = worst(&fitting, p)?;
        if best.is_none_or(|(_, b)| w < b) {
            best = Some((p, w));
        }
    }
    best.context("empty fitting grid")
}

/// One grid point's largest errors over the runs it was checked on.
#[derive(Clone, Copy, Debug)]
pub struct Survey {
    pub params: GpuParams,
    /// Largest time-ratio error, fault error and iteration-time error.
    pub ratio: f64,
    pub faults: f64,
    pub times: f64,
}

impl Survey {
    /// Within the targets on every run: time ratio within 15%,
    /// faults within 25%.
    pub fn meets_targets(&self) -> bool {
        self.ratio <= 0.15 && self.faults <= 0.25
    }
}

/// `params`' largest errors of each kind over `runs` (what the fit and the
/// survey both judge by).
fn largest_errors(runs: &[RecordedRun], params: GpuParams) -> Result<Survey> {
    let rows = check(runs, params)?;
    let max = |f: &dyn Fn(&super::CheckRow) -> f64| rows.iter().map(f).fold(0.0, f64::max);
    Ok(Survey {
        params,
        ratio: max(&|r| r.ratio_error()),
        faults: max(&|r| r.fault_error()),
        times: max(&|r| r.time_errors[0].max(r.time_errors[1])),
    })
}

/// Every grid point against every run, held-out ones included: a survey
/// of what the model can reach, not a fit (`check-gpu --grid`), the
/// points in grid order.
pub fn survey(runs: &[RecordedRun]) -> Result<Vec<Survey>> {
    grid().map(|params| largest_errors(runs, params)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_holds_every_combination_and_the_measured_event_latency() {
        let g: Vec<GpuParams> = grid().collect();
        let n = LATENCY_US.len() * BATCH.len() * SKEW.len() * FILL_MAX.len();
        assert_eq!(g.len(), n);
        assert!(g.iter().all(|p| p.event_latency_s == EVENT_LATENCY_S));
        assert!(g.contains(&super::super::FITTED), "FITTED is a grid point");
    }
}
