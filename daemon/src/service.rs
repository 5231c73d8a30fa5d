//! prescientd as a service: the control plane of prescient.ko.
//!
//! It applies the configured parameters to /dev/prescient, attaches the
//! processes it is told to (by pid, by command-line pattern, or every process
//! that opens /dev/nvidia-uvm), polls the module's statistics, serves them to
//! Prometheus, and answers prescientctl on a Unix socket (proto.rs).
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
//! 0 after SIGTERM/SIGINT (processes the daemon attached are detached, the
//! socket removed; the module keeps the parameters in force), 78 config
//! invalid (EX_CONFIG), 69 module missing with `on_missing_module = "exit"`
//! (EX_UNAVAILABLE), 77 permission denied (EX_NOPERM), 1 anything else at
//! start (port in use, socket busy, a configured pid the module refuses).
//! Nothing is left half-applied by a failed start: parameters are restored
//! and attachments undone.
//!
//! # Locking
//! One std `Mutex<State>`, never held across an `.await`; device ioctls are
//! made with it held so that the daemon's view and the module's change
//! together (they are short: the module never sleeps on the fault path).

use crate::config::{BackendKind, Config, OnMissingModule};
use crate::device::{attach_error_text, DevError, Device};
use crate::metrics::{self, DaemonCounters};
use crate::proto::{
    self, EngineParams, ErrorReply, ModuleInfo, ProcessInfo, Reply, Request, Response, Stats,
    VersionInfo,
};
use crate::userspace::{self, Userspace};
use anyhow::{anyhow, Context};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::watch;

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_UNAVAILABLE: i32 = 69;
pub const EXIT_NOPERM: i32 = 77;
pub const EXIT_CONFIG: i32 = 78;

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Attach attempts per pid before the daemon stops trying (and says so).
const MAX_ATTACH_TRIES: u32 = 3;
/// Longest request line accepted on the control socket.
const MAX_REQUEST: usize = 4096;

/// Why an attachment exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    Config,
    Pattern,
    All,
    Ctl,
    /// Attached by someone else (a DeepUM-style runtime, another tool).
    Other,
}

impl Reason {
    fn as_str(self) -> &'static str {
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
    fn ours(self) -> bool {
        self != Reason::Other
    }
}

#[derive(Clone, Debug)]
struct Attachment {
    comm: String,
    reason: Reason,
}

struct State {
    cfg: Config,
    patterns: Vec<regex::Regex>,
    /// The parameters the daemon applies (config, then prescientctl set).
    desired: EngineParams,
    up: bool,
    /// The module was seen at least once (a later absence is an unload).
    seen: bool,
    module: Option<ModuleInfo>,
    stats: Stats,
    attached: BTreeMap<i32, Attachment>,
    failed: HashMap<i32, u32>,
    daemon: DaemonCounters,
    last_poll_error: Option<String>,
    /// Set (under the lock) when shutdown has begun: from then on nothing
    /// attaches, so the scan and poll tasks still running cannot re-attach
    /// what `detach_ours` has just detached.
    shutting_down: bool,
}

pub struct Service {
    config_path: PathBuf,
    dev: Device,
    started: Instant,
    st: Mutex<State>,
    stop: watch::Sender<Option<i32>>,
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn process_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn cmdline(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    Some(parts.join(" "))
}

/// Processes with /dev/nvidia-uvm open, except ourselves.
fn uvm_processes() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|f| std::fs::read_link(f.path()).is_ok_and(|l| l.as_os_str() == "/dev/nvidia-uvm"))
        {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

fn module_info(v: &prescient_uapi::Version) -> ModuleInfo {
    ModuleInfo {
        abi_version: v.abi_version,
        driver_version: proto::driver_version_string(v.driver_version),
        bound: v.flags & prescient_uapi::VERSION_FLAG_BOUND != 0,
        enabled: v.flags & prescient_uapi::VERSION_FLAG_ENABLED != 0,
        max_processes: v.max_spaces,
    }
}

/// An error reply of class `kind` (see `ErrorReply`).
pub(crate) fn error(kind: &str, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply {
        kind: kind.into(),
        message: message.into(),
    })
}

