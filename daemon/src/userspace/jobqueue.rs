//! The migration workers' queue: prefetches (to the GPU) before evictions
//! (to the CPU), with every `EVICT_EVERY`-th job an eviction while both
//! wait.
//!
//! Why: under a residency budget the loop queues about one eviction per
//! prefetch, and one FIFO put each prefetch behind the evictions queued
//! before it (GPU run 40: stream with the oracle, 94 jobs queued on
//! average, 4 of 4 workers busy, the copy engine idle a third of the
//! time). A prefetch is what the GPU waits for. Evictions still get a
//! share: the ledger counts an evicted block until its UVM_MIGRATE to the
//! CPU returns (residency.rs), and a prefetch that needs its room is not
//! issued before (core's pump.rs), so an eviction left waiting holds
//! prefetches back. (Until the ledger followed evictions to their end it
//! counted a block gone when queued, and the budget overshot: GPU runs 58
//! and 60.)
//!
//! With `merge_blocks` set, a job that continues the last one queued in
//! its direction (same destination, adjacent blocks) joins it, up to that
//! many blocks: one UVM_MIGRATE instead of several. Why: GPU run 41,
//! stream under the oracle, had all 4 workers busy, 272 jobs queued on
//! average and half its prefetches single 2 MB blocks, while the copy
//! engine moved data to the GPU 1.23 s of the run. Only jobs still waiting
//! merge, so nothing queued is delayed, and the ledger is unchanged (it
//! counted each prefetch when it was queued, and counts each evicted block
//! until its merged job returns).
//!
//! Workers have a [`Role`]. With prefetch workers (`--prefetch-workers`),
//! those take only prefetches and the others take evictions first. Why
//! (GPU run 57, migbench on an idle H100 process): an ASYNC UVM_MIGRATE to
//! the GPU returns after 25-35 us per 2 MB (one thread issues 49 GB/s, the
//! copies' own rate), while one to the CPU takes 170 us per 2 MB alone
//! and 450-800 us with 4-8 threads (it adds CPU mappings, which waits for
//! the copy: uvm_migrate.c's "synchronous operations"), topping out near
//! 20 GB/s. In a shared pool the workers sit in evictions, and a prefetch
//! the GPU waits for queues behind them.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// Jobs queued per direction before new ones are dropped (and counted).
pub(super) const QUEUE: usize = 1024;
/// While both directions wait, one job in this many is an eviction.
const EVICT_EVERY: u32 = 4;

/// Which jobs a worker takes (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Prefetches first, every `EVICT_EVERY`-th an eviction while both wait.
    Any,
    /// Prefetches only.
    Prefetch,
    /// Evictions first, else prefetches.
    EvictFirst,
}

/// A job that can take in the next one (one UVM_MIGRATE for both).
pub(super) trait Merge {
    /// Takes `next` in if it continues this job (same direction and
    /// destination, adjacent blocks) and both fit in `max_blocks`.
    fn merge(&mut self, next: &Self, max_blocks: u64) -> bool;
}

/// What became of a pushed job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pushed {
    Queued,
    /// Joined the last job queued in its direction.
    Merged,
    /// Its direction is full, or the queue is closed.
    Refused,
}

/// The two directions' jobs (`J`: the workers' job, migrator.rs).
struct Queues<J> {
    to_gpu: VecDeque<J>,
    to_cpu: VecDeque<J>,
    /// Prefetches taken since the last eviction.
    since_evict: u32,
    closed: bool,
}

impl<J> Queues<J> {
    fn pick_for(&mut self, role: Role) -> Option<J> {
        match role {
            Role::Any => self.pick(),
            Role::Prefetch => self.to_gpu.pop_front(),
            Role::EvictFirst => self.to_cpu.pop_front().or_else(|| self.to_gpu.pop_front()),
        }
    }

    fn pick(&mut self) -> Option<J> {
        let evict = !self.to_cpu.is_empty()
            && (self.to_gpu.is_empty() || self.since_evict + 1 >= EVICT_EVERY);
        if evict {
            self.since_evict = 0;
            self.to_cpu.pop_front()
        } else {
            self.since_evict += 1;
            self.to_gpu.pop_front()
        }
    }
}

