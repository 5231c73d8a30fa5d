//! The migration workers: UVM_MIGRATE jobs (prefetches to the GPU,
//! evictions to the CPU) issued by a small thread pool, so the loop never
//! waits on a copy; their counters and busy time; and `runs()`, which
//! coalesces blocks into the jobs' runs.

use super::jobqueue::{JobQueue, Merge, Pushed, Role};
use prescient_core::BLOCK_SHIFT;
use prescient_uvm::ioctl as uvm;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// One UVM_MIGRATE: a run of blocks to one GPU or to the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Job {
    base: u64,
    len: u64,
    to_gpu: bool,
    /// The destination's UUID: the GPU's, or `CPU_UUID`.
    dest: [u8; 16],
    /// For an eviction, the GPU whose lane chose it (counted by GPU; the
    /// ioctl itself names no source).
    from: [u8; 16],
}

impl Job {
    /// `count` 2 MB blocks from block `first`, to the GPU of UUID `gpu`.
    pub(super) fn to_gpu(first: u64, count: u64, gpu: [u8; 16]) -> Job {
        Job {
            base: first << BLOCK_SHIFT,
            len: count << BLOCK_SHIFT,
            to_gpu: true,
            dest: gpu,
            from: uvm::CPU_UUID,
        }
    }

    /// `count` 2 MB blocks from block `first`, to the CPU, chosen by the
    /// lane of GPU `from` (UVM_MIGRATE needs no source: the blocks leave
    /// whichever GPU holds them).
    pub(super) fn to_cpu(first: u64, count: u64, from: [u8; 16]) -> Job {
        Job {
            base: first << BLOCK_SHIFT,
            len: count << BLOCK_SHIFT,
            to_gpu: false,
            dest: uvm::CPU_UUID,
            from,
        }
    }

    /// The destination's UUID.
    #[cfg(test)]
    pub(super) fn dest(&self) -> [u8; 16] {
        self.dest
    }

    pub(super) fn goes_to_gpu(&self) -> bool {
        self.to_gpu
    }

    /// The first block.
    pub(super) fn first(&self) -> u64 {
        self.base >> BLOCK_SHIFT
    }

    /// For an eviction, the GPU whose lane chose it.
    #[cfg(test)]
    pub(super) fn chosen_by(&self) -> [u8; 16] {
        self.from
    }

    /// Its length in blocks.
    pub(super) fn blocks(&self) -> u64 {
        self.len >> BLOCK_SHIFT
    }
}

impl Merge for Job {
    /// `next` joins this job when it goes the same way to the same place
    /// and starts where this one ends, or ends where it starts (victims
    /// can come in descending order).
    fn merge(&mut self, next: &Job, max_blocks: u64) -> bool {
        let same = (self.to_gpu, self.dest, self.from) == (next.to_gpu, next.dest, next.from);
        if !same || self.blocks() + next.blocks() > max_blocks {
            return false;
        }
        if self.base + self.len == next.base {
            self.len += next.len;
        } else if next.base + next.len == self.base {
            self.base = next.base;
            self.len += next.len;
        } else {
            return false;
        }
        true
    }
}

