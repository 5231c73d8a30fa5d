//! The service's user-space backend (`backend = "userspace"`): what
//! prescient.ko does, done from prescientd for hosts that cannot load a
//! module. Each attached process gets its own thread running [`run`]
//! (process.rs: tools event tracker in, engine, UVM_MIGRATE out); this type
//! implements [`Backend`] as the module client does (version, parameters,
//! statistics, attach, detach), so the service, prescientctl and /metrics
//! work the same with either backend.
//!
//! The folder: `process.rs` (the loop), `policy.rs` and `pump.rs` (what it
//! decides), `residency.rs`, `migrator.rs`, `discard.rs` and `snapshot.rs`
//! (what it keeps and does), `config.rs` and `mode.rs` (what it is told),
//! and the loop's own state machines `gate.rs`, `backoff.rs`, with
//! `blocklog.rs` and `marks.rs`.
//!
//! Differences from the module, by construction:
//! - parameters apply to processes attached after the change (a running
//!   engine keeps the tables it has learnt); transparent mode only, since an
//!   unmodified process reports no execution ids;
//! - the driver's events show faults, not accesses to resident memory, so
//!   `prefetches_used` and `late_prefetches` are not known here and stay 0;
//! - RESET_TABLES is refused (EOPNOTSUPP): detach and attach again instead.
//!
//! # Locking
//! One `Mutex<Inner>`; a process's thread never takes it (it publishes into
//! its own `Mutex<Snapshot>`), so detaching (which joins the thread) under
//! the lock cannot deadlock.

mod ahead;
pub mod alive;
pub mod backoff;
pub mod blocklog;
mod config;
mod discard;
pub(crate) mod execfeed;
pub mod gate;
mod jobqueue;
mod lanes;
pub mod marks;
mod mechanism;
mod migrator;
mod mode;
pub mod oracle;
mod policy;
mod process;
mod pump;
mod ranges;
mod residency;
mod route;
pub mod series;
mod shared;
mod snapshot;
mod state;

pub use ahead::AheadStats;
pub use config::{own_table_defaults, Config, GpuBudgets, Settings};
pub use mechanism::{Hist, Mechanism};
pub use mode::{ExecIds, FaultSource, PolicyMode};
pub use oracle::{OracleConfig, OracleStats};
pub use process::run;
pub use shared::SharedStats;
pub use snapshot::Snapshot;

use crate::backend::{refused, Backend, DevError, MarkFrom};
use crate::pidfd::Pidfd;
use config::blocks_of;
use prescient_core::{Params, BLOCK_SHIFT};
use prescient_uapi as uapi;
use prescient_uapi::control::Applied;
use prescient_uvm::ioctl as uvm;
use prescient_uvm::{Claim, Session};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

struct Space {
    /// Held while attached: no second daemon acts for this process.
    _claim: Option<Claim>,
    handle: u64,
    pid: i32,
    /// The process itself: marks are taken only from it (marks.rs).
    target: Option<Arc<Pidfd>>,
    stop: Arc<AtomicBool>,
    snap: Arc<Mutex<Snapshot>>,
    /// The process's dead/alive marks, to its thread (marks.rs).
    marks: marks::Sender,
    thread: Option<JoinHandle<anyhow::Result<Snapshot>>>,
}

impl Space {
    fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
    /// Stops the thread and waits for it (it checks `stop` every loop
    /// turn); returns the process's final counters.
    fn stop(&mut self) -> Snapshot {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(s)) => return s,
                Ok(Err(e)) => tracing::warn!(pid = self.pid, "user-space backend: {e:#}"),
                Err(_) => tracing::error!(pid = self.pid, "user-space backend thread panicked"),
            }
        }
        self.snap.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

struct Inner {
    params: uapi::ParamsAbi,
    spaces: Vec<Space>,
    next_handle: u64,
    /// Pids being attached now (the lock is not held across an attach).
    attaching: Vec<i32>,
    /// Counters of processes no longer attached: the totals stay monotonic
    /// (Prometheus counters), as the module's do.
    retired: uapi::StatsHead,
    /// Per-GPU budgets for processes attached from now on.
    gpu_budgets: GpuBudgets,
}

