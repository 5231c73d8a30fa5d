//! prescient-sim: compare the driver, Prescient and an oracle on a trace.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use prescient_core::{Mode, Params};
use prescient_sim::g10::Layout;
use prescient_sim::model::CostModel;
use prescient_sim::plan::Plan;
use prescient_sim::report::{self, PolicyKind};
use prescient_sim::{load, Format};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "prescient-sim",
    version,
    about = "Trace-driven simulator for Prescient's UM prefetcher"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay a trace under one or more policies and report per iteration.
    Run(RunArgs),
    /// Run a parameter grid (DeepUM's Table 7.7 by default) over traces.
    Sweep(SweepArgs),
    /// Convert a trace to the native format.
    Convert(ConvertArgs),
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff); with --out-dir, write it and one page per
    /// subcommand (prescient-sim-run.1 ...).
    Man {
        /// Write every page into this directory instead of printing one.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Replay each recorded GPU run and compare measured with predicted.
    CheckGpu(CheckGpuArgs),
}

#[derive(Args)]
struct CheckGpuArgs {
    /// Print `{"runs":[{name, measured_ratio, predicted_ratio,
    /// measured_faults, predicted_faults, held_out}]}` instead of the table.
    #[arg(long)]
    json: bool,
    /// Recorded runs file (default: the runs shipped in sim/gpu-runs/runs.json).
    #[arg(long)]
    runs: Option<PathBuf>,
    /// Search the fitting grid on the runs not held out, print the best
    /// parameters and check with them.
    #[arg(long)]
    fit: bool,
    /// Check every point of the fitting grid against every run, held-out
    /// ones included (a survey of what the model can reach, not a fit):
    /// one line per point, the closest to the targets first.
    #[arg(long, conflicts_with_all = ["fit", "json"])]
    grid: bool,
}

#[derive(Args, Clone)]
struct TraceArgs {
    /// Trace file (G10 kernels.config or native; .gz accepted).
    #[arg(long)]
    trace: PathBuf,
    /// Trace format.
    #[arg(long, value_enum, default_value = "auto")]
    format: Format,
    /// Tensor layout for G10 traces: G10's own ranges, or a caching allocator's.
    #[arg(long, value_enum, default_value = "g10")]
    layout: Layout,
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// GPU memory: bytes, or e.g. 40G, 40GiB, 1.5G, 512MiB (binary units:
    /// 40GB is 40 GiB here as everywhere in Prescient).
    #[arg(long, value_name = "SIZE", default_value = "40GiB", value_parser = parse_gpu_mem)]
    gpu_mem: u64,
    /// Host-to-device bandwidth, a rate in decimal units unlike sizes
    /// (e.g. 15.754GB/s = 15.754e9 bytes/s; also B/s, KB/s, MB/s, MiB/s, GiB/s).
    #[arg(long, default_value = "15.754GB/s", value_parser = parse_bandwidth)]
    h2d: f64,
    /// Device-to-host bandwidth.
    #[arg(long, default_value = "15.754GB/s", value_parser = parse_bandwidth)]
    d2h: f64,
    /// Far-fault latency per fault batch: a duration such as 45us or 1.5ms.
    #[arg(long, value_name = "DURATION", default_value = "45us", value_parser = parse_latency)]
    fault_latency: f64,
    /// Faults serviced per batch.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=4096))]
    fault_batch: u32,
    /// Delay from a fault to the prefetcher learning of it (the tools
    /// event's delivery to prescientd), a duration such as 20us; default 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_latency)]
    event_latency: Option<f64>,
    /// Iterations to replay (the first one is for learning).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    iterations: u64,
}

impl ModelArgs {
    fn model(&self) -> CostModel {
        CostModel {
            gpu_bytes: self.gpu_mem,
            h2d_bps: self.h2d,
            d2h_bps: self.d2h,
            fault_latency_s: self.fault_latency,
            fault_batch: self.fault_batch,
            event_latency_s: self.event_latency.unwrap_or(0.0),
            ..CostModel::g10()
        }
    }
}

