//! Allocations the CPU rewrites every step, tried in host memory: the GPU
//! reads them there over the link instead of migrating them in and
//! evicting them again; kept only if the program's steps got faster.
//!
//! Why: a buffer the CPU rewrites every step (a program's input, written
//! on the CPU and read by its first kernel) goes to the GPU and back once
//! a step whatever the policy does, and the way back is the slow direction
//! (UVM_MIGRATE to the CPU tops out near 20 GB/s, BENCHMARKS-gpu.md run
//! 57). Advised to stay in host memory and mapped to the GPU (what
//! `cudaMemAdvise` SetPreferredLocation host + SetAccessedBy does), dnn's
//! 1 GiB input made its GPU phase 34 ms instead of 169 (GPU run 93). But a
//! block the GPU reads many times per CPU write crosses the link at every
//! read (run 94: a 4 KB result took 275 ms an iteration instead of 9 once
//! its kernel's atomics went to host memory), and faults do not say which
//! kind a block is. So every advice is a measured trial.
//!
//! States: a block the CPU's own fault took back from the GPU (a migration
//! to the CPU for coherence) in `TAKES_TO_TRY` rounds, the GPU having it
//! again in between, makes its allocation a *candidate* if it is at least
//! `MIN_TRY_BYTES` and was never tried. With the step's length known (the
//! median of the last `SAMPLES` intervals between two starts of one
//! execution id), the candidate is *on trial*: advised, never prefetched.
//! After `SKIP` more intervals, the median of the next `SAMPLES` decides:
//! at most `KEEP_PCT`% of the length before, it is *kept*; else the advice
//! is *undone* and the allocation never tried again. When the loop ends
//! (the process exits, or prescientd detaches) every advice is taken back:
//! a detached process runs as it would have without prescientd. One trial at a time,
//! none after `MAX_UNDONE` undone; without execution ids (no `prescientctl
//! run`) there is no step length and nothing is tried.

use super::oracle::maps::Range;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Rounds of the CPU taking a block back that make its allocation a
/// candidate.
pub const TAKES_TO_TRY: u8 = 2;
/// Smaller allocations are never tried (results the CPU reads, whose
/// atomics would cross the link).
pub const MIN_TRY_BYTES: u64 = 64 << 20;
/// Step intervals of one measurement.
pub const SAMPLES: usize = 8;
/// Intervals skipped after the advice (steps that straddle it).
pub const SKIP: u64 = 4;
/// A trial is kept if its step is at most this part of the one before.
pub const KEEP_PCT: u128 = 90;
/// Blocks followed at most (128 GB); allocations tried at most.
pub const MAX_TRACKED: usize = 1 << 16;
pub const MAX_TRIED: usize = 64;
/// Trials undone after which the process gets no more (each costs the
/// steps it lasted).
pub const MAX_UNDONE: u64 = 2;
/// Execution ids whose last start is remembered at most.
const MAX_IDS: usize = 1 << 14;

/// What the trials did (`host_shared` in the stats JSON).
#[derive(Serialize, Default, Clone, Debug, PartialEq, Eq)]
pub struct SharedStats {
    /// Rounds in which the CPU's fault took a block back from the GPU.
    pub cpu_takes: u64,
    /// Allocations tried in host memory, kept, undone; advice the driver
    /// refused.
    pub trials: u64,
    pub kept: u64,
    pub undone: u64,
    pub errors: u64,
    /// The step's length before and during the last trial, in us.
    pub last_before_us: u64,
    pub last_during_us: u64,
    /// Prefetches declined because the block lives in host memory.
    pub prefetches_declined: u64,
}

/// What the process is to do for the trials this turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Advise the allocation to stay in host memory (a trial starts).
    Advise(Range),
    /// Take the advice back (the trial made the steps slower).
    Undo(Range),
}

/// The step's length, from the intervals between two starts of one
/// execution id (each kernel of a step recurs once a step).
#[derive(Default)]
struct Steps {
    last: HashMap<u64, Instant>,
    intervals: VecDeque<Duration>,
    /// Intervals seen in all.
    seen: u64,
}

impl Steps {
    fn start(&mut self, id: u64, now: Instant) {
        if self.last.len() >= MAX_IDS && !self.last.contains_key(&id) {
            self.last.clear();
        }
        if let Some(t) = self.last.insert(id, now) {
            if self.intervals.len() == 4 * SAMPLES {
                self.intervals.pop_front();
            }
            self.intervals.push_back(now.saturating_duration_since(t));
            self.seen += 1;
        }
    }

    /// The median of the last `SAMPLES` intervals.
    fn median(&self) -> Option<Duration> {
        if self.intervals.len() < SAMPLES {
            return None;
        }
        let mut v: Vec<Duration> = self.intervals.iter().rev().take(SAMPLES).copied().collect();
        v.sort_unstable();
        Some(v[SAMPLES / 2])
    }
}

