//! prescientd's command line: the `service` and `attach` subcommands and their flag groups.
//!
//! This module belongs to the binary (main.rs declares it), not to the
//! library. Each subcommand has only its own flags, so a flag that does not
//! apply is refused by clap (exit 2) instead of ignored: `--budget` exists
//! on `attach` only, the service reads its budget from the config file.
//! Bare `prescientd` prints the help on stderr and exits 2: running the
//! binary with no subcommand is a mistake (the service is `prescientd
//! service`), and a supervisor should see it fail. Research knobs (the
//! back-off and tracker-gate numbers, synchronous migration, coalescing,
//! the regret window switch) are hidden from `--help` but accepted, and
//! listed in daemon/README.md. Size and duration flags take negative
//! numbers as values, so that `--budget -1` is refused by the grammar with
//! its accepted forms rather than read as an unknown flag.

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use prescient_units::{parse_seconds, ByteSize, GpuBudget, HumanDuration};
use prescientd::userspace::{backoff, gate};
use prescientd::userspace::{ExecIds, FaultSource, PolicyMode};
use std::path::PathBuf;
use std::time::Duration;

/// prescientd's arguments: one subcommand, required.
#[derive(Parser, Debug)]
#[command(
    name = "prescientd",
    version,
    about = "Prescient's daemon: the service that runs prescient.ko (or the user-space backend), or the user-space backend attached to one CUDA process",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What prescientd runs.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the service: the control plane of prescient.ko (or of the
    /// user-space backend, with backend = "userspace"), driven by the config
    /// file, prescientctl's socket and /metrics.
    Service(ServiceArgs),
    /// Act for one CUDA process from user space (no module needed): attach
    /// to its UVM, prefetch and pre-evict until it exits, print counters as JSON.
    Attach(Box<AttachArgs>),
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff); with --out-dir, write it and one page per
    /// subcommand (prescientd-service.8 ...). With --config-file, the config
    /// file's page instead, prescientd.toml(5).
    Man {
        /// Write every page into this directory instead of printing one.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
        /// prescientd.toml(5): every key of the config file, its default and
        /// what it does (written as prescientd.toml.5 with --out-dir).
        #[arg(long)]
        config_file: bool,
    },
}

/// `prescientd service`.
#[derive(Args, Debug)]
pub struct ServiceArgs {
    /// The config file (every key: prescientd.toml(5)).
    #[arg(long, value_name = "FILE", default_value = prescientd::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Check the config file and exit (0 if valid, 78 otherwise).
    #[arg(long)]
    pub check_config: bool,
}

/// `prescientd attach`: every group of flags the user-space backend takes.
#[derive(Args, Debug)]
pub struct AttachArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub marks: MarksArgs,
    #[command(flatten)]
    pub backoff: BackoffArgs,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

/// Which process, and how to wait for it.
#[derive(Args, Debug)]
#[command(next_help_heading = "Target")]
pub struct TargetArgs {
    /// The CUDA process to act for.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: i32,
    /// Keep retrying attach this long (the target may not have opened its
    /// UVM fds yet): seconds, or a duration such as 500ms.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub attach_wait: Duration,
    /// Create this file once the tracker runs (a workload can wait for it).
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
}