impl Inner {
    fn retire(&mut self, mut sp: Space) {
        let s = sp.stop();
        add_counters(&mut self.retired, &s);
    }
}

/// Adds one process's counters to a head of totals.
fn add_counters(h: &mut uapi::StatsHead, s: &Snapshot) {
    let blocks = |bytes: u64| bytes >> BLOCK_SHIFT;
    h.faults_seen += s.fault_blocks;
    h.blocks_prefetched += blocks(s.prefetch_bytes);
    h.pre_evictions += blocks(s.evict_bytes);
    h.queue_drops += s.dropped_events;
    h.migrate_errors += s.prefetch_errors + s.evict_errors;
    h.discards += s.discarded_blocks;
    h.populated += s.alive_populated_blocks;
}

pub struct Userspace {
    settings: Settings,
    inner: Mutex<Inner>,
}

/// Engine parameters under the ABI's: transparent mode, sized from the
/// residency budget (`Params::for_budget`), or from the GPU's memory when
/// there is none (0). The loop (process.rs) sizes its engine the same way.
fn base_params(gpu_memory_bytes: u64, budget: u64) -> Params {
    config::base_params((budget > 0).then_some(budget), blocks_of(gpu_memory_bytes))
}

/// nvidia_uvm's version encoded as the module reports it
/// (major << 32 | minor << 16 | patch).
fn encode_version(v: &str) -> u64 {
    let mut it = v.trim().split('.').map(|x| x.parse::<u64>().unwrap_or(0));
    let (a, b, c) = (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    );
    (a << 32) | ((b & 0xffff) << 16) | (c & 0xffff)
}

/// A process claimed and attached, ready for its loop to start.
struct Opened {
    claim: Claim,
    session: Session,
}