/// One followed block: rounds the CPU took it back, and whether this
/// round counted already.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    takes: u8,
    on_cpu: bool,
}

/// A trial under way.
#[derive(Clone, Copy, Debug)]
struct Trial {
    alloc: Range,
    before: Duration,
    /// `Steps::seen` when it started.
    from: u64,
}

/// Blocks followed, candidates, the trial, and what was kept.
#[derive(Default)]
pub struct SharedBlocks {
    followed: HashMap<u64, Entry>,
    /// Blocks whose allocation is to be tried.
    candidates: Vec<u64>,
    trial: Option<Trial>,
    kept: Vec<Range>,
    /// Allocations tried (kept or undone) or refused: never tried again.
    tried: Vec<Range>,
    steps: Steps,
    pub stats: SharedStats,
}

impl SharedBlocks {
    /// The CPU's fault took (part of) block `b` back from the GPU.
    pub fn cpu_took(&mut self, b: u64) {
        if !self.followed.contains_key(&b) && self.followed.len() >= MAX_TRACKED {
            return;
        }
        let e = self.followed.entry(b).or_default();
        if e.on_cpu {
            return;
        }
        e.on_cpu = true;
        e.takes = e.takes.saturating_add(1);
        self.stats.cpu_takes += 1;
        if e.takes == TAKES_TO_TRY && self.candidates.len() < MAX_TRIED {
            self.candidates.push(b);
        }
    }

    /// The GPU had block `b` again (a fault, or a migration to it).
    pub fn gpu_had(&mut self, b: u64) {
        if let Some(e) = self.followed.get_mut(&b) {
            e.on_cpu = false;
        }
    }

    /// A stream started the kernel with execution id `id` at `now`.
    pub fn kernel_start(&mut self, id: u64, now: Instant) {
        self.steps.start(id, now);
    }

    /// Does the byte address `addr` live in host memory (kept, or on
    /// trial)? Such blocks are never prefetched.
    pub fn is_host(&self, addr: u64) -> bool {
        self.trial.is_some_and(|t| t.alloc.holds(addr)) || self.kept.iter().any(|a| a.holds(addr))
    }

    /// Has a block waiting for its allocation to be looked up?
    #[cfg(test)]
    pub fn has_candidates(&self) -> bool {
        self.trial.is_none() && !self.candidates.is_empty()
    }

    /// This turn's action: the trial's verdict once it has its samples,
    /// else a new trial for a candidate (`alloc_of`: its allocation, called
    /// only when a candidate is looked up).
    pub fn decide(&mut self, mut alloc_of: impl FnMut(u64) -> Option<Range>) -> Option<Action> {
        if let Some(t) = self.trial {
            return self.verdict(t);
        }
        if self.stats.undone >= MAX_UNDONE {
            self.candidates.clear();
            return None;
        }
        let before = self.steps.median()?;
        while let Some(b) = self.candidates.pop() {
            let Some(a) = alloc_of(b << prescient_core::BLOCK_SHIFT) else {
                continue;
            };
            if a.size() < MIN_TRY_BYTES || self.tried.contains(&a) {
                continue;
            }
            if self.tried.len() >= MAX_TRIED {
                self.candidates.clear();
                return None;
            }
            self.tried.push(a);
            self.trial = Some(Trial {
                alloc: a,
                before,
                from: self.steps.seen,
            });
            self.stats.trials += 1;
            self.stats.last_before_us = before.as_micros() as u64;
            return Some(Action::Advise(a));
        }
        None
    }

    /// The verdict of trial `t`, once `SKIP + SAMPLES` intervals came.
    fn verdict(&mut self, t: Trial) -> Option<Action> {
        if self.steps.seen < t.from + SKIP + SAMPLES as u64 {
            return None;
        }
        let during = self.steps.median()?;
        self.trial = None;
        self.stats.last_during_us = during.as_micros() as u64;
        if during.as_nanos() * 100 <= t.before.as_nanos() * KEEP_PCT {
            self.kept.push(t.alloc);
            self.stats.kept += 1;
            None
        } else {
            self.stats.undone += 1;
            Some(Action::Undo(t.alloc))
        }
    }

    /// The allocations in host memory now (kept, or on trial), forgotten:
    /// the loop is ending and takes its advice back.
    pub fn take_placed(&mut self) -> Vec<Range> {
        let mut out = std::mem::take(&mut self.kept);
        out.extend(self.trial.take().map(|t| t.alloc));
        out
    }