fn dev_error(e: &DevError) -> Response {
    match e {
        DevError::Missing { .. } => error("unavailable", e.to_string()),
        DevError::Permission(_) => error("permission", e.to_string()),
        DevError::Refused { .. } | DevError::Declined { .. } => error("invalid", e.to_string()),
    }
}

impl Service {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug; the state itself is
        // always consistent between statements, so keep serving.
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn shutdown(&self, code: i32) {
        let _ = self.stop.send(Some(code));
    }

    fn uptime(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Attaches `pid` for `reason`; records it. The error is a sentence.
    fn attach_locked(&self, s: &mut State, pid: i32, reason: Reason) -> Result<(), String> {
        if s.shutting_down {
            return Err(format!("pid {pid}: prescientd is shutting down"));
        }
        match self.dev.attach_pid(pid) {
            Ok(_) => {
                tracing::info!(pid, comm = %comm(pid), reason = reason.as_str(), "attached");
                s.attached.insert(
                    pid,
                    Attachment {
                        comm: comm(pid),
                        reason,
                    },
                );
                s.failed.remove(&pid);
                Ok(())
            }
            Err(e) => {
                s.daemon.attach_failures += 1;
                Err(attach_error_text(pid, &e))
            }
        }
    }

    /// The module answered after being absent (or for the first time):
    /// bring it to the desired state.
    fn on_module_up(&self, s: &mut State) {
        let v = match self.dev.version() {
            Ok(v) => v,
            Err(_) => return,
        };
        s.module = Some(module_info(&v));
        let current = self.dev.params().map(|p| EngineParams::from_abi(&p));
        if current.as_ref().ok() != Some(&s.desired) {
            match self.dev.set_params(&s.desired.to_abi()) {
                Ok(()) => tracing::info!(params = ?s.desired, "parameters applied"),
                Err(e) => tracing::error!("applying parameters to the module: {e}"),
            }
        }
        if s.seen {
            s.daemon.module_reconnects += 1;
            tracing::info!(
                "{} is back (nvidia-uvm {}); parameters re-applied",
                self.dev.needs(),
                proto::driver_version_string(v.driver_version)
            );
        }
        s.seen = true;
        s.up = true;
    }

    /// One statistics poll, and the reconciliation that follows from it.
    fn poll(&self) {
        let mut s = self.lock();
        if s.shutting_down {
            return;
        }
        s.daemon.polls += 1;
        match self.dev.stats() {
            Ok(raw) => {
                if !s.up {
                    self.on_module_up(&mut s);
                }
                s.last_poll_error = None;
                let stats = Stats::from_abi(&raw, self.uptime());
                // Ours that the module no longer has: exited, or lost in a reload.
                let ours: Vec<(i32, Reason)> = s
                    .attached
                    .iter()
                    .filter(|(pid, _)| !stats.processes.iter().any(|p| p.pid == **pid))
                    .map(|(pid, a)| (*pid, a.reason))
                    .collect();
                for (pid, reason) in ours {
                    if reason.ours() && process_exists(pid) {
                        if let Err(e) = self.attach_locked(&mut s, pid, reason) {
                            tracing::warn!("re-attaching: {e}");
                            s.attached.remove(&pid);
                        }
                    } else {
                        tracing::info!(pid, "process exited; the module detached it");
                        s.attached.remove(&pid);
                    }
                }
                for p in &stats.processes {
                    s.attached.entry(p.pid).or_insert_with(|| Attachment {
                        comm: comm(p.pid),
                        reason: Reason::Other,
                    });
                }
                s.stats = stats;
            }
            Err(e @ DevError::Missing { .. }) => {
                s.daemon.poll_errors += 1;
                if s.up || !s.seen && s.last_poll_error.is_none() {
                    tracing::warn!(
                        "{}: {e}; {}",
                        self.dev.path().display(),
                        match s.cfg.on_missing_module {
                            OnMissingModule::Wait =>
                                "waiting for it (on_missing_module = \"wait\")",
                            OnMissingModule::Exit => "exiting (on_missing_module = \"exit\")",
                        }
                    );
                }
                s.last_poll_error = Some(e.to_string());
                s.up = false;
                s.stats.backend_up = false;
                if s.cfg.on_missing_module == OnMissingModule::Exit {
                    self.shutdown(EXIT_UNAVAILABLE);
                }
            }
            Err(e @ DevError::Permission(_)) => {
                tracing::error!("{}: {e}", self.dev.path().display());
                s.up = false;
                self.shutdown(EXIT_NOPERM);
            }
            Err(e) => {
                s.daemon.poll_errors += 1;
                let msg = e.to_string();
                if s.last_poll_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("polling {}: {msg}", self.dev.path().display());
                }
                s.last_poll_error = Some(msg);
            }
        }
    }

