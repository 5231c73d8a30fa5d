//! What one process's loop carries from turn to turn (`Process`), and how
//! it is set up: the engine, the workers, the block log, the self back-off
//! and the tracker gate.

use super::ahead::Ahead;
use super::alive::Populate;
use super::backoff::Backoff;
use super::blocklog::BlockLog;
use super::config::Config;
use super::execfeed::Feed;
use super::gate::{self, Gate, MajorFaults};
use super::lanes::{Lane, Lanes};
use super::mechanism;
use super::migrator::Migrator;
use super::mode::{ExecIds, FaultSource};
use super::oracle::record::Recorder;
use super::route::Route;
use super::shared::SharedBlocks;
use super::snapshot::Snapshot;
use prescient_core::BLOCK_SHIFT;
use prescient_uvm::ioctl as uvm;
use prescient_uvm::{Gpu, Session};
use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a closed gate reads the process's major-fault counter.
const GATE_POLL: Duration = Duration::from_micros(100);

/// The tracker gate with what drives it: the process's major-fault counter
/// and when a closed gate last read it.
pub(super) struct TrackerGate {
    pub(super) gate: Gate,
    majflt: MajorFaults,
    last_poll: Instant,
}

impl TrackerGate {
    /// The gate for `cfg`, when it is wanted and usable; says why not.
    pub(super) fn open(cfg: &Config, pid: i32) -> Option<TrackerGate> {
        let usable =
            cfg.mode.learns() && cfg.fault_source == FaultSource::Faults && cfg.budget.is_empty();
        if cfg.gate.is_some() && !usable {
            tracing::info!(
                pid,
                "tracker gate not used: it needs prefetching with fault events and no residency budget"
            );
        }
        let p = cfg.gate.filter(|_| usable)?;
        match MajorFaults::open(pid) {
            Ok(majflt) => Some(TrackerGate {
                gate: Gate::new(p, Instant::now()),
                majflt,
                last_poll: Instant::now(),
            }),
            Err(e) => {
                tracing::warn!(pid, "tracker gate not used: /proc/PID/stat: {e}");
                None
            }
        }
    }

    /// What the gate wants done after a drain.
    pub(super) fn action(&mut self, now: Instant) -> gate::Action {
        let g = &mut self.gate;
        match g.state() {
            gate::State::Open => g.after_events(|| self.majflt.read().unwrap_or(0), now),
            gate::State::Closed if now.duration_since(self.last_poll) >= GATE_POLL => {
                self.last_poll = now;
                match self.majflt.read() {
                    Ok(v) => g.poll_closed(v, now),
                    // The process is gone (or /proc unreadable): open,
                    // the alive check ends the loop.
                    Err(_) => g.open_now(now),
                }
            }
            gate::State::Closed => gate::Action::None,
        }
    }
}

/// The union of the GPU copy intervals of our own migrations to the GPU.
#[derive(Default)]
pub(super) struct CopyClock {
    start: u64,
    end: u64,
    total: u64,
}

impl CopyClock {
    /// Adds the interval `b0..b1` (GPU timestamps, in ns, in order).
    pub(super) fn add(&mut self, b0: u64, b1: u64) {
        if b0 > self.end {
            self.total += self.end - self.start;
            (self.start, self.end) = (b0, b1);
        } else {
            self.end = self.end.max(b1);
        }
    }

    /// Nanoseconds covered.
    pub(super) fn ns(&self) -> u64 {
        self.total + (self.end - self.start)
    }
}

