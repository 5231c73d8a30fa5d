//! prescientd as a service: the control plane of prescient.ko.
//!
//! It applies the configured parameters to /dev/prescient, attaches the
//! processes it is told to (by pid, by command-line pattern, or every process
//! that opens /dev/nvidia-uvm), polls the module's statistics, serves them to
//! Prometheus, and answers prescientctl on a Unix socket (the protocol is prescient_uapi::control).
//!
//! # Module states, and what the daemon does in each
//! ```text
//!   start ──probe──> Up ──(ENOENT/ENODEV on a poll: rmmod)──> Down
//!            │        ^                                         │
//!            │        └──(device answers again: re-apply params,│
//!            │            re-attach live processes)─────────────┘
//!            ├─ missing:    on_missing_module = "wait" -> Down (metrics say 0)
//!            │              on_missing_module = "exit" -> exit 69
//!            └─ EACCES/EPERM (node permissions, no CAP_SYS_ADMIN) -> exit 77
//! ```
//! A permission problem does not fix itself, so it is never retried; a
//! missing module is retried only when the config asks to wait.
//!
//! # Exit status
//! See exit.rs.
//!
//! # Locking
//! One std `Mutex<State>`, never held across an `.await`; device ioctls are
//! made with it held so that the daemon's view and the module's change
//! together (they are short: the module never sleeps on the fault path).

mod exit;
mod kube;
pub mod metrics;
mod procfs;
mod provenance;
mod reconcile;
mod requests;
mod state;
#[cfg(test)]
mod testing;

pub use exit::{EXIT_CONFIG, EXIT_FAILURE, EXIT_NOPERM, EXIT_OK, EXIT_UNAVAILABLE};
pub use provenance::engine_params;
pub use state::Service;

use crate::backend::{Backend, DevError};
use crate::config::{BackendKind, Config, OnMissingModule};
use crate::gpu::Detected;
use crate::module::Module;
use crate::socket::{self, bind_socket};
use crate::userspace::{self, Userspace};
use metrics::{DaemonCounters, Identity, Metrics, View};
use prescient_uapi::control::Stats;
use procfs::process_exists;
use reconcile::{apply_at_start, compile};
use state::{load_hint, module_info, State, VERSION};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

impl Service {
    /// The text exposition of the latest reading.
    fn metrics_text(&self) -> Result<String, prometheus::Error> {
        // The backend's snapshots first: its lock is never taken under ours.
        let loops = self.dev.loop_values();
        let gpus = self.dev.gpu_lanes();
        let s = self.lock();
        let attached = s.process_infos();
        let pods: HashMap<i32, kube::Pod> = attached
            .iter()
            .filter_map(|a| Some((a.pid, kube::pod_of(std::path::Path::new("/proc"), a.pid)?)))
            .collect();
        self.metrics.render(&View {
            daemon_version: VERSION,
            budget_in_force: (s.desired.residency_budget_bytes > 0)
                .then_some(s.desired.residency_budget_bytes),
            loops: &loops,
            pods: &pods,
            up: s.up,
            backend: self.dev.kind(),
            module: if s.up { s.module.as_ref() } else { None },
            params: &s.desired,
            stats: &s.stats,
            attached: &attached,
            daemon: s.daemon,
            gpus: &gpus,
        })
    }
}

/// Starts the service; returns the process exit status.
pub async fn run(config_path: PathBuf) -> i32 {
    let cfg = match Config::load(&config_path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("config: {e}");
            return EXIT_CONFIG;
        }
    };
    for (i, pid) in cfg.attach.pids.iter().enumerate() {
        if !process_exists(*pid) {
            tracing::error!("config: attach.pids[{i}]: process {pid} does not exist");
            return EXIT_CONFIG;
        }
    }
    // Sockets first: a port in use must not leave the module changed.
    let (metrics_listener, control) = match bind_listeners(&cfg).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let socket_path = cfg.control.socket.clone();
    let code = start(cfg, config_path, metrics_listener, control).await;
    let _ = std::fs::remove_file(&socket_path);
    code
}

/// Binds the metrics port (when enabled) and the control socket.
async fn bind_listeners(cfg: &Config) -> Result<(Option<TcpListener>, UnixListener), i32> {
    let metrics_listener = if cfg.metrics.enabled {
        // validate() checked the address.
        let addr = cfg.metrics_addr().map_err(|e| {
            tracing::error!("config: {e}");
            EXIT_CONFIG
        })?;
        match TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!("metrics.listen = {addr}: {e}");
                return Err(EXIT_FAILURE);
            }
        }
    } else {
        None
    };
    let control = bind_socket(&cfg.control.socket, &cfg.control.access(), "control.socket")
        .map_err(|e| {
            tracing::error!("{e:#}");
            EXIT_FAILURE
        })?;
    Ok((metrics_listener, control))
}