/// The engine's configuration. By default what prescientd and prescient.ko
/// deploy (transparent mode, 512 rows, 2-way, 4 successors, lookahead 4);
/// `--deepum` is DeepUM's (execution ids, 2048 rows, lookahead 16), the
/// configuration BENCHMARKS.md's G10 tables were measured with.
#[derive(Args, Clone)]
struct EngineArgs {
    /// DeepUM's configuration instead of the deployed one: execution-id
    /// mode, 2048 rows, 2-way, 4 successors, lookahead 16, 4096 tables.
    #[arg(long)]
    deepum: bool,
    /// Rows per correlation table (power of two; default 512, or 2048 with --deepum).
    #[arg(long)]
    rows: Option<u32>,
    /// Ways per row (default 2).
    #[arg(long)]
    assoc: Option<u32>,
    /// Successors per entry (default 4).
    #[arg(long)]
    succs: Option<u32>,
    /// Kernels predicted ahead of the running one (default 4, or 16 with --deepum).
    #[arg(long)]
    lookahead: Option<u32>,
    /// Most blocks predicted ahead at once (default: 40% of the GPU).
    #[arg(long)]
    window_blocks: Option<u32>,
    /// Pre-eviction's lowest free-block target (default: 2.5% of the GPU).
    #[arg(long)]
    free_min: Option<u32>,
    /// Pre-eviction's highest free-block target (default: 50% of the GPU).
    #[arg(long)]
    free_max: Option<u32>,
    /// Block tables in the pool (default: the configuration's).
    #[arg(long)]
    max_tables: Option<u32>,
    /// No execution ids: one global table learnt from faults alone (the
    /// default unless --deepum).
    #[arg(long, conflicts_with = "exec_id")]
    transparent: bool,
    /// Execution-id mode: one table per kernel id a runtime reports (the
    /// default with --deepum).
    #[arg(long)]
    exec_id: bool,
    /// Pre-eviction keeps resident blocks under this percent of the GPU
    /// (the host loop's watermark, prescient.ko's `pre_evict_watermark_pct`).
    #[arg(long, default_value_t = prescient_sim::policy::prescient::DEFAULT_WATERMARK_PCT,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    watermark_pct: u32,
}

impl EngineArgs {
    fn params(&self, m: &CostModel) -> Params {
        let base = Params::for_gpu(m.gpu_blocks() as u32);
        let preset = if self.deepum {
            Params::DEEPUM
        } else {
            prescient_uapi::kernel_default_params(1)
        };
        let mode = if self.transparent {
            Mode::Transparent
        } else if self.exec_id {
            Mode::ExecId
        } else {
            preset.mode
        };
        Params {
            rows: self.rows.unwrap_or(preset.rows),
            assoc: self.assoc.unwrap_or(preset.assoc),
            succs: self.succs.unwrap_or(preset.succs),
            lookahead: self.lookahead.unwrap_or(preset.lookahead),
            window_blocks: self.window_blocks.unwrap_or(base.window_blocks),
            free_min: self.free_min.unwrap_or(base.free_min),
            free_max: self.free_max.unwrap_or(base.free_max),
            // The exec-id mode needs its pool of block tables whatever the preset.
            max_tables: self.max_tables.unwrap_or(Params::DEEPUM.max_tables),
            mode,
            ..base
        }
    }

