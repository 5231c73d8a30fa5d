//! The oracle's schedule over a known block sequence: a cursor that the
//! process's own faults move, each resident block keyed by its next use
//! at or after the cursor, and Belady's choice (the block used farthest in
//! the future, or never) as the victim.
//!
//! Prefetching with Belady eviction follows Cao, Felten, Karlin and Li
//! ("A study of integrated prefetching and caching strategies", SIGMETRICS
//! 1995): a missing block may displace a resident one only if the resident
//! one's next use comes after the missing block's; the lookahead is bounded
//! (`window`), so that the budget holds the blocks reused soonest rather
//! than only the stream's next stretch.

use std::collections::{BTreeSet, HashMap, HashSet};

/// Next use of a block never used again (or not in the plan).
pub const NEVER: u32 = u32::MAX;

/// The cursor, the positions of every block and the keyed resident set.
pub struct Schedule {
    seq: Vec<u64>,
    positions: HashMap<u64, Vec<u32>>,
    cursor: u32,
    /// Resident blocks we track, with the next use they are keyed by.
    keys: HashMap<u64, u32>,
    by_next_use: BTreeSet<(u32, u64)>,
    /// A fault moves the cursor at most this many positions...
    max_jump: u32,
    /// ...unless this many faults in a row were too far: the job is past
    /// the cursor (or elsewhere), and the cursor follows it.
    far_streak: u32,
}

/// Faults in a row beyond `max_jump` after which the cursor jumps anyway.
const FAR_STREAK: u32 = 32;

/// What a fault did to the cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// To the block's next recorded use.
    Ahead,
    /// The block's next use is the cursor itself.
    Here,
    /// The block's next use is more than `max_jump` ahead, or none is left.
    Far,
    /// The plan never uses the block.
    Unplanned,
}

impl Schedule {
    pub fn new(seq: Vec<u64>, max_jump: u32) -> Schedule {
        let mut positions: HashMap<u64, Vec<u32>> = HashMap::new();
        for (p, &b) in seq.iter().enumerate() {
            positions.entry(b).or_default().push(p as u32);
        }
        Schedule {
            seq,
            positions,
            cursor: 0,
            keys: HashMap::new(),
            by_next_use: BTreeSet::new(),
            max_jump: max_jump.max(1),
            far_streak: 0,
        }
    }

    pub fn cursor(&self) -> u32 {
        self.cursor
    }

    pub fn len(&self) -> usize {
        self.seq.len()
    }

    pub fn block_at(&self, p: u32) -> u64 {
        self.seq[p as usize]
    }

    /// The first use of `b` at or after position `at`.
    pub fn next_use(&self, b: u64, at: u32) -> u32 {
        match self.positions.get(&b) {
            Some(v) => v
                .get(v.partition_point(|&p| p < at))
                .copied()
                .unwrap_or(NEVER),
            None => NEVER,
        }
    }

    /// The process faulted on `b`: the cursor moves to that use of it.
    pub fn fault(&mut self, b: u64) -> Moved {
        if !self.positions.contains_key(&b) {
            return Moved::Unplanned;
        }
        let p = self.next_use(b, self.cursor);
        if p == self.cursor {
            self.far_streak = 0;
            return Moved::Here;
        }
        if p == NEVER || p - self.cursor > self.max_jump {
            self.far_streak += 1;
            if p == NEVER || self.far_streak < FAR_STREAK {
                return Moved::Far;
            }
        }
        self.far_streak = 0;
        self.advance(p);
        Moved::Ahead
    }

    /// Moves the cursor to `to`: blocks used in between are keyed again.
    fn advance(&mut self, to: u32) {
        for p in self.cursor..to {
            let b = self.seq[p as usize];
            if let Some(&k) = self.keys.get(&b) {
                if k < to {
                    let n = self.next_use(b, to);
                    self.rekey(b, k, n);
                }
            }
        }
        self.cursor = to;
    }

    fn rekey(&mut self, b: u64, old: u32, new: u32) {
        self.by_next_use.remove(&(old, b));
        self.by_next_use.insert((new, b));
        self.keys.insert(b, new);
    }