/// What the workers did, read by the stats snapshot.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) prefetch_ops: AtomicU64,
    pub(super) prefetch_bytes: AtomicU64,
    pub(super) prefetch_errors: AtomicU64,
    pub(super) prefetch_busy_ns: AtomicU64,
    pub(super) evict_ops: AtomicU64,
    pub(super) evict_bytes: AtomicU64,
    pub(super) evict_errors: AtomicU64,
    pub(super) evict_busy_ns: AtomicU64,
    pub(super) dropped_jobs: AtomicU64,
    /// Jobs that joined one already queued (jobqueue.rs).
    pub(super) merged_jobs: AtomicU64,
    /// Bytes prefetched per destination GPU UUID (a handful of GPUs:
    /// a short list beats a map), so that a multi-GPU run can show every
    /// worker's prefetches going to its own GPU.
    pub(super) prefetch_bytes_by_gpu: Mutex<Vec<([u8; 16], u64)>>,
    /// Jobs submitted and not yet taken by a worker; the most ever, and
    /// the sum and count of the depths seen at submission (the mean).
    pub(super) queued: AtomicU64,
    pub(super) queue_max: AtomicU64,
    pub(super) queue_sum: AtomicU64,
    pub(super) queue_samples: AtomicU64,
    /// Jobs by size in blocks as the workers took them (after merging):
    /// 1, 2, 3-4, 5-8, 9-16, 17+ ([to GPU, to CPU]).
    pub(super) sizes: [[AtomicU64; SIZE_BUCKETS]; 2],
    /// Wall time with both directions in flight, and the integral of the
    /// ops in flight over the time any is (their mean concurrency).
    pub(super) both_busy_ns: AtomicU64,
    pub(super) any_busy_ns: AtomicU64,
    pub(super) inflight_ns: AtomicU64,
    pub(super) inflight_max: AtomicU64,
    /// Bytes pre-evicted per GPU whose lane chose them.
    pub(super) evict_bytes_by_gpu: Mutex<Vec<([u8; 16], u64)>>,
    /// A prefetch was refused with NV_ERR_INVALID_DEVICE: its GPU is not
    /// (any more) in the process's VA space (uvm_migrate.c answers so for
    /// a destination UUID the VA space does not have). The loop reads the
    /// processor table again at once.
    pub(super) gpu_gone: AtomicBool,
    /// Jobs refused with NV_ERR_INVALID_ADDRESS: no managed range covers
    /// them any more (uvm_migrate.c; our jobs are always block-aligned),
    /// i.e. the process freed the memory, or exited, while the job was
    /// queued. Not an error: the data is gone, nothing is to be moved.
    pub(super) freed_jobs: AtomicU64,
}

/// Job size buckets (`Counters::sizes`).
pub(super) const SIZE_BUCKETS: usize = 6;

/// The bucket of a job of `blocks` blocks: 1, 2, 3-4, 5-8, 9-16, 17+.
pub(super) fn size_bucket(blocks: u64) -> usize {
    (64 - blocks.max(1).saturating_sub(1).leading_zeros() as usize).min(SIZE_BUCKETS - 1)
}

/// NV_ERR_INVALID_DEVICE (nvstatuscodes.h).
pub(super) const NV_ERR_INVALID_DEVICE: u32 = 0x26;
/// NV_ERR_INVALID_ADDRESS (nvstatuscodes.h).
pub(super) const NV_ERR_INVALID_ADDRESS: u32 = 0x1e;

/// Adds `bytes` to the entry of GPU `gpu` in `by`.
fn add_gpu_bytes(by: &Mutex<Vec<([u8; 16], u64)>>, gpu: [u8; 16], bytes: u64) {
    if let Ok(mut v) = by.lock() {
        match v.iter_mut().find(|(u, _)| *u == gpu) {
            Some((_, b)) => *b += bytes,
            None => v.push((gpu, bytes)),
        }
    }
}

/// The bytes of GPU `gpu` in `by` (0 when none).
pub(super) fn gpu_bytes(by: &Mutex<Vec<([u8; 16], u64)>>, gpu: &[u8; 16]) -> u64 {
    by.lock()
        .ok()
        .and_then(|v| v.iter().find(|(u, _)| u == gpu).map(|(_, b)| *b))
        .unwrap_or(0)
}

/// Busy-time accounting over parallel workers, both directions under one
/// lock: time with >= 1 op in flight per direction, with both at once,
/// and the integral of the ops in flight.
struct Busy {
    /// Ops in flight [to the GPU, to the CPU].
    inflight: [u32; 2],
    since: Instant,
}

impl Busy {
    /// Accounts the time since the last change, then `delta` ops of
    /// direction `k` start (+1) or end (-1); returns the change's time.
    fn change(&mut self, k: usize, delta: i32, c: &Counters) -> Instant {
        let now = Instant::now();
        self.change_at(k, delta, now, c);
        now
    }