/// The backend the config names, sized for the detected GPU.
fn backend(cfg: &Config, gpu: &Detected) -> Arc<dyn Backend> {
    match cfg.backend {
        BackendKind::Module => Arc::new(Module::new(&cfg.device)),
        BackendKind::Userspace => {
            let devices = crate::gpu::devices(&cfg.gpu.nvml_library);
            Arc::new(Userspace::new(userspace_settings(cfg, gpu, &devices)))
        }
    }
}

/// The user-space backend's settings under `cfg`: the configured GPU's
/// memory (`gpu`) for a GPU NVML does not name, each GPU's own (`devices`)
/// for the rest, unless `userspace.gpu_memory` gives one size for all.
pub fn userspace_settings(
    cfg: &Config,
    gpu: &Detected,
    devices: &Result<Vec<crate::gpu::Device>, crate::gpu::NvmlError>,
) -> userspace::Settings {
    userspace::Settings {
        gpu_memory_bytes: crate::gpu::gpu_memory(cfg.userspace.gpu_memory.0, gpu).bytes,
        gpu_memory: crate::gpu::memory_by_uuid(cfg.userspace.gpu_memory.0, devices),
        workers: cfg.userspace.workers as usize,
        queue_entries: cfg.userspace.queue_entries,
        gate: cfg.userspace.gate,
        regret_window: cfg.userspace.regret_window,
        footprints: cfg.userspace.footprints,
        host_shared: cfg.userspace.host_shared,
        stats_interval: Duration::from_millis(cfg.poll_interval_ms.min(500)),
    }
}

/// The service for `cfg`, before it has seen its backend.
fn new_service(
    cfg: &Config,
    config_path: PathBuf,
    stop: watch::Sender<Option<i32>>,
) -> prometheus::Result<Arc<Service>> {
    let gpu = detect_gpu(cfg);
    Ok(Arc::new(Service {
        config_path,
        dev: backend(cfg, &gpu),
        started: Instant::now(),
        metrics: Metrics::new(&Identity::of_host(gpu.device()))?,
        st: Mutex::new(State {
            patterns: compile(cfg),
            desired: provenance::engine_params(cfg, &gpu),
            up: false,
            seen: false,
            module: None,
            stats: Stats::default(),
            attached: BTreeMap::new(),
            attaching: Vec::new(),
            failed: HashMap::new(),
            daemon: DaemonCounters::default(),
            last_poll_error: None,
            shutting_down: false,
            cfg: cfg.clone(),
        }),
        gpu,
        stop,
    }))
}

/// Asks NVML for the configured GPU once, at start; logs one line either
/// way. Without an answer the daemon still serves prescientctl and /metrics.
fn detect_gpu(cfg: &Config) -> Detected {
    let d = Detected::probe(&cfg.gpu.nvml_library, cfg.gpu.index);
    match &d {
        Detected::Gpu(g) => tracing::info!(
            index = g.index,
            uuid = %g.uuid,
            model = %g.name,
            memory = %prescient_units::ByteSize(g.memory_bytes),
            "GPU detected (NVML)"
        ),
        Detected::None(why) => tracing::warn!(
            "no GPU detected ({why}); {}",
            match cfg.backend {
                BackendKind::Module if cfg.engine.residency_budget.each_bytes() == 0 =>
                    "the module pre-evicts nothing until engine.residency_budget is set",
                BackendKind::Module => "engine.residency_budget applies as configured",
                BackendKind::Userspace =>
                    "the engine is sized by userspace.gpu_memory or its default",
            }
        ),
    }
    d
}

/// The backend now: applies the parameters and configured attachments (or
/// undoes them), or waits for a missing one, or gives up with an exit status.
fn probe(svc: &Service, cfg: &Config) -> Result<(), i32> {
    match svc.dev.version() {
        Ok(v) => {
            let m = module_info(&v);
            tracing::info!(
                abi = m.abi_version,
                driver = %m.driver_version,
                "{} found at {}",
                svc.dev.needs(),
                svc.dev.path().display()
            );
            apply_at_start(svc, cfg)?;
        }
        Err(e @ DevError::Permission(_)) => {
            tracing::error!("{}: {e}", cfg.device.display());
            return Err(EXIT_NOPERM);
        }
        Err(e @ DevError::Missing { .. }) => match cfg.on_missing_module {
            OnMissingModule::Exit => {
                tracing::error!(
                    "{}: {e}; exiting (on_missing_module = \"exit\"). {}",
                    svc.dev.path().display(),
                    load_hint(svc.dev.kind(), &svc.config_path)
                );
                return Err(EXIT_UNAVAILABLE);
            }
            OnMissingModule::Wait => {
                tracing::warn!(
                    "{}: {e}; waiting for it (on_missing_module = \"wait\"); metrics report prescient_backend_up 0",
                    cfg.device.display()
                );
                svc.lock().last_poll_error = Some(e.to_string());
            }
        },
        Err(e) => {
            tracing::error!(
                "{}: {e} (is this prescient's device node?)",
                cfg.device.display()
            );
            return Err(EXIT_FAILURE);
        }
    }
    Ok(())
}