/// Everything one process's loop carries from turn to turn.
pub(super) struct Process {
    pub(super) cfg: Config,
    pub(super) fd: Arc<OwnedFd>,
    /// One engine, ledger and budget per GPU the process faults from.
    pub(super) lanes: Lanes,
    /// Blocks we discarded (dead, off the GPU with no copy) and that have
    /// not come back since: an alive mark migrates them back at once, since
    /// a GPU touching a discarded block faults page by page
    /// (notes/uvm-facts.md).
    pub(super) discarded: HashSet<u64>,
    /// Dead blocks off the GPU, to discard where they are.
    pub(super) host_dead: Vec<u64>,
    /// Dead victims may be discarded (the driver can, and we learn marks).
    pub(super) discard_ok: bool,
    pub(super) log: BlockLog,
    pub(super) backoff: Option<Backoff>,
    pub(super) gate: Option<TrackerGate>,
    pub(super) copy: CopyClock,
    pub(super) snap: Snapshot,
    pub(super) migrator: Migrator,
    /// The process's GPUs and each block's destination among them.
    pub(super) route: Route,
    pub(super) start: Instant,
    /// The process's execution-id page, once found (execfeed.rs).
    pub(super) feed: Option<Feed>,
    /// The engine runs in execution-id mode.
    pub(super) exec_mode: bool,
    /// When the page was last looked for.
    pub(super) feed_looked: Instant,
    /// A fault came while the page was not found: look again soon.
    pub(super) feed_missed: bool,
    /// The process's launch ring, once found (`--footprints`, ahead/), and
    /// when it was last looked for.
    pub(super) ahead: Option<Ahead>,
    pub(super) ahead_looked: Option<Instant>,
    /// Its ring is of another format (a runtime of another release): said
    /// once, never looked for again.
    pub(super) ring_foreign: bool,
    /// The process's last GPU fault (the feed asks for ids while they come).
    pub(super) last_fault: Option<Instant>,
    /// The mechanism's counters (mechanism.rs).
    pub(super) mech: mechanism::Tracker,
    /// This turn's fault addresses (the first of a run on a block), for the
    /// oracle's binding of its plan and its cursor (oracle mode only).
    pub(super) turn_faults: Vec<u64>,
    /// This turn's blocks the CPU faulted away from the GPU (oracle mode).
    pub(super) turn_cpu_taken: Vec<u64>,
    /// Blocks the CPU and the GPU take from each other every step, and
    /// those kept in host memory (shared.rs).
    pub(super) shared: SharedBlocks,
    /// `--record-plan`: the run's block sequence.
    pub(super) recorder: Option<Recorder>,
    /// Set by a policy that cannot go on (a plan of another workload):
    /// the loop stops and returns it as its error.
    pub(super) fatal: Option<String>,
}

/// The worker pool `cfg` asks for on `fd`: none in a mode that never
/// migrates (its queue then only fills).
fn migrator_for(fd: Arc<OwnedFd>, cfg: &Config) -> Migrator {
    let flags = migrate_flags(cfg);
    let workers = if cfg.mode.evicts() { cfg.workers } else { 0 };
    let (pw, merge) = (cfg.prefetch_workers, cfg.merge_queued_blocks);
    Migrator::start(fd, flags, workers, pw, merge)
}

