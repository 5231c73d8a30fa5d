//! prescientd: Prescient's daemon.
//!
//! * `prescientd service [--config FILE] [--check-config]`: the service, the
//!   control plane of prescient.ko (config file, prescientctl's socket,
//!   /metrics); see `prescientd::service`.
//! * `prescientd attach --pid PID [...]`: the user-space backend for one
//!   process, where no module can be loaded (see README.md).
//!
//! Bare `prescientd` prints the help and exits 2 (cli.rs says why).

mod cli;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use cli::{AttachArgs, Cli, Command, MarksArgs, ServiceArgs};
use prescient_uvm::ioctl as uvm;
use prescient_uvm::{Claim, Session};
use prescientd::userspace::marks;
use prescientd::userspace::{self, Config, FaultSource};
use prescientd::userspace::{backoff, gate};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "prescientd",
                &mut std::io::stdout(),
            );
        }
        Command::Man {
            out_dir,
            config_file,
        } => {
            let done = if config_file {
                config_page(out_dir.as_deref())
            } else {
                man(out_dir.as_deref())
            };
            if let Err(e) = done {
                eprintln!("prescientd: {e:#}");
                std::process::exit(1);
            }
        }
        Command::Service(args) => std::process::exit(service(args).await),
        Command::Attach(args) => {
            // An ordinary error is one line and exit 1, even with
            // RUST_BACKTRACE set (returning anyhow::Result from main would
            // print a backtrace); the causes follow on the same line.
            if let Err(e) = run_attached(*args).await {
                eprintln!("prescientd: {e:#}");
                std::process::exit(1);
            }
        }
    }
}

/// The man pages: section 8 (a system daemon). Printed, or every page
/// (one per subcommand too) written into `dir`.
fn man(dir: Option<&std::path::Path>) -> Result<()> {
    let cmd = Cli::command().name("prescientd");
    match dir {
        None => clap_mangen::Man::new(cmd)
            .section("8")
            .render(&mut std::io::stdout())?,
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            let mut cmd = cmd;
            cmd.build();
            write_pages(&cmd, d)?;
        }
    }
    Ok(())
}

/// prescientd.toml(5), printed or written into `dir`.
fn config_page(dir: Option<&std::path::Path>) -> Result<()> {
    let page =
        prescientd::config_doc::render(env!("CARGO_PKG_VERSION")).map_err(anyhow::Error::msg)?;
    match dir {
        None => print!("{page}"),
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            let path = d.join("prescientd.toml.5");
            std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// Writes `cmd`'s page as `prescientd.8`, and its subcommands' under their
/// display names (`prescientd-service.8`, set by `build`).
fn write_pages(cmd: &clap::Command, dir: &std::path::Path) -> Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .render(&mut out)?;
    let path = dir.join(format!("{name}.8"));
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        write_pages(sub, dir)?;
    }
    Ok(())
}

/// `prescientd service`: checks the config (and exits with --check-config) or runs the service; returns the exit status.
async fn service(args: ServiceArgs) -> i32 {
    if !args.check_config {
        return prescientd::service::run(args.config).await;
    }
    match prescientd::config::Config::load(&args.config) {
        Ok(_) => {
            println!("{}: ok", args.config.display());
            0
        }
        Err(e) => {
            eprintln!("prescientd: {e}");
            prescientd::service::EXIT_CONFIG
        }
    }
}