    fn change_at(&mut self, k: usize, delta: i32, now: Instant, c: &Counters) {
        let ns = now.duration_since(self.since).as_nanos() as u64;
        self.since = now;
        let [g, h] = self.inflight;
        if g > 0 {
            c.prefetch_busy_ns.fetch_add(ns, Relaxed);
        }
        if h > 0 {
            c.evict_busy_ns.fetch_add(ns, Relaxed);
        }
        if g > 0 && h > 0 {
            c.both_busy_ns.fetch_add(ns, Relaxed);
        }
        if g + h > 0 {
            c.any_busy_ns.fetch_add(ns, Relaxed);
            c.inflight_ns.fetch_add(ns * u64::from(g + h), Relaxed);
        }
        self.inflight[k] = self.inflight[k].saturating_add_signed(delta);
        c.inflight_max
            .fetch_max(u64::from(self.inflight[0] + self.inflight[1]), Relaxed);
    }
}

/// An eviction that ended: its UVM_MIGRATE to the CPU returned, and the
/// blocks `left` the GPU, or the driver refused and they stay (the ledger
/// counted them until now: residency.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Evicted {
    pub(super) job: Job,
    pub(super) left: bool,
}

impl Evicted {
    /// The GPU whose lane chose the blocks.
    pub(super) fn from(&self) -> [u8; 16] {
        self.job.from
    }

    /// The job's blocks.
    pub(super) fn blocks(&self) -> std::ops::Range<u64> {
        let first = self.job.base >> BLOCK_SHIFT;
        first..first + self.job.blocks()
    }
}

/// One job a worker ran, with when its call began and returned: the block
/// log's `J` lines (blocklog.rs), which tell a job that waited in the queue
/// from one that sat in its UVM_MIGRATE.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ran {
    pub(super) job: Job,
    pub(super) start: Instant,
    pub(super) end: Instant,
    /// How the call ended: 0 it succeeded, > 0 the driver's RM status, < 0
    /// the ioctl's errno, negated.
    pub(super) status: i64,
}

/// The most `Ran` records kept between two turns; more are dropped (the
/// loop takes them every turn, so only a loop stuck for a long time loses
/// any).
const MAX_RAN: usize = 1 << 16;

/// The jobs the workers ran, kept only while someone reads them.
#[derive(Default)]
struct RanLog {
    on: AtomicBool,
    ran: Mutex<Vec<Ran>>,
}

impl RanLog {
    fn push(&self, r: Ran) {
        if !self.on.load(Relaxed) {
            return;
        }
        if let Ok(mut v) = self.ran.lock() {
            if v.len() < MAX_RAN {
                v.push(r);
            }
        }
    }
}

/// What a worker calls for one job: UVM_MIGRATE, or a test's double.
pub(super) type Move = Arc<dyn Fn(&Job) -> Result<(), uvm::IoctlError> + Send + Sync>;

/// The worker pool of one process and the queue that feeds it.
pub(super) struct Migrator {
    queue: Arc<JobQueue<Job>>,
    handles: Vec<JoinHandle<()>>,
    pub(super) counters: Arc<Counters>,
    /// Evictions that ended since the loop last took them.
    evicted: Arc<Mutex<Vec<Evicted>>>,
    /// The jobs run since the loop last took them (`record_jobs`).
    ran: Arc<RanLog>,
}

impl Migrator {
    /// Starts `workers` threads migrating in `fd`'s address space, each
    /// job to its own destination (none when `workers` is 0: the queue
    /// then only fills); queued jobs merge up to `merge_blocks` (0: never).
    /// `prefetch_workers` of them take only prefetches and the rest
    /// evictions first (jobqueue.rs), at least one being left for
    /// evictions; 0: every worker takes both, prefetches first.
    pub(super) fn start(
        fd: Arc<OwnedFd>,
        flags: u32,
        workers: usize,
        prefetch_workers: usize,
        merge_blocks: u64,
    ) -> Migrator {
        let mover: Move =
            Arc::new(move |j: &Job| uvm::migrate(fd.as_raw_fd(), j.base, j.len, j.dest, flags));
        Self::start_with(mover, workers, prefetch_workers, merge_blocks)
    }