impl Userspace {
    pub fn new(settings: Settings) -> Userspace {
        let p = base_params(settings.gpu_memory_bytes, 0);
        Userspace {
            settings,
            inner: Mutex::new(Inner {
                params: uapi::ParamsAbi::from_engine(
                    &p,
                    16,
                    prescient_core::DEFAULT_WATERMARK_PCT,
                    0,
                    true,
                ),
                spaces: Vec::new(),
                next_handle: 1,
                attaching: Vec::new(),
                retired: uapi::StatsHead::default(),
                gpu_budgets: GpuBudgets::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver's version, refused when unknown. No nvidia_uvm is
    /// "missing", as an unloaded prescient.ko is for the module backend.
    fn driver(&self) -> Result<String, DevError> {
        if !std::path::Path::new("/sys/module/nvidia_uvm").exists() {
            return Err(DevError::Missing {
                needs: "nvidia_uvm",
                err: io::Error::new(io::ErrorKind::NotFound, "no /sys/module/nvidia_uvm"),
            });
        }
        prescient_uvm::driver_version()
            .map_err(|e| refused("driver", libc::EPROTONOSUPPORT, format!("{e:#}")))
    }

    /// Drops processes whose thread has ended (the target exited), as the
    /// module's worker does.
    fn reap(inner: &mut Inner) {
        while let Some(i) = inner.spaces.iter().position(Space::finished) {
            let sp = inner.spaces.remove(i);
            tracing::debug!(pid = sp.pid, "user-space backend: target gone");
            inner.retire(sp);
        }
    }

    /// Refuses `pid` when it is attached already or no slot is free.
    fn check_free(inner: &Inner, pid: i32) -> Result<(), DevError> {
        if inner.spaces.iter().any(|s| s.pid == pid) || inner.attaching.contains(&pid) {
            return Err(refused(
                "ATTACH",
                libc::EEXIST,
                format!("pid {pid} is already attached"),
            ));
        }
        if inner.spaces.len() + inner.attaching.len() >= uapi::MAX_SPACES {
            return Err(refused(
                "ATTACH",
                libc::ENOSPC,
                format!("every slot is in use ({} processes)", uapi::MAX_SPACES),
            ));
        }
        Ok(())
    }

    /// Claims `pid`, attaches to its /dev/nvidia-uvm and opens its tracker.
    /// No waiting: the service attaches processes that run CUDA already.
    fn open(&self, pid: i32) -> Result<Opened, DevError> {
        let claim =
            Claim::take(pid).map_err(|e| refused("ATTACH", libc::EBUSY, format!("{e:#}")))?;
        let session = Session::open(
            pid,
            Duration::ZERO,
            self.settings.queue_entries,
            FaultSource::Faults.events(),
            |_| {},
        )
        .map_err(|e| attach_error(pid, e))?;
        Ok(Opened { claim, session })
    }

    /// Starts the loop of an opened process under the parameters `p` and
    /// the per-GPU budgets `gpus`.
    fn start(
        &self,
        pid: i32,
        o: Opened,
        p: uapi::ParamsAbi,
        gpus: &GpuBudgets,
    ) -> Result<Space, DevError> {
        let snap = Arc::new(Mutex::new(Snapshot {
            pid,
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (marks_tx, marks_rx) = marks::channel();
        let Opened { claim, session } = o;
        let target = session
            .target
            .pidfd
            .try_clone()
            .map(|fd| Arc::new(Pidfd::from_fd(pid, fd)))
            .ok();
        let discard = uvm::discard_supported(&session.driver_version);
        let cfg = Config::for_service(&self.settings, p, gpus, snap.clone(), marks_rx, discard);
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("prescient-{pid}"))
            .spawn(move || run(session, cfg, stop2))
            .map_err(|e| DevError::Refused {
                op: "ATTACH",
                err: e,
            })?;
        Ok(Space {
            _claim: Some(claim),
            handle: 0,
            pid,
            target,
            stop,
            snap,
            marks: marks_tx,
            thread: Some(thread),
        })
    }
}

impl Backend for Userspace {
    fn kind(&self) -> &'static str {
        "userspace"
    }

    fn needs(&self) -> &'static str {
        "nvidia_uvm"
    }

    fn title(&self) -> &'static str {
        "the user-space backend"
    }

    fn path(&self) -> &Path {
        Path::new("/dev/nvidia-uvm")
    }

    fn version(&self) -> Result<uapi::Version, DevError> {
        let v = self.driver()?;
        let enabled = self.lock().params.enabled == 1;
        Ok(uapi::Version {
            abi_version: uapi::ABI_VERSION,
            flags: uapi::VERSION_FLAG_BOUND
                | if enabled {
                    uapi::VERSION_FLAG_ENABLED
                } else {
                    0
                },
            max_spaces: uapi::MAX_SPACES as u32,
            reserved0: 0,
            driver_version: encode_version(&v),
        })
    }

    fn params(&self) -> Result<uapi::ParamsAbi, DevError> {
        Ok(self.lock().params)
    }

    fn set_params(&self, p: &uapi::ParamsAbi) -> Result<(), DevError> {
        if p.mode != uapi::MODE_TRANSPARENT {
            return Err(refused(
                "SET_PARAMS",
                libc::EINVAL,
                "mode: the user-space backend runs transparent mode only (an unmodified process reports no execution ids)".into(),
            ));
        }
        p.to_engine(&base_params(
            self.settings.gpu_memory_bytes,
            p.residency_budget_bytes,
        ))
        .map_err(|e| refused("SET_PARAMS", libc::EINVAL, e.to_string()))?;
        self.lock().params = *p;
        Ok(())
    }

    fn reset_tables(&self) -> Result<(), DevError> {
        Err(refused(
            "RESET_TABLES",
            libc::EOPNOTSUPP,
            "the user-space backend cannot reset a running engine's tables; detach and attach the process again".into(),
        ))
    }

    fn loop_values(&self) -> Vec<crate::backend::LoopValues> {
        let inner = self.lock();
        inner
            .spaces
            .iter()
            .map(|sp| {
                let mut s = sp.snap.lock().map(|g| g.clone()).unwrap_or_default();
                s.pid = sp.pid;
                series::values(&s)
            })
            .collect()
    }

    fn gpu_lanes(&self) -> Vec<prescient_uapi::control::GpuLane> {
        let inner = self.lock();
        let mut out = Vec::new();
        for sp in &inner.spaces {
            if let Ok(s) = sp.snap.lock() {
                out.extend(s.gpus.iter().map(|g| prescient_uapi::control::GpuLane {
                    pid: sp.pid,
                    ..g.clone()
                }));
            }
        }
        out
    }

    /// Takes the per-GPU sizes of `budget` (its each-GPU size is the
    /// parameters' `residency_budget_bytes`, set apart); every size must be
    /// whole 2 MB blocks.
    fn set_gpu_budgets(
        &self,
        budget: &prescient_units::GpuBudget,
        indices: &[(String, u32)],
    ) -> Result<(), DevError> {
        if let Some(b) = budget
            .gpus
            .iter()
            .map(|(_, b)| *b)
            .find(|b| !crate::config::budget_ok(*b))
        {
            return Err(refused(
                "SET_GPU_BUDGET",
                libc::EINVAL,
                format!("a GPU's budget of {b} bytes is not whole 2 MiB blocks"),
            ));
        }
        self.lock().gpu_budgets = GpuBudgets {
            budget: prescient_units::GpuBudget {
                each: None,
                gpus: budget.gpus.clone(),
            },
            indices: indices.to_vec(),
        };
        Ok(())
    }

    fn stats(&self) -> Result<uapi::Stats, DevError> {
        self.driver()?;
        let mut inner = self.lock();
        Self::reap(&mut inner);
        let mut st = uapi::Stats {
            head: inner.retired,
            ..Default::default()
        };
        let blocks = |bytes: u64| bytes >> BLOCK_SHIFT;
        for (i, sp) in inner.spaces.iter().enumerate().take(uapi::MAX_SPACES) {
            let s = sp.snap.lock().map(|g| g.clone()).unwrap_or_default();
            let errors = s.prefetch_errors + s.evict_errors;
            st.spaces[i] = uapi::SpaceStats {
                handle: sp.handle,
                pid: sp.pid as u64,
                faults: s.fault_blocks,
                prefetched: blocks(s.prefetch_bytes),
                resident_blocks: s.resident_blocks,
                pre_evictions: blocks(s.evict_bytes),
                discards: s.discarded_blocks,
                migrate_errors: errors,
                populated: s.alive_populated_blocks,
                gpu: uapi::GPU_UNKNOWN,
                ..Default::default()
            };
            add_counters(&mut st.head, &s);
            st.head.n_spaces += 1;
        }
        let p = inner.params;
        if let Ok(e) = p.to_engine(&base_params(
            self.settings.gpu_memory_bytes,
            p.residency_budget_bytes,
        )) {
            st.head.table_bytes = (e.storage_words() * 8) as u64 * st.head.n_spaces as u64;
        }
        Ok(st)
    }

    fn attach_pid(&self, pid: i32) -> Result<u64, DevError> {
        // Unknown drivers are refused here, before the claim and any ioctl.
        self.driver()?;
        let (params, gpus) = {
            let mut inner = self.lock();
            Self::reap(&mut inner);
            Self::check_free(&inner, pid)?;
            inner.attaching.push(pid);
            (inner.params, inner.gpu_budgets.clone())
        };
        // Not under the lock: the attach makes ioctls on the target's fds,
        // which must not stall stats, marks and other attaches.
        let started = self
            .open(pid)
            .and_then(|o| self.start(pid, o, params, &gpus));
        let mut inner = self.lock();
        inner.attaching.retain(|p| *p != pid);
        let mut space = started?;
        let handle = inner.next_handle;
        inner.next_handle += 1;
        space.handle = handle;
        inner.spaces.push(space);
        Ok(handle)
    }

    /// Hands a process's own dead/alive mark to its loop's thread; an
    /// alive mark returns once applied (marks.rs). The lock is not held
    /// while waiting.
    fn mark(&self, m: MarkFrom<'_>) -> Result<Applied, DevError> {
        let pid = m.peer.pid.unwrap_or(0);
        let (tx, target) = {
            let mut inner = self.lock();
            Self::reap(&mut inner);
            match inner.spaces.iter().find(|s| s.pid == pid) {
                Some(sp) => (sp.marks.clone(), sp.target.clone()),
                None => {
                    return Err(refused(
                        "MARK",
                        libc::ENOENT,
                        format!(
                        "pid {pid} is not attached (attach it first: its marks go to its backend)"
                    ),
                    ))
                }
            }
        };
        let Some(target) = target else {
            return Err(refused(
                "MARK",
                libc::EPERM,
                format!("pid {pid}: no pidfd of the attached process; marks refused"),
            ));
        };
        marks::check_peer(m.peer, &target).map_err(|e| refused("MARK", libc::EPERM, e))?;
        marks::send(&tx, m.owner, m.dead, m.blocks, m.populate).map_err(|e| match e {
            marks::SendError::Busy(b) => refused("MARK", libc::EBUSY, b),
            marks::SendError::Gone => refused("MARK", libc::ENOENT, e.to_string()),
        })
    }

    fn detach_pid(&self, pid: i32) -> Result<(), DevError> {
        let mut inner = self.lock();
        let Some(i) = inner.spaces.iter().position(|s| s.pid == pid) else {
            return Err(refused(
                "DETACH",
                libc::ENOENT,
                format!("pid {pid} is not attached"),
            ));
        };
        let sp = inner.spaces.remove(i);
        inner.retire(sp);
        Ok(())
    }
}

impl Drop for Userspace {
    fn drop(&mut self) {
        for s in self.lock().spaces.iter_mut() {
            let _ = s.stop();
        }
    }
}

/// An attach failure as the module would report it: the errno that
/// `attach_error_text` reads, with the backend's own sentence.
#[cold]
fn attach_error(pid: i32, e: anyhow::Error) -> DevError {
    let io = e
        .chain()
        .find_map(|c| c.downcast_ref::<io::Error>())
        .and_then(|x| x.raw_os_error());
    let text = format!("{e:#}");
    match io {
        Some(libc::ESRCH) => refused("ATTACH", libc::ESRCH, text),
        Some(libc::EPERM | libc::EACCES) => refused("ATTACH", libc::EPERM, text),
        _ if text.contains("no /dev/nvidia-uvm fd") => refused("ATTACH", libc::ENOENT, text),
        _ => refused("ATTACH", libc::EINVAL, format!("pid {pid}: {text}")),
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range per mark reads best in tests
mod tests {
    use super::*;
    use std::time::Duration;

    fn us() -> Userspace {
        Userspace::new(Settings {
            gpu_memory_bytes: 8 << 30,
            gpu_memory: Vec::new(),
            workers: 1,
            queue_entries: 1 << 12,
            gate: true,
            regret_window: true,
            footprints: true,
            host_shared: true,
            stats_interval: Duration::from_millis(100),
        })
    }

    #[test]
    fn a_process_that_ends_keeps_its_counts_in_the_totals() {
        let u = us();
        let mut inner = u.lock();
        let done = Snapshot {
            fault_blocks: 10,
            prefetch_bytes: 3 << BLOCK_SHIFT,
            evict_bytes: 2 << BLOCK_SHIFT,
            dropped_events: 1,
            prefetch_errors: 1,
            discarded_blocks: 4,
            alive_populated_blocks: 5,
            ..Default::default()
        };
        let d2 = done.clone();
        inner.spaces.push(Space {
            _claim: None,
            handle: 1,
            pid: 42,
            target: None,
            stop: Arc::new(AtomicBool::new(false)),
            snap: Arc::new(Mutex::new(Snapshot::default())),
            marks: marks::channel().0,
            thread: Some(std::thread::spawn(move || Ok(d2))),
        });
        while !inner.spaces[0].finished() {
            std::thread::yield_now();
        }
        Userspace::reap(&mut inner);
        assert!(inner.spaces.is_empty());
        let h = inner.retired;
        assert_eq!(
            (h.faults_seen, h.blocks_prefetched, h.pre_evictions),
            (10, 3, 2)
        );
        assert_eq!((h.queue_drops, h.migrate_errors, h.n_spaces), (1, 1, 0));
        assert_eq!((h.discards, h.populated), (4, 5));
    }

    #[test]
    fn marks_go_to_the_process_thread_and_only_to_an_attached_one() {
        let u = us();
        let me = std::process::id() as i32;
        let owner = Arc::default();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let peer = {
            let _e = rt.enter();
            crate::socket::Peer::of(&tokio::net::UnixStream::from_std(a).unwrap())
        };
        let mark = |dead, blocks| MarkFrom {
            peer: &peer,
            owner: &owner,
            dead,
            blocks,
            populate: true,
        };
        let e = u.mark(mark(true, vec![1..2])).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(e.to_string().contains("not attached"), "{e}");
        let (tx, rx) = marks::channel();
        let thread = std::thread::spawn(move || {
            // Applies one alive mark, as the backend loop does, then ends.
            let m = loop {
                if let Some(m) = rx.next() {
                    break m;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            assert!(!m.dead && rx.gate().pending() == 1);
            rx.gate().close(m.gate.unwrap());
            Ok(Snapshot::default())
        });
        u.lock().spaces.push(Space {
            _claim: None,
            handle: 1,
            pid: me,
            target: Some(Arc::new(Pidfd::open(me).unwrap())),
            stop: Arc::new(AtomicBool::new(false)),
            snap: Arc::new(Mutex::new(Snapshot::default())),
            marks: tx,
            thread: Some(thread),
        });
        assert_eq!(u.mark(mark(false, vec![1..4])).unwrap().blocks, 3);
        // The thread has ended: the next alive mark cannot be applied.
        while !u.lock().spaces[0].finished() {
            std::thread::yield_now();
        }
        assert!(u.mark(mark(false, vec![1..4])).is_err());
    }

    #[test]
    fn versions_encode_as_the_module_reports_them() {
        assert_eq!(encode_version("580.159.04"), (580 << 32) | (159 << 16) | 4);
        assert_eq!(encode_version("565.57"), (565 << 32) | (57 << 16));
    }

    #[test]
    fn parameters_are_validated_and_kept() {
        let u = us();
        let mut p = u.params().unwrap();
        p.assoc = 4;
        p.succs = 2;
        u.set_params(&p).unwrap();
        assert_eq!(u.params().unwrap().assoc, 4);
        let mut bad = p;
        bad.rows = 3;
        assert_eq!(u.set_params(&bad).unwrap_err().errno(), Some(libc::EINVAL));
        let mut exec = p;
        exec.mode = uapi::MODE_EXEC_ID;
        let e = u.set_params(&exec).unwrap_err().to_string();
        assert!(e.contains("transparent mode only"), "{e}");
        // Refused requests changed nothing.
        assert_eq!(u.params().unwrap(), p);
    }

    #[test]
    fn detach_of_an_unknown_pid_and_reset_are_clear_refusals() {
        let u = us();
        assert_eq!(u.detach_pid(12345).unwrap_err().errno(), Some(libc::ENOENT));
        let e = u.reset_tables().unwrap_err().to_string();
        assert!(e.contains("detach and attach"), "{e}");
    }

    #[test]
    fn without_nvidia_uvm_the_backend_is_missing_not_broken() {
        if std::path::Path::new("/sys/module/nvidia_uvm").exists() {
            return; // a GPU host: covered by the H200 run instead
        }
        let u = us();
        assert!(matches!(u.stats(), Err(DevError::Missing { .. })));
        assert!(matches!(u.version(), Err(DevError::Missing { .. })));
        assert!(matches!(u.attach_pid(1), Err(DevError::Missing { .. })));
    }
}