    /// Starts tracking resident block `b` (no-op when tracked).
    pub fn track(&mut self, b: u64) {
        if self.keys.contains_key(&b) {
            return;
        }
        let n = self.next_use(b, self.cursor);
        self.keys.insert(b, n);
        self.by_next_use.insert((n, b));
    }

    /// Stops tracking `b`.
    pub fn untrack(&mut self, b: u64) {
        if let Some(k) = self.keys.remove(&b) {
            self.by_next_use.remove(&(k, b));
        }
    }

    pub fn tracked(&self) -> usize {
        self.keys.len()
    }

    /// Belady's victim: the tracked block used farthest ahead, untracked.
    pub fn take_victim(&mut self) -> Option<(u64, u32)> {
        let (k, b) = self.by_next_use.pop_last()?;
        self.keys.remove(&b);
        Some((b, k))
    }

    /// Belady's victim only if it is used after position `p` (Cao et
    /// al.'s rule: never displace a block needed before the one fetched).
    pub fn take_victim_after(&mut self, p: u32) -> Option<(u64, u32)> {
        match self.by_next_use.last() {
            Some(&(k, _)) if k > p => self.take_victim(),
            _ => None,
        }
    }

    /// The next `distinct` blocks the plan uses from the cursor, each with
    /// its first position, looking at most `scan` positions ahead.
    pub fn window(&self, distinct: usize, scan: usize) -> Vec<(u32, u64)> {
        let mut seen = HashSet::with_capacity(distinct);
        let mut out = Vec::with_capacity(distinct);
        let end = (self.cursor as usize)
            .saturating_add(scan)
            .min(self.seq.len());
        for p in self.cursor as usize..end {
            if out.len() >= distinct {
                break;
            }
            let b = self.seq[p];
            if seen.insert(b) {
                out.push((p as u32, b));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Next use by a plain scan (no positions table).
    fn brute_next_use(seq: &[u64], b: u64, at: u32) -> u32 {
        (at as usize..seq.len())
            .find(|&p| seq[p] == b)
            .map_or(NEVER, |p| p as u32)
    }

    /// A small deterministic generator (no external crate).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    #[test]
    fn next_use_and_the_victim_agree_with_a_brute_force_scan() {
        let mut g = Lcg(7);
        for round in 0..200 {
            let n = 1 + g.next(40) as usize;
            let seq: Vec<u64> = (0..n).map(|_| g.next(8)).collect();
            let mut s = Schedule::new(seq.clone(), NEVER);
            let mut resident: Vec<u64> = Vec::new();
            for _ in 0..n {
                let b = g.next(10); // 8 and 9 are never used
                if g.next(3) == 0 && !resident.contains(&b) {
                    s.track(b);
                    resident.push(b);
                } else {
                    s.fault(b);
                }
                let c = s.cursor();
                for b in 0..10 {
                    assert_eq!(s.next_use(b, c), brute_next_use(&seq, b, c));
                }
            }
            // The victim is a block with the farthest brute-force next use.
            let c = s.cursor();
            let far = resident.iter().map(|&b| brute_next_use(&seq, b, c)).max();
            let got = s.take_victim();
            assert_eq!(got.map(|(_, k)| k), far, "round {round}");
            if let Some((b, k)) = got {
                assert_eq!(brute_next_use(&seq, b, c), k);
            }
        }
    }

    #[test]
    fn faults_move_the_cursor_forward_only_and_not_too_far() {
        //            0  1  2  3  4  5  6  7
        let seq = vec![1, 2, 3, 1, 4, 5, 6, 2];
        let mut s = Schedule::new(seq, 4);
        assert_eq!(s.fault(1), Moved::Here);
        assert_eq!(s.fault(3), Moved::Ahead);
        assert_eq!(s.cursor(), 2);
        // 2's next use after the cursor is 7: 5 ahead, over the jump limit.
        assert_eq!(s.fault(2), Moved::Far);
        assert_eq!(s.cursor(), 2);
        assert_eq!(s.fault(9), Moved::Unplanned);
        assert_eq!(s.fault(5), Moved::Ahead);
        assert_eq!(s.cursor(), 5);
        // 1 is used no more: far, the cursor stays.
        assert_eq!(s.fault(1), Moved::Far);
        assert_eq!(s.cursor(), 5);
    }

    #[test]
    fn a_run_of_far_faults_moves_the_cursor_to_the_job() {
        let mut seq: Vec<u64> = (0..100).collect();
        seq.push(7);
        let mut s = Schedule::new(seq, 10);
        for _ in 1..FAR_STREAK {
            assert_eq!(s.fault(50), Moved::Far);
        }
        assert_eq!(s.cursor(), 0);
        // One more: the job is there, the cursor follows.
        assert_eq!(s.fault(50), Moved::Ahead);
        assert_eq!(s.cursor(), 50);
        // A block used no more never moves it.
        for _ in 0..2 * FAR_STREAK {
            assert_eq!(s.fault(3), Moved::Far);
        }
        assert_eq!(s.cursor(), 50);
    }

    #[test]
    fn keys_follow_the_cursor() {
        let seq = vec![1, 2, 3, 1, 4, 2];
        let mut s = Schedule::new(seq, 100);
        s.track(1);
        s.track(2);
        s.track(9);
        // 9 is never used: the first victim.
        assert_eq!(s.take_victim(), Some((9, NEVER)));
        s.fault(3); // cursor 2: 1 next at 3, 2 next at 5
        assert_eq!(s.take_victim_after(5), None);
        assert_eq!(s.take_victim_after(4), Some((2, 5)));
        s.fault(4); // cursor 4: 1 is never used again
        assert_eq!(s.take_victim(), Some((1, NEVER)));
        assert_eq!(s.tracked(), 0);
    }

    #[test]
    fn the_window_lists_distinct_blocks_in_order() {
        let seq = vec![1, 2, 1, 3, 2, 4, 5];
        let s = Schedule::new(seq, 100);
        assert_eq!(s.window(3, 100), [(0, 1), (1, 2), (3, 3)]);
        assert_eq!(s.window(10, 4), [(0, 1), (1, 2), (3, 3)]);
    }

    /// Fetches with the schedule's victim on demand (no prefetch), against
    /// an exhaustive search over every eviction choice on small random
    /// sequences: Belady's choice is optimal for demand fetching.
    #[test]
    fn belady_fetches_no_more_than_any_other_choice() {
        let mut g = Lcg(11);
        for _ in 0..60 {
            let n = 4 + g.next(9) as usize;
            let seq: Vec<u64> = (0..n).map(|_| g.next(5)).collect();
            let cap = 1 + g.next(3) as usize;
            let got = belady_misses(&seq, cap);
            let best = brute_min_misses(&seq, cap, 0, &mut Vec::new());
            assert_eq!(got, best, "{seq:?} cap {cap}");
        }
    }

    fn belady_misses(seq: &[u64], cap: usize) -> usize {
        let mut s = Schedule::new(seq.to_vec(), NEVER);
        let mut res: Vec<u64> = Vec::new();
        let mut misses = 0;
        for &b in seq {
            s.fault(b);
            if res.contains(&b) {
                continue;
            }
            misses += 1;
            if res.len() == cap {
                let (v, _) = s.take_victim().unwrap();
                res.retain(|&x| x != v);
            }
            res.push(b);
            s.track(b);
        }
        misses
    }

    fn brute_min_misses(seq: &[u64], cap: usize, i: usize, res: &mut Vec<u64>) -> usize {
        if i == seq.len() {
            return 0;
        }
        let b = seq[i];
        if res.contains(&b) {
            return brute_min_misses(seq, cap, i + 1, res);
        }
        if res.len() < cap {
            res.push(b);
            let m = 1 + brute_min_misses(seq, cap, i + 1, res);
            res.pop();
            return m;
        }
        (0..res.len())
            .map(|k| {
                let old = std::mem::replace(&mut res[k], b);
                let m = 1 + brute_min_misses(seq, cap, i + 1, res);
                res[k] = old;
                m
            })
            .min()
            .unwrap()
    }
}