/// `prescientd attach`: attaches to the process, runs the loop until it exits, prints the counters.
async fn run_attached(args: AttachArgs) -> Result<()> {
    let pid = args.target.pid;
    let budget = args.policy.budget.clone().unwrap_or_default();
    if args.policy.fault_source == FaultSource::FaultsOnly && !budget.is_empty() {
        anyhow::bail!("--fault-source faults-only sees no migrations: it cannot keep a residency budget; drop --budget or use --fault-source faults");
    }
    let devices = prescientd::gpu::devices(prescientd::gpu::NVML_LIBRARY);
    let nvml_gpus = (devices.as_ref())
        .map(|d| d.iter().map(|d| (d.uuid.clone(), d.index)).collect())
        .map_err(Clone::clone);
    prescientd::gpu::check_budget(&budget, &nvml_gpus)
        .map_err(|e| anyhow::anyhow!("--budget: {e}"))?;
    let backoff = args.backoff.params()?;
    let gate = args.gate.params()?;
    let oracle = args.policy.oracle()?;
    // Unknown drivers are refused before the claim and any ioctl.
    let version = prescient_uvm::driver_version()?;
    tracing::info!(%version, "nvidia_uvm ABI known");

    // One acting backend per process (observe mode acts too little to
    // matter, but it would hide a second daemon's effect: claim it as well).
    let _claim = Claim::take(pid)?;
    let session = open_session(pid, &args).await?;
    let (target, gpu) = (&session.target, session.gpu);
    // Each GPU the process faults from gets its own engine, sized from
    // its own memory (the loop says which, as they come).
    tracing::info!(pid, fd = target.target_fd_no, first_gpu_index = gpu.index, first_gpu = %gpu, "attached");

    let discard = !args.marks.no_discard && uvm::discard_supported(&version);
    if !args.marks.no_discard && !discard {
        tracing::warn!(%version, "this driver has no UVM_DISCARD: dead blocks are evicted like live ones");
    }
    if let Some(o) = &oracle {
        // A plan of another workload is refused here, before anything moves,
        // when the process already has ranges the plan cannot have.
        let now = userspace::oracle::maps::read(pid)?;
        o.plan.check_now(&now).map_err(anyhow::Error::msg)?;
    }
    let (marks, _marks_server) = serve_marks(&args.marks, &session)?;
    if let Some(f) = &args.target.ready_file {
        use std::io::Write;
        prescientd::safe_path::create_output(f, "--ready-file")?
            .write_all(b"attached\n")
            .with_context(|| format!("writing {}", f.display()))?;
    }
    let configured = args.policy.gpu_memory.map_or(0, u64::from);
    // A GPU NVML does not name (none should) takes the first GPU's size.
    let gpu_memory = prescientd::gpu::gpu_memory(
        configured,
        &prescientd::gpu::Detected::probe_uuid(prescientd::gpu::NVML_LIBRARY, &gpu.to_string()),
    );
    let by_uuid = prescientd::gpu::memory_by_uuid(configured, &devices);
    tracing::info!(
        gpu_memory = %prescient_units::ByteSize(gpu_memory.bytes),
        source = %gpu_memory.source,
        per_gpu = !by_uuid.is_empty(),
        "engines sized (per_gpu: each from its own GPU's memory, NVML)"
    );
    let mut cfg = loop_config(args, backoff, gate, marks, discard, gpu_memory.bytes);
    cfg.oracle = oracle;
    cfg.gpu_indices = nvml_gpus.unwrap_or_default();
    cfg.gpu_memory = by_uuid;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop2.store(true, Ordering::Relaxed);
    });
    let snap = tokio::task::spawn_blocking(move || userspace::run(session, cfg, stop)).await??;
    println!("{}", serde_json::to_string(&snap)?);
    Ok(())
}

/// Attaches to `pid` with the tracker the fault source needs, retrying
/// for --attach-wait (the target may not have opened its UVM fds yet).
async fn open_session(pid: i32, args: &AttachArgs) -> Result<Session> {
    let events = args.policy.fault_source.events();
    let (wait, entries) = (args.target.attach_wait, args.tuning.queue_entries);
    // The retries sleep: off the runtime's workers.
    tokio::task::spawn_blocking(move || {
        Session::open(pid, wait, entries, events, |e| {
            tracing::debug!("attach: {e:#}; retrying")
        })
    })
    .await?
}

/// The marks channel's receiver and its server, when --marks-socket is given.
type MarksServing = (Option<marks::Receiver>, Option<RemoveOnDrop>);

/// Serves --marks-socket for the target `session` attached, if given: the
/// socket belongs to the target's user (mode --marks-socket-mode, 0600 by
/// default), and only the target process itself may mark on it.
fn serve_marks(args: &MarksArgs, session: &Session) -> Result<MarksServing> {
    let Some(path) = &args.marks_socket else {
        return Ok((None, None));
    };
    let t = &session.target;
    let target = prescientd::pidfd::Pidfd::from_fd(t.pid, t.pidfd.try_clone()?);
    let access = prescientd::socket::Access {
        mode: args.marks_socket_mode,
        uid: target.uid(),
        gid: None,
    };
    let (tx, rx) = marks::channel();
    let l = prescientd::socket::bind_socket(path, &access, "--marks-socket")?;
    tracing::info!(path = %path.display(), "serving marks");
    let server = tokio::spawn(marks::serve(l, Arc::new(target), tx));
    Ok((Some(rx), Some(RemoveOnDrop(path.clone(), server))))
}