    /// As `start`, each job moved by `mover`.
    pub(super) fn start_with(
        mover: Move,
        workers: usize,
        prefetch_workers: usize,
        merge_blocks: u64,
    ) -> Migrator {
        let counters = Arc::new(Counters::default());
        let evicted = Arc::new(Mutex::new(Vec::new()));
        let busy = Arc::new(Mutex::new(Busy {
            inflight: [0; 2],
            since: Instant::now(),
        }));
        let queue = Arc::new(JobQueue::new(merge_blocks));
        let ran = Arc::new(RanLog::default());
        let roles = roles(workers, prefetch_workers);
        let handles = roles
            .into_iter()
            .enumerate()
            .filter_map(|(i, role)| {
                let w = Worker {
                    mover: mover.clone(),
                    queue: queue.clone(),
                    c: counters.clone(),
                    busy: busy.clone(),
                    evicted: evicted.clone(),
                    ran: ran.clone(),
                };
                spawn_worker(i, role, w)
            })
            .collect();
        Migrator {
            queue,
            handles,
            counters,
            evicted,
            ran,
        }
    }

    /// From now on keeps a record of every job run (`take_ran`).
    pub(super) fn record_jobs(&self) {
        self.ran.on.store(true, Relaxed);
    }

    /// The jobs run since the last call (none unless `record_jobs`).
    pub(super) fn take_ran(&self) -> Vec<Ran> {
        self.ran
            .ran
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }

    /// The evictions that ended since the last call.
    pub(super) fn take_evicted(&self) -> Vec<Evicted> {
        self.evicted
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }

    /// Queues `j` (prefetches before evictions: jobqueue.rs); dropped
    /// (and counted) when its direction's queue is full.
    pub(super) fn submit(&self, j: Job) {
        let c = &self.counters;
        // Counted before the push: a worker may take it at once.
        let depth = c.queued.fetch_add(1, Relaxed) + 1;
        match self.queue.push(j, j.to_gpu) {
            Pushed::Queued => {}
            Pushed::Merged => {
                c.queued.fetch_sub(1, Relaxed);
                c.merged_jobs.fetch_add(1, Relaxed);
                return;
            }
            Pushed::Refused => {
                c.queued.fetch_sub(1, Relaxed);
                c.dropped_jobs.fetch_add(1, Relaxed);
                if !j.to_gpu {
                    // Never issued: the blocks stay, and count again.
                    push_evicted(&self.evicted, j, false);
                }
                return;
            }
        }
        c.queue_max.fetch_max(depth, Relaxed);
        c.queue_sum.fetch_add(depth, Relaxed);
        c.queue_samples.fetch_add(1, Relaxed);
    }

    /// Closes the queue and returns what it held, in the workers' order
    /// (tests: a migrator with no workers only fills its queue).
    #[cfg(test)]
    pub(super) fn drain(&self) -> Vec<Job> {
        self.queue.close();
        std::iter::from_fn(|| self.queue.next()).collect()
    }

    /// Runs every queued job at once as a worker whose UVM_MIGRATE
    /// succeeds would, evictions ending (tests: a migrator with no workers
    /// completes its evictions when the test says). Returns the jobs.
    #[cfg(test)]
    pub(super) fn run_queued(&self) -> Vec<Job> {
        let jobs: Vec<Job> = std::iter::from_fn(|| self.queue.try_next()).collect();
        for j in jobs.iter().filter(|j| !j.to_gpu) {
            push_evicted(&self.evicted, *j, true);
        }
        jobs
    }

