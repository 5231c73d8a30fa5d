//! The loop that acts for one process: tools events in, the engine in the
//! middle, UVM_MIGRATE out (prefetch to the GPU, pre-evict to the CPU),
//! UVM_DISCARD for blocks the process marked dead (marks.rs).
//!
//! The turns are prescient-uvm's `Session::pump` (the loop `prescientctl
//! record` reads with too). Each turn: drain the events (`on_event`), drive
//! the tracker gate, apply the marks, let the policy (policy.rs) decide what
//! moves, and now and then publish the counters (snapshot.rs).

use super::blocklog;
use super::config::Config;
use super::discard::discard_blocks;
use super::execfeed::{engine_id, ids_wanted, Feed};
use super::gate;
use super::lanes::{apply_mark, Lane};
use super::marks::Discarded;
use super::mode::{ExecIds, FaultSource, PolicyMode};
use super::oracle::{maps, Oracle, OracleConfig};
use super::policy;
use super::residency::apply_migration;
use super::route::Learnt;
use super::shared::Action;
use super::snapshot::{fill, write_stats, Snapshot};
use super::state::Process;
use prescient_core::BLOCK_SHIFT;
use prescient_uapi::control::Applied;
use prescient_uvm::ioctl as uvm;
use prescient_uvm::{Ended, Event, Gpu, Pace, Session, Tracker, Turn, DRAIN_BATCH};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the loop checks that the process is still there, and how long
/// it naps after a turn with no event.
const PACE: Pace = Pace {
    alive_every: Duration::from_millis(100),
    idle_sleep: Duration::from_micros(50),
};
/// How often `--exec-ids on` looks for a page not found yet.
const FEED_LOOK_EVERY: Duration = Duration::from_millis(100);
/// ... and how often once faults come without it: the job is running GPU
/// work, and every fault until the page is found carries no id (the
/// runtime makes the page at its first allocation, before its first copy).
const FEED_LOOK_FAULTING: Duration = Duration::from_millis(1);
/// `UvmEventFaultClientTypeHub`: a non-replayable fault (copy engines).
const CLIENT_TYPE_HUB: u8 = 2;
/// Marks applied per turn; the rest wait for the next one.
const MARKS_PER_TURN: usize = 16;

/// Runs the loop for the process of `session` until `stop`, the configured
/// duration, or the process's exit; returns its final counters.
pub fn run(session: Session, cfg: Config, stop: Arc<AtomicBool>) -> anyhow::Result<Snapshot> {
    let oracle = cfg.oracle.clone();
    let mut p = Process::new(&session, cfg)?;
    let mut policy = for_mode(p.cfg.mode, oracle)?;
    let mut last_write = Instant::now();
    let duration = p.cfg.duration;
    let ended = session.pump(&stop, duration, PACE, |tracker| {
        let mut faulted = false;
        p.read_exec_ids();
        let n = tracker.drain(DRAIN_BATCH, |ev| faulted |= p.on_event(ev));
        if !p.drive_gate(tracker) {
            return Turn::Stop;
        }
        p.apply_marks();
        if p.migrator.counters.gpu_gone.swap(false, Ordering::Relaxed) {
            tracing::warn!(pid = p.snap.pid, "a prefetch's GPU is not in the process's VA space (NV_ERR_INVALID_DEVICE): reading its processor table again");
            p.reread_gpus();
        }
        p.evictions_ended();
        p.try_shared();
        p.tick();
        policy.step(&mut p);
        p.high_water();
        if p.fatal.is_some() {
            return Turn::Stop;
        }
        if last_write.elapsed() >= p.cfg.stats_interval {
            last_write = Instant::now();
            p.publish(tracker);
        }
        if n == 0 && !faulted {
            Turn::Idle
        } else {
            Turn::Busy
        }
    });
    if ended == Ended::TargetExited {
        tracing::info!(pid = session.target.pid, "target exited");
    }
    if let Some(e) = p.fatal.take() {
        p.finish(&session);
        anyhow::bail!("{e}");
    }
    Ok(p.finish(&session))
}