    /// One line saying which engine configuration runs.
    fn describe(&self, p: &Params) -> String {
        format!(
            "engine: {} mode, rows {}, assoc {}, succs {}, lookahead {} ({})",
            match p.mode {
                Mode::Transparent => "transparent",
                Mode::ExecId => "exec-id",
            },
            p.rows,
            p.assoc,
            p.succs,
            p.lookahead,
            if self.deepum {
                "DeepUM's configuration, --deepum"
            } else {
                "as prescientd deploys it; --deepum for DeepUM's"
            }
        )
    }
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    engine: EngineArgs,
    /// Policies to compare, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "driver,prescient,oracle"
    )]
    policy: Vec<PolicyKind>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw iteration times and faults over time into this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct SweepArgs {
    /// Trace files (repeat the flag for several).
    #[arg(long = "trace", required = true)]
    traces: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    format: Format,
    #[arg(long, value_enum, default_value = "g10")]
    layout: Layout,
    #[command(flatten)]
    model: ModelArgs,
    /// Grid as rows:assoc:succs triples, comma separated (default: DeepUM's Table 7.7).
    #[arg(long, value_delimiter = ',')]
    grid: Vec<String>,
    #[arg(long, default_value_t = Params::DEEPUM.lookahead)]
    lookahead: u32,
    /// Add the same grid in transparent mode.
    #[arg(long)]
    transparent_too: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ConvertArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Output native trace (".gz" to compress).
    #[arg(long)]
    out: PathBuf,
}

/// DeepUM's Table 7.7 configurations: (assoc, succs, rows).
const TABLE_7_7: [(u32, u32, u32); 13] = [
    (2, 4, 128),
    (2, 8, 128),
    (4, 4, 128),
    (2, 4, 512),
    (2, 8, 512),
    (4, 4, 512),
    (2, 4, 1024),
    (2, 8, 1024),
    (4, 4, 1024),
    (2, 4, 2048),
    (2, 8, 2048),
    (4, 4, 2048),
    (2, 4, 4096),
];

/// Lets a closed pipe end the program quietly, as it does for other CLI
/// tools (`prescient-sim check-gpu | head`): Rust ignores SIGPIPE, so a
/// write to a closed pipe would panic in `println!`.
fn restore_sigpipe() {
    // SAFETY: setting a signal's disposition to the default, before any
    // thread is started; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

fn main() {
    restore_sigpipe();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::Sweep(a) => sweep(a),
        Cmd::Convert(a) => convert(a),
        Cmd::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "prescient-sim", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { out_dir } => man(out_dir.as_deref()),
        Cmd::CheckGpu(a) => check_gpu(a),
    };
    if let Err(e) = res {
        eprintln!("prescient-sim: error: {e:#}");
        std::process::exit(1);
    }
}

/// The man page, printed; or every page (one per subcommand) into `dir`.
fn man(dir: Option<&std::path::Path>) -> Result<()> {
    let cmd = <Cli as clap::CommandFactory>::command();
    match dir {
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?,
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            clap_mangen::generate_to(cmd, d).with_context(|| format!("writing {}", d.display()))?;
        }
    }
    Ok(())
}

fn run(a: RunArgs) -> Result<()> {
    let w = load(&a.trace.trace, a.trace.format, a.trace.layout)?;
    let plan = Plan::new(&w)?;
    let model = a.model.model();
    let params = a.engine.params(&model);
    params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    if a.policy
        .iter()
        .any(|p| !matches!(p, PolicyKind::Driver | PolicyKind::Oracle))
    {
        eprintln!("prescient-sim: {}", a.engine.describe(&params));
    }
    let r = report::run(
        &plan,
        model,
        a.model.iterations as usize,
        &a.policy,
        params,
        a.engine.watermark_pct,
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", report::text(&r));
    }
    if let Some(p) = a.plot {
        report::plot(&r, &p).with_context(|| format!("{}: cannot draw plot", p.display()))?;
    }
    Ok(())
}

