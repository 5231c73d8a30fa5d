//! Blocks ordered by their predicted next use, kept up to date launch by
//! launch, so that every turn can make the resident blocks used again
//! last the next victims (policy.rs `demote_farthest`; on with the
//! next-use order, `--no-farthest-victims`, hidden, turns it off).
//!
//! Why: the next-use order (order.rs `order_next_use`) sorts every block
//! with a use known, which costs too much for every kernel start (0.6 ms
//! at 5,700 blocks), so it runs every 32nd of a step. Between two passes,
//! the blocks the GPU has just used stay at the most recent end whatever
//! their next use, and victims are taken from the older end: blocks the
//! pass found far, but by then nearer than those. A replay of the 374M
//! LM's launches under its budget (GPU run 169's block log, BENCHMARKS-gpu.md
//! section "farthest victims") moves 26,182 blocks to the host with the
//! pass alone, 19,465 with this index (64 blocks a launch), and 17,710
//! with Belady's clairvoyant choice.
//!
//! A block's prediction (recur.rs) changes only when a launch that uses it
//! is queued or the GPU passes one, so the index is updated for those
//! blocks only (`update`), plus a bounded number of entries whose
//! predicted use the GPU passed without it (`STALE_PER_UPDATE`).
//!
//! Bounds: an update takes at most recur.rs `MAX_RECORD_BLOCKS` blocks;
//! the index holds at most one entry per block the recurrence table
//! holds, and starts again with it.

use super::recur::{Recurrence, MAX_BLOCKS, MAX_RECORD_BLOCKS};
use std::collections::{BTreeSet, HashMap};

/// Entries whose predicted use has passed, predicted again per update.
pub const STALE_PER_UPDATE: usize = 16;

/// `(next use, block)` of the blocks whose uses were seen, the next use
/// being the first launch at or after the one the GPU runs (`u64::MAX`:
/// not expected back).
#[derive(Default, Debug)]
pub struct Farthest {
    by_next: BTreeSet<(u64, u64)>,
    next_of: HashMap<u64, u64>,
    /// The recurrence table's restarts when the index last followed it.
    restarts: u64,
    /// Blocks left out of the index because the caller refused them (not
    /// resident and live), until their next use is queued or passed.
    pub parked: u64,
}

impl Farthest {
    /// The blocks of `ranges` had a use queued or passed: predicts their
    /// next use again as of launch `now` (the one the GPU runs), and a few
    /// whose predicted use is behind `now`.
    pub fn update(&mut self, recur: &Recurrence, ranges: &[(u64, u64)], now: u64) {
        if recur.restarts != self.restarts || self.next_of.len() > MAX_BLOCKS {
            self.by_next.clear();
            self.next_of.clear();
            self.restarts = recur.restarts;
        }
        let Some(period) = recur.period() else {
            return;
        };
        // A use at `now` itself is the running launch's: the nearest.
        let before = now.saturating_sub(1);
        let predict = |b| recur.next_use_of(b, before, period).unwrap_or(u64::MAX);
        let mut left = MAX_RECORD_BLOCKS;
        for &(first, count) in ranges {
            let count = count.min(left);
            left -= count;
            for b in first..first.saturating_add(count) {
                self.set(b, predict(b));
            }
        }
        for _ in 0..STALE_PER_UPDATE {
            match self.by_next.first() {
                Some(&(at, b)) if at < now => self.set(b, predict(b)),
                _ => break,
            }
        }
    }

    /// The blocks used again last that `wanted` accepts, farthest first, at
    /// most `k`, among the `scan` farthest entries. With `park`, the ones
    /// it refuses leave the index until a use of theirs is queued or
    /// passed (a block evicted or dead would otherwise be looked at every
    /// turn).
    pub fn farthest(
        &mut self,
        k: usize,
        scan: usize,
        park: bool,
        mut wanted: impl FnMut(u64) -> bool,
    ) -> Vec<u64> {
        let mut out = Vec::with_capacity(k);
        let mut refused = Vec::new();
        for &(_, b) in self.by_next.iter().rev().take(scan) {
            if out.len() >= k {
                break;
            }
            if wanted(b) {
                out.push(b);
            } else if park {
                refused.push(b);
            }
        }
        for b in refused {
            if let Some(at) = self.next_of.remove(&b) {
                self.by_next.remove(&(at, b));
                self.parked += 1;
            }
        }
        out
    }

