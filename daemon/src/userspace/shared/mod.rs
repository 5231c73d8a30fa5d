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
//! The same holds for the part of a kernel larger than the budget that does
//! not fit (FDTD-2D: each kernel sweeps two or three 1.07 GB fields through
//! a 1.61 GB budget, every block in and out once a step): read and written
//! in host memory it costs link bytes at every use but nothing on the way
//! out (GPU run 125: two of FDTD-2D's fields advised by hand, 155.6 ms a
//! step under the driver against Prescient's 301.8).
//!
//! States: a block the CPU's own fault took back from the GPU (a migration
//! to the CPU for coherence) in `TAKES_TO_TRY` rounds, the GPU having it
//! again in between, makes its allocation a *candidate* if it is at least
//! `MIN_TRY_BYTES` and was never tried. Without such a candidate, running
//! launches whose ranges not in host memory exceed the budget offer a
//! group (`SharedBlocks::overflow`): from the ranges of every such launch
//! since the last trial, a step after the first, the largest never tried,
//! as many as it takes for the rest to fit, each giving every allocation it
//! covers (the runtime merges touching extents). FDTD-2D's two fields of
//! three go in one trial (one after another, each trial lasting four steps,
//! its iterations 0-7 ran slow: GPU runs 128-140). The CPU's candidates go
//! first: dnn's input, which its first kernel also sweeps, is one.
//!
//! With the step's length known (the median of the last `SAMPLES`
//! intervals between two starts of one execution id), the candidate is *on trial*: advised, never prefetched.
//! After `SKIP` more intervals, the median of the next `SAMPLES` decides:
//! at most `KEEP_PCT`% of the length before, it is *kept*; else the advice
//! is *undone* and the allocation never tried again. When the loop ends
//! (the process exits, or prescientd detaches) every advice is taken back:
//! a detached process runs as it would have without prescientd. One trial at a time,
//! none after `MAX_UNDONE` undone; without execution ids (no `prescientctl
//! run`) there is no step length and nothing is tried.
//!
//! Ranges the job advised to stay in host memory itself (user.rs, from the
//! launch ring's host-advice table) count as host memory too, but are the
//! job's: never tried, never undone.

mod user;

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
/// Ranges of launches larger than the budget followed at most between
/// two trials.
pub const MAX_UNION: usize = 1024;
/// Allocation lookups one overflow range may take (a range the ring
/// claims is not trusted).
const MAX_LOOKUPS: usize = 4096;
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
    /// Trials in host memory (of one allocation, or of an overflow
    /// group), kept, undone; advice the driver refused.
    pub trials: u64,
    pub kept: u64,
    pub undone: u64,
    pub errors: u64,
    /// The step's length before and during the last trial, in us.
    pub last_before_us: u64,
    pub last_during_us: u64,
    /// Prefetches declined because the block lives in host memory.
    pub prefetches_declined: u64,
    /// Times the overflow group changed to a new, non-empty one (running
    /// launches exceeding the budget).
    pub overflow_candidates: u64,
    /// The job's own host advice (user.rs): ranges and bytes, and trials
    /// it superseded (their allocation then left alone, not undone).
    pub user_host_ranges: u64,
    pub user_host_bytes: u64,
    pub user_superseded: u64,
}

/// What the process is to do for the trials this turn, with the trial's
/// allocations (one, or the running kernel's overflow group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Advise the allocations to stay in host memory (a trial starts).
    Advise(Vec<Range>),
    /// Take the advice back (the trial made the steps slower).
    Undo(Vec<Range>),
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
#[derive(Debug)]
struct Trial {
    allocs: Vec<Range>,
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
    /// The overflow group (`(first block, blocks)` ranges as the ring
    /// gives them), tried together when no CPU candidate waits, and the
    /// generation of running launches `overflow` last looked at.
    overflow: Vec<(u64, u64)>,
    overflow_generation: Option<u64>,
    /// The ranges of the launches larger than the budget since the last
    /// trial started (at most `MAX_UNION`).
    overflow_union: Vec<(u64, u64)>,
    /// `Steps::seen` when the union's first range came: the group is
    /// offered a whole step later, once every kernel of a step added its.
    union_since: Option<u64>,
    /// The ranges the job itself advised to stay in host memory (user.rs):
    /// never prefetched, never tried, never undone.
    user: Vec<Range>,
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

