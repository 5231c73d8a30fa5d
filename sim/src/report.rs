//! Running policies on one trace, and the JSON, text and SVG reports.

use crate::model::{replay, CostModel, Replay};
use crate::plan::Plan;
use crate::policy::{Driver, Oracle, Prescient};
use anyhow::{bail, Result};
use prescient_core::Params;
use serde::Serialize;

/// The policies a run can compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    Driver,
    Prescient,
    /// Prescient with the regret-driven window depth
    /// (`Engine::set_regret_window`), an experiment for small memories.
    PrescientRegret,
    Oracle,
}

/// One run's whole result, printed by `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub trace: String,
    pub ideal_s: f64,
    pub footprint_bytes: u64,
    pub gpu_bytes: u64,
    pub kernels: usize,
    pub model: CostModel,
    pub params: ParamsReport,
    pub policies: Vec<PolicyReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ParamsReport {
    pub rows: u32,
    pub assoc: u32,
    pub succs: u32,
    pub lookahead: u32,
    pub window_blocks: u32,
    pub free_min: u32,
    pub free_max: u32,
    pub mode: String,
}

impl From<&Params> for ParamsReport {
    fn from(p: &Params) -> Self {
        ParamsReport {
            rows: p.rows,
            assoc: p.assoc,
            succs: p.succs,
            lookahead: p.lookahead,
            window_blocks: p.window_blocks,
            free_min: p.free_min,
            free_max: p.free_max,
            mode: format!("{:?}", p.mode).to_lowercase(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PolicyReport {
    pub name: String,
    pub iteration_s: Vec<f64>,
    pub ratio_to_ideal: Vec<f64>,
    pub faults: Vec<u64>,
    pub fault_blocks: Vec<u64>,
    pub stall_s: Vec<f64>,
    pub late_prefetches: Vec<u64>,
    pub prefetches: Vec<u64>,
    pub prefetches_used: Vec<u64>,
    pub prefetches_wasted: Vec<u64>,
    pub evictions_on_demand: Vec<u64>,
    pub demand_copies: Vec<u64>,
    pub demand_populates: Vec<u64>,
    pub pre_evictions: Vec<u64>,
    pub discards: Vec<u64>,
    pub bytes_h2d: u64,
    pub bytes_d2h: u64,
    pub table_bytes: usize,
    pub extra: serde_json::Value,
    #[serde(skip_serializing_if = "debug_off")]
    pub fault_timeline: Vec<(f64, u32)>,
}

impl PolicyReport {
    /// One replay's report; `ideal` is the all-resident iteration time.
    pub fn new(r: Replay, ideal: f64) -> Self {
        let its = &r.iterations;
        let col =
            |f: &dyn Fn(&crate::model::IterStats) -> u64| its.iter().map(f).collect::<Vec<_>>();
        PolicyReport {
            name: r.name.clone(),
            iteration_s: its.iter().map(|i| i.time_s).collect(),
            ratio_to_ideal: its.iter().map(|i| i.time_s / ideal).collect(),
            faults: col(&|i| i.faults),
            fault_blocks: col(&|i| i.fault_blocks),
            stall_s: its.iter().map(|i| i.stall_s).collect(),
            late_prefetches: col(&|i| i.late_prefetches),
            prefetches: col(&|i| i.prefetches),
            prefetches_used: col(&|i| i.prefetches_used),
            prefetches_wasted: col(&|i| i.prefetches_wasted),
            evictions_on_demand: col(&|i| i.evictions_on_demand),
            demand_copies: col(&|i| i.demand_copies),
            demand_populates: col(&|i| i.demand_populates),
            pre_evictions: col(&|i| i.pre_evictions),
            discards: col(&|i| i.discards),
            bytes_h2d: its.iter().map(|i| i.bytes_h2d).sum(),
            bytes_d2h: its.iter().map(|i| i.bytes_d2h).sum(),
            table_bytes: r.table_bytes,
            extra: r.extra,
            fault_timeline: r.fault_timeline,
        }
    }

    /// Mean ratio to ideal over the steady-state iterations (2 onwards; the
    /// only one if there is one).
    pub fn steady_ratio(&self) -> f64 {
        steady(&self.ratio_to_ideal)
    }

    pub fn steady_faults(&self) -> f64 {
        steady(&self.faults.iter().map(|&f| f as f64).collect::<Vec<_>>())
    }

    /// Mean faulted blocks per steady-state iteration (each block once per
    /// kernel it faulted in).
    pub fn steady_fault_blocks(&self) -> f64 {
        steady(
            &self
                .fault_blocks
                .iter()
                .map(|&f| f as f64)
                .collect::<Vec<_>>(),
        )
    }
}

fn debug_off<T>(_: &T) -> bool {
    std::env::var_os("PRESCIENT_SIM_TIMELINE").is_none()
}

fn steady(v: &[f64]) -> f64 {
    let s = if v.len() > 1 { &v[1..] } else { v };
    s.iter().sum::<f64>() / s.len().max(1) as f64
}

/// Runs `policies` on `plan`.
pub fn run(
    plan: &Plan,
    m: CostModel,
    iterations: usize,
    policies: &[PolicyKind],
    params: Params,
    watermark_pct: u32,
) -> Result<RunReport> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let ideal = plan.ideal_s();
    let mut out = Vec::new();
    for &p in policies {
        let r = match p {
            PolicyKind::Driver => replay(plan, m, iterations, &mut Driver::new(plan.blocks)),
            PolicyKind::Prescient | PolicyKind::PrescientRegret => {
                let mut pol =
                    Prescient::new(params, plan, m.gpu_blocks())?.with_watermark(watermark_pct);
                if p == PolicyKind::PrescientRegret {
                    pol = pol.with_regret_window();
                }
                replay(plan, m, iterations, &mut pol)
            }
            PolicyKind::Oracle => {
                out.push(best_oracle(plan, m, iterations));
                continue;
            }
        };
        out.push(PolicyReport::new(r, ideal));
    }
    Ok(RunReport {
        trace: plan.name.clone(),
        ideal_s: ideal,
        footprint_bytes: plan.footprint_blocks as u64 * prescient_core::BLOCK_BYTES,
        gpu_bytes: m.gpu_bytes,
        kernels: plan.kernels.len(),
        model: m,
        params: (&params).into(),
        policies: out,
    })
}

/// The oracle under each of its schedules; the fastest in steady state.
fn best_oracle(plan: &Plan, m: CostModel, iterations: usize) -> PolicyReport {
    let ideal = plan.ideal_s();
    crate::policy::oracle::ORACLE_SCHEDULES
        .iter()
        .map(|&schedule| {
            let r = replay(
                plan,
                m,
                iterations,
                &mut Oracle::new(plan, iterations, schedule),
            );
            PolicyReport::new(r, ideal)
        })
        .min_by(|a, b| a.steady_ratio().total_cmp(&b.steady_ratio()))
        .expect("at least one reach")
}

/// The human table.
pub fn text(r: &RunReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let _ = writeln!(
        s,
        "trace {}: {} kernels, footprint {:.1} GiB on a {:.1} GiB GPU ({:.0}%), ideal {:.3} s/iteration",
        r.trace,
        r.kernels,
        gib(r.footprint_bytes),
        gib(r.gpu_bytes),
        100.0 * r.footprint_bytes as f64 / r.gpu_bytes as f64,
        r.ideal_s
    );
    let _ = writeln!(
        s,
        "{:<10} {:>4} {:>10} {:>8} {:>10} {:>8} {:>10} {:>10}",
        "policy", "iter", "time s", "x ideal", "faults", "late", "prefetch", "wasted"
    );
    for p in &r.policies {
        for i in 0..p.iteration_s.len() {
            let _ = writeln!(
                s,
                "{:<10} {:>4} {:>10.3} {:>8.3} {:>10} {:>8} {:>10} {:>10}",
                if i == 0 { p.name.as_str() } else { "" },
                i + 1,
                p.iteration_s[i],
                p.ratio_to_ideal[i],
                p.faults[i],
                p.late_prefetches[i],
                p.prefetches[i],
                p.prefetches_wasted[i]
            );
        }
    }
    if let Some(d) = r.policies.iter().find(|p| p.name == "driver") {
        for p in r.policies.iter().filter(|p| p.name != "driver") {
            let cut = 1.0 - p.steady_faults() / d.steady_faults().max(1.0);
            let _ = writeln!(
                s,
                "{}: steady-state faults {:.1}% fewer than driver, {:.2}x faster",
                p.name,
                100.0 * cut,
                d.steady_ratio() / p.steady_ratio()
            );
        }
    }
    s
}

/// An SVG with iteration time per policy and faults over time.
pub fn plot(r: &RunReport, path: &std::path::Path) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1000, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(380);
    plot_iteration_ratios(r, &top)?;
    plot_cumulative_faults(r, &bottom)?;
    root.present()?;
    Ok(())
}

/// The area of the SVG that one chart fills.
type SvgArea<'a> =
    plotters::drawing::DrawingArea<plotters::prelude::SVGBackend<'a>, plotters::coord::Shift>;

/// Colors of the policies' lines, in the report's policy order.
const PLOT_COLORS: [plotters::style::RGBColor; 5] = {
    use plotters::style::colors::*;
    [RED, BLUE, GREEN, MAGENTA, CYAN]
};

/// Draws each policy's iteration time over the ideal, with the ideal as a line.
fn plot_iteration_ratios(r: &RunReport, area: &SvgArea) -> Result<()> {
    use plotters::prelude::*;
    let colors = PLOT_COLORS;
    let iters = r
        .policies
        .iter()
        .map(|p| p.iteration_s.len())
        .max()
        .unwrap_or(1);
    let ymax = r
        .policies
        .iter()
        .flat_map(|p| p.ratio_to_ideal.iter().copied())
        .fold(1.0, f64::max)
        * 1.1;
    let mut c = ChartBuilder::on(area)
        .caption(
            format!("{}: iteration time / ideal", r.trace),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.5f64..iters as f64 + 0.5, 0f64..ymax)?;
    c.configure_mesh()
        .x_desc("iteration")
        .y_desc("x ideal")
        .draw()?;
    for (i, p) in r.policies.iter().enumerate() {
        let col = colors[i % colors.len()];
        c.draw_series(LineSeries::new(
            p.ratio_to_ideal
                .iter()
                .enumerate()
                .map(|(k, &v)| (k as f64 + 1.0, v)),
            col.stroke_width(3),
        ))?
        .label(p.name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3)));
    }
    c.draw_series(LineSeries::new(
        vec![(0.5, 1.0), (iters as f64 + 0.5, 1.0)],
        BLACK.stroke_width(1),
    ))?
    .label("ideal")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}

