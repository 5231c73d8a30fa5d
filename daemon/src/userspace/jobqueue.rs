//! The migration workers' queue: prefetches (to the GPU) before evictions
//! (to the CPU), with every `EVICT_EVERY`-th job an eviction while both
//! wait.
//!
//! Why: under a residency budget the loop queues about one eviction per
//! prefetch, and one FIFO put each prefetch behind the evictions queued
//! before it (GPU run 40: stream with the oracle, 94 jobs queued on
//! average, 4 of 4 workers busy, the copy engine idle a third of the
//! time). A prefetch is what the GPU waits for; an eviction only keeps the
//! budget, whose ledger already counts the block gone. Evictions still get
//! a share, so the GPU's real residency stays near the ledger's.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// Jobs queued per direction before new ones are dropped (and counted).
pub(super) const QUEUE: usize = 1024;
/// While both directions wait, one job in this many is an eviction.
const EVICT_EVERY: u32 = 4;

/// The two directions' jobs (`J`: the workers' job, migrator.rs).
struct Queues<J> {
    to_gpu: VecDeque<J>,
    to_cpu: VecDeque<J>,
    /// Prefetches taken since the last eviction.
    since_evict: u32,
    closed: bool,
}

impl<J> Queues<J> {
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
    ready: Condvar,
}

impl<J> Default for JobQueue<J> {
    fn default() -> Self {
        JobQueue {
            q: Mutex::new(Queues {
                to_gpu: VecDeque::new(),
                to_cpu: VecDeque::new(),
                since_evict: 0,
                closed: false,
            }),
            ready: Condvar::new(),
        }
    }
}

impl<J> JobQueue<J> {
    /// Queues `j`, a prefetch when `to_gpu` (else an eviction); false (not
    /// queued) when its direction is full or the queue is closed.
    pub(super) fn push(&self, j: J, to_gpu: bool) -> bool {
        let Ok(mut q) = self.q.lock() else {
            return false;
        };
        if q.closed {
            return false;
        }
        let d = if to_gpu { &mut q.to_gpu } else { &mut q.to_cpu };
        if d.len() >= QUEUE {
            return false;
        }
        d.push_back(j);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// The next job, waiting for one; None once closed and empty.
    pub(super) fn next(&self) -> Option<J> {
        let mut q = self.q.lock().ok()?;
        loop {
            if let Some(j) = q.pick() {
                return Some(j);
            }
            if q.closed {
                return None;
            }
            q = self.ready.wait(q).ok()?;
        }
    }

    /// No more jobs: the workers finish what is queued, then stop.
    pub(super) fn close(&self) {
        if let Ok(mut q) = self.q.lock() {
            q.closed = true;
        }
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::migrator::Job;

    fn push(q: &JobQueue<Job>, j: Job) -> bool {
        q.push(j, j.goes_to_gpu())
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
    fn a_waiting_worker_wakes_for_a_job() {
        let q = std::sync::Arc::new(JobQueue::<Job>::default());
        let q2 = q.clone();
        let w = std::thread::spawn(move || q2.next().map(|j| j.first()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        push(&q, Job::to_gpu(42, 1, [1; 16]));
        assert_eq!(w.join().unwrap(), Some(42));
    }
}
