//! The user-space backend loop: tools events in, engine in the middle,
//! UVM_MIGRATE out (prefetch to the GPU, pre-evict to the CPU), UVM_DISCARD
//! for blocks the process marked dead (marks.rs).

use crate::attach::{Event, Target, Tracker};
use crate::backoff::{self, Backoff};
use crate::blocklog::{self, BlockLog};
use crate::gate::{self, Gate, MajorFaults};
use crate::marks::{self, Mark};
use crate::uvm;
use prescient_core::{Engine, Mode, Params, Prefetch, Victim, BLOCK_BYTES, BLOCK_SHIFT};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyMode {
    /// Engine-driven prefetch and pre-eviction under the budget.
    Prescient,
    /// No prefetch; evict the oldest-resident block when over the budget.
    DriverLike,
    /// Count events only; issue nothing.
    Observe,
}

/// Where the engine's faults come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultSource {
    /// GPU_FAULT events (exact, but the driver's per-fault tools cost is high).
    Faults,
    /// MIGRATION events only: a fault-driven migration to the GPU (cause
    /// coherence or driver prefetch) stands for a fault on its block.
    Migrations,
    /// GPU_FAULT events only, no MIGRATION events: the ledger then knows only
    /// our own commands, so no budget can be enforced.
    FaultsOnly,
}

pub struct Config {
    pub fault_source: FaultSource,
    pub mode: PolicyMode,
    pub budget: Option<u64>,
    pub duration: Option<Duration>,
    pub stats_json: Option<std::path::PathBuf>,
    pub stats_interval: Duration,
    pub workers: usize,
    pub async_migrate: bool,
    pub max_coalesce_blocks: u64,
    /// The prediction window's depth follows the rate of regretted victims
    /// (core engine.rs, `set_regret_window`); it matters only under a budget.
    pub regret_window: bool,
    /// The engine's prediction window in blocks, instead of the one
    /// `base_params` derives (1/8 of the budget or the GPU).
    pub window_blocks: Option<u32>,
    pub gpu_blocks: u32,
    /// Self back-off (None: always prefetch).
    pub backoff: Option<backoff::Params>,
    /// Tracker gate: events off during the process's CPU phases (None:
    /// always on). Used only when prefetching with GPU_FAULT and MIGRATION
    /// events and no residency budget (see gate.rs).
    pub gate: Option<gate::Params>,
    /// Table parameters set through the service (rows, assoc, succs,
    /// lookahead; transparent mode only), on top of `Params::for_gpu`.
    pub engine: Option<prescient_uapi::ParamsAbi>,
    /// Where the service reads this process's counters: replaced with a
    /// fresh snapshot every `stats_interval` and at the end.
    pub publish: Option<Arc<Mutex<Snapshot>>>,
    /// Dead and alive marks from the process (marks.rs); None: none come.
    pub marks: Option<Receiver<Mark>>,
    /// Discard dead victims with UVM_DISCARD (the driver has it: 580+);
    /// otherwise they are evicted like live ones.
    pub discard: bool,
    /// Log every block decision and movement here (blocklog.rs).
    pub block_log: Option<std::path::PathBuf>,
}

#[derive(Default)]
struct Counters {
    prefetch_ops: AtomicU64,
    prefetch_bytes: AtomicU64,
    prefetch_errors: AtomicU64,
    prefetch_busy_ns: AtomicU64,
    evict_ops: AtomicU64,
    evict_bytes: AtomicU64,
    evict_errors: AtomicU64,
    evict_busy_ns: AtomicU64,
    dropped_jobs: AtomicU64,
}

#[derive(Serialize, Default, Clone)]
pub struct Snapshot {
    pub pid: i32,
    pub mode: Option<PolicyMode>,
    pub fault_source: Option<FaultSource>,
    pub driver_version: String,
    pub gpu_uuid: String,
    pub budget_bytes: Option<u64>,
    pub elapsed_s: f64,
    /// Wall-clock time of this snapshot (Unix seconds), to line samples up
    /// with a workload's own timestamps.
    pub unix_s: f64,
    pub events: u64,
    pub fault_events: u64,
    pub fault_blocks: u64,
    pub migration_events: u64,
    pub other_events: u64,
    pub migrated_to_gpu_bytes: u64,
    pub migrated_to_cpu_bytes: u64,
    pub driver_evictions: u64,
    pub migrations_by_cause: [u64; 8],
    pub dropped_events: u64,
    pub resident_bytes: u64,
    pub resident_blocks: u64,
    pub max_resident_bytes: u64,
    pub prefetch_ops: u64,
    pub prefetch_bytes: u64,
    pub prefetch_errors: u64,
    /// Prefetched bytes / wall time with at least one prefetch ioctl in flight.
    pub prefetch_gbps: f64,
    pub evict_ops: u64,
    pub evict_bytes: u64,
    pub evict_errors: u64,
    pub evict_gbps: f64,
    /// Bytes of user-requested (our UVM_MIGRATE) migrations to the GPU, and
    /// their throughput over the union of their GPU copy intervals
    /// (beginTimeStampGpu..endTimeStampGpu of the migration events).
    pub user_to_gpu_bytes: u64,
    pub user_to_gpu_copy_s: f64,
    pub user_to_gpu_gbps: f64,
    pub dropped_jobs: u64,
    /// Predicted blocks not prefetched because the ledger has them resident.
    pub prefetch_resident: u64,
    /// Prefetch rounds stopped under the budget because every resident block
    /// was predicted.
    pub prefetch_no_room: u64,
    pub engine_faults: u64,
    pub engine_prefetches: u64,
    pub engine_windows: u64,
    pub engine_refaults: u64,
    pub engine_victims: u64,
    pub engine_free_target: u32,
    /// Transparent mode's history: faults it predicted, faults it did not,
    /// and moves of its window elsewhere.
    pub engine_history_hits: u64,
    pub engine_history_misses: u64,
    pub engine_history_jumps: u64,
    /// Victim requests the engine could not fill.
    pub engine_victim_shortfall: u64,
    /// Pre-evicted blocks faulted again soon, and offered again soon
    /// (core `Stats::regrets`, `Stats::regret_offers`).
    pub engine_regrets: u64,
    pub engine_regret_offers: u64,
    /// The history window's depth now, in blocks.
    pub engine_window_blocks: u64,
    /// Blocks the engine has as resident, and blocks it could not track
    /// (its ledger was full: they would be invisible to pre-eviction).
    pub engine_resident_blocks: u32,
    pub engine_ledger_overflow: u64,
    /// Mark requests applied, and the blocks they covered.
    pub mark_requests: u64,
    pub marked_dead_blocks: u64,
    pub marked_alive_blocks: u64,
    /// Dead blocks discarded (UVM_DISCARD, no copy) instead of evicted, the
    /// ioctls that did it, failures (those blocks were evicted instead), and
    /// the backend thread's time in them.
    pub discarded_blocks: u64,
    pub discard_ops: u64,
    pub discard_errors: u64,
    pub discard_s: f64,
    /// Of `discarded_blocks`, those discarded where they were when their dead
    /// mark came (not on the GPU), rather than as victims.
    pub host_discarded_blocks: u64,
    /// Discarded blocks marked alive again, migrated back to the GPU (the
    /// driver copies nothing for discarded pages).
    pub refetched_blocks: u64,
    /// Discarded blocks the GPU faulted on before they were marked alive
    /// or prefetched.
    pub discarded_faulted: u64,
    /// Self back-off counters (absent when disabled).
    pub backoff: Option<backoff::Stats>,
    /// Tracker gate counters (absent when not used). While the gate is
    /// closed no event is seen: the fault counts above then miss the faults
    /// of those periods.
    pub gate: Option<gate::Stats>,
}