/// What the loop does for the process.
#[derive(Args, Debug)]
#[command(next_help_heading = "Policy")]
pub struct PolicyArgs {
    #[arg(long, value_enum, default_value_t = PolicyMode::Prescient)]
    pub mode: PolicyMode,
    /// Execution ids from the process's runtime (`prescientctl run`): `on`
    /// runs the engine in execution-id mode, `auto` only if the process
    /// has its execution-id page at attach, `off` never.
    #[arg(long, value_enum, default_value_t = ExecIds::Auto)]
    pub exec_ids: ExecIds,
    /// Residency budget of each GPU the process computes on (its
    /// GPU-resident managed memory there), enforced by pre-eviction: a
    /// size for every GPU (4G, 1.5G, 512MiB; binary units), GPU=SIZE for
    /// one GPU by UUID or nvidia-smi index (GPU-4f3c...=40G, 1=20G), or
    /// both, comma-separated (30G,1=20G).
    #[arg(long, value_name = "BUDGET", allow_negative_numbers = true)]
    pub budget: Option<GpuBudget>,
    /// Events the engine learns from: GPU faults, or fault-driven migrations
    /// only (cheaper for the target: the driver records far fewer events).
    #[arg(long, value_enum, default_value_t = FaultSource::Faults)]
    pub fault_source: FaultSource,
    /// GPU memory that sizes every GPU's engine. Default: each GPU's own
    /// size as NVML reports it, else 80G (the service's
    /// `userspace.gpu_memory` default, the same rule).
    #[arg(long, value_name = "SIZE", allow_negative_numbers = true)]
    pub gpu_memory: Option<ByteSize>,
    /// Most predicted blocks in flight ahead of the process (the engine's
    /// prediction window). Default: 1/8 of the budget, or of the GPU
    /// without one; never more than 1/8 of the GPU.
    #[arg(long, value_name = "BLOCKS", value_parser = clap::value_parser!(u32).range(1..=prescient_core::Params::MAX_WINDOW_BLOCKS as i64))]
    pub window_blocks: Option<u32>,
    /// Under --budget, keep the prediction window at its full depth (by
    /// default it shrinks while pre-evicted blocks are soon needed again).
    #[arg(long, hide = true)]
    pub no_regret_window: bool,
    /// `--mode oracle`: the plan to replay, recorded by `--record-plan` on
    /// a run of the same workload (same managed ranges). One GPU: a process
    /// that computes on a second GPU ends the loop with one line.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// `--mode oracle`: distinct blocks to prefetch ahead of the process's
    /// position in the plan. Default: 1/8 of the budget.
    #[arg(long, value_name = "BLOCKS", value_parser = clap::value_parser!(u32).range(1..))]
    pub oracle_ahead: Option<u32>,
    /// Record the run's block sequence (its faults, by managed range) as a
    /// plan for `--mode oracle --plan`, written when the loop ends. One
    /// GPU: a process that faults from a second GPU gets no plan (said).
    #[arg(long, value_name = "FILE")]
    pub record_plan: Option<PathBuf>,
    /// No launch footprints. By default (prescient mode, with execution
    /// ids) prescientd reads the launches the process's runtime
    /// (`prescientctl run`) publishes before the GPU runs them, each with
    /// the managed blocks its pointer arguments point into, and prefetches
    /// the blocks of the kernel the GPU is on and of the ones queued behind
    /// it, in launch order, ahead of the engine's predictions (see
    /// daemon/README.md, "Launch footprints").
    #[arg(long, conflicts_with = "footprints")]
    pub no_footprints: bool,
    /// Launch footprints: the default since they are on (accepted for
    /// the scripts that asked for them when they were off).
    #[arg(long, hide = true)]
    pub footprints: bool,
    /// With launch footprints: the part of each GPU's budget (or size) the
    /// launches to come may fill, in percent (25 ran faster than 50 on
    /// ResNet-50 and the encoder: BENCHMARKS-gpu.md run 61).
    #[arg(long, value_name = "PCT", default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub footprint_window_pct: u32,
    /// With launch footprints: victims follow the whole queue of launches
    /// to come, not only the window (BENCHMARKS-gpu.md runs 77-83: faster
    /// on the transformer and ResNet-50, slower on the encoder and dnn).
    /// A research knob, off by default.
    #[arg(long, hide = true)]
    pub order_queue: bool,
    /// With launch footprints: the part of each GPU's budget (or size)
    /// kept for running launches larger than it, in percent, their blocks
    /// later launches use first; 0 (the default): the plain window. A
    /// research knob (BENCHMARKS-gpu.md run 84).
    #[arg(long, value_name = "PCT", default_value_t = 0, hide = true, value_parser = clap::value_parser!(u32).range(0..=90))]
    pub large_window_pct: u32,
    /// With launch footprints: victims among the blocks no queued launch
    /// uses go from the one that left the queue last (used again last in
    /// a program that repeats itself), and the queue is ordered as with
    /// --order-queue; neither pass runs while the running launches exceed
    /// the limit; it replaces the next-use order. A research knob, off
    /// (BENCHMARKS-gpu.md runs 87-90: stream 1.87x faster, the 220M LM
    /// 1.31-1.52x slower).
    #[arg(long, hide = true)]
    pub cyclic_victims: bool,
    /// With launch footprints, victims among the blocks no queued launch
    /// uses go by their next use, predicted from their uses one step ago
    /// (a step: the launches between two of one execution id), the
    /// farthest first, and the queue is ordered as with --order-queue;
    /// this turns that off (victims: least recently migrated first, the
    /// window's blocks last). A research knob (BENCHMARKS-gpu.md runs
    /// 108-111).
    #[arg(long, hide = true)]
    pub no_next_use_victims: bool,
    /// With the next-use order, running launches larger than the limit
    /// are ordered by where the GPU is in them, told by its faults: the
    /// blocks it has passed go by their next use, the ones ahead of it
    /// are kept and prefetched in the order it reaches them; this turns
    /// that off (no order while they run). A research knob.
    #[arg(long, hide = true)]
    pub no_sweep_victims: bool,
    /// With the sweep: the part of each GPU's limit the blocks ahead of
    /// the GPU may fill, in percent (each block of it is one less for the
    /// blocks passed, which come back: bench/gpu/sweep_replay.py). A
    /// research knob.
    #[arg(long, hide = true, value_name = "PCT", default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub sweep_window_pct: u32,
    /// Never try an allocation in host memory. By default (prescient mode,
    /// with execution ids) an allocation of 64 MB or more that the CPU's
    /// own faults take back from the GPU in two rounds (a buffer the CPU
    /// rewrites every step) is advised to stay in host memory, mapped to
    /// the GPU, which reads it there over the link instead of migrating it
    /// in and evicting it again; the advice is kept only if the step got
    /// at least 10% shorter (daemon/README.md, "Blocks the CPU and the GPU
    /// share").
    #[arg(long)]
    pub no_host_shared: bool,
}