    /// Lets the workers finish what is queued and waits for them.
    pub(super) fn finish(&mut self) {
        self.queue.close();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The role of each of `workers` workers, `prefetch` of them (at most
/// all but one) prefetch-only.
fn roles(workers: usize, prefetch: usize) -> Vec<Role> {
    let p = prefetch.min(workers.saturating_sub(1));
    let rest = if p == 0 { Role::Any } else { Role::EvictFirst };
    (0..workers)
        .map(|i| if i < p { Role::Prefetch } else { rest })
        .collect()
}

/// Starts worker `i`, named after its role so that a thread listing (or
/// its kernel stack in /proc) tells the workers apart; `None`, with an
/// error logged, if the thread cannot start (the others still run).
fn spawn_worker(i: usize, role: Role, w: Worker) -> Option<JoinHandle<()>> {
    let kind = match role {
        Role::Any => "any",
        Role::Prefetch => "pf",
        Role::EvictFirst => "ev",
    };
    std::thread::Builder::new()
        .name(format!("migrate-{kind}-{i}"))
        .spawn(move || w.run(role))
        .map_err(|e| tracing::error!("migration worker {i}: {e}"))
        .ok()
}

/// Records an ended eviction for the loop.
fn push_evicted(to: &Mutex<Vec<Evicted>>, job: Job, left: bool) {
    if let Ok(mut v) = to.lock() {
        v.push(Evicted { job, left });
    }
}

/// What one worker thread holds.
struct Worker {
    mover: Move,
    queue: Arc<JobQueue<Job>>,
    c: Arc<Counters>,
    busy: Arc<Mutex<Busy>>,
    evicted: Arc<Mutex<Vec<Evicted>>>,
    ran: Arc<RanLog>,
}

impl Worker {
    /// `delta` ops of direction `k` start or end (`Busy::change`); returns
    /// when, the time the busy clock and the job's record share.
    fn busy(&self, k: usize, delta: i32) -> Instant {
        match self.busy.lock() {
            Ok(mut b) => b.change(k, delta, &self.c),
            Err(_) => Instant::now(),
        }
    }

    /// Migrates the jobs of `role` until the queue closes.
    fn run(self, role: Role) {
        let c = &self.c;
        while let Some(job) = self.queue.next_for(role) {
            c.queued.fetch_sub(1, Relaxed);
            let k = usize::from(!job.to_gpu);
            c.sizes[k][size_bucket(job.blocks())].fetch_add(1, Relaxed);
            let start = self.busy(k, 1);
            let r = (self.mover)(&job);
            let end = self.busy(k, -1);
            self.ran.push(Ran {
                job,
                start,
                end,
                status: status(r),
            });
            count(c, &job, r);
            if !job.to_gpu {
                push_evicted(&self.evicted, job, evicted_left(r));
            }
        }
    }
}

/// Whether an eviction's blocks left the GPU: it succeeded, or the memory
/// was freed meanwhile (NV_ERR_INVALID_ADDRESS: no range any more). Any
/// other error may have stopped part-way (UVM_MIGRATE stops at a block's
/// error): the blocks count as staying, and those that did leave are
/// cheap victims again (migrating CPU-resident memory to the CPU copies
/// nothing).
fn evicted_left(r: Result<(), uvm::IoctlError>) -> bool {
    matches!(r, Ok(()) | Err(uvm::IoctlError::Rm(NV_ERR_INVALID_ADDRESS)))
}

/// A call's result as one number (`Ran::status`).
fn status(r: Result<(), uvm::IoctlError>) -> i64 {
    match r {
        Ok(()) => 0,
        Err(uvm::IoctlError::Rm(s)) => i64::from(s),
        Err(uvm::IoctlError::Errno(e)) => -i64::from(e as i32),
    }
}

/// Counts one finished job; warns about the first few failures.
fn count(c: &Counters, job: &Job, r: Result<(), uvm::IoctlError>) {
    let (ops, bytes, errs) = if job.to_gpu {
        (&c.prefetch_ops, &c.prefetch_bytes, &c.prefetch_errors)
    } else {
        (&c.evict_ops, &c.evict_bytes, &c.evict_errors)
    };
    match r {
        Ok(()) => {
            ops.fetch_add(1, Relaxed);
            bytes.fetch_add(job.len, Relaxed);
            if job.to_gpu {
                add_gpu_bytes(&c.prefetch_bytes_by_gpu, job.dest, job.len);
            } else {
                add_gpu_bytes(&c.evict_bytes_by_gpu, job.from, job.len);
            }
        }
        Err(uvm::IoctlError::Rm(NV_ERR_INVALID_ADDRESS)) => {
            c.freed_jobs.fetch_add(1, Relaxed);
        }
        Err(e) => {
            if job.to_gpu && e == uvm::IoctlError::Rm(NV_ERR_INVALID_DEVICE) {
                c.gpu_gone.store(true, Relaxed);
            }
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

/// Coalesces `blocks` into runs (start, count) of consecutive blocks, at
/// most `max` long, keeping their order: a block extends the run before it
/// only when it is that run's next block. Prefetches keep the engine's
/// order this way; evictions and discards sort first (`sorted_runs`).
pub(super) fn runs(blocks: impl IntoIterator<Item = u64>, max: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for b in blocks {
        match out.last_mut() {
            Some((s, l)) if *s + *l == b && *l < max.max(1) => *l += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// Sorts `blocks`, drops repeats and drains them as `runs`.
pub(super) fn sorted_runs(blocks: &mut Vec<u64>, max: u64) -> Vec<(u64, u64)> {
    blocks.sort_unstable();
    blocks.dedup();
    runs(blocks.drain(..), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_coalesce_consecutive_blocks_up_to_the_limit() {
        let mut b = vec![9, 3, 4, 5, 4, 7, 8, 20];
        assert_eq!(sorted_runs(&mut b, 16), [(3, 3), (7, 3), (20, 1)]);
        assert!(b.is_empty());
        let mut b: Vec<u64> = (0..5).collect();
        assert_eq!(sorted_runs(&mut b, 2), [(0, 2), (2, 2), (4, 1)]);
    }

    #[test]
    fn prefetch_runs_keep_the_engines_order() {
        // Only a block's own successor extends a run; nothing is reordered.
        assert_eq!(runs([5, 6, 2, 3, 4, 9], 16), [(5, 2), (2, 3), (9, 1)]);
        assert_eq!(runs([1, 2, 3], 2), [(1, 2), (3, 1)]);
    }

    #[test]
    fn prefetch_workers_leave_one_for_evictions() {
        use Role::{Any, EvictFirst as E, Prefetch as P};
        assert_eq!(roles(4, 0), [Any; 4]);
        assert_eq!(roles(8, 2), [P, P, E, E, E, E, E, E]);
        assert_eq!(roles(2, 5), [P, E]);
        assert_eq!(roles(1, 1), [Any]);
    }

    #[test]
    fn job_sizes_fall_in_power_of_two_buckets() {
        let got: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 16, 17, 64]
            .iter()
            .map(|&b| size_bucket(b))
            .collect();
        assert_eq!(got, [0, 1, 2, 2, 3, 3, 4, 4, 5, 5]);
    }

    #[test]
    fn jobs_are_recorded_with_their_call_and_status_only_once_asked() {
        let mover: Move = Arc::new(|j: &Job| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            if j.goes_to_gpu() {
                Ok(())
            } else {
                Err(uvm::IoctlError::Rm(NV_ERR_INVALID_ADDRESS))
            }
        });
        let mut m = Migrator::start_with(mover, 2, 0, 0);
        m.submit(Job::to_gpu(1, 1, [1; 16]));
        while m.counters.prefetch_ops.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        m.record_jobs();
        m.submit(Job::to_gpu(4, 2, [1; 16]));
        m.submit(Job::to_cpu(9, 1, [1; 16]));
        m.finish();
        let mut ran = m.take_ran();
        ran.sort_by_key(|r| r.job.first());
        let seen: Vec<(u64, u64, bool, i64)> = ran
            .iter()
            .map(|r| (r.job.first(), r.job.blocks(), r.job.goes_to_gpu(), r.status))
            .collect();
        // The job before `record_jobs` is not there.
        assert_eq!(seen, [(4, 2, true, 0), (9, 1, false, 0x1e)]);
        for r in &ran {
            assert!(r.end.duration_since(r.start) >= std::time::Duration::from_millis(2));
        }
        assert!(m.take_ran().is_empty());
    }

    #[test]
    fn an_errno_is_recorded_negated() {
        let e = uvm::IoctlError::Errno(nix::errno::Errno::EINTR);
        assert_eq!(status(Err(e)), -(nix::errno::Errno::EINTR as i64));
        assert_eq!(status(Ok(())), 0);
    }

    #[test]
    fn busy_time_counts_each_direction_both_and_the_ops_in_flight() {
        let c = Counters::default();
        let t0 = Instant::now();
        let mut b = Busy {
            inflight: [0; 2],
            since: t0,
        };
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        b.change_at(0, 1, at(0), &c); // one to the GPU
        b.change_at(1, 1, at(20), &c); // and one to the CPU
        b.change_at(0, 1, at(40), &c); // a second to the GPU
        b.change_at(0, -1, at(60), &c);
        b.change_at(0, -1, at(70), &c);
        b.change_at(1, -1, at(100), &c);
        let ms = |a: &AtomicU64| a.load(Relaxed) / 1_000_000;
        assert_eq!(ms(&c.prefetch_busy_ns), 70);
        assert_eq!(ms(&c.evict_busy_ns), 80);
        assert_eq!(ms(&c.both_busy_ns), 50);
        assert_eq!(ms(&c.any_busy_ns), 100);
        // 1 op for 20 ms, 2 for 20, 3 for 20, 2 for 10, 1 for 30.
        assert_eq!(ms(&c.inflight_ns), 20 + 40 + 60 + 20 + 30);
        assert_eq!(c.inflight_max.load(Relaxed), 3);
        assert_eq!(b.inflight, [0, 0]);
    }

    #[test]
    fn prefetched_and_evicted_bytes_are_counted_by_gpu() {
        let c = Counters::default();
        let (g2, g5) = ([2u8; 16], [5u8; 16]);
        count(&c, &Job::to_gpu(0, 2, g2), Ok(()));
        count(&c, &Job::to_gpu(8, 1, g5), Ok(()));
        count(&c, &Job::to_gpu(4, 1, g2), Ok(()));
        count(&c, &Job::to_gpu(6, 1, g5), Err(uvm::IoctlError::Rm(0x1f)));
        assert!(
            !c.gpu_gone.load(Relaxed),
            "another error says nothing of the GPU"
        );
        count(
            &c,
            &Job::to_gpu(6, 1, g5),
            Err(uvm::IoctlError::Rm(NV_ERR_INVALID_DEVICE)),
        );
        assert!(c.gpu_gone.load(Relaxed));
        // Memory freed while its job was queued: counted apart, no error.
        count(
            &c,
            &Job::to_cpu(6, 1, g5),
            Err(uvm::IoctlError::Rm(NV_ERR_INVALID_ADDRESS)),
        );
        assert_eq!(c.freed_jobs.load(Relaxed), 1);
        assert_eq!(c.evict_errors.load(Relaxed), 0);
        count(&c, &Job::to_cpu(0, 3, g5), Ok(()));
        let by = c.prefetch_bytes_by_gpu.lock().unwrap().clone();
        let mb2 = 2 << 20;
        assert_eq!(by, vec![(g2, 3 * mb2), (g5, mb2)]);
        assert_eq!(gpu_bytes(&c.evict_bytes_by_gpu, &g5), 3 * mb2);
        assert_eq!(gpu_bytes(&c.evict_bytes_by_gpu, &g2), 0);
        assert_eq!(c.prefetch_bytes.load(Relaxed), 4 * mb2);
        assert_eq!(c.evict_bytes.load(Relaxed), 3 * mb2);
    }
}