    /// Running launches (of `generation`) whose `ranges` (first block,
    /// blocks) not in host memory exceed `limit_blocks` sweep every block
    /// through the limit: with those of every such launch since the last
    /// trial started, a step after the first: their largest ranges of at
    /// least `MIN_TRY_BYTES` never tried (the lowest address first among
    /// equals; whether one is in host memory or was tried is asked of its
    /// middle block), as many as it takes for the rest to fit, become the
    /// overflow group, tried together. Launches that fit change nothing.
    /// Looks once a generation.
    pub fn overflow(&mut self, generation: u64, ranges: &[(u64, u64)], limit_blocks: u64) {
        if self.overflow_generation == Some(generation) {
            return;
        }
        self.overflow_generation = Some(generation);
        // A range is named by its middle block: its first one may start
        // before the allocation (2 MB blocks, allocations aligned less),
        // in the mapping below it. The ranges come from the process's
        // ring: no arithmetic on them may overflow.
        let mid = |(first, n): (u64, u64)| {
            first
                .saturating_add(n / 2)
                .saturating_mul(prescient_core::BLOCK_BYTES)
        };
        let mut left: Vec<(u64, u64)> = (ranges.iter().copied())
            .filter(|&r| !self.is_host(mid(r)))
            .collect();
        largest_first(&mut left);
        left.dedup_by_key(|r| r.0);
        if blocks_in(&left) <= limit_blocks {
            return;
        }
        // The union of the ranges of every launch larger than the budget
        // since the last trial: FDTD-2D's kernels each sweep two fields of
        // three, the three together.
        let since = *self.union_since.get_or_insert(self.steps.seen);
        for r in left {
            let u = &mut self.overflow_union;
            if let Some(x) = u.iter_mut().find(|x| x.0 == r.0) {
                x.1 = x.1.max(r.1);
            } else if u.len() < MAX_UNION {
                u.push(r);
            }
        }
        if self.steps.seen < since + self.steps.last.len() as u64 {
            return;
        }
        let mut all: Vec<(u64, u64)> = (self.overflow_union.iter().copied())
            .filter(|&r| !self.is_host(mid(r)))
            .collect();
        largest_first(&mut all);
        let untried = |&&r: &&(u64, u64)| {
            r.1.saturating_mul(prescient_core::BLOCK_BYTES) >= MIN_TRY_BYTES
                && !self.tried.iter().any(|a| a.holds(mid(r)))
        };
        // The largest ranges first, until what is left fits: FDTD-2D's
        // three fields under a budget of one and a half give two, tried
        // together instead of one after another.
        let mut group = Vec::new();
        let mut over = blocks_in(&all);
        for r in all.iter().filter(untried) {
            if over <= limit_blocks {
                break;
            }
            group.push(*r);
            over = over.saturating_sub(r.1);
        }
        if !group.is_empty() && group != self.overflow {
            self.stats.overflow_candidates += 1;
        }
        self.overflow = group;
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

    /// Does the byte address `addr` live in host memory (kept, on trial,
    /// or so advised by the job itself)? Such blocks are never prefetched.
    pub fn is_host(&self, addr: u64) -> bool {
        let on_trial = self.trial.as_ref().map_or(&[][..], |t| &t.allocs[..]);
        (on_trial.iter().chain(&self.kept).chain(&self.user)).any(|a| a.holds(addr))
    }

    /// Has a block waiting for its allocation to be looked up?
    #[cfg(test)]
    pub fn has_candidates(&self) -> bool {
        self.trial.is_none() && (!self.candidates.is_empty() || !self.overflow.is_empty())
    }

    /// This turn's action: the trial's verdict once it has its samples,
    /// else a new trial: a CPU candidate's allocation, else the running
    /// kernel's overflow group (`alloc_of`: an address's allocation, called
    /// only when a candidate is looked up).
    pub fn decide(&mut self, mut alloc_of: impl FnMut(u64) -> Option<Range>) -> Option<Action> {
        if self.trial.is_some() {
            return self.verdict();
        }
        if self.stats.undone >= MAX_UNDONE {
            self.candidates.clear();
            self.overflow.clear();
            return None;
        }
        let before = self.steps.median()?;
        let allocs = match self.cpu_candidate(&mut alloc_of) {
            Some(a) => vec![a],
            None => self.overflow_group(&mut alloc_of)?,
        };
        self.tried.extend(&allocs);
        self.overflow_union.clear();
        self.union_since = None;
        self.trial = Some(Trial {
            allocs: allocs.clone(),
            before,
            from: self.steps.seen,
        });
        self.stats.trials += 1;
        self.stats.last_before_us = before.as_micros() as u64;
        Some(Action::Advise(allocs))
    }

    /// May allocation `a` be tried: large enough, never tried, not the
    /// job's own advice?
    fn triable(&self, a: Range) -> bool {
        a.size() >= MIN_TRY_BYTES && !self.tried.contains(&a) && !self.user_overlaps(a)
    }

    /// The allocation of the first CPU candidate that may be tried.
    fn cpu_candidate(&mut self, alloc_of: &mut impl FnMut(u64) -> Option<Range>) -> Option<Range> {
        while let Some(b) = self.candidates.pop() {
            let Some(a) = alloc_of(b << prescient_core::BLOCK_SHIFT) else {
                continue;
            };
            if self.tried.len() >= MAX_TRIED {
                self.candidates.clear();
                return None;
            }
            if self.triable(a) {
                return Some(a);
            }
        }
        None
    }

    /// The allocations of the overflow group that may be tried, each once
    /// (within `MAX_TRIED`); None if none may.
    fn overflow_group(
        &mut self,
        alloc_of: &mut impl FnMut(u64) -> Option<Range>,
    ) -> Option<Vec<Range>> {
        let mut group: Vec<Range> = Vec::new();
        for (first, n) in std::mem::take(&mut self.overflow) {
            // The runtime merges touching extents: one range may span
            // several allocations (FDTD-2D's ex and ey, adjacent, are one
            // 1,024-block range). Each allocation it covers by at least
            // MIN_TRY_BYTES is in the group; a neighbour a partial block
            // reaches is not.
            let range = Range {
                start: first.saturating_mul(prescient_core::BLOCK_BYTES),
                end: (first.saturating_add(n)).saturating_mul(prescient_core::BLOCK_BYTES),
            };
            let mut addr = range.start;
            for _ in 0..MAX_LOOKUPS {
                if addr >= range.end {
                    break;
                }
                let Some(a) = alloc_of(addr) else {
                    addr = addr.saturating_add(prescient_core::BLOCK_BYTES);
                    continue;
                };
                let room = self.tried.len() + group.len() < MAX_TRIED;
                let covered = a.overlap(&range) >= MIN_TRY_BYTES;
                if covered && self.triable(a) && !group.contains(&a) && room {
                    group.push(a);
                }
                addr = a.end.max(addr.saturating_add(1));
            }
        }
        (!group.is_empty()).then_some(group)
    }

    /// The verdict of the trial under way, once `SKIP + SAMPLES`
    /// intervals came.
    fn verdict(&mut self) -> Option<Action> {
        let from = self.trial.as_ref()?.from;
        if self.steps.seen < from + SKIP + SAMPLES as u64 {
            return None;
        }
        let during = self.steps.median()?;
        let t = self.trial.take()?;
        self.stats.last_during_us = during.as_micros() as u64;
        if during.as_nanos() * 100 <= t.before.as_nanos() * KEEP_PCT {
            self.kept.extend(t.allocs);
            self.stats.kept += 1;
            None
        } else {
            self.stats.undone += 1;
            Some(Action::Undo(t.allocs))
        }
    }

    /// The allocations in host memory now (kept, or on trial), forgotten:
    /// the loop is ending and takes its advice back.
    pub fn take_placed(&mut self) -> Vec<Range> {
        let mut out = std::mem::take(&mut self.kept);
        out.extend(self.trial.take().into_iter().flat_map(|t| t.allocs));
        out
    }

    /// The driver refused the advice for a trial's allocations (the caller
    /// took back what it had advised): the trial ends there, and its
    /// allocations are never tried again.
    pub fn refused(&mut self) {
        self.trial = None;
        self.stats.errors += 1;
    }
}

/// Orders `(first block, blocks)` ranges the largest first, the lowest
/// address first among equals (the overflow group's order).
fn largest_first(ranges: &mut [(u64, u64)]) {
    ranges.sort_unstable_by_key(|&(first, n)| (std::cmp::Reverse(n), first));
}

/// Blocks in `(first block, blocks)` ranges (saturating: the ranges come
/// from the process's ring).
fn blocks_in(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().fold(0u64, |sum, r| sum.saturating_add(r.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    pub(super) const INPUT: Range = Range {
        start: 4 * GIB,
        end: 5 * GIB,
    };

    pub(super) fn alloc_of(addr: u64) -> Option<Range> {
        INPUT.holds(addr).then_some(INPUT)
    }

    /// `n` steps of `per` each, of five kernels (each recurs once a step).
    pub(super) fn run_steps(s: &mut SharedBlocks, t0: &mut Instant, n: usize, per: Duration) {
        for _ in 0..n {
            for id in 0..5 {
                s.kernel_start(id, *t0 + per / 5 * id as u32);
            }
            *t0 += per;
        }
    }

    /// A field of FDTD-2D's shape: 512 blocks from `first`.
    fn field(first: u64) -> Range {
        Range {
            start: first << prescient_core::BLOCK_SHIFT,
            end: (first + 512) << prescient_core::BLOCK_SHIFT,
        }
    }

    /// The allocation of `addr`: dnn's input or one of three fields.
    fn alloc_or_field(addr: u64) -> Option<Range> {
        let b = addr >> prescient_core::BLOCK_SHIFT;
        let f = [10000, 20000, 30000]
            .into_iter()
            .find(|f| (*f..f + 512).contains(&b));
        f.map(field).or_else(|| alloc_of(addr))
    }

    /// A kernel over a scalar and three 512-block fields (FDTD-2D's last)
    /// under a 720-block limit: the two largest (the lowest addresses among
    /// equals) are tried together, the rest (513 blocks) fitting; once
    /// they are kept nothing more is offered. Undone, the third field
    /// alone is offered next, tried with nothing beside it.
    #[test]
    fn overflow_tries_as_many_fields_together_as_it_takes_to_fit() {
        let ranges = [
            (7, 1),
            (20000, 512),
            (10000, 512),
            (30000, 512),
            (10000, 512),
        ];
        for keep in [true, false] {
            let mut s = SharedBlocks::default();
            s.overflow(1, &ranges, 720);
            assert_eq!(s.stats.overflow_candidates, 1);
            s.overflow(1, &ranges, 720);
            assert_eq!(s.stats.overflow_candidates, 1, "once a generation");
            let mut t = Instant::now();
            run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
            let both = vec![field(10000), field(20000)];
            assert_eq!(s.decide(alloc_or_field), Some(Action::Advise(both.clone())));
            assert!(s.is_host(field(20000).start) && !s.is_host(field(30000).start));
            s.overflow(2, &ranges, 720);
            assert!(!s.has_candidates(), "on trial: 513 blocks left fit");
            let per = if keep { 200 } else { 400 };
            run_steps(&mut s, &mut t, 5, Duration::from_millis(per));
            if keep {
                assert_eq!(s.decide(alloc_or_field), None, "kept");
                s.overflow(3, &ranges, 720);
                assert!(!s.has_candidates(), "30000 and the scalar fit");
                assert_eq!(s.take_placed(), both);
            } else {
                assert_eq!(s.decide(alloc_or_field), Some(Action::Undo(both)));
                s.overflow(3, &ranges, 720);
                assert!(!s.has_candidates(), "offered a step after its union began");
                run_steps(&mut s, &mut t, 1, Duration::from_millis(400));
                s.overflow(4, &ranges, 720);
                assert_eq!(
                    s.decide(alloc_or_field),
                    Some(Action::Advise(vec![field(30000)]))
                );
            }
        }
    }

    /// FDTD-2D's kernels each sweep two fields of three: the union of the
    /// launches larger than the limit since the last trial gives the group
    /// of two that leaves one field, which fits.
    #[test]
    fn the_group_comes_from_every_large_launch_since_the_last_trial() {
        let mut s = SharedBlocks::default();
        s.overflow(1, &[(10000, 512), (20000, 512)], 720);
        assert_eq!(s.overflow.len(), 1, "one kernel: one field is enough");
        s.overflow(2, &[(7, 1), (20000, 512), (30000, 512)], 720);
        s.overflow(3, &[(40000, 100)], 720);
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        let both = vec![field(10000), field(20000)];
        assert_eq!(s.decide(alloc_or_field), Some(Action::Advise(both)));
        assert!(
            s.overflow_union.is_empty(),
            "a trial starts the union again"
        );
    }

    /// The runtime merges touching extents: FDTD-2D's adjacent ex and ey
    /// come as one 1,024-block range beside hz. The group is both fields
    /// of the merged range (hz then fits), and the lookups are bounded
    /// whatever the range claims.
    #[test]
    fn a_merged_range_gives_every_allocation_it_covers() {
        let fields = [field(10000), field(10512), field(20000)];
        let alloc_of = |addr: u64| fields.iter().copied().find(|a| a.holds(addr));
        let mut s = SharedBlocks::default();
        s.overflow(1, &[(10000, 1024), (20000, 512), (7, 1)], 722);
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        let want = vec![field(10000), field(10512)];
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(want)));
        let mut s = SharedBlocks::default();
        s.overflow(1, &[(0, u64::MAX)], 722);
        let mut lookups = 0;
        assert_eq!(
            s.decide(|_| {
                lookups += 1;
                None
            }),
            None
        );
        assert_eq!(lookups, 0, "no step length yet: nothing looked up");
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        s.overflow(2, &[(0, u64::MAX)], 722);
        let mut lookups = 0;
        let got = s.decide(|_| {
            lookups += 1;
            None
        });
        assert_eq!((got, lookups), (None, MAX_LOOKUPS));
    }

    /// Allocations need not start on a 2 MB block: a range whose first
    /// block begins in the allocation below it is tried as its own
    /// allocation (named by its middle block), not as the one below.
    #[test]
    fn overflow_names_a_range_by_its_own_allocation() {
        const MB: u64 = 1 << 20;
        let low = Range {
            start: 20 * GIB,
            end: 20 * GIB + 1025 * MB,
        };
        let high = Range {
            start: low.end,
            end: low.end + 1025 * MB,
        };
        let alloc_of = |addr: u64| [low, high].into_iter().find(|a| a.holds(addr));
        let block = |addr: u64| addr >> prescient_core::BLOCK_SHIFT;
        // Each range as the runtime gives it: every block it touches.
        let ranges = [
            (block(low.start), block(low.end - 1) - block(low.start) + 1),
            (
                block(high.start),
                block(high.end - 1) - block(high.start) + 1,
            ),
        ];
        assert_eq!(
            ranges[1],
            (block(high.start), 513),
            "high's first block is low's last"
        );
        let mut s = SharedBlocks::default();
        // Only the second is running: it alone exceeds a 500-block limit.
        s.overflow(1, &ranges[1..], 500);
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(vec![high])));
    }

    /// A candidate of the CPU's goes before the overflow's: dnn's input,
    /// which its first kernel sweeps too.
    #[test]
    fn the_cpus_candidates_go_before_the_overflow() {
        let mut s = SharedBlocks::default();
        s.overflow(1, &[(10000, 512), (20000, 512)], 720);
        let block = ((4 * GIB) >> prescient_core::BLOCK_SHIFT) + 10;
        s.cpu_took(block);
        s.gpu_had(block);
        s.cpu_took(block);
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        assert_eq!(s.decide(alloc_or_field), Some(Action::Advise(vec![INPUT])));
    }

    /// Ranges as the process's ring may give them, at the top of the
    /// address space or absurdly long, neither panic nor wrap: the longest
    /// (at the lowest address) is the candidate, its middle saturated at
    /// the last block (its lookup finds no allocation there).
    #[test]
    fn overflow_survives_ranges_at_the_end_of_the_address_space() {
        let mut s = SharedBlocks::default();
        s.overflow(
            1,
            &[(u64::MAX - 1, u64::MAX), (u64::MAX, 1000), (5, u64::MAX)],
            10,
        );
        assert_eq!(s.stats.overflow_candidates, 1);
        assert_eq!(s.overflow.len(), 1);
    }

    /// Launches that fit the limit, or exceed it only by ranges under
    /// `MIN_TRY_BYTES` (16 blocks: 32 MB), offer nothing.
    #[test]
    fn overflow_offers_nothing_that_fits_or_is_small() {
        let mut s = SharedBlocks::default();
        s.overflow(1, &[(0, 300), (1000, 300)], 720);
        s.overflow(2, &[(0, 16), (100, 16), (200, 16)], 40);
        assert_eq!(s.stats.overflow_candidates, 0);
        assert!(!s.has_candidates());
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
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(vec![INPUT])));
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
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(vec![INPUT])));
        run_steps(&mut s, &mut t, 3, Duration::from_millis(275));
        assert_eq!(s.decide(alloc_of), Some(Action::Undo(vec![INPUT])));
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
                assert_eq!(got, Some(Action::Advise(vec![other])));
                run_steps(&mut s, &mut t, 3, Duration::from_millis(900));
                assert_eq!(s.decide(alloc_of), Some(Action::Undo(vec![other])));
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