/// The policy `mode` names; the oracle replays `oracle`'s plan (the
/// command line refuses `--mode oracle` without one).
fn for_mode(
    mode: PolicyMode,
    oracle: Option<OracleConfig>,
) -> anyhow::Result<Box<dyn policy::Policy>> {
    Ok(match mode {
        PolicyMode::Observe => Box::new(policy::Observe),
        PolicyMode::DriverLike => Box::new(policy::DriverLike),
        PolicyMode::Prescient => Box::new(policy::Prescient),
        PolicyMode::Oracle => match oracle {
            Some(c) => Box::new(Oracle::new(c)),
            None => anyhow::bail!("--mode oracle needs --plan FILE"),
        },
    })
}

/// CLOCK_MONOTONIC_RAW in ns: the clock of the driver's event timestamps
/// (NV_GETTIME is ktime_get_raw).
fn raw_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Process {
    /// One tools event; true when the engine learnt a fault from it.
    fn on_event(&mut self, ev: Event) -> bool {
        self.snap.events += 1;
        match ev {
            Event::Fault(f) => {
                self.snap.fault_events += 1;
                if f.client_type == CLIENT_TYPE_HUB {
                    self.snap.hub_fault_events += 1;
                    if self.feed.as_ref().is_some_and(|f| f.current().is_some()) {
                        self.snap.hub_fault_events_with_id += 1;
                    }
                }
                if let Some(g) = self.gate.as_mut() {
                    g.gate.gpu_fault();
                }
                let b = f.address >> BLOCK_SHIFT;
                self.mech.fault(&f, b, raw_now_ns());
                match self.learn_gpu(f.gpu_index, b) {
                    Some(gpu) => self.on_gpu_fault(gpu, &f),
                    None => false,
                }
            }
            Event::Migration(m) => self.on_migration(&m),
            Event::Thrashing(t) => {
                self.snap.driver_thrashing_events += 1;
                self.snap.driver_thrashing_bytes += t.size;
                self.log.thrashing(t.address >> BLOCK_SHIFT, t.size);
                false
            }
            Event::Throttling(t, start) => {
                if start {
                    self.snap.driver_throttle_starts += 1;
                } else {
                    self.snap.driver_throttle_ends += 1;
                }
                self.log.throttling(t.address >> BLOCK_SHIFT, start);
                false
            }
            Event::Other => {
                self.snap.other_events += 1;
                false
            }
        }
    }

    /// Processor `index` faulted on block `b` (a fault event, or a
    /// migration to a GPU standing for one): `b`'s prefetches go there
    /// from now on (route.rs); an unknown index reads the table again.
    /// Returns the GPU, None for an index in no table (its fault is
    /// counted, and learnt by no engine: never a guessed GPU).
    fn learn_gpu(&mut self, index: u16, b: u64) -> Option<Gpu> {
        let fd = self.fd.as_raw_fd();
        let generation = self.route.generation();
        let learnt = self
            .route
            .fault(index, b, || prescient_uvm::attach::read_processor_table(fd));
        self.snap.faults_unknown_gpu = self.route.unknown_faults;
        if self.route.generation() != generation {
            self.sync_lanes();
        }
        match learnt {
            Learnt::Gpu(g) => Some(g),
            Learnt::Unknown => None,
        }
    }

    /// Drops the lanes of GPUs that left the table just read.
    fn sync_lanes(&mut self) {
        let table = self.route.table();
        self.lanes.retain_gpus(|g| table.gpu(g.index) == Some(*g));
    }

    /// The lane of `gpu`, made on its first fault; a new lane's engine
    /// starts at the kernel running now (execution-id mode).
    fn lane(&mut self, gpu: Gpu) -> Option<&mut Lane> {
        let current = self.feed.as_ref().and_then(|f| f.current());
        let learns = self.exec_mode && self.cfg.mode.learns();
        let fresh = self.lanes.iter().all(|l| l.gpu != gpu);
        if fresh && self.lanes.len() > 0 {
            // A second GPU: which lane counts a block is the backend's to
            // say, so alive marks leave discarded blocks to its refetch.
            if let Some(m) = &self.cfg.marks {
                m.gate().set_populate(None);
            }
        }
        let lane = self.lanes.get_or_make(gpu, &self.cfg, self.exec_mode)?;
        if let (true, true, Some(id)) = (fresh, learns, current) {
            lane.engine.kernel_start(engine_id(id));
        }
        Some(lane)
    }

    /// A fault of `gpu` at byte address `addr`. A fault says the block is
    /// not resident (on this GPU: it leaves any other's ledger). Once per
    /// run of faults on one block is enough: `uncertain` is only refilled
    /// on opening the gate, which also resets `last_fault_block`.
    fn on_gpu_fault(&mut self, gpu: Gpu, f: &uvm::GpuFaultV2) -> bool {
        let addr = f.address;
        let b = addr >> BLOCK_SHIFT;
        self.lanes.moved_to(gpu.index, b);
        self.shared.gpu_had(b);
        let learns = self.cfg.mode.learns();
        let log_on = learns && self.log.on();
        self.look_on_fault();
        let with_id = self.feed.as_ref().is_some_and(|f| f.current().is_some());
        let Some(lane) = self.lane(gpu) else {
            return false;
        };
        let Some(stats) = lane.fault(b, learns, log_on) else {
            return false;
        };
        if self.discarded.remove(&b) {
            self.snap.discarded_faulted += 1;
            if let Some(m) = &self.cfg.marks {
                m.gate().forget(b);
            }
        }
        self.count_fault(b, with_id);
        match stats {
            Some((x, y)) => self.log.fault(f, blocklog::fault_kind(&x, &y)),
            None if !learns => self.log.fault(f, '-'),
            None => {}
        }
        if let Some(r) = self.recorder.as_mut() {
            r.fault_from(gpu.index, addr);
        }
        if self.cfg.mode == PolicyMode::Oracle {
            self.turn_faults.push(addr);
        }
        learns
    }

    /// A fault while the page is not found: look for it at once (at most
    /// every [`FEED_LOOK_FAULTING`]) and read it, so that this fault gets
    /// the id the page holds already (the faulting kernel's id was written
    /// before it ran). Run 51 looked only at the next turn, and 1-431
    /// faults per run came before the page was found: most likely those
    /// drained in the first turn that had any (the encoder's were 148 in
    /// each of its four runs).
    fn look_on_fault(&mut self) {
        if self.feed.is_none() && self.cfg.exec_ids == ExecIds::On {
            self.feed_missed = true;
            self.read_exec_ids();
        }
    }

    /// Reads the execution-id page (looking for it every
    /// [`FEED_LOOK_EVERY`] until found, with `--exec-ids on`): each new id
    /// starts a kernel in the engine.
    fn read_exec_ids(&mut self) {
        let every = if self.feed_missed {
            FEED_LOOK_FAULTING
        } else {
            FEED_LOOK_EVERY
        };
        if self.feed.is_none()
            && self.cfg.exec_ids == ExecIds::On
            && self.feed_looked.elapsed() >= every
        {
            self.feed_looked = Instant::now();
            self.feed_missed = false;
            self.feed = Feed::find(self.snap.pid);
        }
        let Some(feed) = self.feed.as_mut() else {
            return;
        };
        let since_fault = self.last_fault.map(|t| t.elapsed());
        let want = ids_wanted(since_fault, self.start.elapsed());
        feed.want(want);
        // The launches first: a launch is in the ring before the page can
        // name it (ahead/).
        self.read_ring(want);
        let Some(feed) = self.feed.as_mut() else {
            return;
        };
        let learns = self.exec_mode && self.cfg.mode.learns();
        let (lanes, mut ahead) = (&mut self.lanes, self.ahead.as_mut());
        let shared = &mut self.shared;
        let log = &mut self.log;
        let now = Instant::now();
        // The ids are the process's, not one GPU's: every lane's engine
        // sees each kernel start, and learns the blocks its GPU faults on.
        feed.poll_streams(|stream, id| {
            if learns {
                for l in lanes.iter_mut() {
                    l.engine.kernel_start(engine_id(id));
                }
            }
            if let Some(n) = ahead.as_mut().and_then(|a| a.queue.started(stream, id)) {
                log.kernel(n);
            }
            shared.kernel_start(id, now);
        });
        self.snap.exec_ids_seen = feed.ids_seen;
        self.snap.exec_ids_torn = feed.torn();
    }

    /// Counts a fault on block `b` (a GPU fault, or a migration standing
    /// for one) for the process and hands it to the back-off; `with_id`:
    /// an execution id was known.
    fn count_fault(&mut self, b: u64, with_id: bool) {
        self.snap.fault_blocks += 1;
        self.last_fault = Some(Instant::now());
        if with_id {
            self.snap.faults_with_exec_id += 1;
        } else if self.feed.is_none() {
            self.snap.faults_no_page += 1;
            self.feed_missed = true;
        } else {
            self.snap.faults_before_first_id += 1;
        }
        if let Some(bo) = self.backoff.as_mut() {
            bo.fault(b);
        }
    }

    /// One migration event: residency, counters, and (with
    /// `--fault-source migrations`) the fault it stands for.
    fn on_migration(&mut self, m: &uvm::MigrationV2) -> bool {
        self.snap.migration_events += 1;
        self.snap.migrations_by_cause[(m.migration_cause & 7) as usize] += 1;
        let b = m.address >> BLOCK_SHIFT;
        self.mech.migration(m, b);
        let to_gpu = m.dst_index != uvm::CPU_INDEX;
        if to_gpu {
            self.shared.gpu_had(b);
        } else if m.src_index != uvm::CPU_INDEX && m.migration_cause == uvm::CAUSE_COHERENCE {
            self.shared.cpu_took(b);
        }
        let mut learnt = false;
        if self.cfg.fault_source == FaultSource::Migrations
            && to_gpu
            && (m.migration_cause == uvm::CAUSE_COHERENCE
                || m.migration_cause == uvm::CAUSE_PREFETCH)
        {
            if let Some(gpu) = self.learn_gpu(m.dst_index, b) {
                learnt = self.migration_fault(gpu, b);
            }
        }
        if to_gpu {
            self.log.migration(b, true, m.migration_cause);
            self.snap.migrated_to_gpu_bytes += m.migrated_bytes;
            let (b0, b1) = (m.begin_time_stamp_gpu, m.end_time_stamp_gpu);
            if m.migration_cause == uvm::CAUSE_USER && b0 != 0 && b1 >= b0 {
                self.snap.user_to_gpu_bytes += m.migrated_bytes;
                self.copy.add(b0, b1);
            }
            // Our own prefetches left the other lanes when issued; a late
            // event of one must not take the block from a GPU that faulted
            // on it since (residency.rs says why our events come late).
            let ours = m.migration_cause == uvm::CAUSE_USER && self.cfg.mode.prefetches();
            if !ours {
                self.lanes.moved_to(m.dst_index, b);
            }
            let (mode, gpu) = (self.cfg.mode, self.route.table().gpu(m.dst_index));
            if let Some(l) = gpu.and_then(|g| self.lane(g)) {
                apply_migration(&mut l.residency, &mut l.engine, mode, m);
            }
        } else if m.src_index != uvm::CPU_INDEX {
            self.log.migration(b, false, m.migration_cause);
            self.snap.migrated_to_cpu_bytes += m.migrated_bytes;
            if m.migration_cause == uvm::CAUSE_COHERENCE {
                if let Some(g) = self.gate.as_mut() {
                    g.gate.cpu_fault_migration();
                }
                if self.cfg.mode == PolicyMode::Oracle {
                    self.turn_cpu_taken.push(b);
                }
            }
            let mode = self.cfg.mode;
            if let Some(l) = self.lanes.at(m.src_index) {
                if apply_migration(&mut l.residency, &mut l.engine, mode, m) {
                    self.snap.driver_evictions += 1;
                }
            }
        }
        learnt
    }

    /// A fault-driven migration to `gpu` standing for a fault on block `b`
    /// (`--fault-source migrations`): learnt as the fault it stands for;
    /// the migration itself makes the block resident.
    fn migration_fault(&mut self, gpu: Gpu, b: u64) -> bool {
        let learns = self.cfg.mode.learns();
        self.look_on_fault();
        let with_id = self.feed.as_ref().is_some_and(|f| f.current().is_some());
        let Some(lane) = self.lane(gpu) else {
            return false;
        };
        if b == lane.last_fault_block {
            return false;
        }
        lane.new_fault(b, learns);
        self.count_fault(b, with_id);
        learns
    }

    /// Closes or opens the tracker gate as it asks; false when events can
    /// no longer be seen (the loop then stops).
    fn drive_gate(&mut self, tracker: &Tracker) -> bool {
        let Some(g) = self.gate.as_mut() else {
            return true;
        };
        let now = Instant::now();
        match g.action(now) {
            gate::Action::None => {}
            gate::Action::Close => {
                // Events already queued are still read by the next drains.
                if let Err(e) = tracker.disable() {
                    tracing::warn!(pid = self.snap.pid, "tracker gate: disabling events: {e}");
                    g.gate.failed(now);
                }
            }
            gate::Action::Open => {
                if let Err(e) = tracker.enable() {
                    // Nothing is seen from here on: say so, and stop.
                    tracing::error!(pid = self.snap.pid, "tracker gate: re-enabling events: {e}");
                    g.gate.failed(now);
                    return false;
                }
                // Migrations of the closed period were not seen: what the
                // ledger says is resident may not be any more.
                for l in self.lanes.iter_mut() {
                    l.uncertain.clear();
                    for b in l.residency.clear() {
                        l.engine.evicted(b);
                        l.uncertain.insert(b);
                    }
                    l.last_fault_block = u64::MAX;
                }
            }
        }
        true
    }

    /// Applies the marks that came since the last turn (a bounded number).
    fn apply_marks(&mut self) {
        let Some(rx) = self.cfg.marks.as_ref() else {
            return;
        };
        for _ in 0..MARKS_PER_TURN {
            let Some(m) = rx.next() else { break };
            if self.log.on() {
                let kind = match (m.dead, m.discarded) {
                    (true, _) => 'd',
                    (false, Discarded::BringBack) => 'a',
                    (false, _) => 'r',
                };
                for r in &m.blocks {
                    // `populated` is sorted: the range's share by two searches.
                    let p = &m.populated;
                    let n = p.partition_point(|&b| b < r.end) - p.partition_point(|&b| b < r.start);
                    self.log.mark(r, kind, n);
                }
            }
            let route = &self.route;
            let a = apply_mark(
                &mut self.lanes,
                |b| route.owner(b),
                &mut self.discarded,
                self.cfg.mode,
                &m,
                &mut self.host_dead,
            );
            count_mark(&mut self.snap, m.dead, &a);
            // Dead data still on the host: discarded there too, now, before
            // the next mark (an alive mark after it must find it done), so
            // that it comes back to the GPU with no copy.
            if self.discard_ok {
                let before = self.snap.discarded_blocks;
                // A block the driver refuses stays as it is.
                discard_blocks(
                    self.fd.as_raw_fd(),
                    &mut self.host_dead,
                    self.cfg.max_coalesce_blocks,
                    &mut self.discarded,
                    &mut self.snap,
                    Some(rx.gate()),
                    &mut self.log,
                );
                self.snap.host_discarded_blocks += self.snap.discarded_blocks - before;
            }
            self.host_dead.clear();
            // Applied: the engine has the blocks alive, so the gate need
            // not hold them any more (the process had its reply when they
            // went in). The refetches are issued by the policy, after
            // making room.
            if let Some(id) = m.gate {
                rx.gate().close(id);
            }
        }
    }

    /// The evictions the workers finished since the last turn: their
    /// blocks leave the ledgers (or stay, refused).
    fn evictions_ended(&mut self) {
        for r in self.migrator.take_ran() {
            self.log.job(&r);
        }
        let done = self.migrator.take_evicted();
        if !done.is_empty() {
            self.snap.evict_refused_blocks += self.lanes.evictions_ended(&done);
        }
    }

    /// The highest the ledgers counted on the GPU, blocks still leaving
    /// included (`Snapshot::budget_high_water_bytes`).
    fn high_water(&mut self) {
        let (mut all, mut leaving) = (0, 0);
        for l in self.lanes.iter() {
            all += l.residency.total();
            leaving += l.residency.leaving_total();
        }
        let s = &mut self.snap;
        s.budget_high_water_bytes = s.budget_high_water_bytes.max(all);
        s.leaving_bytes = leaving;
    }

    /// The per-turn counters: peak residency, back-off, copy throughput.
    fn tick(&mut self) {
        self.high_water();
        let s = &mut self.snap;
        let mut total = 0;
        for l in self.lanes.iter_mut() {
            let t = l.residency.staying_total();
            l.max_resident_bytes = l.max_resident_bytes.max(t);
            total += t;
        }
        s.max_resident_bytes = s.max_resident_bytes.max(total);
        if let Some(bo) = self.backoff.as_mut() {
            bo.tick(s.fault_blocks, Instant::now());
        }
        let copy_ns = self.copy.ns();
        s.user_to_gpu_copy_s = copy_ns as f64 / 1e9;
        s.user_to_gpu_gbps = if copy_ns > 0 {
            s.user_to_gpu_bytes as f64 / copy_ns as f64
        } else {
            0.0
        };
    }

    /// Refreshes the snapshot and hands it to the service and the file.
    fn publish(&mut self, tracker: &Tracker) {
        let now = Instant::now();
        self.reread_gpus();
        let counters = &self.migrator.counters;
        let view = self.lanes.view(counters, &self.cfg.gpu_indices);
        fill(&mut self.snap, view, counters, tracker, self.start);
        self.snap.backoff = self.backoff.as_ref().map(|b| b.stats(now));
        self.snap.gate = self.gate.as_ref().map(|g| g.gate.stats(now));
        self.snap.mechanism = self.mech.snapshot();
        self.snap.ahead = self.ahead.as_ref().map(|a| a.snapshot());
        self.snap.host_shared = self.shared.stats.clone();
        if let Some(rx) = self.cfg.marks.as_ref() {
            let t = rx.gate().times();
            self.snap.alive_marks = t.marks.load(Ordering::Relaxed);
            self.snap.alive_gate_wait_s = t.gate_wait_ns.load(Ordering::Relaxed) as f64 / 1e9;
            self.snap.alive_populate_s = t.populate_ns.load(Ordering::Relaxed) as f64 / 1e9;
        }
        if let Some(r) = self.recorder.as_ref() {
            self.snap.plan_recorded = r.entries() as u64;
            self.snap.plan_unmapped = r.unmapped;
        }
        write_stats(
            self.cfg.publish.as_ref(),
            self.cfg.stats_json.as_ref(),
            &self.snap,
        );
    }

    /// Reads the processor table again at every snapshot, so that a GPU
    /// that left it (a reset, a MIG reconfiguration) gets no more
    /// prefetches even when no fault names an unknown index.
    fn reread_gpus(&mut self) {
        match prescient_uvm::attach::read_processor_table(self.fd.as_raw_fd()) {
            Ok(t) => {
                self.route.replace(t);
                self.sync_lanes();
            }
            Err(e) => tracing::debug!(pid = self.snap.pid, "processor table: {e:#}"),
        }
        self.snap.gpu_uuids = (self.route.table().gpus().iter())
            .map(|g| g.to_string())
            .collect();
    }

    /// Waits for the workers, reads the last events, publishes once more.
    fn finish(mut self, session: &Session) -> Snapshot {
        if let Some(m) = &self.cfg.marks {
            // Its fd goes with the process.
            m.gate().set_populate(None);
        }
        self.migrator.finish();
        self.undo_shared();
        self.evictions_ended();
        self.high_water();
        self.log.flush();
        session.drain_rest(|_| {});
        if let Some(r) = self.recorder.as_mut() {
            if let Err(e) = r.write() {
                tracing::error!(pid = self.snap.pid, "--record-plan: {e:#}");
            }
        }
        self.publish(&session.tracker);
        self.snap
    }
}

