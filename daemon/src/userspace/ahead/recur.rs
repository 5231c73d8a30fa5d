//! Each block's next use, predicted from its uses one period ago, for the
//! victim order (order.rs `order_next_use`; on unless
//! `--no-next-use-victims`): the period is the number of launches between
//! two launches of one execution id.
//!
//! Why: among blocks no queued launch uses, Belady's victim is the one
//! used again last. `--cyclic-victims` took the block that left the queue
//! last for it, which holds for a solver's sweeps but not for a training
//! step: the forward pass's last blocks are the backward pass's first,
//! so it evicted what came back first (the 220M LM 1.31-1.52x slower,
//! GPU runs 89-90). A block's uses a period ago say when it comes back
//! whatever the step's shape, as long as the step repeats itself (the
//! execution ids assume that already: PyTorch's caching allocator hands
//! out the same blocks every step).
//!
//! Bounds: the ring is the process's memory, so a record adds at most
//! [`MAX_RECORD_BLOCKS`] blocks, and past [`MAX_BLOCKS`] blocks (512 GB of
//! managed memory; 128 bytes of uses each, 32 MiB at most) or [`MAX_IDS`]
//! ids the table starts again. Ids that never repeat (arguments that
//! change every launch) give no period, and the order stays the engine's.

use std::collections::{HashMap, VecDeque};

/// Uses kept per block, the newest first.
pub const USES_KEPT: usize = 16;
/// Intervals between two launches of one id kept for the period.
pub const GAPS_KEPT: usize = 64;
/// Intervals needed before a period is given.
pub const GAPS_NEEDED: usize = 16;
/// Ids and blocks remembered at most.
pub const MAX_IDS: usize = 1 << 16;
pub const MAX_BLOCKS: usize = 1 << 18;
/// Blocks one record may add.
pub const MAX_RECORD_BLOCKS: u64 = 4096;

/// Launch numbers (1-based: 0 is none) of each block's recent uses, and
/// the intervals between launches of one id.
#[derive(Default, Debug)]
pub struct Recurrence {
    /// Launches seen: the next launch's number minus one.
    launches: u64,
    last_of_id: HashMap<u64, u64>,
    gaps: VecDeque<u64>,
    uses: HashMap<u64, [u64; USES_KEPT]>,
    /// Times the table started again at its bound.
    pub restarts: u64,
}

impl Recurrence {
    /// Launch `id` using the blocks of `ranges` was queued: returns its
    /// number (from 1).
    pub fn launched(&mut self, id: u64, ranges: &[(u64, u64)]) -> u64 {
        if self.last_of_id.len() >= MAX_IDS || self.uses.len() >= MAX_BLOCKS {
            self.start_again();
        }
        self.launches += 1;
        let n = self.launches;
        if let Some(prev) = self.last_of_id.insert(id, n) {
            if self.gaps.len() == GAPS_KEPT {
                self.gaps.pop_front();
            }
            self.gaps.push_back(n - prev);
        }
        let mut left = MAX_RECORD_BLOCKS;
        for &(first, count) in ranges {
            let count = count.min(left);
            left -= count;
            for b in first..first.saturating_add(count) {
                let u = self.uses.entry(b).or_default();
                if u[0] != n {
                    u.copy_within(0..USES_KEPT - 1, 1);
                    u[0] = n;
                }
            }
        }
        n
    }

    /// Launches in one step: the median interval between two launches of
    /// one id, once [`GAPS_NEEDED`] are known.
    pub fn period(&self) -> Option<u64> {
        if self.gaps.len() < GAPS_NEEDED {
            return None;
        }
        let mut g: Vec<u64> = self.gaps.iter().copied().collect();
        let mid = g.len() / 2;
        Some(*g.select_nth_unstable(mid).1)
    }

    /// The launch that next uses `block` after launch `now`: its first
    /// queued use past `now` if it has one, else by the `period`: one
    /// period after the earliest kept use that gives a launch past `now`.
    /// A block in a run of uses too dense for its kept uses to reach a
    /// period back (a workspace every launch reads) comes back after its
    /// mean gap while the run goes on. None: no use known, or none in the
    /// last period.
    #[cfg(test)]
    pub fn next_use(&self, block: u64, now: u64, period: u64) -> Option<u64> {
        next_of(self.uses.get(&block)?, now, period)
    }