impl PolicyArgs {
    /// The oracle's configuration: the plan read and checked against
    /// --budget; None in the other modes. Errors name the flag.
    pub fn oracle(&self) -> Result<Option<prescientd::userspace::OracleConfig>> {
        use prescientd::userspace::oracle::{check_budget, plan::Plan};
        let sizes: Vec<u64> = self.budget.iter().flat_map(|b| b.sizes()).collect();
        if let Some(b) = sizes.iter().find(|&&b| b < prescient_core::BLOCK_BYTES) {
            bail!("--budget {b} is smaller than one 2 MB block");
        }
        let path = match (self.mode, &self.plan) {
            (PolicyMode::Oracle, Some(p)) => p,
            (PolicyMode::Oracle, None) => {
                bail!("--mode oracle needs --plan FILE (record one with --record-plan)")
            }
            (_, Some(_)) => bail!("--plan is for --mode oracle"),
            (_, None) if self.oracle_ahead.is_some() => {
                bail!("--oracle-ahead is for --mode oracle")
            }
            (_, None) => return Ok(None),
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--plan {}: {e}", path.display()))?;
        let plan =
            Plan::parse(&text).map_err(|e| anyhow::anyhow!("--plan {}: {e}", path.display()))?;
        for b in sizes {
            check_budget(b, &plan).map_err(anyhow::Error::msg)?;
        }
        Ok(Some(prescientd::userspace::OracleConfig {
            plan: std::sync::Arc::new(plan),
            ahead: self.oracle_ahead,
        }))
    }
}

/// How long to run and where counters go.
#[derive(Args, Debug)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Stop after this long (default: when the target exits): seconds, or a
    /// duration such as 10m.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Write counters as JSON to this file, periodically and at exit.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// How often --stats-json is written (at least 10ms).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "500ms",
        allow_negative_numbers = true
    )]
    pub stats_interval: HumanDuration,
    /// Write every block decision and movement to this file (tab-separated,
    /// for bench/gpu/blocklog.py; large: about 30 bytes per migrated block).
    #[arg(long, value_name = "FILE")]
    pub block_log: Option<PathBuf>,
}