/// Counts one applied mark.
fn count_mark(s: &mut Snapshot, dead: bool, a: &Applied) {
    s.mark_requests += 1;
    if dead {
        s.marked_dead_blocks += a.blocks;
    } else {
        s.marked_alive_blocks += a.blocks;
    }
    s.refetched_blocks += a.refetched;
}

impl Process {
    /// Tries allocations the CPU rewrites every step in host memory, and
    /// keeps or undoes each trial by the step's length (shared.rs), in
    /// prescient mode with `--host-shared`.
    fn try_shared(&mut self) {
        if !self.cfg.host_shared || self.cfg.mode != PolicyMode::Prescient {
            return;
        }
        // The process's managed ranges, read only if a candidate is looked up.
        let pid = self.snap.pid;
        let mut ranges: Option<Vec<maps::Range>> = None;
        let alloc_of = |addr: u64| {
            let r = ranges.get_or_insert_with(|| maps::read(pid).unwrap_or_default());
            maps::find(r, addr).map(|i| r[i])
        };
        let Some(action) = self.shared.decide(alloc_of) else {
            return;
        };
        let (fd, gpus) = (self.fd.as_raw_fd(), self.gpu_uuids());
        let r = match &action {
            Action::Advise(allocs) => advise_all(fd, allocs, &gpus),
            Action::Undo(allocs) => (allocs.iter()).try_for_each(|&a| undo_host(fd, a, &gpus)),
        };
        let (Action::Advise(allocs) | Action::Undo(allocs)) = &action;
        let s = &self.shared.stats;
        tracing::info!(
            pid,
            allocations = allocs.len(),
            start = allocs.first().map_or(0, |a| a.start),
            bytes = allocs.iter().map(|a| a.size()).sum::<u64>(),
            before_us = s.last_before_us,
            during_us = s.last_during_us,
            advise = matches!(action, Action::Advise(_)),
            ok = r.is_ok(),
            "host-memory trial"
        );
        if let (Err(e), Action::Advise(_)) = (&r, &action) {
            tracing::warn!(
                pid,
                "keeping allocations in host memory failed ({e}); they stay ordinary"
            );
            self.shared.refused();
        }
    }