impl Process {
    /// Sets up the engine, the workers, the block log, back-off and gate
    /// for the process of `session`.
    pub(super) fn new(session: &Session, cfg: Config) -> anyhow::Result<Process> {
        let (target, gpu) = (&session.target, session.gpu);
        let feed = match cfg.exec_ids {
            ExecIds::Off => None,
            ExecIds::Auto | ExecIds::On => Feed::find(target.pid),
        };
        let exec_mode = cfg.exec_ids == ExecIds::On || feed.is_some();
        let log = match &cfg.block_log {
            Some(p) => BlockLog::create(p)
                .map_err(|e| anyhow::anyhow!("block log {}: {e}", p.display()))?,
            None => BlockLog::off(),
        };
        let fd = Arc::new(target.va_fd.try_clone()?);
        let migrator = migrator_for(fd.clone(), &cfg);
        if log.on() {
            migrator.record_jobs();
        }
        let route = Route::new(target.processor_table()?);
        let gpus = route.table().gpus();
        let mut lanes = Lanes::default();
        match gpus {
            // One GPU: its lane from the start, as the one engine was.
            [only] => lanes.push(Lane::new(*only, cfg.budget_of(only), &cfg, exec_mode)?),
            [] => {}
            _ => {
                let all: Vec<String> = gpus.iter().map(|g| format!("{}={g}", g.index)).collect();
                tracing::info!(
                    pid = target.pid,
                    gpus = all.join(","),
                    "the process's VA space has {} GPUs: each GPU it faults from gets its own engine, ledger and budget, and its blocks are prefetched to it",
                    gpus.len()
                );
            }
        }
        start_populating(&cfg, gpus, &fd);
        let cfg_record = cfg.record_plan.clone();
        let snap = Snapshot {
            pid: target.pid,
            mode: Some(cfg.mode),
            fault_source: Some(cfg.fault_source),
            driver_version: session.driver_version.clone(),
            gpu_uuid: gpu.to_string(),
            budget_bytes: cfg.budget.each,
            exec_mode,
            ..Default::default()
        };
        Ok(Process {
            backoff: open_backoff(&cfg, target.pid),
            gate: TrackerGate::open(&cfg, target.pid),
            discard_ok: cfg.discard && cfg.mode.learns(),
            cfg,
            fd,
            lanes,
            discarded: HashSet::new(),
            host_dead: Vec::new(),
            log,
            copy: CopyClock::default(),
            snap,
            migrator,
            route,
            start: Instant::now(),
            feed,
            exec_mode,
            feed_looked: Instant::now(),
            feed_missed: false,
            ahead: None,
            ahead_looked: None,
            ring_foreign: false,
            last_fault: None,
            mech: mechanism::Tracker::default(),
            turn_faults: Vec::new(),
            turn_cpu_taken: Vec::new(),
            shared: SharedBlocks::default(),
            recorder: cfg_record.map(|path| Recorder::new(target.pid, path)),
            fatal: None,
        })
    }
}

/// Lets alive marks bring discarded blocks back before their reply
/// (alive.rs), where the process has one GPU and discards.
fn start_populating(cfg: &Config, gpus: &[Gpu], fd: &Arc<OwnedFd>) {
    let wanted = cfg.discard && cfg.alive_populate && cfg.mode.learns();
    let (Some(m), [only], true) = (&cfg.marks, gpus, wanted) else {
        return;
    };
    m.gate()
        .set_populate(Some(populate_to(fd.clone(), *only, migrate_flags(cfg))));
}

/// UVM_MIGRATE's flags for `cfg`: the workers' and the populate's.
fn migrate_flags(cfg: &Config) -> u32 {
    if cfg.async_migrate {
        uvm::MIGRATE_FLAG_ASYNC
    } else {
        0
    }
}

/// How an alive mark brings discarded blocks back to `gpu` before its reply
/// (alive.rs): one UVM_MIGRATE, as the workers issue them. Only while the
/// process has one GPU: with several, the lane that counts a block is
/// known to the backend only (`Process::lane` turns it off).
fn populate_to(fd: Arc<OwnedFd>, gpu: Gpu, flags: u32) -> Populate {
    Arc::new(move |first, count| {
        let (base, len) = (first << BLOCK_SHIFT, count << BLOCK_SHIFT);
        uvm::migrate(fd.as_raw_fd(), base, len, gpu.uuid, flags).is_ok()
    })
}

/// Self back-off for `cfg`, when it is wanted and usable. Not under a
/// residency budget: there, prefetching is how the working set comes back
/// at all, and stopping it costs more than a wrong prediction
/// (daemon/README.md, "Measured history"). It exists for the no-pressure
/// case, whose tracker cost the gate removes.
fn open_backoff(cfg: &Config, pid: i32) -> Option<Backoff> {
    if cfg.backoff.is_some() && cfg.mode.learns() && !cfg.budget.is_empty() {
        tracing::info!(pid, "self back-off not used under a residency budget");
    }
    cfg.backoff
        .filter(|_| cfg.mode.learns() && cfg.budget.is_empty())
        .map(|p| Backoff::new(p, Instant::now()))
}
