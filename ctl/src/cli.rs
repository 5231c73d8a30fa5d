//! prescientctl's command line. This file is also compiled by build.rs to
//! generate the shell completions and the man page, so it depends on clap
//! and prescient-units (the duration grammar) alone.

use clap::{Args, Parser, Subcommand, ValueEnum};
use prescient_units::parse_seconds;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "prescientctl",
    version,
    about = "Control Prescient (prefetching for CUDA Unified Memory) through prescientd",
    long_about = "Control Prescient through prescientd's control socket: read status and \
statistics, tune the correlation tables (rows, associativity, successors, lookahead), \
the residency budget, and attach or detach CUDA processes. prescientd owns /dev/prescient; \
prescientctl never opens it. Reading needs access to the socket; changing anything needs root.",
    after_help = "Exit status: 0 ok, 1 the daemon refused the request, 2 bad usage, \
69 prescientd not reachable (version too, with or without --json), 77 permission denied \
(the control socket belongs to the group prescient: join it, or use sudo)."
)]
pub struct Cli {
    /// prescientd's control socket.
    #[arg(
        long,
        global = true,
        env = "PRESCIENT_SOCKET",
        default_value = "/run/prescient/control.sock"
    )]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Daemon, module and parameters in force; attached processes.
    Status(JsonFlag),
    /// Counters: faults, prefetches, pre-evictions, per process.
    Stats {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Repeat every DURATION (seconds, or e.g. 500ms, 2s, 1m; 0.1 s to
        /// 1 h), with per-second rates (Ctrl-C stops).
        #[arg(long, value_name = "DURATION", value_parser = parse_watch, allow_negative_numbers = true)]
        watch: Option<Duration>,
    },
    /// Change table parameters or the budget; prints old and new values.
    Set(SetArgs),
    /// Clear the correlation tables (learning starts over).
    Reset,
    /// Attach a CUDA process (it must have /dev/nvidia-uvm open).
    Attach {
        /// Process id.
        #[arg(value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
    },
    /// Detach a process.
    Detach {
        /// Process id.
        #[arg(value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
    },
    /// Versions of prescientctl, prescientd, the module's ABI and the bound driver.
    Version(JsonFlag),
    /// Record a running CUDA process's GPU faults and migrations into a
    /// native trace (replay it with `prescient-sim run --trace FILE`). Works
    /// without prescientd or the module: attaches like the user-space
    /// backend (pidfd_getfd + the UVM tools event tracker). Needs root.
    Record(RecordArgs),
    /// Renumber a native trace's blocks from 0 as `record` does (for traces
    /// recorded before `record` compacted addresses itself).
    #[command(hide = true)]
    CompactTrace {
        /// The trace to renumber.
        input: PathBuf,
        /// Where to write the renumbered trace.
        output: PathBuf,
    },
    /// Run a command (e.g. `python train.py`, torchrun) on Prescient: its
    /// device allocations become managed memory, its kernel launches carry
    /// execution ids, and prescientd attaches it and every CUDA child once
    /// they open the GPU. Exits with the command's exit status.
    Run(RunArgs),
    /// Print a shell completion script (generated at build time).
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page (roff, generated at build time); with --out-dir,
    /// write it and one page per subcommand (prescientctl-status.1 ...).
    Man {
        /// Write every page into this directory instead of printing one.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct JsonFlag {
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Residency budget of each GPU the job computes on: a size (bytes or
    /// K/M/G/T, e.g. 40G) for every GPU, GPU=SIZE for one GPU by UUID or
    /// nvidia-smi index (GPU-4f3c...=40G, 1=20G), or both (30G,1=20G).
    /// The job sees it as its GPU's size (cuMemGetInfo: its own GPU's
    /// where the budget names it by full UUID; for the others the
    /// each-GPU size, or the smallest size given when GPUs are named by
    /// index, which CUDA does not know), and prescientd keeps the job's
    /// resident memory on each GPU under that GPU's budget (set as the
    /// daemon's).
    #[arg(long, value_name = "BUDGET", value_parser = parse_run_budget)]
    pub budget: Option<prescient_units::GpuBudget>,
    /// How prescientd predicts: `auto` (execution-id mode while ids
    /// arrive, transparent otherwise), `exec-id`, or `transparent` (no ids
    /// are written).
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: RunMode,
    /// No dead/alive marks from PyTorch's allocator.
    #[arg(long)]
    pub no_marks: bool,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// `prescientctl run --mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunMode {
    Auto,
    ExecId,
    Transparent,
}

/// `run --budget`: the budget grammar, every size at least 2 MiB.
fn parse_run_budget(s: &str) -> Result<prescient_units::GpuBudget, String> {
    let b = prescient_units::parse_budget(s).map_err(|e| e.to_string())?;
    if b.sizes().any(|x| x < 2 << 20) {
        return Err(format!("{s:?}: a budget is at least 2 MiB"));
    }
    Ok(b)
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Process id of the CUDA process.
    #[arg(value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: i32,
    /// Output trace (".gz" to compress).
    #[arg(long)]
    pub out: PathBuf,
    /// Stop after this long (seconds, or e.g. 90s, 5m; 10 ms to 1 day;
    /// default: when the target exits, or on SIGINT/SIGTERM; the file is
    /// written in every case).
    #[arg(long, value_name = "DURATION", value_parser = parse_record_duration, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Which iteration to write: `auto` (the last complete one that faults
    /// on at least 1/8 as many blocks as the largest, when at least three
    /// are found; else everything), `whole` (everything as one iteration) or
    /// an iteration number from 0. Iterations are cut where the CPU takes
    /// data back from the GPU after GPU faults.
    #[arg(long, default_value = "auto", value_parser = parse_iteration)]
    pub iteration: IterationArg,
    /// A gap between GPU faults longer than this (microseconds) starts a new
    /// pseudo-kernel.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub gap_us: u64,
    /// Most distinct 2 MB blocks in one pseudo-kernel.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_blocks: u32,
    /// Tools queue entries (power of two).
    #[arg(long, default_value_t = 1 << 16)]
    pub queue_entries: u32,
    /// Keep retrying the attach for this long (seconds, or e.g. 500ms, 1m;
    /// at most 1 h; CUDA opens its UVM fds only when it initialises).
    /// Permission errors are not retried.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_wait, allow_negative_numbers = true)]
    pub attach_wait: Duration,
    /// Create this file once the tracker runs (a workload can wait for it).
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IterationArg {
    Auto,
    Whole,
    Index(usize),
}

fn parse_iteration(s: &str) -> Result<IterationArg, String> {
    match s {
        "auto" => Ok(IterationArg::Auto),
        "whole" => Ok(IterationArg::Whole),
        n => n
            .parse::<usize>()
            .map(IterationArg::Index)
            .map_err(|_| format!("{s:?}: expected auto, whole or an iteration number")),
    }
}

/// `--duration`: 10 ms to a day.
fn parse_record_duration(s: &str) -> Result<Duration, String> {
    seconds_within(s, Duration::from_millis(10), Duration::from_secs(86400))
}

/// `--attach-wait`: none to an hour.
fn parse_wait(s: &str) -> Result<Duration, String> {
    seconds_within(s, Duration::ZERO, Duration::from_secs(3600))
}

/// `--watch`: 100 ms to an hour.
fn parse_watch(s: &str) -> Result<Duration, String> {
    seconds_within(s, Duration::from_millis(100), Duration::from_secs(3600))
}

/// A duration in the one grammar of prescient-units (plain seconds or
/// humantime forms, as prescientd's flags), refused outside `lo..=hi`.
fn seconds_within(s: &str, lo: Duration, hi: Duration) -> Result<Duration, String> {
    let d = parse_seconds(s).map_err(|e| e.to_string())?;
    if !(lo..=hi).contains(&d) {
        return Err(format!(
            "{s:?} is out of range {}..={} seconds",
            lo.as_secs_f64(),
            hi.as_secs_f64()
        ));
    }
    Ok(d)
}

/// The changes form a required group; `--json` is outside it (a bare
/// `set --json` is a usage error, not a round trip to the daemon).
#[derive(Args, Debug)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true)))]
pub struct SetArgs {
    /// Rows per correlation table (power of two, 1..=65536).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub rows: Option<u32>,
    /// Ways per row (1..=16, at most rows).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub assoc: Option<u32>,
    /// Successors per entry (1..=16).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub succs: Option<u32>,
    /// Kernels predicted ahead (1..=64).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub lookahead: Option<u32>,
    /// Residency budget: bytes or K/M/G/T (multiple of 2 MiB) for every
    /// GPU, 0 = the GPU's size; GPU=SIZE for one GPU by UUID or
    /// nvidia-smi index (user-space backend), e.g. 30G,1=20G.
    #[arg(long, group = "change", value_name = "BUDGET")]
    pub budget: Option<String>,
    /// Most migrations in flight (1..=1024).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub inflight: Option<u32>,
    /// Pre-eviction watermark, percent of the budget (1..=100).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub watermark: Option<u32>,
    /// Turn prefetching on.
    #[arg(long, group = "change", conflicts_with = "disable")]
    pub enable: bool,
    /// Turn prefetching off (faults are still recorded).
    #[arg(long, group = "change")]
    pub disable: bool,
    /// Engine mode.
    #[arg(long, group = "change", value_enum)]
    pub mode: Option<ModeArg>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// One global table learnt from faults (unmodified jobs).
    Transparent,
    /// One table per execution id (a runtime reports kernels).
    ExecId,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}