    /// Blocks in the index.
    pub fn len(&self) -> usize {
        self.next_of.len()
    }

    /// The predicted next use of `block`, if indexed.
    #[cfg(test)]
    pub fn next_use(&self, block: u64) -> Option<u64> {
        self.next_of.get(&block).copied()
    }

    fn set(&mut self, b: u64, at: u64) {
        if let Some(old) = self.next_of.insert(b, at) {
            if old == at {
                return;
            }
            self.by_next.remove(&(old, b));
        }
        self.by_next.insert((at, b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `launches` launches of steps of `pattern` (launch i of a step uses
    /// blocks `pattern[i]`, ids distinct within a step), the GPU running
    /// the one `ahead - 1` launches before the last queued (0: it has run
    /// them all), the index updated as the queue does: with each launch
    /// queued and each one the GPU passes. Returns the GPU's launch.
    fn drive(pattern: &[Vec<u64>], launches: usize, ahead: usize) -> (Recurrence, Farthest, u64) {
        let len = pattern.len();
        let ranges = |n: usize| -> Vec<(u64, u64)> {
            pattern[(n - 1) % len].iter().map(|&b| (b, 1)).collect()
        };
        let (mut r, mut f) = (Recurrence::default(), Farthest::default());
        let mut gpu = 1;
        for n in 1..=launches {
            r.launched(((n - 1) % len) as u64 + 1, &ranges(n));
            f.update(&r, &ranges(n), gpu as u64);
            while n >= gpu + ahead {
                gpu += 1;
                f.update(&r, &ranges(gpu - 1), gpu as u64);
            }
        }
        (r, f, gpu as u64)
    }

    /// A training step's shape (forward 10, 11, 12, backward 12, 11, 10)
    /// with the GPU in the fifth step's forward pass: the farthest is 10
    /// (read last by the coming backward pass), then 11; 12 is in use.
    #[test]
    fn the_farthest_block_is_the_one_the_step_reads_last() {
        let p: Vec<Vec<u64>> = [10, 11, 12, 12, 11, 10].iter().map(|&b| vec![b]).collect();
        let (_, mut f, gpu) = drive(&p, 27, 1);
        assert_eq!(gpu, 27);
        assert_eq!(f.farthest(2, 8, false, |_| true), [10, 11]);
        assert_eq!(f.next_use(12), Some(27), "the running launch's");
        // Refused blocks are parked; the rest keep their order.
        assert_eq!(f.farthest(1, 8, true, |b| b != 10), [11]);
        assert_eq!((f.parked, f.len()), (1, 2));
        assert_eq!(f.farthest(9, 8, true, |_| true), [11, 12]);
    }

    proptest! {
        /// Against a brute force: after any number of launches, with the
        /// GPU any distance behind, the index's order of every block is
        /// the order of its true next use at or after the GPU's launch in
        /// the endless repetition (blocks not in the pattern are never
        /// indexed).
        #[test]
        fn the_index_orders_blocks_by_their_true_next_use(
            pattern in proptest::collection::vec(proptest::collection::vec(0u64..24, 1..3), 16..40),
            steps in 3usize..5,
            extra in 0usize..40,
            ahead in 0usize..30,
        ) {
            prop_assume!((0..24).all(|b| pattern.iter().flatten().filter(|&&x| x == b).count() <= 8));
            let len = pattern.len();
            let (ahead, extra) = (ahead % len, extra % len);
            let (_, mut f, gpu) = drive(&pattern, steps * len + extra, ahead);
            let truth = |b: u64| (gpu..gpu + len as u64)
                .find(|&n| pattern[(n as usize - 1) % len].contains(&b));
            let mut want: Vec<(u64, u64)> = (0..24u64)
                .filter_map(|b| truth(b).map(|t| (t, b)))
                .collect();
            want.sort_unstable_by(|x, y| y.cmp(x));
            let want: Vec<u64> = want.into_iter().map(|(_, b)| b).collect();
            prop_assert_eq!(f.farthest(99, 99, false, |_| true), want);
        }
    }
}