/// Runs Prescient over the parameter grid on every trace, one row per point.
fn sweep(a: SweepArgs) -> Result<()> {
    let grid = sweep_grid(&a.grid)?;
    let modes: &[bool] = if a.transparent_too {
        &[false, true]
    } else {
        &[false]
    };
    let mut rows_out = Vec::new();
    for path in &a.traces {
        let w = load(path, a.format, a.layout)?;
        let plan = Plan::new(&w)?;
        for &transparent in modes {
            for &point in &grid {
                let row = sweep_point(&a, &plan, point, transparent)?;
                rows_out.push(row);
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string(&rows_out)?);
    }
    Ok(())
}

/// The sweep's (rows, assoc, succs) points: `--grid` as given, else Table 7.7.
fn sweep_grid(grid: &[String]) -> Result<Vec<(u32, u32, u32)>> {
    if grid.is_empty() {
        return Ok(TABLE_7_7
            .iter()
            .map(|&(assoc, succs, rows)| (rows, assoc, succs))
            .collect());
    }
    grid.iter()
        .map(|g| {
            let v: Vec<u32> = g
                .split(':')
                .map(|x| x.parse())
                .collect::<Result<_, _>>()
                .with_context(|| format!("--grid {g:?}: expected rows:assoc:succs"))?;
            match v[..] {
                [r, a, s] => Ok((r, a, s)),
                _ => bail!("--grid {g:?}: expected rows:assoc:succs"),
            }
        })
        .collect()
}

/// Runs Prescient at one grid point; prints its text line unless `--json`
/// and returns its JSON row.
fn sweep_point(
    a: &SweepArgs,
    plan: &Plan,
    (rows, assoc, succs): (u32, u32, u32),
    transparent: bool,
) -> Result<serde_json::Value> {
    let params = Params {
        rows,
        assoc,
        succs,
        lookahead: a.lookahead,
        mode: if transparent {
            Mode::Transparent
        } else {
            Mode::ExecId
        },
        ..Params::for_gpu(a.model.model().gpu_blocks() as u32)
    };
    params
        .validate()
        .map_err(|e| anyhow::anyhow!("grid point {rows}:{assoc}:{succs}: {e}"))?;
    let r = report::run(
        plan,
        a.model.model(),
        a.model.iterations as usize,
        &[PolicyKind::Prescient],
        params,
        prescient_sim::policy::prescient::DEFAULT_WATERMARK_PCT,
    )?;
    let p = &r.policies[0];
    let row = serde_json::json!({
        "trace": r.trace,
        "mode": if transparent { "transparent" } else { "exec-id" },
        "rows": rows, "assoc": assoc, "succs": succs,
        "steady_ratio_to_ideal": p.steady_ratio(),
        "steady_faults": p.steady_faults(),
        "table_bytes": p.table_bytes,
    });
    if !a.json {
        println!(
            "{:<18} {:<11} rows {:>5} assoc {} succs {}  x ideal {:.3}  faults/iter {:>9.0}  tables {:>6.1} MiB",
            r.trace,
            row["mode"].as_str().unwrap_or(""),
            rows,
            assoc,
            succs,
            p.steady_ratio(),
            p.steady_faults(),
            p.table_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(row)
}

/// `check-gpu`: the recorded runs, replayed with the fitted parameters.
fn check_gpu(a: CheckGpuArgs) -> Result<()> {
    use prescient_sim::gpu;
    let text = match &a.runs {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?
        }
        None => gpu::RUNS_JSON.to_string(),
    };
    let runs = gpu::parse_runs(&text)?;
    if a.grid {
        return survey_grid(&runs);
    }
    let params = if a.fit {
        let (p, worst) = gpu::fit(&runs)?;
        eprintln!(
            "fitted on the runs not held out: {p:?}, worst error {:.1}%",
            100.0 * worst
        );
        p
    } else {
        gpu::FITTED
    };
    let rows = gpu::check(&runs, params)?;
    if a.json {
        println!("{}", serde_json::json!({ "runs": rows }));
        return Ok(());
    }
    println!(
        "{:<26} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>17} {:>17} held-out",
        "run",
        "measured",
        "predicted",
        "err",
        "faults",
        "predicted",
        "err",
        "driver-like ms",
        "prescient ms"
    );
    for r in &rows {
        println!(
            "{:<26} {:>8.2}x {:>8.2}x {:>5.0}% {:>9.0} {:>9.0} {:>5.0}% {:>8.0}/{:<8.0} {:>8.0}/{:<8.0} {}",
            r.name,
            r.measured_ratio,
            r.predicted_ratio,
            100.0 * r.ratio_error(),
            r.measured_faults,
            r.predicted_faults,
            100.0 * r.fault_error(),
            r.measured_ms[0],
            r.predicted_ms[0],
            r.measured_ms[1],
            r.predicted_ms[1],
            if r.held_out { "yes" } else { "" }
        );
    }
    Ok(())
}

/// `check-gpu --grid`: every grid point's largest errors over every run,
/// the closest to the targets (time ratio 15%, faults 25%) first.
fn survey_grid(runs: &[prescient_sim::gpu::RecordedRun]) -> Result<()> {
    let mut points = prescient_sim::gpu::fit::survey(runs)?;
    let key = |s: &prescient_sim::gpu::fit::Survey| (s.ratio / 0.15).max(s.faults / 0.25);
    points.sort_by(|a, b| key(a).total_cmp(&key(b)));
    println!(
        "{:>10} {:>5} {:>5} {:>4} {:>9} {:>9} {:>9}",
        "latency", "batch", "ahead", "fill", "ratio err", "fault err", "time err"
    );
    for s in &points {
        let p = s.params;
        println!(
            "{:>8.0}us {:>5} {:>5} {:>4} {:>8.1}% {:>8.1}% {:>8.1}%",
            p.fault_latency_s * 1e6,
            p.fault_batch,
            p.wave_skew,
            p.fill_max,
            100.0 * s.ratio,
            100.0 * s.faults,
            100.0 * s.times
        );
    }
    let meeting = points.iter().filter(|s| s.meets_targets()).count();
    println!(
        "{meeting} of {} points have every run's time ratio within 15% and faults within 25%",
        points.len()
    );
    Ok(())
}

fn convert(a: ConvertArgs) -> Result<()> {
    let w = load(&a.trace.trace, a.trace.format, a.trace.layout)?;
    prescient_sim::native::write_file(&a.out, &w)?;
    eprintln!("wrote {} ({} kernels)", a.out.display(), w.kernels.len());
    Ok(())
}

fn split_unit(s: &str) -> Result<(f64, String), String> {
    let s = s.trim();
    let idx = s
        .find(|c: char| {
            !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')
        })
        .unwrap_or(s.len());
    // 'e' may start a unit? None of ours does, so treat it as exponent.
    let (num, unit) = s.split_at(idx);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} does not start with a number"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?} must be a positive number"));
    }
    Ok((v, unit.trim().to_string()))
}