    /// [`Recurrence::next_use`] of every block with a use kept.
    pub fn next_uses(
        &self,
        now: u64,
        period: u64,
    ) -> impl Iterator<Item = (u64, Option<u64>)> + '_ {
        (self.uses.iter()).map(move |(&b, u)| (b, next_of(u, now, period)))
    }

    /// The number of the last launch queued.
    pub fn last_launch(&self) -> u64 {
        self.launches
    }

    /// Forgets ids and uses (the launch count goes on).
    #[cold]
    fn start_again(&mut self) {
        self.last_of_id.clear();
        self.gaps.clear();
        self.uses.clear();
        self.restarts += 1;
    }
}

/// [`Recurrence::next_use`] from a block's kept uses `u`.
fn next_of(u: &[u64; USES_KEPT], now: u64, period: u64) -> Option<u64> {
    let kept: &[u64] = &u[..u.iter().position(|&x| x == 0).unwrap_or(USES_KEPT)];
    // A use already queued (the CPU runs ahead) is known, not predicted:
    // every launch before it is queued too, so it is the next.
    if let Some(&queued) = kept.iter().rev().find(|&&x| x > now) {
        return Some(queued);
    }
    let (&newest, &oldest) = (kept.first()?, kept.last()?);
    let gap = ((newest - oldest) / (USES_KEPT as u64 - 1)).max(1);
    let dense = kept.len() == USES_KEPT && oldest.saturating_add(period) > now;
    if dense && now.saturating_sub(newest) <= 2 * gap {
        return Some(newest.saturating_add(gap).max(now + 1));
    }
    kept.iter()
        .rev()
        .map(|&x| x.saturating_add(period))
        .find(|&at| at > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One training step of 6 launches (ids 1-6; the same ids every step,
    /// as the caching allocator gives): forward 1-3 writes activations
    /// 10, 11, 12 and reads weights 20, 21, 22; backward 4-6 reads them
    /// in reverse. `only` launches of it are queued.
    fn step(r: &mut Recurrence, only: usize) {
        let launches = [
            (1, [(10, 1), (20, 1)]),
            (2, [(11, 1), (21, 1)]),
            (3, [(12, 1), (22, 1)]),
            (4, [(12, 1), (22, 1)]),
            (5, [(11, 1), (21, 1)]),
            (6, [(10, 1), (20, 1)]),
        ];
        for (id, blocks) in launches.into_iter().take(only) {
            r.launched(id, &blocks);
        }
    }

    /// After four steps and the fifth's forward pass (launches 1-27, the
    /// GPU at 27): the backward pass reads 12 first, at 28, then 11 at 29
    /// and 10 at 30, so 10 is Belady's victim. The block that left the
    /// queue last (`--cyclic-victims`) would be 12, the one needed first.
    #[test]
    fn blocks_come_back_a_period_after_their_uses_whatever_the_steps_shape() {
        let mut r = Recurrence::default();
        for _ in 0..4 {
            step(&mut r, 6);
        }
        step(&mut r, 3);
        assert_eq!(r.last_launch(), 27);
        assert_eq!(r.period(), Some(6), "21 gaps of 6");
        let next = |b| r.next_use(b, 27, 6);
        assert_eq!(
            (next(12), next(11), next(10)),
            (Some(28), Some(29), Some(30))
        );
        assert_eq!(
            (next(22), next(21), next(20)),
            (Some(28), Some(29), Some(30))
        );
        assert_eq!(next(99), None, "never used");
        // With the GPU back at 25 (26 and 27 still queued), 11 and 12 have
        // queued uses: those, not a period after last step's.
        assert_eq!(
            (r.next_use(12, 25, 6), r.next_use(11, 25, 6)),
            (Some(27), Some(26))
        );
        assert_eq!(r.next_use(10, 25, 6), Some(30), "no queued use: 24 + 6");
        // A block first used by a launch still queued: that launch, not a
        // step after it.
        r.launched(9, &[(50, 1)]);
        assert_eq!(r.next_use(50, 27, 6), Some(28));
        // A block last used a period ago or more is not expected back.
        r.launched(7, &[(40, 1)]);
        assert_eq!(r.next_use(40, 29 + 6, 6), None);
    }

    #[test]
    fn no_period_until_enough_ids_came_back() {
        let mut r = Recurrence::default();
        for _ in 0..3 {
            step(&mut r, 6);
        }
        assert_eq!(r.period(), None, "12 gaps");
        step(&mut r, 6);
        assert_eq!(r.period(), Some(6));
    }

    /// A workspace every launch reads, in a step of 100 launches: its 16
    /// kept uses do not reach a period back; while its run goes on it is
    /// expected at the next launch, and a period after its run ends, it
    /// is not expected any more.
    #[test]
    fn a_block_every_launch_uses_comes_back_next() {
        let mut r = Recurrence::default();
        for _ in 0..2 {
            for id in 0..100 {
                r.launched(id, &[(7, 1)]);
            }
        }
        assert_eq!(r.period(), Some(100));
        assert_eq!(r.next_use(7, 200, 100), Some(201));
        assert_eq!(r.next_use(7, 300, 100), None);
    }

    /// A record claiming more blocks than any launch could use adds at
    /// most [`MAX_RECORD_BLOCKS`]; past [`MAX_BLOCKS`] the table starts
    /// again.
    #[test]
    fn a_record_cannot_grow_the_table_without_bound() {
        let mut r = Recurrence::default();
        r.launched(1, &[(0, u64::MAX), (1 << 40, 5)]);
        assert_eq!(r.next_uses(0, 1).count() as u64, MAX_RECORD_BLOCKS);
        let records = MAX_BLOCKS as u64 / MAX_RECORD_BLOCKS;
        for i in 1..=records {
            r.launched(1, &[(i * MAX_RECORD_BLOCKS, MAX_RECORD_BLOCKS)]);
        }
        assert_eq!(r.restarts, 1);
        assert!(r.next_uses(0, 1).count() <= MAX_BLOCKS);
    }

    /// Against the definition: a step of `pattern` (launch i of the step
    /// uses the blocks `pattern[i]`, ids distinct within it, each block
    /// used at most 8 times a step) repeated 3 times and `extra` launches
    /// into the fourth, the GPU `behind` launches short of the last one
    /// queued. Each block's true next use is the first launch after the
    /// GPU's that uses it in the endless repetition; the prediction must
    /// equal it (queued uses known, the rest a step after last step's).
    mod against_the_definition {
        use super::*;
        use proptest::prelude::*;

        fn steps() -> impl Strategy<Value = Vec<Vec<u64>>> {
            proptest::collection::vec(proptest::collection::vec(0u64..40, 1..4), 16..60)
                .prop_filter("each block at most 8 times a step", |p| {
                    (0..40).all(|b| p.iter().flatten().filter(|&&x| x == b).count() <= 8)
                })
        }

        proptest! {
            #[test]
            fn predictions_equal_the_next_use(pattern in steps(), extra in 0usize..60, behind in 0u64..60) {
                let len = pattern.len();
                let extra = extra % len;
                let mut r = Recurrence::default();
                for i in 0..(3 * len + extra) {
                    let ranges: Vec<(u64, u64)> = pattern[i % len].iter().map(|&b| (b, 1)).collect();
                    r.launched((i % len) as u64 + 1, &ranges);
                }
                let period = r.period().expect("every gap is one step");
                prop_assert_eq!(period, len as u64);
                let now = r.last_launch() - behind % len as u64;
                for b in 0..40u64 {
                    // Launch n (from 1) runs pattern[(n - 1) % len].
                    let truth = (now + 1..=now + len as u64)
                        .find(|&n| pattern[(n as usize - 1) % len].contains(&b));
                    prop_assert_eq!(r.next_use(b, now, period), truth, "block {}", b);
                }
            }
        }
    }
}