/// The queue shared by the loop (`push`) and the workers (`next`).
pub(super) struct JobQueue<J> {
    q: Mutex<Queues<J>>,
    /// Wakes `Any` and `EvictFirst` workers.
    ready: Condvar,
    /// Wakes `Prefetch` workers (an eviction must not wake only them).
    ready_prefetch: Condvar,
    /// Largest merged job in blocks; 0: jobs never merge.
    merge_blocks: u64,
}

impl<J: Merge> Default for JobQueue<J> {
    fn default() -> Self {
        Self::new(0)
    }
}

impl<J: Merge> JobQueue<J> {
    /// A queue whose jobs merge up to `merge_blocks` blocks (0: never).
    pub(super) fn new(merge_blocks: u64) -> Self {
        JobQueue {
            q: Mutex::new(Queues {
                to_gpu: VecDeque::new(),
                to_cpu: VecDeque::new(),
                since_evict: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            ready_prefetch: Condvar::new(),
            merge_blocks,
        }
    }

    /// Queues `j`, a prefetch when `to_gpu` (else an eviction), or merges
    /// it into the last job of its direction; refused when its direction
    /// is full or the queue is closed.
    pub(super) fn push(&self, j: J, to_gpu: bool) -> Pushed {
        let Ok(mut q) = self.q.lock() else {
            return Pushed::Refused;
        };
        if q.closed {
            return Pushed::Refused;
        }
        let d = if to_gpu { &mut q.to_gpu } else { &mut q.to_cpu };
        if self.merge_blocks > 0 && d.back_mut().is_some_and(|b| b.merge(&j, self.merge_blocks)) {
            return Pushed::Merged;
        }
        if d.len() >= QUEUE {
            return Pushed::Refused;
        }
        d.push_back(j);
        drop(q);
        // A prefetch wakes one of each kind: whichever is free takes it.
        if to_gpu {
            self.ready_prefetch.notify_one();
        }
        self.ready.notify_one();
        Pushed::Queued
    }

    /// The next job, waiting for one; None once closed and empty.
    #[cfg(test)]
    pub(super) fn next(&self) -> Option<J> {
        self.next_for(Role::Any)
    }

    /// The next job, None if none is queued (tests: a worker that runs
    /// when the test says).
    #[cfg(test)]
    pub(super) fn try_next(&self) -> Option<J> {
        self.q.lock().ok()?.pick_for(Role::Any)
    }

    /// The next job a worker of `role` takes, waiting for one; None once
    /// closed and nothing of its kind is left.
    pub(super) fn next_for(&self, role: Role) -> Option<J> {
        let cv = if role == Role::Prefetch {
            &self.ready_prefetch
        } else {
            &self.ready
        };
        let mut q = self.q.lock().ok()?;
        loop {
            if let Some(j) = q.pick_for(role) {
                return Some(j);
            }
            if q.closed {
                return None;
            }
            q = cv.wait(q).ok()?;
        }
    }

    /// No more jobs: the workers finish what is queued, then stop.
    pub(super) fn close(&self) {
        if let Ok(mut q) = self.q.lock() {
            q.closed = true;
        }
        self.ready.notify_all();
        self.ready_prefetch.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::migrator::Job;

    fn push(q: &JobQueue<Job>, j: Job) -> bool {
        q.push(j, j.goes_to_gpu()) == Pushed::Queued
    }

    #[test]
    fn prefetches_go_first_and_evictions_keep_a_share() {
        let q = JobQueue::default();
        for b in 0..3 {
            assert!(push(&q, Job::to_cpu(100 + b, 1, [1; 16])));
        }
        for b in 0..8 {
            assert!(push(&q, Job::to_gpu(b, 1, [1; 16])));
        }
        q.close();
        let order: Vec<(bool, u64)> = std::iter::from_fn(|| q.next())
            .map(|j| (j.goes_to_gpu(), j.first()))
            .collect();
        let want = [
            (true, 0),
            (true, 1),
            (true, 2),
            (false, 100),
            (true, 3),
            (true, 4),
            (true, 5),
            (false, 101),
            (true, 6),
            (true, 7),
            (false, 102),
        ];
        assert_eq!(order, want);
    }

    #[test]
    fn a_full_direction_refuses_and_a_closed_queue_drains_then_ends() {
        let q = JobQueue::default();
        for b in 0..QUEUE as u64 {
            assert!(push(&q, Job::to_cpu(b, 1, [1; 16])));
        }
        assert!(!push(&q, Job::to_cpu(9999, 1, [1; 16])));
        assert!(
            push(&q, Job::to_gpu(1, 1, [1; 16])),
            "the other direction has room"
        );
        q.close();
        assert_eq!(std::iter::from_fn(|| q.next()).count(), QUEUE + 1);
        assert!(q.next().is_none());
    }

    #[test]
    fn adjacent_jobs_merge_into_the_last_queued_up_to_the_limit() {
        let q = JobQueue::new(4);
        let (g, h) = ([1; 16], [2; 16]);
        let pushed: Vec<Pushed> = [
            Job::to_gpu(10, 1, g),
            Job::to_gpu(11, 2, g), // continues 10: 3 blocks
            Job::to_gpu(13, 2, g), // 5 > 4: a job of its own
            Job::to_gpu(12, 1, h), // another GPU
            Job::to_gpu(11, 1, h), // 11 then 12 for that GPU, in one
            Job::to_cpu(50, 1, g),
            Job::to_cpu(49, 1, g), // evictions merge the same way
            Job::to_cpu(60, 1, g), // not adjacent
        ]
        .into_iter()
        .map(|j| q.push(j, j.goes_to_gpu()))
        .collect();
        use Pushed::{Merged as M, Queued as Q};
        assert_eq!(pushed, [Q, M, Q, Q, M, Q, M, Q]);
        q.close();
        let got: Vec<(bool, u64, u64)> = std::iter::from_fn(|| q.next())
            .map(|j| (j.goes_to_gpu(), j.first(), j.blocks()))
            .collect();
        let want = [
            (true, 10, 3),
            (true, 13, 2),
            (true, 11, 2),
            (false, 49, 2),
            (false, 60, 1),
        ];
        assert_eq!(got, want);
        // Off (0): nothing merges.
        let q = JobQueue::new(0);
        assert_eq!(
            push_all(&q, &[Job::to_gpu(1, 1, g), Job::to_gpu(2, 1, g)]),
            2
        );
    }

    fn push_all(q: &JobQueue<Job>, jobs: &[Job]) -> usize {
        jobs.iter().filter(|&&j| push(q, j)).count()
    }

    #[test]
    fn prefetch_workers_take_only_prefetches_and_the_others_evictions_first() {
        let q = JobQueue::default();
        for j in [
            Job::to_cpu(100, 1, [1; 16]),
            Job::to_gpu(0, 1, [1; 16]),
            Job::to_cpu(101, 1, [1; 16]),
            Job::to_gpu(1, 1, [1; 16]),
        ] {
            assert!(push(&q, j));
        }
        let first = |r| q.next_for(r).map(|j| (j.goes_to_gpu(), j.first()));
        assert_eq!(first(Role::EvictFirst), Some((false, 100)));
        assert_eq!(first(Role::Prefetch), Some((true, 0)));
        assert_eq!(first(Role::EvictFirst), Some((false, 101)));
        // No eviction left: an eviction-first worker helps with prefetches.
        assert_eq!(first(Role::EvictFirst), Some((true, 1)));
        assert!(push(&q, Job::to_cpu(102, 1, [1; 16])));
        q.close();
        // Closed with only an eviction left: a prefetch worker ends.
        assert_eq!(first(Role::Prefetch), None);
        assert_eq!(first(Role::Any), Some((false, 102)));
    }

    #[test]
    fn an_eviction_wakes_a_waiting_eviction_worker_beside_a_prefetch_worker() {
        use std::sync::Arc;
        let q = Arc::new(JobQueue::<Job>::default());
        let spawn = |r: Role| {
            let q = q.clone();
            std::thread::spawn(move || q.next_for(r).map(|j| j.first()))
        };
        let (p, e) = (spawn(Role::Prefetch), spawn(Role::EvictFirst));
        std::thread::sleep(std::time::Duration::from_millis(20));
        push(&q, Job::to_cpu(7, 1, [1; 16]));
        assert_eq!(e.join().unwrap(), Some(7));
        push(&q, Job::to_gpu(8, 1, [1; 16]));
        assert_eq!(p.join().unwrap(), Some(8));
    }

    #[test]
    fn a_waiting_worker_wakes_for_a_job() {
        let q = std::sync::Arc::new(JobQueue::<Job>::default());
        let q2 = q.clone();
        let w = std::thread::spawn(move || q2.next().map(|j| j.first()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        push(&q, Job::to_gpu(42, 1, [1; 16]));
        assert_eq!(w.join().unwrap(), Some(42));
    }
}