/// The user-space loop's configuration from the attach flags.
fn loop_config(
    args: AttachArgs,
    backoff: Option<backoff::Params>,
    gate: Option<gate::Params>,
    marks: Option<marks::Receiver>,
    discard: bool,
    gpu_memory: u64,
) -> Config {
    let gpu_blocks = (gpu_memory >> prescient_core::BLOCK_SHIFT).min(u32::MAX as u64);
    Config {
        fault_source: args.policy.fault_source,
        mode: args.policy.mode,
        budget: args.policy.budget.unwrap_or_default(),
        gpu_indices: Vec::new(),
        duration: args.output.duration,
        stats_json: args.output.stats_json,
        stats_interval: args.output.stats_interval.0.max(Duration::from_millis(10)),
        workers: args.tuning.workers.max(1),
        prefetch_workers: args.tuning.prefetch_workers,
        async_migrate: !args.tuning.sync_migrate,
        max_coalesce_blocks: args.tuning.coalesce_blocks.max(1),
        merge_queued_blocks: args.tuning.merge_queued,
        reserve_pct: args.tuning.reserve_pct,
        // The next-use order and the sweep were experiments; their flags
        // are gone (core drops them in the same change).
        regret_window: !args.policy.no_regret_window,
        window_blocks: args.policy.window_blocks,
        gpu_blocks: gpu_blocks as u32,
        gpu_memory: Vec::new(),
        backoff,
        gate,
        engine: None,
        publish: None,
        marks,
        discard,
        alive_populate: !args.marks.no_alive_populate,
        block_log: args.output.block_log,
        exec_ids: args.policy.exec_ids,
        oracle: None,
        record_plan: args.policy.record_plan,
        footprints: !args.policy.no_footprints,
        footprint_window_pct: args.policy.footprint_window_pct,
        order_queue: args.policy.order_queue,
        large_window_pct: args.policy.large_window_pct,
        cyclic_victims: args.policy.cyclic_victims,
        next_use_victims: !args.policy.no_next_use_victims,
        sweep_victims: !args.policy.no_sweep_victims,
        sweep_window_pct: args.policy.sweep_window_pct,
        host_shared: !args.policy.no_host_shared,
    }
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
    use super::*;
    use prescientd::gpu::{Detected, Device, NvmlError};
    use prescientd::service::{engine_params, userspace_settings};
    use prescientd::userspace::GpuBudgets;

    /// `prescientd attach` with no flags but `--pid`, and the service's
    /// user-space backend under `config` (its file's text), run one set of
    /// defaults: the same engine for every budget and id mode, the same
    /// loop knobs. (H100 run 46: the service path was slower than attach's;
    /// it ran the module's table sizes, and execution-id mode on one table.)
    fn agree(config: &str) {
        let Command::Attach(a) = Cli::try_parse_from(["prescientd", "attach", "--pid", "1"])
            .unwrap()
            .command
        else {
            panic!("not attach")
        };
        let (backoff, gate) = (a.backoff.params().unwrap(), a.gate.params().unwrap());
        let queue_entries = a.tuning.queue_entries;
        let gpu = 80u64 << 30;
        let attach = loop_config(*a, backoff, gate, None, true, gpu);
        let cfg = prescientd::config::Config::parse(config).unwrap();
        let det = Detected::Gpu(Device {
            index: 0,
            uuid: "GPU-0".into(),
            name: "test".into(),
            memory_bytes: gpu,
        });
        let settings = userspace_settings(&cfg, &det, &Err(NvmlError::NotInstalled("test".into())));
        let (_tx, rx) = marks::channel();
        let svc = Config::for_service(
            &settings,
            engine_params(&cfg, &det).into(),
            &GpuBudgets::default(),
            Arc::default(),
            rx,
            true,
        );
        for budget in [None, Some(4800u64 << 20)] {
            for exec in [false, true] {
                let (x, y) = (
                    attach.engine_for(budget, attach.gpu_blocks, exec).unwrap(),
                    svc.engine_for(budget, svc.gpu_blocks, exec).unwrap(),
                );
                assert_eq!(x, y, "{config:?}: budget {budget:?}, execution ids {exec}");
            }
        }
        let knobs = |c: &Config| {
            format!(
                "{:?} {:?} {} {} {} {} {} {} {:?} {:?} {:?} {:?} {:?} {} {} {}",
                c.mode,
                c.fault_source,
                c.workers,
                c.prefetch_workers,
                c.merge_queued_blocks,
                c.async_migrate,
                c.max_coalesce_blocks,
                c.regret_window,
                c.window_blocks,
                c.backoff,
                c.gate,
                c.stats_interval,
                c.exec_ids,
                c.gpu_blocks,
                c.footprints,
                c.host_shared
            )
        };
        assert_eq!(knobs(&attach), knobs(&svc), "{config:?}");
        assert_eq!(queue_entries, settings.queue_entries, "{config:?}");
    }

    #[test]
    fn attach_and_the_services_userspace_backend_run_one_set_of_defaults() {
        agree("backend = \"userspace\"");
        // The shipped file writes prescient.ko's defaults for every key.
        let sample = prescientd::config_doc::SAMPLE
            .replace("backend = \"module\"", "backend = \"userspace\"");
        assert_ne!(sample, prescientd::config_doc::SAMPLE);
        agree(&sample);
    }

    /// A table key the operator sets is the operator's, under either
    /// backend.
    #[test]
    fn a_table_key_set_in_the_file_applies_as_given() {
        let cfg = prescientd::config::Config::parse(
            "backend = \"userspace\"\n[engine]\nrows = 1024\nlookahead = 8\n",
        )
        .unwrap();
        let det = Detected::None("test".into());
        let p = engine_params(&cfg, &det);
        assert_eq!((p.rows, p.lookahead, p.assoc, p.succs), (1024, 8, 2, 4));
        let module = prescientd::config::Config::parse("").unwrap();
        let p = engine_params(&module, &det);
        assert_eq!((p.rows, p.lookahead), (512, 4), "prescient.ko's own");
    }
}
