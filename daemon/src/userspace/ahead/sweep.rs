//! Where the GPU is inside running launches larger than the limit, told
//! by its faults: the blocks it has passed are victims by their next use,
//! the ones ahead of it are kept and prefetched in the order it reaches
//! them (order.rs `order_sweep`, policy.rs `issue_upcoming`).
//!
//! Why: a kernel larger than the budget (FDTD-2D's, which sweep two or
//! three 1.07 GB fields side by side under a 1.6 GB budget; dnn's first
//! layer, which reads 1 GiB twice under 1 GiB) used to get no order at
//! all (`order::may_order`): victims were the least recently migrated,
//! which in a sweep are the blocks the next sweep needs first, so every
//! block came back every kernel (GPU run 112: FDTD-2D moved 6.7 GB a step
//! where the GPU oracle moves 3.3). A replay of both patterns with the
//! thread blocks lined up at the front (bench/gpu/sweep_replay.py) gives
//! nearly Belady's count on FDTD-2D with this order (1,641-1,659 blocks a
//! step; Belady 1,632, least recently migrated 3,584) and 1,137-1,462 on
//! dnn (Belady 1,056, least recently migrated 1,724). On the GPU (runs
//! 114-116): FDTD-2D's bytes 21% fewer (5.13 GB a step against 6.51) and
//! its faults halved.
//!
//! A block's place in its range is its offset over the range's size, so
//! that arrays swept side by side (one row of each per thread block) are
//! met at the same place; the front of a range is where its last fault
//! was (back too: a second pass over it starts again), or, for a range
//! with no fault since the launches started (prefetched in time), the
//! farthest front of the others.
//!
//! The sweep stands aside for the rest of a launch whose faults come
//! behind the front (`REGRET_RATE`): its thread blocks are spread over
//! the range, not lined up at a front, and the blocks it calls passed are
//! still read. GPU runs 114-115: dnn's first kernel, a grid-stride loop
//! whose 1,024 resident thread blocks each walk the whole input, thrashed
//! under the sweep (4.5 s iterations against 0.17-0.27 s), with the last
//! fault as the front and with the nearest of the last 16 alike.

/// Places are in 1/65,536ths of a range.
const SCALE: u64 = 1 << 16;
/// A block is passed only this far behind its range's front: faults
/// arrive in batches from thread blocks around the front.
const MARGIN: u64 = SCALE / 64;
/// Faults counted before the sweep may stand aside, and the share of
/// them behind the front (1 in `REGRET_RATE`) past which it does.
const REGRET_MIN_FAULTS: u64 = 32;
const REGRET_RATE: u64 = 8;
/// Ranges followed at most (a record holds 27; many streams could each
/// run one); ranges past it are not followed.
const MAX_RANGES: usize = super::queue::MAX_RUNNING_RANGES;
/// Ranges smaller than this are never passed and lend no front (a
/// scalar's or a small table's block, read by every thread block).
const MIN_RANGE: u64 = 4;

/// One range of the running launches and where the GPU is in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    first: u64,
    count: u64,
    /// The place of its last fault since the launches started.
    front: Option<u64>,
}

/// The running launches' ranges and their fronts, for one front
/// generation of the queue.
#[derive(Debug, Default)]
pub(in crate::userspace) struct Sweep {
    generation: Option<u64>,
    /// Sorted by first block, each once.
    ranges: Vec<Range>,
    /// The fronts when the blocks were last ordered.
    ordered: Vec<Option<u64>>,
    /// The farthest front of the ranges (what a range without faults
    /// takes).
    lead: Option<u64>,
    /// Every running block not passed, in the order the GPU reaches them
    /// (`Sweep::window` gives a prefix), and the fronts it was computed
    /// for (computed again only when one moved: it sorts the running
    /// blocks, and a turn comes every millisecond or so).
    ahead: Vec<u64>,
    ahead_for: Option<Vec<Option<u64>>>,
    /// Faults in the followed ranges since the launches started, and of
    /// them, faults on blocks the sweep called passed.
    faults: u64,
    regrets: u64,
    /// Stood aside for these launches (for good: see `stands_aside`).
    aside: bool,
}