    /// Attaches processes found by pattern or because they use the GPU.
    fn scan(&self) {
        let (all, patterns, up) = {
            let s = self.lock();
            (s.cfg.attach.all_uvm_processes, s.patterns.clone(), s.up)
        };
        if !up || (!all && patterns.is_empty()) {
            return;
        }
        for pid in uvm_processes() {
            let mut s = self.lock();
            if s.shutting_down {
                return;
            }
            if s.attached.contains_key(&pid)
                || s.failed.get(&pid).copied().unwrap_or(0) >= MAX_ATTACH_TRIES
            {
                continue;
            }
            let reason = if all {
                Reason::All
            } else {
                match cmdline(pid) {
                    Some(c) if patterns.iter().any(|p| p.is_match(&c)) => Reason::Pattern,
                    _ => continue,
                }
            };
            if let Err(e) = self.attach_locked(&mut s, pid, reason) {
                let n = s.failed.entry(pid).or_insert(0);
                *n += 1;
                if *n == MAX_ATTACH_TRIES {
                    tracing::warn!("giving up on attaching: {e}");
                } else {
                    tracing::debug!("attach failed, will retry: {e}");
                }
            }
        }
        // Forget failures of processes that are gone.
        self.lock().failed.retain(|pid, _| process_exists(*pid));
    }