    /// The driver refused the advice for a trial's allocation: it ends
    /// there (the allocation is never tried again).
    pub fn refused(&mut self) {
        self.trial = None;
        self.stats.errors += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const INPUT: Range = Range {
        start: 4 * GIB,
        end: 5 * GIB,
    };

    fn alloc_of(addr: u64) -> Option<Range> {
        INPUT.holds(addr).then_some(INPUT)
    }

    /// `n` steps of `per` each, of five kernels (each recurs once a step).
    fn run_steps(s: &mut SharedBlocks, t0: &mut Instant, n: usize, per: Duration) {
        for _ in 0..n {
            for id in 0..5 {
                s.kernel_start(id, *t0 + per / 5 * id as u32);
            }
            *t0 += per;
        }
    }

    /// A block of dnn's input taken back by the CPU in two rounds: its
    /// allocation is tried once the step's length is known; steps three
    /// times shorter keep it, and its blocks are never prefetched.
    #[test]
    fn a_trial_that_shortens_the_step_is_kept() {
        let mut s = SharedBlocks::default();
        let mut t = Instant::now();
        let block = ((4 * GIB) >> prescient_core::BLOCK_SHIFT) + 10;
        s.cpu_took(block);
        s.cpu_took(block);
        s.gpu_had(block);
        assert!(!s.has_candidates(), "one round, two events");
        s.cpu_took(block);
        assert!(s.has_candidates());
        assert_eq!(s.decide(alloc_of), None, "no step length yet");
        run_steps(&mut s, &mut t, 3, Duration::from_millis(450));
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(INPUT)));
        assert!(s.is_host(4 * GIB + 123) && !s.is_host(5 * GIB));
        run_steps(&mut s, &mut t, 2, Duration::from_millis(150));
        assert_eq!(s.decide(alloc_of), None, "samples still coming");
        run_steps(&mut s, &mut t, 1, Duration::from_millis(150));
        assert_eq!(s.decide(alloc_of), None);
        assert_eq!(s.stats.kept, 1);
        assert!(s.is_host(4 * GIB));
        assert_eq!(s.stats.last_before_us, 450_000);
        assert_eq!(s.stats.last_during_us, 150_000);
        assert_eq!(s.take_placed(), [INPUT], "taken back when the loop ends");
        assert!(!s.is_host(4 * GIB));
    }

    /// A trial that makes the steps longer is undone, and the allocation is
    /// never tried again; a small allocation (a result) is never tried.
    #[test]
    fn a_trial_that_slows_the_step_is_undone_and_not_tried_again() {
        let mut s = SharedBlocks::default();
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(25));
        let block = (4 * GIB) >> prescient_core::BLOCK_SHIFT;
        for _ in 0..2 {
            s.cpu_took(block);
            s.gpu_had(block);
        }
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(INPUT)));
        run_steps(&mut s, &mut t, 3, Duration::from_millis(275));
        assert_eq!(s.decide(alloc_of), Some(Action::Undo(INPUT)));
        assert!(!s.is_host(4 * GIB));
        assert_eq!(s.stats.undone, 1);
        for _ in 0..4 {
            s.cpu_took(block);
            s.gpu_had(block);
        }
        assert_eq!(s.decide(alloc_of), None, "tried once");
        let small = |_| {
            Some(Range {
                start: 0,
                end: 4096,
            })
        };
        for _ in 0..2 {
            s.cpu_took(7);
            s.gpu_had(7);
        }
        assert_eq!(s.decide(small), None);
        assert_eq!(s.stats.trials, 1);
        // A second allocation undone too: no third trial.
        let other = Range {
            start: 8 * GIB,
            end: 9 * GIB,
        };
        let third = Range {
            start: 10 * GIB,
            end: 11 * GIB,
        };
        for (a, b) in [(other, 8 * GIB), (third, 10 * GIB)] {
            let blk = b >> prescient_core::BLOCK_SHIFT;
            for _ in 0..2 {
                s.cpu_took(blk);
                s.gpu_had(blk);
            }
            let got = s.decide(|x| (x >= a.start && x < a.end).then_some(a));
            if a == other {
                assert_eq!(got, Some(Action::Advise(other)));
                run_steps(&mut s, &mut t, 3, Duration::from_millis(900));
                assert_eq!(s.decide(alloc_of), Some(Action::Undo(other)));
            } else {
                assert_eq!(got, None, "two undone: no more trials");
            }
        }
        assert_eq!(s.stats.undone, 2);
    }

    /// A refused advice ends the trial; the followed set is bounded.
    #[test]
    fn refusals_end_the_trial_and_the_followed_set_is_bounded() {
        let mut s = SharedBlocks::default();
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(25));
        let block = (4 * GIB) >> prescient_core::BLOCK_SHIFT;
        for _ in 0..2 {
            s.cpu_took(block);
            s.gpu_had(block);
        }
        assert!(matches!(s.decide(alloc_of), Some(Action::Advise(_))));
        s.refused();
        assert!(!s.is_host(4 * GIB));
        assert_eq!(s.stats.errors, 1);
        for b in 0..MAX_TRACKED as u64 + 10 {
            s.cpu_took(b);
        }
        assert_eq!(s.followed.len(), MAX_TRACKED);
    }
}
