//! The service's state (`State`, one lock) and the `Service` that owns it;
//! reconcile.rs, requests.rs and the tasks in mod.rs act on them.

use super::metrics::{DaemonCounters, Metrics};
use crate::backend::Backend;
use crate::config::Config;
use prescient_uapi::control::{self, EngineParams, ModuleInfo, ProcessInfo, Stats};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::watch;

pub(super) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why an attachment exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reason {
    Config,
    Pattern,
    All,
    Ctl,
    /// Attached by someone else (a DeepUM-style runtime, another tool).
    Other,
}

impl Reason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Reason::Config => "config",
            Reason::Pattern => "pattern",
            Reason::All => "all",
            Reason::Ctl => "ctl",
            Reason::Other => "other",
        }
    }
    /// The daemon made this attachment and keeps it (re-attaches after a
    /// module reload, detaches at shutdown).
    pub(super) fn ours(self) -> bool {
        self != Reason::Other
    }
}

#[derive(Clone, Debug)]
pub(super) struct Attachment {
    pub(super) comm: String,
    pub(super) reason: Reason,
    /// The process attached (None: attached by someone else): only this
    /// process is ever re-attached, never another that gets its pid.
    pub(super) process: Option<Arc<crate::pidfd::Pidfd>>,
}

/// What the service knows and wants, under one lock.
pub(super) struct State {
    pub(super) cfg: Config,
    pub(super) patterns: Vec<regex::Regex>,
    /// The parameters the daemon applies (config, then prescientctl set).
    pub(super) desired: EngineParams,
    pub(super) up: bool,
    /// The module was seen at least once (a later absence is an unload).
    pub(super) seen: bool,
    pub(super) module: Option<ModuleInfo>,
    pub(super) stats: Stats,
    pub(super) attached: BTreeMap<i32, Attachment>,
    /// Pids being attached now (the lock is not held across an attach).
    pub(super) attaching: Vec<i32>,
    pub(super) failed: HashMap<i32, u32>,
    pub(super) daemon: DaemonCounters,
    pub(super) last_poll_error: Option<String>,
    /// Set (under the lock) when shutdown has begun: from then on nothing
    /// attaches, so the scan and poll tasks still running cannot re-attach
    /// what `detach_ours` has just detached.
    pub(super) shutting_down: bool,
}

impl State {
    /// The attached processes as the status reply and /metrics show them.
    pub(super) fn process_infos(&self) -> Vec<ProcessInfo> {
        self.attached
            .iter()
            .map(|(pid, a)| ProcessInfo {
                pid: *pid,
                comm: a.comm.clone(),
                reason: a.reason.as_str().into(),
            })
            .collect()
    }
}

/// The running service: its backend, its state, and how it is stopped.
pub struct Service {
    pub(super) config_path: PathBuf,
    pub(super) dev: Arc<dyn Backend>,
    pub(super) started: Instant,
    /// Every series /metrics exports, registered once.
    pub(super) metrics: Metrics,
    pub(super) st: Mutex<State>,
    /// The GPU NVML reported at start, or why none (gpu/).
    pub(super) gpu: crate::gpu::Detected,
    /// Asks the signal loop to end with an exit status.
    pub(super) stop: watch::Sender<Option<i32>>,
}

impl Service {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug; the state itself is
        // always consistent between statements, so keep serving.
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the service with exit status `code`.
    pub(super) fn shutdown(&self, code: i32) {
        let _ = self.stop.send(Some(code));
    }

    /// Seconds since the service started.
    pub(super) fn uptime(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// What prescientctl and /metrics show of the backend's version.
pub(super) fn module_info(v: &prescient_uapi::Version) -> ModuleInfo {
    ModuleInfo {
        abi_version: v.abi_version,
        driver_version: control::driver_version_string(v.driver_version),
        bound: v.flags & prescient_uapi::VERSION_FLAG_BOUND != 0,
        enabled: v.flags & prescient_uapi::VERSION_FLAG_ENABLED != 0,
        max_processes: v.max_spaces,
    }
}

/// What to do about a backend that is not loaded, for the operator who
/// asked (`prescientctl stats`, the log at start): load what it needs, or,
/// for the module, run without it.
pub(super) fn load_hint(backend: &str, config: &std::path::Path) -> String {
    match backend {
        "userspace" => "Load the NVIDIA driver's nvidia_uvm (`sudo modprobe nvidia-uvm`); the user-space backend attaches once it is there".into(),
        _ => format!(
            "Load it (`sudo modprobe prescient`; the prescient-dkms package or `make dkms` builds it for this kernel), or run without it: backend = \"userspace\" in {}",
            config.display()
        ),
    }
}
