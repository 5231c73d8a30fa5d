//! How far a running launch larger than the limit has come through its
//! blocks, from the GPU's faults: the blocks it has passed are the first
//! victims, and its window starts where it is, not at its first block.
//!
//! Why: a launch larger than the limit must stream, and its list of
//! blocks is fixed when it starts. Without this the window stayed on the
//! launch's first blocks (resident long ago) and the victims were the
//! least recently migrated blocks, the ones the next launches read, not
//! the input the kernel had just finished with (GPU run 86: dnn, whose
//! first kernel reads 1 GiB twice under a 1 GiB budget, moved 2.8 GB a
//! step to the GPU and 3.1 GB back where it needs about 1.1 each).
//!
//! A fault on block `b` of a running launch's range says the kernel is
//! at `b` in it. Blocks more than a lag behind (thread blocks do not run
//! in lockstep) are passed unless a later launch uses them; they become
//! the first live victims (`Engine::passed`; evicted, never discarded).
//! A fault well behind the furthest one starts a new sweep of that range
//! (a grid-stride loop with more thread blocks than the GPU holds at once
//! sweeps its buffers once per wave): the range's place moves back. All
//! of it only while the running launches use more blocks than the limit;
//! else nothing changes.

use super::queue::Queue;
use serde::Serialize;
use std::time::{Duration, Instant};

/// A range's lag: at least this many blocks ...
const MIN_LAG: u64 = 4;
/// ... or this fraction of it.
const LAG_DIV: u64 = 16;
/// Ranges of running launches followed at most (launches on many streams
/// at once, or with many arguments, are followed in their first ranges).
const MAX_FRONTS: usize = 64;
/// How often the blocks later launches use are gathered again while
/// launches keep coming (each gathering reads the whole queue).
const LATER_EVERY: Duration = Duration::from_millis(1);

/// What the sweep saw (in the `ahead` object of the stats JSON).
#[derive(Serialize, Default, Clone, Debug, PartialEq, Eq)]
pub struct SweepStats {
    /// Blocks made the first victims because the running launch had
    /// passed them.
    pub passed_blocks: u64,
    /// Faults that moved a range's place back (a new sweep of it).
    pub sweep_restarts: u64,
    /// Running launches found larger than the limit.
    pub large_fronts: u64,
}

/// One range of a running launch, and the furthest block of it the GPU
/// faulted on in its current sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Front {
    first: u64,
    count: u64,
    at: Option<u64>,
}

impl Front {
    fn lag(&self) -> u64 {
        MIN_LAG.max(self.count / LAG_DIV)
    }

    fn contains(&self, b: u64) -> bool {
        b >= self.first && b - self.first < self.count
    }

    /// Where the range's blocks still to come start: a lag behind the
    /// furthest fault.
    fn start(&self) -> u64 {
        self.at
            .map_or(self.first, |a| a.saturating_sub(self.lag()).max(self.first))
    }
}

/// The running launches' places in their ranges, for the queue's front
/// generation they belong to.
#[derive(Default)]
pub struct Sweep {
    generation: Option<u64>,
    fronts: Vec<Front>,
    /// Blocks the running launches' ranges hold.
    front_blocks: u64,
    /// These running launches were counted in `large_fronts`.
    counted: bool,
    /// Blocks later launches use: sorted, disjoint `[start, end)`.
    later: Vec<(u64, u64)>,
    later_gen: Option<u64>,
    later_at: Option<Instant>,
    /// Bumped when a range's start moves: the list of upcoming blocks is
    /// computed again.
    pub version: u64,
    pub stats: SweepStats,
}

impl Sweep {
    /// Follows the running launches of `q`: new fronts, none placed yet,
    /// when they changed.
    pub fn follow(&mut self, q: &Queue) {
        if self.generation == Some(q.front_generation) {
            return;
        }
        self.generation = Some(q.front_generation);
        self.fronts.clear();
        let ranges = q.fronts().flat_map(|l| l.ranges.iter());
        for &(first, count) in ranges.take(MAX_FRONTS) {
            self.fronts.push(Front {
                first,
                count,
                at: None,
            });
        }
        self.front_blocks = self.fronts.iter().map(|f| f.count).sum();
        self.counted = false;
        self.later_gen = None;
        self.version += 1;
    }

    /// The blocks the launches behind the running ones use, merged.
    fn gather_later(&mut self, q: &Queue) {
        self.later.clear();
        for l in q.later() {
            for &(first, count) in &l.ranges {
                self.later.push((first, first.saturating_add(count)));
            }
        }
        self.later.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.later.len());
        for &(s, e) in &self.later {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.later = merged;
        self.later_gen = Some(q.generation);
        self.later_at = Some(Instant::now());
    }

    /// Does a launch behind the running ones use `b`?
    pub fn later_uses(&self, b: u64) -> bool {
        let i = self.later.partition_point(|&(s, _)| s <= b);
        i > 0 && b < self.later[i - 1].1
    }