/// `--gpu-mem`: a size in prescient-units' grammar, at least one 2 MiB block.
fn parse_gpu_mem(s: &str) -> Result<u64, String> {
    let bytes = prescient_units::parse_size(s).map_err(|e| e.to_string())?;
    if bytes < 2 << 20 {
        return Err(format!("{s:?} is smaller than one 2 MiB block"));
    }
    Ok(bytes)
}

/// Reads a bandwidth: a rate in decimal units (GB/s = 10^9 bytes/s, as
/// link speeds are quoted), a grammar of its own, not a memory size.
fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let (v, unit) = split_unit(s)?;
    let mult = match unit.as_str() {
        "B/s" => 1.0,
        "KB/s" => 1e3,
        "MB/s" => 1e6,
        "GB/s" => 1e9,
        "MiB/s" => 1024.0 * 1024.0,
        "GiB/s" => 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "unknown bandwidth unit {u:?} (use B/s, MB/s, GB/s, MiB/s, GiB/s)"
            ))
        }
    };
    Ok(v * mult)
}

/// `--fault-latency`: a duration in prescient-units' grammar, in seconds, positive.
fn parse_latency(s: &str) -> Result<f64, String> {
    let d = prescient_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err(format!("{s:?} must be a positive duration"));
    }
    Ok(d.as_secs_f64())
}