impl Sweep {
    /// The sweep of the running launches of front generation
    /// `generation`, whose records claim `ranges`: started again (no
    /// front known) when they changed.
    pub(in crate::userspace) fn at(
        &mut self,
        generation: u64,
        ranges: &[(u64, u64)],
    ) -> &mut Sweep {
        if self.generation == Some(generation) {
            return self;
        }
        self.generation = Some(generation);
        self.ranges.clear();
        self.ordered.clear();
        self.ahead_for = None;
        self.lead = None;
        (self.faults, self.regrets, self.aside) = (0, 0, false);
        let followed = ranges.iter().filter(|r| r.1 > 0).take(MAX_RANGES);
        self.ranges.extend(followed.map(|&(first, count)| Range {
            first,
            count,
            front: None,
        }));
        // Of ranges starting at one block, the longest stays.
        self.ranges
            .sort_unstable_by_key(|r| (r.first, std::cmp::Reverse(r.count)));
        self.ranges.dedup_by_key(|r| r.first);
        self
    }

    /// The GPU faulted on block `b`: the front of its range is there. A
    /// fault on a block called passed is a regret.
    pub(in crate::userspace) fn fault(&mut self, b: u64) {
        let Some((i, at)) = self.locate(b) else {
            return;
        };
        if self.ranges[i].count < MIN_RANGE {
            return;
        }
        self.faults += 1;
        if self.place(b).is_some_and(|(_, passed)| passed) {
            self.regrets += 1;
        }
        self.ranges[i].front = Some(at);
        self.lead = self.ranges.iter().filter_map(|r| r.front).max();
        self.aside |= self.faults >= REGRET_MIN_FAULTS && self.regrets * REGRET_RATE > self.faults;
    }

    /// Does the sweep stand aside for these launches? Once too many of
    /// their faults came behind the front, until other launches run: a
    /// sweep that went on and off would thrash while on.
    pub(in crate::userspace) fn stands_aside(&self) -> bool {
        self.aside
    }

    /// The range holding `b` (the first one starting at or before it
    /// that reaches it) and `b`'s place in it.
    fn locate(&self, b: u64) -> Option<(usize, u64)> {
        let i = self
            .ranges
            .partition_point(|r| r.first <= b)
            .checked_sub(1)?;
        let r = self.ranges[i];
        let offset = b - r.first;
        (offset < r.count).then(|| {
            (
                i,
                (u128::from(offset) * u128::from(SCALE) / u128::from(r.count)) as u64,
            )
        })
    }

    /// The front of range `i`: its own, else the farthest of the others.
    fn front(&self, i: usize) -> Option<u64> {
        self.ranges[i].front.or(self.lead)
    }

    /// Where `b` is: None outside the followed ranges, else its place and
    /// whether the GPU has passed it.
    pub(in crate::userspace) fn place(&self, b: u64) -> Option<(u64, bool)> {
        let (i, at) = self.locate(b)?;
        let passed = self.ranges[i].count >= MIN_RANGE
            && self.front(i).is_some_and(|f| at.saturating_add(MARGIN) < f);
        Some((at, passed))
    }

    /// Each range's front, in range order.
    fn fronts(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        (0..self.ranges.len()).map(|i| self.front(i))
    }

