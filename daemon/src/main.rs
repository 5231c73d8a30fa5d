//! prescientd: Prescient's daemon.
//!
//! * `prescientd [--config FILE]`: the service, the control plane of
//!   prescient.ko (config file, prescientctl's socket, /metrics); see
//!   `prescientd::service`.
//! * `prescientd --pid PID [...]`: the user-space backend for one process,
//!   where no module can be loaded (see README.md).

use anyhow::{Context, Result};
use clap::Parser;
use prescientd::userspace::{self, backoff, gate, Config, FaultSource, PolicyMode};
use prescientd::{attach, uvm};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "prescientd",
    version,
    about = "Prescient: prefetching for CUDA Unified Memory, attached from outside (no kernel module)"
)]
struct Cli {
    /// Run as the service with this config file (default
    /// /etc/prescient/prescientd.toml when --pid is not given).
    #[arg(long, conflicts_with = "pid")]
    config: Option<PathBuf>,
    /// Check the config file and exit (0 if valid, 78 otherwise).
    #[arg(long, conflicts_with = "pid")]
    check_config: bool,
    /// User-space backend: the CUDA process to act for (no module needed).
    #[arg(long)]
    pid: Option<i32>,
    /// Residency budget in bytes (GPU-resident managed memory of the process),
    /// enforced by pre-eviction. Suffixes K, M, G accepted.
    #[arg(long, value_parser = parse_bytes)]
    budget: Option<u64>,
    #[arg(long, value_enum, default_value_t = PolicyMode::Prescient)]
    mode: PolicyMode,
    /// Events the engine learns from: GPU faults, or fault-driven migrations
    /// only (cheaper for the target: the driver records far fewer events).
    #[arg(long, value_enum, default_value_t = FaultSource::Faults)]
    fault_source: FaultSource,
    /// Stop after this many seconds (default: when the target exits).
    #[arg(long)]
    duration: Option<f64>,
    /// Write counters as JSON to this file, periodically and at exit.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    #[arg(long, default_value_t = 500)]
    stats_interval_ms: u64,
    /// Tools queue entries (power of two).
    #[arg(long, default_value_t = 1 << 16)]
    queue_entries: u32,
    /// Threads issuing UVM_MIGRATE.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Issue UVM_MIGRATE synchronously (the default is ASYNC).
    #[arg(long)]
    sync_migrate: bool,
    /// Largest prefetch in 2 MB blocks (contiguous predicted blocks coalesce).
    #[arg(long, default_value_t = 16)]
    coalesce_blocks: u64,
    /// Under --budget, keep the prediction window at its full depth. By
    /// default the depth shrinks while more than 2% of the blocks
    /// pre-eviction takes are needed again within about a window's depth of
    /// evictions, and grows when the process outruns the window.
    #[arg(long)]
    no_regret_window: bool,
    /// Most predicted blocks in flight ahead of the process (the engine's
    /// prediction window). Default: 1/8 of the budget, or of the GPU
    /// without one; never more than 1/8 of the GPU.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=prescient_core::Params::MAX_WINDOW_BLOCKS as i64))]
    window_blocks: Option<u32>,
    /// Write every block decision and movement to this file (tab-separated,
    /// for bench/gpu/blocklog.py; large: about 30 bytes per migrated block).
    #[arg(long)]
    block_log: Option<PathBuf>,
    /// Keep retrying attach for this many seconds (the target may not have
    /// opened its UVM fds yet).
    #[arg(long, default_value_t = 30.0)]
    attach_wait: f64,
    /// Create this file once the tracker runs (a workload can wait for it).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Never back off: prefetch whatever the engine predicts (back-off is
    /// never used under --budget).
    #[arg(long)]
    no_backoff: bool,
    /// Back-off: one predicted block in this many is held back and watched
    /// to measure prediction accuracy while prefetching.
    #[arg(long, default_value_t = backoff::Params::default().holdout)]
    backoff_holdout: u32,
    /// Back-off: a watched prediction counts as used if the process faults
    /// on it within this many further fault blocks.
    #[arg(long, default_value_t = backoff::Params::default().horizon)]
    backoff_horizon: u64,
    /// Back-off: watched predictions per accuracy decision.
    #[arg(long, default_value_t = backoff::Params::default().window)]
    backoff_window: u64,
    /// Back-off: stop prefetching below this accuracy.
    #[arg(long, default_value_t = backoff::Params::default().stop_below)]
    backoff_stop: f64,
    /// Back-off: resume after a probe at or above this accuracy.
    #[arg(long, default_value_t = backoff::Params::default().resume_at)]
    backoff_resume: f64,
    /// Back-off: milliseconds between probes while backed off.
    #[arg(long, default_value_t = backoff::Params::default().probe_every.as_millis() as u64)]
    backoff_probe_ms: u64,
    /// GPU memory in bytes to size the engine when no budget is given.
    #[arg(long, value_parser = parse_bytes, default_value = "140G")]
    gpu_memory: u64,
    /// Keep the tools events on during the process's CPU phases (the
    /// tracker gate is on by default when prefetching with no --budget:
    /// with events on, every CPU fault of the process waits for a driver
    /// flush; see daemon/src/gate.rs). The gate hides the faults of the
    /// closed periods from the counters: measure faults with --no-gate.
    #[arg(long)]
    no_gate: bool,
    /// Serve a Unix socket at PATH on which the process sends its own dead
    /// and alive marks (the control protocol's "mark" request; see
    /// bench/gpu/torch/managed_alloc.cu). Dead blocks are discarded, not
    /// copied, when pre-evicted.
    #[arg(long)]
    marks_socket: Option<PathBuf>,
    /// Permission bits of --marks-socket, octal (only the target's own pid
    /// is accepted on it, whoever connects).
    #[arg(long, default_value = "666", value_parser = parse_mode)]
    marks_socket_mode: u32,
    /// Evict dead blocks like live ones (no UVM_DISCARD).
    #[arg(long)]
    no_discard: bool,
    /// Tracker gate: CPU-fault migrations in a row that close it.
    #[arg(long, default_value_t = gate::Params::default().close_after)]
    gate_close_after: u32,
    /// Tracker gate: open once the process's major faults are still this long (ms).
    #[arg(long, default_value_t = gate::Params::default().settle.as_secs_f64() * 1e3)]
    gate_settle_ms: f64,
    /// Tracker gate: open after this long closed in any case (ms).
    #[arg(long, default_value_t = gate::Params::default().max_closed.as_secs_f64() * 1e3)]
    gate_max_closed_ms: f64,
}