    /// Takes back every host-memory advice (the loop is ending) while the
    /// process lives; one that exited took its managed ranges with it.
    fn undo_shared(&mut self) {
        let placed = self.shared.take_placed();
        let alive = std::path::Path::new(&format!("/proc/{}", self.snap.pid)).exists();
        if placed.is_empty() || !alive {
            return;
        }
        let (fd, gpus) = (self.fd.as_raw_fd(), self.gpu_uuids());
        for a in placed {
            match undo_host(fd, a, &gpus) {
                Ok(()) => tracing::info!(
                    pid = self.snap.pid,
                    start = a.start,
                    bytes = a.size(),
                    "host-memory advice taken back (the loop ends)"
                ),
                Err(e) => tracing::warn!(
                    pid = self.snap.pid,
                    "taking back a host-memory advice at the end: {e}"
                ),
            }
        }
    }

    /// The UUIDs of the GPUs the process has faulted from (its lanes').
    fn gpu_uuids(&self) -> Vec<[u8; 16]> {
        self.lanes.iter().map(|l| l.gpu.uuid).collect()
    }
}

/// Advises allocation `a` to stay in host memory, mapped to each of `gpus`.
fn advise_host(fd: std::os::fd::RawFd, a: maps::Range, gpus: &[[u8; 16]]) -> anyhow::Result<()> {
    let len = a.size();
    uvm::set_preferred_location(fd, a.start, len, uvm::CPU_UUID)?;
    for &g in gpus {
        uvm::set_accessed_by(fd, a.start, len, g)?;
    }
    Ok(())
}

/// Advises every allocation of a trial; on the first refusal takes back
/// what it advised (the trial's allocations stay ordinary) and returns it.
fn advise_all(
    fd: std::os::fd::RawFd,
    allocs: &[maps::Range],
    gpus: &[[u8; 16]],
) -> anyhow::Result<()> {
    for (i, &a) in allocs.iter().enumerate() {
        if let Err(e) = advise_host(fd, a, gpus) {
            for &done in &allocs[..=i] {
                // Best effort: a part of `a` may hold advice already.
                let _ = undo_host(fd, done, gpus);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Takes back [`advise_host`]'s advice on `a`.
fn undo_host(fd: std::os::fd::RawFd, a: maps::Range, gpus: &[[u8; 16]]) -> anyhow::Result<()> {
    let len = a.size();
    for &g in gpus {
        uvm::unset_accessed_by(fd, a.start, len, g)?;
    }
    uvm::unset_preferred_location(fd, a.start, len)?;
    Ok(())
}