    fn handle(&self, req: Request, peer: Peer) -> Response {
        let peer_uid = peer.uid;
        if let Request::Mark { dead, ranges } = req {
            // Not under the service lock: an alive mark waits for the
            // process's backend thread.
            return self.mark(peer.pid, dead, &ranges);
        }
        if req.mutates() && peer_uid != Some(0) {
            return error(
                "permission",
                format!(
                    "this request changes prescient's state and needs root (your uid is {})",
                    peer_uid
                        .map(|u| u.to_string())
                        .unwrap_or_else(|| "unknown".into())
                ),
            );
        }
        let mut s = self.lock();
        match req {
            Request::Version => Response::Ok(Reply::Version(VersionInfo {
                daemon: VERSION.into(),
                protocol: proto::PROTOCOL_VERSION,
                module: self.dev.version().ok().map(|v| module_info(&v)),
            })),
            Request::Status => Response::Ok(Reply::Status(proto::Status {
                daemon_version: VERSION.into(),
                backend: self.dev.kind().into(),
                backend_up: s.up,
                module: if s.up { s.module.clone() } else { None },
                params: s.desired,
                module_params: self.dev.params().ok().map(|p| EngineParams::from_abi(&p)),
                config_path: self.config_path.display().to_string(),
                uptime_s: self.uptime(),
                attached: s
                    .attached
                    .iter()
                    .map(|(pid, a)| ProcessInfo {
                        pid: *pid,
                        comm: a.comm.clone(),
                        reason: a.reason.as_str().into(),
                    })
                    .collect(),
            })),
            Request::Stats => match self.dev.stats() {
                Ok(raw) => Response::Ok(Reply::Stats(Stats::from_abi(&raw, self.uptime()))),
                Err(e) => dev_error(&e),
            },
            Request::GetParams => match self.dev.params() {
                Ok(p) => Response::Ok(Reply::Params(EngineParams::from_abi(&p))),
                Err(DevError::Missing { .. }) => Response::Ok(Reply::Params(s.desired)),
                Err(e) => dev_error(&e),
            },
            Request::SetParams { changes } => {
                if changes.is_empty() {
                    return error("invalid", "nothing to set");
                }
                let old = self
                    .dev
                    .params()
                    .map(|p| EngineParams::from_abi(&p))
                    .unwrap_or(s.desired);
                let new = changes.apply(&old);
                if let Err((key, msg)) = new.check() {
                    return error("invalid", format!("{key}: {msg}"));
                }
                if !s.up {
                    return error(
                        "unavailable",
                        format!("{} is not loaded: nothing changed (the daemon applies its config when it appears)", self.dev.needs()),
                    );
                }
                match self.dev.set_params(&new.to_abi()) {
                    Ok(()) => {
                        tracing::info!(?old, ?new, "parameters set by prescientctl");
                        s.desired = new;
                        Response::Ok(Reply::ParamsChanged { old, new })
                    }
                    Err(e) => dev_error(&e),
                }
            }
            Request::Reset => match self.dev.reset_tables() {
                Ok(()) => {
                    tracing::info!("tables reset by prescientctl");
                    Response::Ok(Reply::Done {
                        message: "correlation tables cleared".into(),
                    })
                }
                Err(e) => dev_error(&e),
            },
            Request::Attach { pid } => {
                if pid <= 0 || !process_exists(pid) {
                    return error("not-found", format!("pid {pid}: no such process"));
                }
                if !s.up {
                    return error("unavailable", format!("{} is not loaded", self.dev.needs()));
                }
                match self.attach_locked(&mut s, pid, Reason::Ctl) {
                    Ok(()) => Response::Ok(Reply::Done {
                        message: format!("attached pid {pid} ({})", comm(pid)),
                    }),
                    Err(m) => error("invalid", m),
                }
            }
            Request::Mark { .. } => error("internal", "mark handled above"),
            Request::Detach { pid } => {
                if pid <= 0 {
                    return error("not-found", format!("pid {pid}: no such process"));
                }
                match self.dev.detach_pid(pid) {
                    Ok(()) => {
                        s.attached.remove(&pid);
                        tracing::info!(pid, "detached by prescientctl");
                        Response::Ok(Reply::Done {
                            message: format!("detached pid {pid}"),
                        })
                    }
                    Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::ESRCH)) => {
                        s.attached.remove(&pid);
                        error("not-found", format!("pid {pid} is not attached"))
                    }
                    Err(e) => dev_error(&e),
                }
            }
        }
    }

    /// A process's own dead/alive marks (marks.rs); `pid` is the peer's,
    /// from SO_PEERCRED, so a process marks only its own memory.
    fn mark(&self, pid: Option<i32>, dead: bool, ranges: &[[u64; 2]]) -> Response {
        let Some(pid) = pid.filter(|p| *p > 0) else {
            return error(
                "permission",
                "mark: the sender's pid is unknown (SO_PEERCRED); marks are taken only from the process they are about",
            );
        };
        let blocks = match crate::marks::block_ranges(dead, ranges) {
            Ok(b) => b,
            Err(m) => return error("invalid", format!("mark: {m}")),
        };
        match self.dev.mark(pid, dead, blocks) {
            Ok(a) => Response::Ok(Reply::Marked(a)),
            Err(e) if e.errno() == Some(libc::ENOENT) => error("not-found", format!("mark: {e}")),
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
                error("unavailable", format!("mark: {e}"))
            }
            Err(e) => dev_error(&e),
        }
    }

    /// SIGHUP: the new file replaces the running config only if it is valid
    /// and its parameters are accepted by the module.
    fn reload(&self) {
        let new = match Config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => {
                self.lock().daemon.reloads_failed += 1;
                tracing::error!("config reload refused, keeping the running configuration: {e}");
                return;
            }
        };
        if let Some((i, pid)) = new
            .attach
            .pids
            .iter()
            .enumerate()
            .find(|(_, p)| !process_exists(**p))
        {
            self.lock().daemon.reloads_failed += 1;
            tracing::error!(
                "config reload refused, keeping the running configuration: attach.pids[{i}]: process {pid} does not exist"
            );
            return;
        }
        let mut s = self.lock();
        for (what, changed) in [
            ("device", new.device != s.cfg.device),
            ("control", new.control != s.cfg.control),
            ("metrics", new.metrics != s.cfg.metrics),
        ] {
            if changed {
                tracing::warn!(
                    "config reload: [{what}] changed; it takes effect at the next restart"
                );
            }
        }
        let params = new.engine.params();
        if params != s.desired && s.up {
            if let Err(e) = self.dev.set_params(&params.to_abi()) {
                s.daemon.reloads_failed += 1;
                tracing::error!("config reload refused by the module, nothing changed: {e}");
                return;
            }
            tracing::info!(?params, "config reload: parameters applied");
        }
        s.desired = params;
        s.patterns = compile(&new);
        // Pids the config no longer names are detached; new ones attached.
        let drop: Vec<i32> = s
            .attached
            .iter()
            .filter(|(pid, a)| a.reason == Reason::Config && !new.attach.pids.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in drop {
            let _ = self.dev.detach_pid(pid);
            s.attached.remove(&pid);
        }
        if s.up {
            for pid in new.attach.pids.clone() {
                if !s.attached.contains_key(&pid) {
                    if let Err(e) = self.attach_locked(&mut s, pid, Reason::Config) {
                        tracing::error!("config reload: attach.pids: {e}");
                    }
                }
            }
        }
        s.cfg = new;
        s.daemon.reloads_ok += 1;
        tracing::info!("config reloaded from {}", self.config_path.display());
    }

    /// Starts shutdown: detaches what the daemon attached and stops all
    /// further attaching. The module keeps its parameters.
    fn detach_ours(&self) {
        let mut s = self.lock();
        s.shutting_down = true;
        let ours: Vec<i32> = s
            .attached
            .iter()
            .filter(|(_, a)| a.reason.ours())
            .map(|(p, _)| *p)
            .collect();
        for pid in ours {
            match self.dev.detach_pid(pid) {
                Ok(()) => tracing::info!(pid, "detached"),
                Err(e) => tracing::debug!(pid, "detach at shutdown: {e}"),
            }
            s.attached.remove(&pid);
        }
    }

    fn metrics_text(&self) -> Result<String, prometheus::Error> {
        let s = self.lock();
        let attached: Vec<ProcessInfo> = s
            .attached
            .iter()
            .map(|(pid, a)| ProcessInfo {
                pid: *pid,
                comm: a.comm.clone(),
                reason: a.reason.as_str().into(),
            })
            .collect();
        metrics::render(&metrics::View {
            daemon_version: VERSION,
            up: s.up,
            module: if s.up { s.module.as_ref() } else { None },
            params: &s.desired,
            stats: &s.stats,
            attached: &attached,
            daemon: s.daemon,
        })
    }
}