/// The process's own dead and alive marks.
#[derive(Args, Debug)]
#[command(next_help_heading = "Marks")]
pub struct MarksArgs {
    /// Serve a Unix socket at PATH on which the process sends its own dead
    /// and alive marks (the control protocol's "mark" request; see
    /// bench/gpu/torch/managed_alloc.cu). Dead blocks are discarded, not
    /// copied, when pre-evicted.
    #[arg(long, value_name = "PATH")]
    pub marks_socket: Option<PathBuf>,
    /// Permission bits of --marks-socket, octal. The socket belongs to the
    /// target's user, and only the target process itself may mark on it.
    #[arg(long, value_name = "MODE", default_value = "600", value_parser = parse_mode)]
    pub marks_socket_mode: u32,
    /// Evict dead blocks like live ones (no UVM_DISCARD).
    #[arg(long)]
    pub no_discard: bool,
    /// Leave discarded blocks marked alive to the backend's refetch instead
    /// of bringing them back before the alive mark's reply.
    #[arg(long, hide = true)]
    pub no_alive_populate: bool,
}

/// Self back-off: stop prefetching while predictions miss (daemon/src/backoff.rs).
#[derive(Args, Debug)]
#[command(next_help_heading = "Back-off")]
pub struct BackoffArgs {
    /// Never back off: prefetch whatever the engine predicts (back-off is
    /// never used under --budget).
    #[arg(long)]
    pub no_backoff: bool,
    /// One predicted block in this many is held back and watched.
    #[arg(long, hide = true, default_value_t = backoff::Params::default().holdout)]
    pub backoff_holdout: u32,
    /// A watched prediction counts as used if the process faults on it
    /// within this many further fault blocks.
    #[arg(long, hide = true, default_value_t = backoff::Params::default().horizon)]
    pub backoff_horizon: u64,
    /// Watched predictions per accuracy decision.
    #[arg(long, hide = true, default_value_t = backoff::Params::default().window)]
    pub backoff_window: u64,
    /// Stop prefetching below this accuracy.
    #[arg(long, hide = true, default_value_t = backoff::Params::default().stop_below)]
    pub backoff_stop: f64,
    /// Resume after a probe at or above this accuracy.
    #[arg(long, hide = true, default_value_t = backoff::Params::default().resume_at)]
    pub backoff_resume: f64,
    /// Time between probes while backed off.
    #[arg(long, hide = true, value_name = "DURATION", default_value_t = HumanDuration(backoff::Params::default().probe_every))]
    pub backoff_probe: HumanDuration,
}

impl BackoffArgs {
    /// The back-off parameters, checked; None with --no-backoff.
    pub fn params(&self) -> Result<Option<backoff::Params>> {
        if self.no_backoff {
            return Ok(None);
        }
        let p = backoff::Params {
            holdout: self.backoff_holdout,
            horizon: self.backoff_horizon,
            window: self.backoff_window,
            stop_below: self.backoff_stop,
            resume_at: self.backoff_resume,
            probe_every: self.backoff_probe.0,
        };
        p.validate().map_err(anyhow::Error::msg)?;
        Ok(Some(p))
    }
}

/// The tracker gate: tools events off during the process's CPU phases (daemon/src/gate.rs).
#[derive(Args, Debug)]
#[command(next_help_heading = "Tracker gate")]
pub struct GateArgs {
    /// Keep the tools events on during the process's CPU phases (the gate is
    /// on by default when prefetching with no --budget: with events on,
    /// every CPU fault of the process waits for a driver flush). The gate
    /// hides the faults of the closed periods from the counters: measure
    /// faults with --no-gate.
    #[arg(long)]
    pub no_gate: bool,
    /// CPU-fault migrations in a row that close the gate.
    #[arg(long, hide = true, default_value_t = gate::Params::default().close_after)]
    pub gate_close_after: u32,
    /// Open once the process's major faults are still this long.
    #[arg(long, hide = true, value_name = "DURATION", default_value_t = HumanDuration(gate::Params::default().settle))]
    pub gate_settle: HumanDuration,
    /// Open after this long closed in any case.
    #[arg(long, hide = true, value_name = "DURATION", default_value_t = HumanDuration(gate::Params::default().max_closed))]
    pub gate_max_closed: HumanDuration,
}