#[derive(Clone, Copy)]
struct Job {
    base: u64,
    len: u64,
    to_gpu: bool,
}

impl Job {
    /// `count` 2 MB blocks from block `first`, to the GPU or to the CPU.
    fn blocks(first: u64, count: u64, to_gpu: bool) -> Job {
        Job {
            base: first << BLOCK_SHIFT,
            len: count << BLOCK_SHIFT,
            to_gpu,
        }
    }
}

/// How often a closed gate reads the process's major-fault counter.
const GATE_POLL: Duration = Duration::from_micros(100);

/// Busy-time accounting over parallel workers: time with >= 1 op in flight.
struct Busy {
    inflight: u32,
    since: Instant,
}

fn worker(
    fd: Arc<OwnedFd>,
    rx: Arc<Mutex<Receiver<Job>>>,
    gpu: [u8; 16],
    flags: u32,
    c: Arc<Counters>,
    busy: Arc<[Mutex<Busy>; 2]>,
) {
    loop {
        let job = match rx.lock() {
            Ok(r) => match r.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let k = usize::from(!job.to_gpu);
        if let Ok(mut b) = busy[k].lock() {
            if b.inflight == 0 {
                b.since = Instant::now();
            }
            b.inflight += 1;
        }
        let dest = if job.to_gpu { gpu } else { uvm::CPU_UUID };
        let r = uvm::migrate(fd.as_raw_fd(), job.base, job.len, dest, flags);
        if let Ok(mut b) = busy[k].lock() {
            b.inflight -= 1;
            if b.inflight == 0 {
                let ns = b.since.elapsed().as_nanos() as u64;
                if job.to_gpu {
                    &c.prefetch_busy_ns
                } else {
                    &c.evict_busy_ns
                }
                .fetch_add(ns, Relaxed);
            }
        }
        let (ops, bytes, errs) = if job.to_gpu {
            (&c.prefetch_ops, &c.prefetch_bytes, &c.prefetch_errors)
        } else {
            (&c.evict_ops, &c.evict_bytes, &c.evict_errors)
        };
        match r {
            Ok(()) => {
                ops.fetch_add(1, Relaxed);
                bytes.fetch_add(job.len, Relaxed);
            }
            Err(e) => {
                if errs.fetch_add(1, Relaxed) < 5 {
                    tracing::warn!(
                        base = format!("{:#x}", job.base),
                        len = job.len,
                        to_gpu = job.to_gpu,
                        "UVM_MIGRATE: {e}"
                    );
                }
            }
        }
    }
}

/// GPU residency per 2 MB block, from migration events and our own commands.
#[derive(Default)]
struct Ledger {
    bytes: HashMap<u64, u64>,
    total: u64,
    fifo: VecDeque<u64>,
}

impl Ledger {
    /// Returns true when the block became resident.
    fn add(&mut self, block: u64, b: u64) -> bool {
        let e = self.bytes.entry(block).or_insert(0);
        let was = *e;
        *e = (*e + b).min(BLOCK_BYTES);
        self.total += *e - was;
        if was == 0 && *e > 0 {
            self.fifo.push_back(block);
            return true;
        }
        false
    }
    /// Returns true when the block stopped being resident.
    fn sub(&mut self, block: u64, b: u64) -> bool {
        let Some(e) = self.bytes.get_mut(&block) else {
            return false;
        };
        let was = *e;
        *e = e.saturating_sub(b);
        self.total -= was - *e;
        if *e == 0 {
            self.bytes.remove(&block);
            return was > 0;
        }
        false
    }
    fn get(&self, block: u64) -> u64 {
        self.bytes.get(&block).copied().unwrap_or(0)
    }
    fn blocks(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// The engine's parameters before the service's table settings: transparent
/// mode, sized by the residency budget (`Params::for_budget`: a ledger for
/// the whole GPU) or by the GPU when there is none.
pub(crate) fn base_params(budget: Option<u64>, gpu_blocks: u32) -> Params {
    Params {
        mode: Mode::Transparent,
        ..match budget {
            Some(b) => {
                Params::for_budget((b >> BLOCK_SHIFT).min(u32::MAX as u64) as u32, gpu_blocks)
            }
            None => Params::for_gpu(gpu_blocks),
        }
    }
}

/// The engine's parameters for one attached process: `base_params`, the
/// window override, then the service's table settings; all validated.
fn engine_params(cfg: &Config) -> anyhow::Result<Params> {
    let mut base = base_params(cfg.budget, cfg.gpu_blocks);
    if let Some(w) = cfg.window_blocks {
        base.window_blocks = w;
    }
    let params = match &cfg.engine {
        Some(abi) => abi
            .to_engine(&base)
            .map_err(|e| anyhow::anyhow!("engine parameters: {e}"))?,
        None => base,
    };
    params
        .validate()
        .map_err(|e| anyhow::anyhow!("engine parameters: {e}"))?;
    Ok(params)
}

pub fn run(
    target: Target,
    tracker: Tracker,
    gpu: (u16, [u8; 16]),
    version: String,
    cfg: Config,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Snapshot> {
    let params = engine_params(&cfg)?;
    let mut engine = Engine::new(params, vec![0u64; params.storage_words()])
        .map_err(|e| anyhow::anyhow!("engine: {e}"))?;
    engine.set_regret_window(cfg.regret_window);
    let fd = Arc::new(target.va_fd.try_clone()?);
    let counters = Arc::new(Counters::default());
    let busy = Arc::new([
        Mutex::new(Busy {
            inflight: 0,
            since: Instant::now(),
        }),
        Mutex::new(Busy {
            inflight: 0,
            since: Instant::now(),
        }),
    ]);
    let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(1024);
    let rx = Arc::new(Mutex::new(rx));
    let flags = if cfg.async_migrate {
        uvm::MIGRATE_FLAG_ASYNC
    } else {
        0
    };
    let mut handles = Vec::new();
    if cfg.mode != PolicyMode::Observe {
        for _ in 0..cfg.workers {
            let (fd, rx, c, busy) = (fd.clone(), rx.clone(), counters.clone(), busy.clone());
            handles.push(std::thread::spawn(move || {
                worker(fd, rx, gpu.1, flags, c, busy)
            }));
        }
    }
    let submit = |j: Job| {
        if let Err(TrySendError::Full(_)) = tx.try_send(j) {
            counters.dropped_jobs.fetch_add(1, Relaxed);
        }
    };

    let start = Instant::now();
    let mut snap = Snapshot {
        pid: target.pid,
        mode: Some(cfg.mode),
        fault_source: Some(cfg.fault_source),
        driver_version: version,
        gpu_uuid: uvm::uuid_string(&gpu.1),
        budget_bytes: cfg.budget,
        ..Default::default()
    };
    let mut ledger = Ledger::default();
    // Blocks the ledger had as resident when the gate last opened: maybe
    // still resident, maybe not. Prefetched when predicted (a resident one
    // copies nothing), but never held out by the back-off: a hold-out on a
    // block that is in fact resident would never fault, and count as a
    // wrong prediction (H200 run 8: back-off stopped a PyTorch loop's
    // prefetching that way, watched accuracy 0.15).
    let mut uncertain: HashSet<u64> = HashSet::new();
    // Blocks we discarded (dead, off the GPU with no copy) and that have not
    // come back since: an alive mark migrates them back at once, since a
    // GPU touching a discarded block faults page by page (121-163 ms per
    // 64 MB on the H200, notes/uvm-facts.md).
    let mut discarded: HashSet<u64> = HashSet::new();
    let discard_ok = cfg.discard && cfg.mode == PolicyMode::Prescient;
    let mut refetch: Vec<u64> = Vec::new();
    let mut host_dead: Vec<u64> = Vec::new();
    let mut leaving = Leaving::default();
    let mut last_fault_block = u64::MAX;
    let mut pf = vec![Prefetch::default(); 256];
    let mut vic = vec![Victim::default(); 64];
    let mut blog = match &cfg.block_log {
        Some(p) => {
            BlockLog::create(p).map_err(|e| anyhow::anyhow!("block log {}: {e}", p.display()))?
        }
        None => BlockLog::off(),
    };
    let mut last_write = Instant::now();
    let budget_blocks = cfg.budget.map(|b| b >> BLOCK_SHIFT);
    let mut alive_check = Instant::now();
    // Union of GPU copy intervals of our own migrations to the GPU.
    let (mut iv_start, mut iv_end, mut iv_total) = (0u64, 0u64, 0u64);
    // Not under a residency budget: there, prefetching is how the working
    // set comes back at all, and stopping it costs more than a wrong
    // prediction (H200 run 7, stream under a 4 GiB budget: back-off stopped
    // twice, 10.3 s of 18 s off, 1802 ms/iteration against 991 without it).
    // It exists for the no-pressure case, whose tracker cost the gate removes.
    if cfg.backoff.is_some() && cfg.mode == PolicyMode::Prescient && cfg.budget.is_some() {
        tracing::info!(
            pid = target.pid,
            "self back-off not used under a residency budget"
        );
    }
    let mut backoff = cfg
        .backoff
        .filter(|_| cfg.mode == PolicyMode::Prescient && cfg.budget.is_none())
        .map(|p| Backoff::new(p, Instant::now()));
    let gate_usable = cfg.mode == PolicyMode::Prescient
        && cfg.fault_source == FaultSource::Faults
        && cfg.budget.is_none();
    if cfg.gate.is_some() && !gate_usable {
        tracing::info!(
            pid = target.pid,
            "tracker gate not used: it needs prefetching with fault events and no residency budget"
        );
    }
    let mut gate = match cfg.gate.filter(|_| gate_usable) {
        Some(p) => match MajorFaults::open(target.pid) {
            Ok(m) => Some((Gate::new(p, Instant::now()), m)),
            Err(e) => {
                tracing::warn!(
                    pid = target.pid,
                    "tracker gate not used: /proc/PID/stat: {e}"
                );
                None
            }
        },
        None => None,
    };
    let mut gate_poll = Instant::now();

    loop {
        if stop.load(Relaxed) {
            break;
        }
        if cfg.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if alive_check.elapsed() > Duration::from_millis(100) {
            alive_check = Instant::now();
            if !target.alive() {
                tracing::info!(pid = target.pid, "target exited");
                break;
            }
        }
        let mut faulted = false;
        let n = tracker.drain(1 << 16, |ev| {
            snap.events += 1;
            match ev {
                Event::Fault(f) => {
                    snap.fault_events += 1;
                    if let Some((g, _)) = gate.as_mut() {
                        g.gpu_fault();
                    }
                    let b = f.address >> BLOCK_SHIFT;
                    if b != last_fault_block {
                        last_fault_block = b;
                        // A fault says the block is not resident. Once per
                        // run of faults on one block is enough: `uncertain`
                        // is only refilled on opening the gate, which also
                        // resets `last_fault_block`.
                        uncertain.remove(&b);
                        if discarded.remove(&b) {
                            snap.discarded_faulted += 1;
                        }
                        snap.fault_blocks += 1;
                        if let Some(bo) = backoff.as_mut() {
                            bo.fault(b);
                        }
                        if cfg.mode == PolicyMode::Prescient {
                            let before = blog.on().then(|| engine.stats());
                            engine.fault(b);
                            faulted = true;
                            if let Some(before) = before {
                                blog.fault(b, blocklog::fault_kind(&before, &engine.stats()));
                            }
                        } else {
                            blog.fault(b, '-');
                        }
                        fault_in(&mut ledger, &mut engine, b);
                    }
                }
                Event::Migration(m) => {
                    snap.migration_events += 1;
                    snap.migrations_by_cause[(m.migration_cause & 7) as usize] += 1;
                    let b = m.address >> BLOCK_SHIFT;
                    if cfg.fault_source == FaultSource::Migrations
                        && m.dst_index != uvm::CPU_INDEX
                        && (m.migration_cause == uvm::CAUSE_COHERENCE
                            || m.migration_cause == uvm::CAUSE_PREFETCH)
                        && b != last_fault_block
                    {
                        last_fault_block = b;
                        snap.fault_blocks += 1;
                        if let Some(bo) = backoff.as_mut() {
                            bo.fault(b);
                        }
                        if cfg.mode == PolicyMode::Prescient {
                            engine.fault(b);
                            faulted = true;
                        }
                    }
                    if m.dst_index != uvm::CPU_INDEX {
                        blog.migration(b, true, m.migration_cause);
                        snap.migrated_to_gpu_bytes += m.migrated_bytes;
                        let (b0, b1) = (m.begin_time_stamp_gpu, m.end_time_stamp_gpu);
                        if m.migration_cause == uvm::CAUSE_USER && b0 != 0 && b1 >= b0 {
                            snap.user_to_gpu_bytes += m.migrated_bytes;
                            if b0 > iv_end {
                                iv_total += iv_end - iv_start;
                                (iv_start, iv_end) = (b0, b1);
                            } else {
                                iv_end = iv_end.max(b1);
                            }
                        }
                        apply_migration(&mut ledger, &mut engine, cfg.mode, &m);
                    } else if m.src_index != uvm::CPU_INDEX {
                        blog.migration(b, false, m.migration_cause);
                        snap.migrated_to_cpu_bytes += m.migrated_bytes;
                        if m.migration_cause == uvm::CAUSE_COHERENCE {
                            if let Some((g, _)) = gate.as_mut() {
                                g.cpu_fault_migration();
                            }
                        }
                        if apply_migration(&mut ledger, &mut engine, cfg.mode, &m) {
                            snap.driver_evictions += 1;
                        }
                    }
                }
                Event::Other => snap.other_events += 1,
            }
        });
        if let Some((g, majflt)) = gate.as_mut() {
            let now = Instant::now();
            let action = match g.state() {
                gate::State::Open => g.after_events(|| majflt.read().unwrap_or(0), now),
                gate::State::Closed if now.duration_since(gate_poll) >= GATE_POLL => {
                    gate_poll = now;
                    match majflt.read() {
                        Ok(v) => g.poll_closed(v, now),
                        // The process is gone (or /proc unreadable): open,
                        // the alive check ends the loop.
                        Err(_) => g.open_now(now),
                    }
                }
                gate::State::Closed => gate::Action::None,
            };
            match action {
                gate::Action::None => {}
                gate::Action::Close => {
                    // Events already queued are still read by the next drains.
                    if let Err(e) = tracker.disable() {
                        tracing::warn!(pid = target.pid, "tracker gate: disabling events: {e}");
                        g.failed(now);
                    }
                }
                gate::Action::Open => {
                    if let Err(e) = tracker.enable() {
                        // Nothing is seen from here on: say so, and stop.
                        tracing::error!(pid = target.pid, "tracker gate: re-enabling events: {e}");
                        g.failed(now);
                        break;
                    }
                    // Migrations of the closed period were not seen: what
                    // the ledger says is resident may not be any more.
                    uncertain.clear();
                    for b in std::mem::take(&mut ledger).bytes.into_keys() {
                        engine.evicted(b);
                        uncertain.insert(b);
                    }
                    last_fault_block = u64::MAX;
                }
            }
        }
        if let Some(rx) = cfg.marks.as_ref() {
            // Bounded per turn; the rest wait for the next one.
            for _ in 0..16 {
                let Ok(m) = rx.try_recv() else { break };
                let a = apply_mark(
                    &mut engine,
                    &mut discarded,
                    cfg.mode,
                    &m,
                    &mut host_dead,
                    &mut refetch,
                );
                snap.mark_requests += 1;
                if m.dead {
                    snap.marked_dead_blocks += a.blocks;
                } else {
                    snap.marked_alive_blocks += a.blocks;
                }
                snap.refetched_blocks += a.refetched;
                // Dead data still on the host: discarded there too, now,
                // before the next mark (an alive mark after it must find
                // it done), so that it comes back to the GPU with no copy.
                if discard_ok {
                    let before = snap.discarded_blocks;
                    // A block the driver refuses stays as it is.
                    discard_blocks(
                        fd.as_raw_fd(),
                        &mut host_dead,
                        cfg.max_coalesce_blocks,
                        &mut discarded,
                        &mut snap,
                    );
                    snap.host_discarded_blocks += snap.discarded_blocks - before;
                }
                host_dead.clear();
                // Applied: from here on no discard of these blocks can start.
                // (The refetches are issued below, after making room.)
                if let Some(done) = m.done {
                    let _ = done.send(a);
                }
            }
        }
        snap.max_resident_bytes = snap.max_resident_bytes.max(ledger.total);
        if let Some(bo) = backoff.as_mut() {
            bo.tick(snap.fault_blocks, Instant::now());
        }
        let copy_ns = iv_total + (iv_end - iv_start);
        snap.user_to_gpu_copy_s = copy_ns as f64 / 1e9;
        snap.user_to_gpu_gbps = if copy_ns > 0 {
            snap.user_to_gpu_bytes as f64 / copy_ns as f64
        } else {
            0.0
        };

        match cfg.mode {
            PolicyMode::Observe => {}
            PolicyMode::DriverLike => {
                if let Some(bb) = budget_blocks {
                    while ledger.blocks() > bb {
                        let Some(v) = ledger.fifo.pop_front() else {
                            break;
                        };
                        if ledger.get(v) == 0 {
                            continue;
                        }
                        ledger.sub(v, BLOCK_BYTES);
                        blog.victim(v);
                        submit(Job::blocks(v, 1, false));
                    }
                }
            }
            PolicyMode::Prescient => {
                // Pre-evict down to the budget less the engine's free target.
                let room = budget_blocks.map(|bb| bb.saturating_sub(engine.free_target() as u64));
                if let Some(target_blocks) = room {
                    let mut rounds = 0;
                    while ledger.blocks() > target_blocks && rounds < 16 {
                        rounds += 1;
                        let want = ((ledger.blocks() - target_blocks) as usize).min(vic.len());
                        let k = engine.victims(&mut vic[..want]);
                        if k == 0 {
                            break;
                        }
                        for v in &vic[..k] {
                            take_victim(&mut ledger, &mut engine, v, discard_ok, &mut leaving);
                        }
                    }
                }
                // Discarded blocks marked alive: back to the GPU (no copy),
                // each with room made for it like a prefetch.
                for (s, l) in runs(&mut refetch, cfg.max_coalesce_blocks) {
                    for b in s..s + l {
                        if let Some(limit) = room {
                            // Without room it comes back all the same: it
                            // is about to be used.
                            make_room(&mut ledger, &mut engine, limit, discard_ok, &mut leaving);
                        }
                        if ledger.add(b, BLOCK_BYTES) {
                            engine.migrated_in(b);
                        }
                    }
                    submit(Job::blocks(s, l, true));
                }
                if faulted || engine.chain_state() == prescient_core::ChainState::Running {
                    let k = engine.prefetches(&mut pf);
                    let mut run: Option<(u64, u64)> = None;
                    for p in &pf[..k] {
                        let b = p.block;
                        if ledger.get(b) >= BLOCK_BYTES {
                            snap.prefetch_resident += 1;
                            continue;
                        }
                        if let Some(limit) = room {
                            // Room for each prefetch, one victim at a time,
                            // as the simulator's make_room does: faults count
                            // at once, so the ledger sits at the limit.
                            if !make_room(&mut ledger, &mut engine, limit, discard_ok, &mut leaving)
                            {
                                // Everything resident is predicted.
                                snap.prefetch_no_room += 1;
                                break;
                            }
                        }
                        let was_uncertain = uncertain.remove(&b);
                        discarded.remove(&b);
                        if let Some(bo) = backoff.as_mut() {
                            if !was_uncertain && !bo.admit(b, snap.fault_blocks) {
                                continue;
                            }
                        }
                        if ledger.add(b, BLOCK_BYTES) {
                            engine.migrated_in(b);
                        }
                        blog.prefetch(b);
                        run = match run {
                            Some((s, l)) if s + l == b && l < cfg.max_coalesce_blocks => {
                                Some((s, l + 1))
                            }
                            Some((s, l)) => {
                                submit(Job::blocks(s, l, true));
                                Some((b, 1))
                            }
                            None => Some((b, 1)),
                        };
                    }
                    if let Some((s, l)) = run {
                        submit(Job::blocks(s, l, true));
                    }
                }
                // A victim the driver refuses to discard is evicted.
                let refused = discard_blocks(
                    fd.as_raw_fd(),
                    &mut leaving.dead,
                    cfg.max_coalesce_blocks,
                    &mut discarded,
                    &mut snap,
                );
                leaving.evict.extend(refused);
                for &v in &leaving.evict {
                    blog.victim(v);
                }
                leaving.submit_evictions(cfg.max_coalesce_blocks, &submit);
            }
        }

        if n == 0 && !faulted {
            std::thread::sleep(Duration::from_micros(50));
        }
        if last_write.elapsed() >= cfg.stats_interval {
            last_write = Instant::now();
            fill(&mut snap, &ledger, &engine, &counters, &tracker, start);
            snap.backoff = backoff.as_ref().map(|b| b.stats(Instant::now()));
            snap.gate = gate.as_ref().map(|(g, _)| g.stats(Instant::now()));
            write_stats(&cfg, &snap);
        }
    }
    drop(tx);
    for h in handles {
        let _ = h.join();
    }
    blog.flush();
    tracker.flush();
    tracker.drain(usize::MAX, |_| {});
    fill(&mut snap, &ledger, &engine, &counters, &tracker, start);
    snap.backoff = backoff.as_ref().map(|b| b.stats(Instant::now()));
    snap.gate = gate.as_ref().map(|(g, _)| g.stats(Instant::now()));
    write_stats(&cfg, &snap);
    Ok(snap)
}

/// Applies one migration event to the residency ledger and tells the engine
/// about blocks that entered or left the GPU. Returns true for a block the
/// driver evicted on its fault path.
///
/// Our own migrations (cause "user"; we issue only those) entered or left
/// the ledger when we issued them, so their events are not applied again.
/// They come late: the driver records them on copy completion, through a
/// queue. By then we may have pre-evicted a block we prefetched, or the GPU
/// may have faulted back a block we evicted. Applying them then made the
/// ledger drift from the truth, in both directions:
/// - adding a late prefetch made it count blocks that were gone; the budget
///   looked full and prefetching starved (H200 run 11: stream under a budget
///   slowed to the driver-like speed after 15 iterations);
/// - subtracting a late eviction lost real residency, and the budget stopped
///   being kept (H200 run 6, driver-like).
///
/// In observe mode we issue nothing, so "user" migrations are the process's
/// own and are applied. In driver-like mode we only evict, so only the
/// evictions are skipped. A process's own cudaMemPrefetchAsync has the same
/// cause: in prescient mode it is not counted.
fn apply_migration(
    ledger: &mut Ledger,
    engine: &mut Engine<Vec<u64>>,
    mode: PolicyMode,
    m: &uvm::MigrationV2,
) -> bool {
    let b = m.address >> BLOCK_SHIFT;
    let user = m.migration_cause == uvm::CAUSE_USER;
    if m.dst_index != uvm::CPU_INDEX {
        let ours = user && mode == PolicyMode::Prescient;
        if !ours && ledger.add(b, m.migrated_bytes) {
            engine.migrated_in(b);
        }
        false
    } else if m.src_index != uvm::CPU_INDEX {
        let ours = user && mode != PolicyMode::Observe;
        if ours || !ledger.sub(b, m.migrated_bytes) {
            return false;
        }
        if m.migration_cause == uvm::CAUSE_EVICTION {
            engine.demand_evicted(b);
            true
        } else {
            engine.evicted(b);
            false
        }
    } else {
        false
    }
}

/// A GPU fault on `block`: the driver is about to make it resident, by a
/// migration or, for memory first touched by the GPU (a PyTorch job's
/// weights and activations) or discarded, by populating it on the GPU with
/// no migration at all and so no migration event. Counting it here is what
/// lets a residency budget see that memory: counted from migration events
/// alone, a PyTorch loop's ledger never rose above its 512 MB input, and
/// a 1.5 GB budget on its 2.96 GB was never enforced (H100 run 14). The
/// block's later migration event adds nothing more (a block counts at most
/// 2 MB).
fn fault_in(ledger: &mut Ledger, engine: &mut Engine<Vec<u64>>, block: u64) {
    if ledger.add(block, BLOCK_BYTES) {
        engine.migrated_in(block);
    }
}

/// Victims taken off the ledger in one turn of the loop, waiting to leave
/// the GPU: dead ones (when discarding) for UVM_DISCARD, live ones for
/// eviction by the workers, in runs of consecutive blocks (a 2 MB
/// UVM_MIGRATE to the CPU moves 15 GB/s on the H200; runs amortise its
/// fixed cost, as the prefetches' runs do).
#[derive(Default)]
struct Leaving {
    dead: Vec<u64>,
    evict: Vec<u64>,
}

impl Leaving {
    /// Submits the pending evictions as runs of at most `max` blocks.
    fn submit_evictions(&mut self, max: u64, submit: &dyn Fn(Job)) {
        for (s, l) in runs(&mut self.evict, max) {
            submit(Job::blocks(s, l, false));
        }
    }
}

/// Takes a victim the engine chose off the ledger and queues it in `out`.
fn take_victim(
    ledger: &mut Ledger,
    engine: &mut Engine<Vec<u64>>,
    v: &Victim,
    discard: bool,
    out: &mut Leaving,
) {
    ledger.sub(v.block, BLOCK_BYTES);
    engine.evicted(v.block);
    if v.discard && discard {
        out.dead.push(v.block);
    } else {
        out.evict.push(v.block);
    }
}

/// Room under `limit` for one more block: at the limit, the engine's first
/// victim is taken. False when there is neither room nor a victim (every
/// resident block is predicted).
fn make_room(
    ledger: &mut Ledger,
    engine: &mut Engine<Vec<u64>>,
    limit: u64,
    discard: bool,
    out: &mut Leaving,
) -> bool {
    if ledger.blocks() < limit {
        return true;
    }
    let mut v = [Victim::default()];
    if engine.victims(&mut v) == 0 {
        return false;
    }
    take_victim(ledger, engine, &v[0], discard, out);
    true
}

/// Discards `blocks` (dead; drained) in runs of consecutive blocks,
/// synchronously on this thread (marks.rs says why), and records them in
/// `discarded`. Returns the blocks the driver refused, in order.
fn discard_blocks(
    fd: std::os::fd::RawFd,
    blocks: &mut Vec<u64>,
    max_run: u64,
    discarded: &mut HashSet<u64>,
    snap: &mut Snapshot,
) -> Vec<u64> {
    let mut refused = Vec::new();
    if blocks.is_empty() {
        return refused;
    }
    let t = Instant::now();
    for (s, l) in runs(blocks, max_run) {
        let failed = discard_run(fd, s, l, snap);
        discarded.extend((s..s + l).filter(|b| failed.binary_search(b).is_err()));
        refused.extend(failed);
    }
    snap.discard_s += t.elapsed().as_secs_f64();
    refused
}

/// Applies one dead or alive mark to the engine (prescient mode only).
/// Dead blocks not on the GPU (and not discarded already) are put in
/// `host_dead`: the caller may discard them where they are, before it
/// applies the next mark. Discarded blocks marked alive are put in
/// `refetch`: the caller makes room for them, counts them and migrates them
/// back.
fn apply_mark(
    engine: &mut Engine<Vec<u64>>,
    discarded: &mut HashSet<u64>,
    mode: PolicyMode,
    m: &Mark,
    host_dead: &mut Vec<u64>,
    refetch: &mut Vec<u64>,
) -> marks::Applied {
    let mut a = marks::Applied {
        blocks: m.blocks.iter().map(|r| r.end - r.start).sum(),
        ignored: mode != PolicyMode::Prescient,
        ..Default::default()
    };
    if a.ignored {
        return a;
    }
    for b in m.blocks.iter().flat_map(|r| r.clone()) {
        if m.dead {
            if engine.mark_dead(b) {
                a.resident += 1;
            } else if !discarded.contains(&b) {
                host_dead.push(b);
            }
            continue;
        }
        a.resident += u64::from(engine.mark_alive(b));
        if discarded.remove(&b) {
            a.refetched += 1;
            refetch.push(b);
        }
    }
    a
}

/// Sorts `blocks` and drains them as runs of consecutive blocks
/// (start, count), at most `max` long.
fn runs(blocks: &mut Vec<u64>, max: u64) -> Vec<(u64, u64)> {
    blocks.sort_unstable();
    blocks.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for b in blocks.drain(..) {
        match out.last_mut() {
            Some((s, l)) if *s + *l == b && *l < max.max(1) => *l += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// UVM_DISCARD (with unmap) of blocks `s..s + l`; returns the blocks that
/// could not be discarded, in order. A run that spans two allocations is
/// refused by the driver (one managed range per call): then block by block.
fn discard_run(fd: std::os::fd::RawFd, s: u64, l: u64, snap: &mut Snapshot) -> Vec<u64> {
    let one = |b: u64, n: u64, snap: &mut Snapshot| {
        let r = uvm::discard(
            fd,
            b << BLOCK_SHIFT,
            n << BLOCK_SHIFT,
            uvm::DISCARD_FLAG_UNMAP,
        );
        match r {
            Ok(()) => {
                snap.discard_ops += 1;
                snap.discarded_blocks += n;
            }
            Err(e) if n == 1 => {
                snap.discard_errors += 1;
                if snap.discard_errors <= 5 {
                    tracing::warn!(
                        pid = snap.pid,
                        base = format!("{:#x}", b << BLOCK_SHIFT),
                        "UVM_DISCARD failed: {e}"
                    );
                }
            }
            Err(_) => {}
        }
        r.is_ok()
    };
    if one(s, l, snap) {
        return Vec::new();
    }
    (s..s + l).filter(|&b| l == 1 || !one(b, 1, snap)).collect()
}

/// Bytes per nanosecond (= GB/s) over `busy_ns`, 0 when nothing was timed.
fn gbps(bytes: u64, busy_ns: u64) -> f64 {
    if busy_ns > 0 {
        bytes as f64 / busy_ns as f64
    } else {
        0.0
    }
}

fn fill(
    s: &mut Snapshot,
    l: &Ledger,
    e: &Engine<Vec<u64>>,
    c: &Counters,
    t: &Tracker,
    start: Instant,
) {
    s.elapsed_s = start.elapsed().as_secs_f64();
    s.unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    s.dropped_events = t.dropped();
    s.resident_bytes = l.total;
    s.resident_blocks = l.blocks();
    s.prefetch_ops = c.prefetch_ops.load(Relaxed);
    s.prefetch_bytes = c.prefetch_bytes.load(Relaxed);
    s.prefetch_errors = c.prefetch_errors.load(Relaxed);
    s.prefetch_gbps = gbps(s.prefetch_bytes, c.prefetch_busy_ns.load(Relaxed));
    s.evict_ops = c.evict_ops.load(Relaxed);
    s.evict_bytes = c.evict_bytes.load(Relaxed);
    s.evict_errors = c.evict_errors.load(Relaxed);
    s.evict_gbps = gbps(s.evict_bytes, c.evict_busy_ns.load(Relaxed));
    s.dropped_jobs = c.dropped_jobs.load(Relaxed);
    let st = e.stats();
    s.engine_faults = st.faults;
    s.engine_prefetches = st.prefetches;
    s.engine_windows = st.windows;
    s.engine_refaults = st.refaults;
    s.engine_victims = st.victims_evict + st.victims_discard;
    s.engine_free_target = e.free_target();
    s.engine_history_hits = st.history_hits;
    s.engine_history_misses = st.history_misses;
    s.engine_history_jumps = st.history_jumps;
    s.engine_victim_shortfall = st.victim_shortfall;
    s.engine_regrets = st.regrets;
    s.engine_regret_offers = st.regret_offers;
    s.engine_window_blocks = e.window_depth() as u64;
    s.engine_resident_blocks = e.resident_blocks();
    s.engine_ledger_overflow = st.ledger_overflow;
}

fn write_stats(cfg: &Config, s: &Snapshot) {
    if let Some(p) = &cfg.publish {
        if let Ok(mut g) = p.lock() {
            *g = s.clone();
        }
    }
    let Some(path) = &cfg.stats_json else { return };
    let tmp = path.with_extension("tmp");
    match serde_json::to_vec_pretty(s) {
        Ok(v) => {
            if std::fs::write(&tmp, v)
                .and_then(|_| std::fs::rename(&tmp, path))
                .is_err()
            {
                tracing::warn!(path = %path.display(), "cannot write stats");
            }
        }
        Err(e) => tracing::warn!("stats: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: u16 = 1;
    const B: u64 = 7; // a 2 MB block number

    fn engine() -> Engine<Vec<u64>> {
        let p = Params {
            mode: Mode::Transparent,
            ..Params::for_gpu(64)
        };
        Engine::new(p, vec![0u64; p.storage_words()]).unwrap()
    }

    fn mig(cause: u8, to_gpu: bool, bytes: u64) -> uvm::MigrationV2 {
        let (src, dst) = if to_gpu {
            (uvm::CPU_INDEX, GPU)
        } else {
            (GPU, uvm::CPU_INDEX)
        };
        uvm::MigrationV2 {
            event_type: uvm::EVENT_MIGRATION,
            migration_cause: cause,
            src_index: src,
            dst_index: dst,
            address: B << BLOCK_SHIFT,
            migrated_bytes: bytes,
            ..Default::default()
        }
    }

    #[test]
    fn a_late_event_of_our_own_prefetch_does_not_bring_back_a_block_we_evicted() {
        let (mut l, mut e) = (Ledger::default(), engine());
        // Prefetch issued (the ledger counts it), then pre-evicted again
        // before the prefetch's own event arrived.
        l.add(B, BLOCK_BYTES);
        l.sub(B, BLOCK_BYTES);
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::Prescient,
            &mig(uvm::CAUSE_USER, true, BLOCK_BYTES),
        );
        assert_eq!(l.get(B), 0, "the late prefetch event re-entered the ledger");
        assert_eq!(l.blocks(), 0);
        // The eviction's own late event changes nothing either.
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::Prescient,
            &mig(uvm::CAUSE_USER, false, BLOCK_BYTES),
        );
        assert_eq!(l.blocks(), 0);
    }

    #[test]
    fn a_late_event_of_our_own_eviction_does_not_remove_what_the_gpu_faulted_back() {
        for mode in [PolicyMode::Prescient, PolicyMode::DriverLike] {
            let (mut l, mut e) = (Ledger::default(), engine());
            l.add(B, BLOCK_BYTES);
            l.sub(B, BLOCK_BYTES); // eviction issued
                                   // The GPU faults part of the block back before the eviction's event.
            apply_migration(
                &mut l,
                &mut e,
                mode,
                &mig(uvm::CAUSE_COHERENCE, true, 64 << 10),
            );
            apply_migration(
                &mut l,
                &mut e,
                mode,
                &mig(uvm::CAUSE_USER, false, BLOCK_BYTES),
            );
            assert_eq!(
                l.get(B),
                64 << 10,
                "{mode:?}: residency lost to a late event"
            );
        }
    }

    #[test]
    fn the_drivers_own_migrations_are_applied_and_its_evictions_reported() {
        let (mut l, mut e) = (Ledger::default(), engine());
        let m = PolicyMode::Prescient;
        assert!(!apply_migration(
            &mut l,
            &mut e,
            m,
            &mig(uvm::CAUSE_PREFETCH, true, BLOCK_BYTES)
        ));
        assert_eq!(l.get(B), BLOCK_BYTES);
        assert!(apply_migration(
            &mut l,
            &mut e,
            m,
            &mig(uvm::CAUSE_EVICTION, false, BLOCK_BYTES)
        ));
        assert_eq!(l.blocks(), 0);
        assert_eq!(e.stats().demand_evictions, 1);
    }

    #[test]
    fn observing_counts_the_processs_own_user_migrations() {
        let (mut l, mut e) = (Ledger::default(), engine());
        let m = PolicyMode::Observe;
        apply_migration(&mut l, &mut e, m, &mig(uvm::CAUSE_USER, true, BLOCK_BYTES));
        assert_eq!(l.get(B), BLOCK_BYTES);
        apply_migration(&mut l, &mut e, m, &mig(uvm::CAUSE_USER, false, BLOCK_BYTES));
        assert_eq!(l.blocks(), 0);
    }

    #[test]
    fn driver_like_counts_the_processs_own_prefetches_to_the_gpu() {
        let (mut l, mut e) = (Ledger::default(), engine());
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::DriverLike,
            &mig(uvm::CAUSE_USER, true, BLOCK_BYTES),
        );
        assert_eq!(l.get(B), BLOCK_BYTES);
    }

    fn resident(l: &mut Ledger, e: &mut Engine<Vec<u64>>, blocks: std::ops::Range<u64>) {
        for b in blocks {
            if l.add(b, BLOCK_BYTES) {
                e.migrated_in(b);
            }
        }
    }

    fn mark(dead: bool, blocks: std::ops::Range<u64>) -> Mark {
        Mark {
            dead,
            blocks: vec![blocks],
            done: None,
        }
    }

    #[test]
    fn dead_blocks_are_the_first_victims_and_discarded() {
        let (mut l, mut e) = (Ledger::default(), engine());
        let mut discarded = HashSet::new();
        let mut refetch = Vec::new();
        let mut host_dead = Vec::new();
        resident(&mut l, &mut e, 10..20);
        let a = apply_mark(
            &mut e,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(true, 15..18),
            &mut host_dead,
            &mut refetch,
        );
        assert_eq!((a.blocks, a.resident, a.ignored), (3, 3, false));
        let mut vic = vec![Victim::default(); 4];
        let k = e.victims(&mut vic);
        assert_eq!(k, 4);
        let dead: Vec<u64> = vic[..3].iter().map(|v| v.block).collect();
        assert_eq!(dead, [15, 16, 17]);
        assert!(vic[..3].iter().all(|v| v.discard));
        assert!(!vic[3].discard, "a live block is evicted, not discarded");
        assert!(refetch.is_empty());
    }

    #[test]
    fn a_discarded_block_marked_alive_comes_back_and_a_live_one_stays() {
        let (mut l, mut e) = (Ledger::default(), engine());
        let mut discarded = HashSet::new();
        let mut refetch = Vec::new();
        let mut host_dead = Vec::new();
        resident(&mut l, &mut e, 10..14);
        apply_mark(
            &mut e,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(true, 10..14),
            &mut host_dead,
            &mut refetch,
        );
        // The backend discarded 10 and 11 (as its pre-eviction does).
        for b in [10, 11] {
            l.sub(b, BLOCK_BYTES);
            e.evicted(b);
            discarded.insert(b);
        }
        let a = apply_mark(
            &mut e,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(false, 9..13),
            &mut host_dead,
            &mut refetch,
        );
        // Of 9..13 only 12 was resident; 10 and 11 come back.
        assert_eq!((a.blocks, a.resident, a.refetched), (4, 1, 2));
        assert_eq!(refetch, [10, 11]);
        assert!(discarded.is_empty());
        assert_eq!(
            l.blocks(),
            2,
            "the caller counts refetches once it has room"
        );
        // 13 was not in the alive range: it is the one dead victim left.
        let mut vic = vec![Victim::default(); 8];
        let k = e.victims(&mut vic);
        assert_eq!((vic[0].block, vic[0].discard), (13, true));
        assert!(vic[1..k].iter().all(|v| !v.discard));
    }

    #[test]
    fn dead_blocks_off_the_gpu_are_listed_for_a_discard_where_they_are() {
        let (mut l, mut e) = (Ledger::default(), engine());
        let mut discarded = HashSet::from([32]);
        let (mut host_dead, mut refetch) = (Vec::new(), Vec::new());
        resident(&mut l, &mut e, 30..31);
        let a = apply_mark(
            &mut e,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(true, 30..34),
            &mut host_dead,
            &mut refetch,
        );
        // 30 is resident (a victim later), 32 was discarded already.
        assert_eq!((a.blocks, a.resident), (4, 1));
        assert_eq!(host_dead, [31, 33]);
        // Once discarded, an alive mark brings them back like any other.
        discarded.extend([31, 33]);
        host_dead.clear();
        let a = apply_mark(
            &mut e,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(false, 30..34),
            &mut host_dead,
            &mut refetch,
        );
        assert_eq!(a.refetched, 3);
        assert_eq!(refetch, [31, 32, 33]);
        assert!(host_dead.is_empty());
    }

    #[test]
    fn marks_are_ignored_where_the_driver_is_emulated_or_only_watched() {
        for mode in [PolicyMode::DriverLike, PolicyMode::Observe] {
            let (mut l, mut e) = (Ledger::default(), engine());
            let mut discarded = HashSet::new();
            let mut refetch = Vec::new();
            let mut host_dead = Vec::new();
            resident(&mut l, &mut e, 0..4);
            let a = apply_mark(
                &mut e,
                &mut discarded,
                mode,
                &mark(true, 0..4),
                &mut host_dead,
                &mut refetch,
            );
            assert!(a.ignored);
            let mut vic = vec![Victim::default(); 4];
            let k = e.victims(&mut vic);
            assert!(vic[..k].iter().all(|v| !v.discard), "{mode:?}");
        }
    }

    #[test]
    fn a_gpu_fault_counts_against_the_budget_once() {
        let (mut l, mut e) = (Ledger::default(), engine());
        // First touch by the GPU: a fault, no migration event.
        fault_in(&mut l, &mut e, B);
        assert_eq!((l.blocks(), l.get(B)), (1, BLOCK_BYTES));
        // A migration event for the same block (a CPU-first block) adds nothing.
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::DriverLike,
            &mig(uvm::CAUSE_COHERENCE, true, BLOCK_BYTES),
        );
        fault_in(&mut l, &mut e, B);
        assert_eq!((l.blocks(), l.total), (1, BLOCK_BYTES));
        // It is a victim like any resident block.
        let mut vic = vec![Victim::default(); 2];
        assert_eq!(e.victims(&mut vic), 1);
        assert_eq!(vic[0].block, B);
    }

    /// Faults count their blocks at once, so between two pre-eviction rounds
    /// more blocks than the budget are resident. Every one of them must be
    /// in the engine's ledger, or pre-eviction never sees it: it would stay
    /// resident for good and shrink the budget left to everything else.
    #[test]
    fn blocks_past_the_budget_stay_visible_to_pre_eviction() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Ledger::default();
        // A burst of 40 faults in one turn, five times the budget.
        for b in 0..40 {
            fault_in(&mut l, &mut e, B + b);
        }
        assert_eq!((l.blocks(), e.resident_blocks()), (40, 40));
        assert_eq!(e.stats().ledger_overflow, 0);
        // Pre-eviction brings it back under the budget.
        let mut out = Leaving::default();
        while l.blocks() > 8 {
            assert!(make_room(&mut l, &mut e, 8, false, &mut out));
        }
        assert_eq!((l.blocks(), e.resident_blocks()), (8, 8));
        assert_eq!(out.evict.len(), 32);
    }

    #[test]
    fn runs_coalesce_consecutive_blocks_up_to_the_limit() {
        let mut b = vec![9, 3, 4, 5, 4, 7, 8, 20];
        assert_eq!(runs(&mut b, 16), [(3, 3), (7, 3), (20, 1)]);
        assert!(b.is_empty());
        let mut b: Vec<u64> = (0..5).collect();
        assert_eq!(runs(&mut b, 2), [(0, 2), (2, 2), (4, 1)]);
    }

    #[test]
    fn refused_discards_are_returned_once_and_not_recorded() {
        let mut snap = Snapshot::default();
        let mut discarded = HashSet::new();
        let mut dead = vec![42, 40, 41, 42, 60];
        let refused = discard_blocks(-1, &mut dead, 16, &mut discarded, &mut snap);
        assert_eq!(refused, [40, 41, 42, 60]);
        assert!(dead.is_empty() && discarded.is_empty());
        assert_eq!(snap.discard_errors, 4);
    }

    #[test]
    fn a_failed_discard_hands_every_block_back_for_eviction() {
        let mut snap = Snapshot::default();
        // No such fd: the run fails, then each block; all are returned.
        assert_eq!(discard_run(-1, 40, 3, &mut snap), [40, 41, 42]);
        assert_eq!((snap.discard_errors, snap.discarded_blocks), (3, 0));
        assert_eq!(discard_run(-1, 50, 1, &mut snap), [50]);
        assert_eq!(snap.discard_errors, 4);
    }
    fn config(budget: Option<u64>, window_blocks: Option<u32>) -> Config {
        Config {
            fault_source: FaultSource::Faults,
            mode: PolicyMode::Prescient,
            budget,
            duration: None,
            stats_json: None,
            stats_interval: Duration::from_secs(1),
            workers: 1,
            async_migrate: true,
            max_coalesce_blocks: 16,
            regret_window: false,
            window_blocks,
            gpu_blocks: 4096,
            backoff: None,
            gate: None,
            engine: None,
            publish: None,
            marks: None,
            discard: true,
            block_log: None,
        }
    }

    #[test]
    fn the_window_is_an_eighth_of_the_budget_unless_given() {
        let p = engine_params(&config(Some(1024 * BLOCK_BYTES), None)).unwrap();
        assert_eq!((p.history_window(), p.max_resident_blocks), (128, 4096));
        let p = engine_params(&config(Some(1024 * BLOCK_BYTES), Some(32))).unwrap();
        assert_eq!(p.history_window(), 32);
        // Without a budget: an eighth of the GPU, which also caps a larger one.
        let p = engine_params(&config(None, None)).unwrap();
        assert_eq!(p.history_window(), 512);
        let p = engine_params(&config(None, Some(100_000))).unwrap();
        assert_eq!(p.history_window(), 512);
    }
}