async fn start(
    cfg: Config,
    config_path: PathBuf,
    metrics_listener: Option<TcpListener>,
    control: UnixListener,
) -> i32 {
    let (stop, stopped) = watch::channel(None);
    let svc = match new_service(&cfg, config_path, stop) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("metrics registry: {e}");
            return EXIT_FAILURE;
        }
    };
    if let Err(code) = probe(&svc, &cfg) {
        return code;
    }
    spawn_every(
        Duration::from_millis(cfg.poll_interval_ms),
        &svc,
        Service::poll,
    );
    spawn_every(
        Duration::from_millis(cfg.attach.scan_interval_ms),
        &svc,
        Service::scan,
    );
    serve_control(&svc, control);
    if let Some(l) = metrics_listener {
        serve_metrics(&svc, l);
    }
    let Some(signals) = Signals::install() else {
        tracing::error!("cannot install signal handlers");
        svc.detach_ours();
        return EXIT_FAILURE;
    };
    tracing::info!(
        "prescientd {VERSION} running; control socket {}",
        cfg.control.socket.display()
    );
    // First poll now, not one interval later.
    {
        let p = svc.clone();
        let _ = tokio::task::spawn_blocking(move || {
            p.poll();
            p.scan();
        })
        .await;
    }
    crate::sd_notify::notify("READY=1");
    let code = wait_for_signal(&svc, signals, stopped).await;
    let d = svc.clone();
    let _ = tokio::task::spawn_blocking(move || d.detach_ours()).await;
    tracing::info!(code, "prescientd stopped");
    code
}

/// Runs `f` on a blocking thread every `every` (a late tick is delayed,
/// not made up for).
fn spawn_every(every: Duration, svc: &Arc<Service>, f: fn(&Service)) {
    let svc = svc.clone();
    tokio::spawn(async move {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            let s = svc.clone();
            let _ = tokio::task::spawn_blocking(move || f(&s)).await;
        }
    });
}

/// Answers prescientctl on the control socket (requests.rs).
fn serve_control(svc: &Arc<Service>, control: UnixListener) {
    let svc = svc.clone();
    let limits = svc.lock().cfg.control.limits();
    tokio::spawn(socket::serve(
        control,
        "control socket",
        limits,
        move |peer| {
            Arc::new(requests::ControlConnection {
                svc: svc.clone(),
                peer,
                owner: Arc::default(),
            })
        },
    ));
}

/// Serves `GET /metrics` on `l`.
fn serve_metrics(svc: &Arc<Service>, l: TcpListener) {
    let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics_handler))
        .with_state(svc.clone());
    tracing::info!("serving metrics on http://{addr}/metrics");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(l, app).await {
            tracing::error!("metrics server: {e}");
        }
    });
}

async fn metrics_handler(
    axum::extract::State(svc): axum::extract::State<Arc<Service>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match svc.metrics_text() {
        Ok(t) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            t,
        )
            .into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The signals the service acts on.
struct Signals {
    hup: Signal,
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> Option<Signals> {
        Some(Signals {
            hup: signal(SignalKind::hangup()).ok()?,
            term: signal(SignalKind::terminate()).ok()?,
            int: signal(SignalKind::interrupt()).ok()?,
        })
    }
}

/// Reloads the config on SIGHUP until SIGTERM, SIGINT or a `shutdown`;
/// returns the exit status.
async fn wait_for_signal(
    svc: &Arc<Service>,
    mut sig: Signals,
    mut stopped: watch::Receiver<Option<i32>>,
) -> i32 {
    loop {
        tokio::select! {
            _ = sig.hup.recv() => {
                let r = svc.clone();
                let _ = tokio::task::spawn_blocking(move || r.reload()).await;
            }
            _ = sig.term.recv() => { tracing::info!("SIGTERM: shutting down"); return EXIT_OK; }
            _ = sig.int.recv() => { tracing::info!("SIGINT: shutting down"); return EXIT_OK; }
            r = stopped.changed() => {
                if r.is_err() { return EXIT_FAILURE; }
                if let Some(c) = *stopped.borrow() { return c; }
            }
        }
    }
}