impl GateArgs {
    /// The gate's parameters, checked; None with --no-gate.
    pub fn params(&self) -> Result<Option<gate::Params>> {
        if self.no_gate {
            return Ok(None);
        }
        const HOUR: Duration = Duration::from_secs(3600);
        for (flag, d) in [
            ("--gate-settle", self.gate_settle),
            ("--gate-max-closed", self.gate_max_closed),
        ] {
            if d.0 > HOUR {
                bail!("{flag} {d} is out of range 0s..=1h");
            }
        }
        let p = gate::Params {
            close_after: self.gate_close_after,
            settle: self.gate_settle.0,
            max_closed: self.gate_max_closed.0,
        };
        p.validate().map_err(anyhow::Error::msg)?;
        Ok(Some(p))
    }
}

/// Queue and worker sizes.
#[derive(Args, Debug)]
#[command(next_help_heading = "Tuning")]
pub struct TuningArgs {
    /// Tools queue entries (power of two; 72 bytes each, pinned by the
    /// driver). 2^18: at 2^16 prescientd dropped 1-9.5% of the events of
    /// PyTorch jobs under a budget (GPU runs 59-60).
    #[arg(long, default_value_t = 1 << 18)]
    pub queue_entries: u32,
    /// Threads issuing UVM_MIGRATE.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Of --workers, how many take only prefetches (the others take
    /// evictions first); 0: every worker takes both, prefetches first.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub prefetch_workers: usize,
    /// Issue UVM_MIGRATE synchronously (the default is ASYNC).
    #[arg(long, hide = true)]
    pub sync_migrate: bool,
    /// Largest prefetch in 2 MB blocks (contiguous predicted blocks coalesce).
    #[arg(long, hide = true, default_value_t = 16)]
    pub coalesce_blocks: u64,
    /// A migration queued next to the last one queued for the workers (same
    /// direction and destination, adjacent blocks) joins it, up to BLOCKS
    /// 2 MB blocks in one UVM_MIGRATE; 0: never.
    #[arg(long, value_name = "BLOCKS", default_value_t = 64)]
    pub merge_queued: u64,
    /// Under a budget, the engine's smallest reserve in percent of it:
    /// evictions that may be on their way while prefetches still go in
    /// (BENCHMARKS-gpu.md run 74). A research knob.
    #[arg(long, hide = true, value_name = "PCT", default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reserve_pct: u32,
}