fn compile(c: &Config) -> Vec<regex::Regex> {
    // Validated when the config was loaded.
    c.attach
        .cmdline_patterns
        .iter()
        .filter_map(|p| regex::Regex::new(p).ok())
        .collect()
}

/// Binds a Unix socket of the line protocol (`what` names it in errors:
/// "control.socket", "--marks-socket"): creates a missing parent directory,
/// refuses if another daemon answers on it, removes a stale file otherwise,
/// and sets `mode`.
pub fn bind_socket(path: &Path, mode: u32, what: &str) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("{what}: creating {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(anyhow!(
                "{what}: another prescientd is running (it answers on {})",
                path.display()
            ));
        }
        std::fs::remove_file(path)
            .with_context(|| format!("{what}: removing stale {}", path.display()))?;
    }
    let l =
        UnixListener::bind(path).with_context(|| format!("{what}: binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("{what}: chmod {}", path.display()))?;
    Ok(l)
}

/// Who is on the other end of a control connection (SO_PEERCRED).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    pub uid: Option<u32>,
    pub pid: Option<i32>,
}

async fn serve_client(svc: Arc<Service>, stream: UnixStream) {
    serve_connection(stream, move |req, peer| svc.handle(req, peer)).await
}

/// Serves one connection of the line protocol: a JSON request per line, a
/// JSON response line each; `handler` runs on a blocking thread.
pub async fn serve_connection<H>(stream: UnixStream, handler: H)
where
    H: Fn(Request, Peer) -> Response + Clone + Send + Sync + 'static,
{
    let peer = stream
        .peer_cred()
        .ok()
        .map(|c| Peer {
            uid: Some(c.uid()),
            pid: c.pid(),
        })
        .unwrap_or_default();
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // At most MAX_REQUEST + 1 bytes per line: a longer one is refused
        // and the connection closed (memory stays bounded).
        let n = match (&mut rd)
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let too_long = n > MAX_REQUEST && buf.last() != Some(&b'\n');
        let resp = if too_long {
            error(
                "invalid",
                format!("request longer than {MAX_REQUEST} bytes"),
            )
        } else {
            match serde_json::from_slice::<Request>(&buf) {
                Ok(req) => {
                    let h = handler.clone();
                    tokio::task::spawn_blocking(move || h(req, peer))
                        .await
                        .unwrap_or_else(|e| error("internal", e.to_string()))
                }
                Err(e) => error("invalid", format!("bad request: {e}")),
            }
        };
        let mut out = serde_json::to_string(&resp).unwrap_or_else(|e| {
            format!("{{\"error\":{{\"kind\":\"internal\",\"message\":\"{e}\"}}}}")
        });
        out.push('\n');
        if wr.write_all(out.as_bytes()).await.is_err() || too_long {
            break;
        }
    }
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
    let metrics_listener = if cfg.metrics.enabled {
        // validate() checked the address.
        let addr = match cfg.metrics_addr() {
            Ok(a) => a,
            Err(e) => {
                tracing::error!("config: {e}");
                return EXIT_CONFIG;
            }
        };
        match TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!("metrics.listen = {addr}: {e}");
                return EXIT_FAILURE;
            }
        }
    } else {
        None
    };
    let control = match bind_socket(
        &cfg.control.socket,
        cfg.control.socket_mode,
        "control.socket",
    ) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e:#}");
            return EXIT_FAILURE;
        }
    };
    let socket_path = cfg.control.socket.clone();
    let code = start(cfg, config_path, metrics_listener, control).await;
    let _ = std::fs::remove_file(&socket_path);
    code
}