    /// Has a front moved by the margin or more since the blocks were last
    /// ordered? Counts the order as done if so.
    pub(in crate::userspace) fn moved(&mut self) -> bool {
        let far = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => x.abs_diff(y) >= MARGIN,
            (a, b) => a != b,
        };
        let moved = self.ordered.len() != self.ranges.len()
            || self.fronts().zip(&self.ordered).any(|(a, &b)| far(a, b));
        if moved {
            self.ordered = self.fronts().collect();
        }
        moved
    }

    /// Of `running` (the running launches' blocks), those the GPU has
    /// passed, the one passed last first.
    pub(in crate::userspace) fn passed(&self, running: &[u64]) -> Vec<u64> {
        let mut p: Vec<(u64, u64)> = (running.iter())
            .filter_map(|&b| match self.place(b) {
                Some((at, true)) => Some((at, b)),
                _ => None,
            })
            .collect();
        p.sort_unstable_by(|x, y| y.cmp(x));
        p.into_iter().map(|(_, b)| b).collect()
    }

    /// Of `running`, the blocks the GPU has not passed, in the order it
    /// reaches them (by place, then block), at most `n`; blocks outside
    /// the followed ranges last, in `running`'s order. `running` must be
    /// the same list for one generation of launches (queue.rs lists it
    /// when they change): the order is kept until a front moves, whatever
    /// `n` (the pass asks for all, the window for a part).
    pub(in crate::userspace) fn window(&mut self, running: &[u64], n: usize) -> &[u64] {
        let same = (self.ahead_for.as_ref())
            .is_some_and(|fronts| fronts.iter().copied().eq(self.fronts()));
        if !same {
            self.ahead_for = Some(self.fronts().collect());
            let mut ahead: Vec<(u64, u64, u64)> = (running.iter().zip(0u64..))
                .filter_map(|(&b, i)| match self.place(b) {
                    Some((_, true)) => None,
                    Some((at, false)) => Some((at, b, 0)),
                    None => Some((u64::MAX, i, b)),
                })
                .collect();
            ahead.sort_unstable();
            let block = |(at, b, other): (u64, u64, u64)| if at == u64::MAX { other } else { b };
            self.ahead.clear();
            self.ahead.extend(ahead.into_iter().map(block));
        }
        &self.ahead[..n.min(self.ahead.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two fields swept side by side (100-163 and 200-263) and a scalar's
    /// block (7): the fault at 216 puts both fields' fronts at a quarter
    /// (the first has none of its own), so 100-114 and 200-214 are passed
    /// (a margin short of 16); the window goes on from 115 and 215 side by
    /// side, the scalar first; a fault back at 202 (a second pass) leaves
    /// only 100 and 200 passed; the scalar is never passed.
    #[test]
    fn fronts_follow_the_faults_side_by_side() {
        let mut s = Sweep::default();
        let ranges = [(200, 10), (100, 64), (7, 1), (200, 64)];
        let running: Vec<u64> = (100..164).chain(200..264).chain([7]).collect();
        s.at(1, &ranges);
        assert_eq!(s.ranges.len(), 3, "200-263 once");
        assert_eq!(s.ranges[2].count, 64, "the longest of those at 200");
        assert_eq!(s.place(132), Some((32768, false)), "no front yet");
        assert!(s.passed(&running).is_empty());
        assert_eq!(s.window(&running, 3), [7, 100, 200]);
        assert!(s.moved(), "first order");
        assert!(!s.moved(), "nothing moved");
        s.fault(216);
        s.fault(7);
        assert!(s.moved());
        let passed = s.passed(&running);
        assert_eq!(passed.len(), 30);
        assert_eq!(&passed[..2], [214, 114], "the one passed last first");
        assert_eq!(s.place(7), Some((0, false)), "a scalar is never passed");
        assert_eq!(s.window(&running, 4), [7, 115, 215, 116]);
        assert_eq!(s.place(99), None, "outside the ranges");
        s.fault(202);
        assert_eq!(s.passed(&running), [200, 100]);
        assert_eq!(s.window(&running, 3), [7, 101, 201], "the second pass");
        // New running launches: the fronts are forgotten.
        s.at(2, &ranges);
        assert!(s.passed(&running).is_empty());
        assert!(!s.stands_aside());
        // Ranges past the bound are not followed.
        let many: Vec<(u64, u64)> = (0..1000).map(|i| (i * 10, 8)).collect();
        s.at(3, &many);
        assert_eq!(s.ranges.len(), MAX_RANGES);
        assert_eq!(s.place(9999), None);
    }

    /// A sweep whose thread blocks spread over the range: of 64 faults
    /// walking up the range, every other one comes from a thread block
    /// far behind (block 0 then 40 further on): more than 1 in 8 behind
    /// the front, so the sweep stands aside; one lined up at a front (the
    /// same faults in order) does not; new launches start it again.
    #[test]
    fn a_sweep_stands_aside_when_its_faults_come_behind_the_front() {
        let mut s = Sweep::default();
        s.at(1, &[(0, 512)]);
        for i in 0..64 {
            s.fault(100 + i);
            s.fault(i);
        }
        assert!(s.stands_aside(), "{} of {}", s.regrets, s.faults);
        s.at(2, &[(0, 512)]);
        assert!(!s.stands_aside());
        for i in 0..128 {
            s.fault(i);
        }
        assert!(!s.stands_aside());
        assert_eq!(s.regrets, 0);
    }
}