/// Draws each policy's cumulative faults against simulated time, downsampled.
fn plot_cumulative_faults(r: &RunReport, area: &SvgArea) -> Result<()> {
    use plotters::prelude::*;
    let colors = PLOT_COLORS;
    let tmax = r
        .policies
        .iter()
        .filter_map(|p| p.fault_timeline.last().map(|x| x.0))
        .fold(1e-9, f64::max);
    let fmax = r
        .policies
        .iter()
        .map(|p| p.fault_timeline.iter().map(|x| x.1 as u64).sum::<u64>())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut c = ChartBuilder::on(area)
        .caption(
            "cumulative GPU faults over simulated time",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..tmax, 0f64..fmax * 1.05)?;
    c.configure_mesh()
        .x_desc("seconds")
        .y_desc("faults")
        .draw()?;
    for (i, p) in r.policies.iter().enumerate() {
        let col = colors[i % colors.len()];
        c.draw_series(LineSeries::new(
            downsampled_cumulative(&p.fault_timeline),
            col.stroke_width(2),
        ))?
        .label(p.name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}

/// Running fault totals over `timeline`, about 600 points and always the
/// last one, so a long run's SVG stays small.
fn downsampled_cumulative(timeline: &[(f64, u32)]) -> Vec<(f64, f64)> {
    let step = (timeline.len() / 600).max(1);
    let mut acc = 0u64;
    timeline
        .iter()
        .enumerate()
        .filter_map(|(k, &(t, f))| {
            acc += f as u64;
            (k % step == 0 || k + 1 == timeline.len()).then_some((t, acc as f64))
        })
        .collect()
}