fn ms_arg(name: &str, v: f64) -> Result<Duration> {
    if !(0.0..=3.6e6).contains(&v) {
        anyhow::bail!("{name} {v} is out of range 0..=3600000");
    }
    Ok(Duration::from_secs_f64(v / 1e3))
}

fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal permission mode (000..777)")),
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|e| format!("bad byte count {s:?}: {e}"))?;
    if v.is_nan() || v < 0.0 {
        return Err(format!("bad byte count {s:?}"));
    }
    Ok((v * mul as f64) as u64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let Some(pid) = cli.pid else {
        let path = cli
            .config
            .clone()
            .unwrap_or_else(|| PathBuf::from(prescientd::config::DEFAULT_PATH));
        if cli.check_config {
            match prescientd::config::Config::load(&path) {
                Ok(_) => {
                    println!("{}: ok", path.display());
                    std::process::exit(0)
                }
                Err(e) => {
                    eprintln!("config: {e}");
                    std::process::exit(prescientd::service::EXIT_CONFIG)
                }
            }
        }
        let code = prescientd::service::run(path).await;
        std::process::exit(code);
    };
    if cli.fault_source == FaultSource::FaultsOnly && cli.budget.is_some() {
        anyhow::bail!("--fault-source faults-only sees no migrations: it cannot keep a residency budget; drop --budget or use --fault-source faults");
    }
    let backoff = (!cli.no_backoff).then_some(backoff::Params {
        holdout: cli.backoff_holdout,
        horizon: cli.backoff_horizon,
        window: cli.backoff_window,
        stop_below: cli.backoff_stop,
        resume_at: cli.backoff_resume,
        probe_every: Duration::from_millis(cli.backoff_probe_ms),
    });
    if let Some(p) = &backoff {
        p.validate().map_err(anyhow::Error::msg)?;
    }
    let gate = (!cli.no_gate).then_some(gate::Params {
        close_after: cli.gate_close_after,
        settle: ms_arg("--gate-settle-ms", cli.gate_settle_ms)?,
        max_closed: ms_arg("--gate-max-closed-ms", cli.gate_max_closed_ms)?,
    });
    if let Some(p) = &gate {
        p.validate().map_err(anyhow::Error::msg)?;
    }
    let version = attach::driver_version()?;
    tracing::info!(%version, "nvidia_uvm ABI known");

    // One acting backend per process (observe mode acts too little to
    // matter, but it would hide a second daemon's effect: claim it as well).
    let _claim = attach::Claim::take(pid)?;
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(cli.attach_wait.max(0.0));
    let (target, gpu) = loop {
        let r = attach::Target::attach(pid).and_then(|t| {
            let g = t.gpu()?;
            Ok((t, g))
        });
        match r {
            Ok(x) => break x,
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!("attach: {e:#}; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    };
    tracing::info!(pid, fd = target.target_fd_no, gpu_index = gpu.0, gpu = %uvm::uuid_string(&gpu.1), "attached");
    let tracker = attach::Tracker::new(
        &target,
        cli.queue_entries,
        match cli.fault_source {
            FaultSource::Faults => (1 << uvm::EVENT_GPU_FAULT) | (1 << uvm::EVENT_MIGRATION),
            FaultSource::Migrations => 1 << uvm::EVENT_MIGRATION,
            FaultSource::FaultsOnly => 1 << uvm::EVENT_GPU_FAULT,
        },
    )
    .context("creating the tools event tracker")?;

    let discard = !cli.no_discard && uvm::discard_supported(&version);
    if !cli.no_discard && !discard {
        tracing::warn!(%version, "this driver has no UVM_DISCARD: dead blocks are evicted like live ones");
    }
    let (marks_rx, _marks_server) = match &cli.marks_socket {
        Some(path) => {
            let (tx, rx) = prescientd::userspace::marks::channel();
            let l = prescientd::socket::bind_socket(path, cli.marks_socket_mode, "--marks-socket")?;
            tracing::info!(path = %path.display(), "serving marks");
            (
                Some(rx),
                Some(RemoveOnDrop(
                    path.clone(),
                    tokio::spawn(prescientd::userspace::marks::serve(l, pid, tx)),
                )),
            )
        }
        None => (None, None),
    };
    if let Some(f) = &cli.ready_file {
        std::fs::write(f, b"attached\n").with_context(|| format!("writing {}", f.display()))?;
    }
    let cfg = Config {
        fault_source: cli.fault_source,
        mode: cli.mode,
        budget: cli.budget,
        duration: cli.duration.map(Duration::from_secs_f64),
        stats_json: cli.stats_json,
        stats_interval: Duration::from_millis(cli.stats_interval_ms.max(10)),
        workers: cli.workers.max(1),
        async_migrate: !cli.sync_migrate,
        max_coalesce_blocks: cli.coalesce_blocks.max(1),
        regret_window: !cli.no_regret_window,
        window_blocks: cli.window_blocks,
        gpu_blocks: (cli.gpu_memory >> prescient_core::BLOCK_SHIFT).min(u32::MAX as u64) as u32,
        backoff,
        gate,
        engine: None,
        publish: None,
        marks: marks_rx,
        discard,
        block_log: cli.block_log,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop2.store(true, Ordering::Relaxed);
    });
    let snap = tokio::task::spawn_blocking(move || {
        userspace::run(target, tracker, gpu, version, cfg, stop)
    })
    .await??;
    println!("{}", serde_json::to_string(&snap)?);
    Ok(())
}

/// The marks server's task and socket file, ended and removed on exit.
struct RemoveOnDrop(PathBuf, tokio::task::JoinHandle<()>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        self.1.abort();
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_mode};

    #[test]
    fn modes() {
        assert_eq!(parse_mode("666"), Ok(0o666));
        assert_eq!(parse_mode("0o600"), Ok(0o600));
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("7777").is_err());
    }

    #[test]
    fn bytes() {
        assert_eq!(parse_bytes("4G"), Ok(4 << 30));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("-1").is_err());
    }
}