async fn start(
    cfg: Config,
    config_path: PathBuf,
    metrics_listener: Option<TcpListener>,
    control: UnixListener,
) -> i32 {
    let dev = match cfg.backend {
        BackendKind::Module => Device::new(&cfg.device),
        BackendKind::Userspace => Device::userspace(Userspace::new(userspace::Settings {
            gpu_memory_bytes: cfg.userspace.gpu_memory.0,
            workers: cfg.userspace.workers as usize,
            queue_entries: cfg.userspace.queue_entries,
            gate: cfg.userspace.gate,
            regret_window: cfg.userspace.regret_window,
            stats_interval: Duration::from_millis(cfg.poll_interval_ms.min(500)),
        })),
    };
    let (stop, mut stopped) = watch::channel(None);
    let svc = Arc::new(Service {
        config_path,
        dev,
        started: Instant::now(),
        st: Mutex::new(State {
            patterns: compile(&cfg),
            desired: cfg.engine.params(),
            up: false,
            seen: false,
            module: None,
            stats: Stats::default(),
            attached: BTreeMap::new(),
            failed: HashMap::new(),
            daemon: DaemonCounters::default(),
            last_poll_error: None,
            shutting_down: false,
            cfg: cfg.clone(),
        }),
        stop,
    });

    // The module now: apply parameters and configured attachments, or undo.
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
            if let Err(code) = apply_at_start(&svc, &cfg) {
                return code;
            }
        }
        Err(e @ DevError::Permission(_)) => {
            tracing::error!("{}: {e}", cfg.device.display());
            return EXIT_NOPERM;
        }
        Err(e @ DevError::Missing { .. }) => match cfg.on_missing_module {
            OnMissingModule::Exit => {
                tracing::error!(
                    "{}: {e}; exiting (on_missing_module = \"exit\"). {}",
                    svc.dev.path().display(),
                    match cfg.backend {
                        BackendKind::Module =>
                            "Load it with `insmod prescient.ko` or `modprobe prescient`",
                        BackendKind::Userspace => "Load the NVIDIA driver (nvidia_uvm) first",
                    }
                );
                return EXIT_UNAVAILABLE;
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
            return EXIT_FAILURE;
        }
    }

    // Poller.
    let p = svc.clone();
    let poll_every = Duration::from_millis(cfg.poll_interval_ms);
    let scan_every = Duration::from_millis(cfg.attach.scan_interval_ms);
    tokio::spawn(async move {
        let mut t = tokio::time::interval(poll_every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            let p2 = p.clone();
            let _ = tokio::task::spawn_blocking(move || p2.poll()).await;
        }
    });
    // Scanner.
    let sc = svc.clone();
    tokio::spawn(async move {
        let mut t = tokio::time::interval(scan_every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            let s2 = sc.clone();
            let _ = tokio::task::spawn_blocking(move || s2.scan()).await;
        }
    });
    // Control socket.
    let cs = svc.clone();
    tokio::spawn(async move {
        loop {
            match control.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(serve_client(cs.clone(), stream));
                }
                Err(e) => {
                    tracing::warn!("control socket accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    // Metrics.
    if let Some(l) = metrics_listener {
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
    // Signals.
    use tokio::signal::unix::{signal, SignalKind};
    let (mut hup, mut term, mut int) = match (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => {
            tracing::error!("cannot install signal handlers");
            svc.detach_ours();
            return EXIT_FAILURE;
        }
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
    let code = loop {
        tokio::select! {
            _ = hup.recv() => {
                let r = svc.clone();
                let _ = tokio::task::spawn_blocking(move || r.reload()).await;
            }
            _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break EXIT_OK; }
            _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break EXIT_OK; }
            r = stopped.changed() => {
                if r.is_err() { break EXIT_FAILURE; }
                if let Some(c) = *stopped.borrow() { break c; }
            }
        }
    };
    let d = svc.clone();
    let _ = tokio::task::spawn_blocking(move || d.detach_ours()).await;
    tracing::info!(code, "prescientd stopped");
    code
}

/// Applies the config's parameters and pids; on any failure restores the
/// module's previous parameters and undoes the attachments made.
fn apply_at_start(svc: &Service, cfg: &Config) -> Result<(), i32> {
    let mut s = svc.lock();
    let before = svc.dev.params().ok();
    let want = cfg.engine.params();
    let restore = |s: &mut State| {
        let ours: Vec<i32> = s.attached.keys().copied().collect();
        for pid in ours {
            let _ = svc.dev.detach_pid(pid);
        }
        s.attached.clear();
        if let Some(b) = before {
            let _ = svc.dev.set_params(&b);
        }
    };
    if before.map(|b| EngineParams::from_abi(&b)) != Some(want) {
        match svc.dev.set_params(&want.to_abi()) {
            Ok(()) => tracing::info!(params = ?want, "parameters applied"),
            Err(e @ DevError::Permission(_)) => {
                tracing::error!("{}: SET_PARAMS: {e}", cfg.device.display());
                return Err(EXIT_NOPERM);
            }
            Err(e) => {
                tracing::error!("[engine]: the module refused the parameters: {e}");
                return Err(EXIT_CONFIG);
            }
        }
    }
    for (i, pid) in cfg.attach.pids.iter().enumerate() {
        if let Err(e) = svc.attach_locked(&mut s, *pid, Reason::Config) {
            tracing::error!("config: attach.pids[{i}]: {e}; undoing what was applied");
            restore(&mut s);
            return Err(EXIT_FAILURE);
        }
    }
    if let Ok(v) = svc.dev.version() {
        s.module = Some(module_info(&v));
    }
    s.up = true;
    s.seen = true;
    Ok(())
}