/// Reads an octal permission mode (`666`, `0o600`).
fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal permission mode (000..777)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn modes() {
        assert_eq!(parse_mode("666"), Ok(0o666));
        assert_eq!(parse_mode("0o600"), Ok(0o600));
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("7777").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn attach(args: &[&str]) -> AttachArgs {
        let argv = ["prescientd", "attach", "--pid", "7"].iter().chain(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Attach(a) => *a,
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn defaults_are_the_old_ones() {
        let a = attach(&[]);
        assert_eq!(a.target.attach_wait, Duration::from_secs(30));
        assert_eq!(a.output.stats_interval.0, Duration::from_millis(500));
        // One default everywhere (issue 18): detected, as the service's.
        assert_eq!(a.policy.gpu_memory, None);
        // The Params types have no PartialEq: compare their Debug text.
        let b = format!("{:?}", a.backoff.params().unwrap());
        assert_eq!(b, format!("{:?}", Some(backoff::Params::default())));
        let g = format!("{:?}", a.gate.params().unwrap());
        assert_eq!(g, format!("{:?}", Some(gate::Params::default())));
    }

    #[test]
    fn no_socket_is_open_to_every_user_by_default() {
        // Review findings 3 and 15: --marks-socket was 0666 by default.
        assert_eq!(attach(&[]).marks.marks_socket_mode, 0o600);
        let c = prescientd::config::Config::default();
        assert_eq!(c.control.socket_mode & 0o007, 0);
        assert_eq!(c.control.socket_group, "prescient");
    }

    #[test]
    fn sizes_and_durations_use_the_shared_grammar() {
        let a = attach(&[
            "--budget",
            "1.5G",
            "--attach-wait",
            "0.5",
            "--duration",
            "1m 30s",
        ]);
        assert_eq!(a.policy.budget, Some(GpuBudget::each(1536 << 20)));
        assert_eq!(a.target.attach_wait, Duration::from_millis(500));
        assert_eq!(a.output.duration, Some(Duration::from_secs(90)));
        let a = attach(&[
            "--budget",
            "1536M",
            "--gate-settle",
            "2ms",
            "--stats-interval",
            "1s",
        ]);
        assert_eq!(a.policy.budget, Some(GpuBudget::each(1536 << 20)));
        assert_eq!(
            a.gate.params().unwrap().unwrap().settle,
            Duration::from_millis(2)
        );
        assert_eq!(a.output.stats_interval.0, Duration::from_secs(1));
    }

    #[test]
    fn budget_takes_per_gpu_sizes_and_names_the_flag_when_bad() {
        let a = attach(&["--budget", "30G,1=20G"]);
        let b = a.policy.budget.unwrap();
        assert_eq!(b.of("GPU-x", Some(1)), Some(20 << 30));
        assert_eq!(b.of("GPU-x", Some(0)), Some(30 << 30));
        let e = Cli::try_parse_from([
            "prescientd",
            "attach",
            "--pid",
            "7",
            "--budget",
            "1=2G,1=3G",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("--budget") && e.contains("named twice"), "{e}");
    }

    #[test]
    fn flags_of_the_other_subcommand_are_refused() {
        for argv in [
            &["prescientd", "service", "--budget", "4G"][..],
            &["prescientd", "service", "--pid", "7"],
            &["prescientd", "attach", "--pid", "7", "--config", "x.toml"],
            &[
                "prescientd",
                "attach",
                "--pid",
                "7",
                "--victim-order",
                "next-use",
            ],
            &["prescientd", "attach", "--pid", "7", "--sweep"],
            &["prescientd", "--config", "x.toml"],
        ] {
            let e = Cli::try_parse_from(argv).expect_err(&argv.join(" "));
            assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{e}");
        }
    }

    /// A plan file of `blocks` 2 MB blocks in one range, in a fresh dir.
    fn plan_file(tag: &str, blocks: u64) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oracle-cli-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.plan");
        let text = format!(
            "prescient-plan 1\nranges 1\n{} 0\nblocks 2\n0 0 2\nend\n",
            blocks << 21
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    fn oracle_error(args: &[&str]) -> String {
        let e = attach(args).policy.oracle().unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn the_oracle_needs_its_plan_and_a_budget_that_fits_it() {
        let p = plan_file("a", 8);
        let ps = p.to_str().unwrap();
        let ok = attach(&["--mode", "oracle", "--plan", ps, "--budget", "8M"]);
        let o = ok.policy.oracle().unwrap().unwrap();
        assert_eq!(o.plan.footprint_blocks(), 8);
        // Budget: smaller than a block, or larger than the footprint.
        let e = oracle_error(&["--mode", "oracle", "--plan", ps, "--budget", "1M"]);
        assert!(
            e.contains("--budget") && e.contains("smaller than one 2 MB block"),
            "{e}"
        );
        let e = oracle_error(&["--mode", "oracle", "--plan", ps, "--budget", "17M"]);
        assert!(
            e.contains("--budget") && e.contains("larger than the plan's footprint"),
            "{e}"
        );
        // The flags belong together.
        let e = oracle_error(&["--mode", "oracle"]);
        assert!(e.contains("--plan"), "{e}");
        let e = oracle_error(&["--plan", ps]);
        assert!(e.contains("--plan is for --mode oracle"), "{e}");
        let e = oracle_error(&["--oracle-ahead", "8"]);
        assert!(e.contains("--oracle-ahead"), "{e}");
        // Any mode: a budget under one block is a mistake.
        let e = oracle_error(&["--mode", "driver-like", "--budget", "4096"]);
        assert!(e.contains("--budget"), "{e}");
        // A file that is no plan: its name and the line.
        std::fs::write(&p, "hello\n").unwrap();
        let e = oracle_error(&["--mode", "oracle", "--plan", ps]);
        assert!(e.contains("p.plan") && e.contains("line 1"), "{e}");
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}