    /// The GPU, under a limit of `limit` blocks, faulted on `b`: returns
    /// the blocks of a running range the kernel has now passed (a lag
    /// behind the fault), if any. Nothing while the running launches fit.
    pub fn fault(&mut self, q: &Queue, b: u64, limit: u64) -> Option<std::ops::Range<u64>> {
        self.follow(q);
        if self.front_blocks <= limit {
            return None;
        }
        if !self.counted {
            self.counted = true;
            self.stats.large_fronts += 1;
        }
        let stale = self.later_gen != Some(q.generation)
            && (self.later_gen.is_none()
                || self.later_at.is_none_or(|t| t.elapsed() >= LATER_EVERY));
        if stale {
            self.gather_later(q);
        }
        let f = self.fronts.iter_mut().find(|f| f.contains(b))?;
        let lag = f.lag();
        match f.at {
            Some(a) if b >= a => {
                let from = f.start();
                f.at = Some(b);
                self.version += 1;
                Some(from..f.start()).filter(|r| !r.is_empty())
            }
            Some(a) if b.saturating_add(lag) < a => {
                f.at = Some(b);
                self.stats.sweep_restarts += 1;
                self.version += 1;
                None
            }
            Some(_) => None,
            None => {
                f.at = Some(b);
                self.version += 1;
                Some(f.first..f.start()).filter(|r| !r.is_empty())
            }
        }
    }

    /// Where a running launch's range `(first, count)` starts in the list
    /// of blocks to come: where the kernel is in it, when followed.
    pub fn start(&self, first: u64, count: u64) -> u64 {
        (self.fronts.iter())
            .find(|f| f.first == first && f.count == count)
            .map_or(first, Front::start)
    }

    /// Counts blocks made the first victims.
    pub fn count_passed(&mut self, n: u64) {
        self.stats.passed_blocks += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_uapi::execpage::encode;
    use prescient_uapi::launchring::Record;

    fn rec(stream: u64, id: u64, ranges: &[(u64, u64)]) -> Record {
        let mut r = Record {
            id: encode(id),
            stream,
            ..Record::default()
        };
        for &(f, n) in ranges {
            r.push(f, n);
        }
        r
    }

    /// dnn's first layer (umbench.cu): an input of 512 blocks at 1000 and
    /// an output of 128 at 2000, which the next layer reads, under a limit
    /// of 480 blocks. Faults going up pass the input a lag (32) behind, in
    /// spans that join; the output is never passed, since the next launch
    /// uses it; a fault far behind starts the second wave's sweep.
    #[test]
    fn faults_through_a_large_launch_pass_what_it_left_behind() {
        let mut q = Queue::default();
        q.push(&rec(7, 1, &[(1000, 512), (2000, 128)]));
        q.push(&rec(7, 2, &[(2000, 128), (3000, 128)]));
        let mut s = Sweep::default();
        assert_eq!(s.fault(&q, 1010, 480), None, "not a lag ahead yet");
        assert!(s.later_uses(2000) && s.later_uses(3127) && !s.later_uses(1000));
        assert!(!s.later_uses(3128));
        assert_eq!(s.start(1000, 512), 1000);
        assert_eq!(s.fault(&q, 1100, 480), Some(1000..1068));
        assert_eq!(s.start(1000, 512), 1068);
        assert_eq!(
            s.fault(&q, 1090, 480),
            None,
            "within the lag: thread blocks behind"
        );
        assert_eq!(s.fault(&q, 1200, 480), Some(1068..1168));
        assert_eq!(s.fault(&q, 2050, 480), Some(2000..2042));
        // The second wave starts at the input's first blocks again.
        assert_eq!(s.fault(&q, 1002, 480), None);
        assert_eq!(s.stats.sweep_restarts, 1);
        assert_eq!(s.start(1000, 512), 1000);
        assert_eq!(s.fault(&q, 1040, 480), Some(1000..1008));
        assert_eq!(s.fault(&q, 5000, 480), None, "no running launch's block");
    }

    /// A running launch within the limit is not followed; a new running
    /// launch starts afresh.
    #[test]
    fn only_launches_larger_than_the_limit_are_followed() {
        let mut q = Queue::default();
        q.push(&rec(7, 1, &[(0, 100)]));
        q.push(&rec(7, 2, &[(0, 600)]));
        let mut s = Sweep::default();
        assert_eq!(s.fault(&q, 90, 480), None);
        assert_eq!(s.start(0, 100), 0);
        q.started(7, 2);
        assert_eq!(s.start(0, 600), 0, "not followed yet");
        assert_eq!(s.fault(&q, 300, 480), Some(0..263));
        assert_eq!(s.start(0, 600), 263);
        assert_eq!(s.start(0, 100), 0, "another range");
        assert_eq!(s.fault(&q, 400, 480), Some(263..363));
        assert_eq!(s.stats.large_fronts, 1);
        // The same kernel launched again: its place is not the last one's.
        q.push(&rec(7, 2, &[(0, 600)]));
        q.push(&rec(7, 3, &[(0, 600)]));
        q.started(7, 3);
        s.follow(&q);
        assert_eq!(s.start(0, 600), 0);
    }
}
