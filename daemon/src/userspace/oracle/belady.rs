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

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// Next use of a block never used again (or not in the plan).
pub const NEVER: u32 = u32::MAX;

/// The cursor, the positions of every block and the keyed resident set.
///
/// A block stays "in use" (keyed below the cursor, so never a victim)
/// until the cursor is `trail` positions past its use: the GPU's thread
/// blocks spread over a stretch of the sequence, and a fault at its
/// leading edge must not make the blocks its trailing edge still reads
/// look finished (they would be evicted and fault straight back).
pub struct Schedule {
    seq: Vec<u64>,
    positions: HashMap<u64, Vec<u32>>,
    cursor: u32,
    trail: u32,
    /// Resident blocks we track, with the next use they are keyed by
    /// (at or after `frontier()`).
    keys: HashMap<u64, u32>,
    by_next_use: BTreeSet<(u32, u64)>,
    /// Blocks faulted on where the plan did not expect them, with the
    /// cursor then: in use now, keyed like a use at that position.
    touched: VecDeque<(u32, u64)>,
    /// A fault moves the cursor this many positions without question
    /// (thread blocks run out of the plan's order by about that much);
    /// farther only if the job can have got there: at most `max_jump / 4`
    /// of the blocks in between are missing now (it runs through resident
    /// blocks without a fault, and cannot pass a missing one). Otherwise
    /// the block is used out of order, and the cursor stays: a wrong jump
    /// would make every block in between look finished.
    max_jump: u32,
}

/// Positions looked at, at most, to decide whether a far fault is plausible.
const MAX_PASS_SCAN: u32 = 1 << 15;

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

/// What the resident set looks like to the schedule (the daemon's ledger,
/// or a test's set).
pub trait Ledger {
    /// Blocks resident now (the budget's unit), those whose eviction has
    /// not completed and those on their way in included.
    fn blocks(&self) -> u64;
    /// Of `blocks`, those whose eviction was started and has not
    /// completed: no victims any more, but their room is not free yet.
    fn leaving(&self) -> u64 {
        0
    }
    /// Whether `b` is wholly resident (or on its way).
    fn resident(&self, b: u64) -> bool;
    /// Whether `b` may be prefetched now.
    fn movable(&mut self, b: u64) -> bool;
    /// Takes `b` off; false when it was not resident any more.
    fn evict(&mut self, b: u64) -> bool;
    /// Brings `b` in for its use at position `pos`.
    fn prefetch(&mut self, b: u64, pos: u32);
}

/// What one `fill` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filled {
    pub prefetched: u64,
    pub victims: u64,
    /// Stopped: every resident block is needed before the next missing one.
    pub no_room: bool,
    /// Missing blocks whose room is made but still leaving the GPU: they
    /// wait for a later turn.
    pub waiting: u64,
}

impl Schedule {
    pub fn new(seq: Vec<u64>, max_jump: u32, trail: u32) -> Schedule {
        let mut positions: HashMap<u64, Vec<u32>> = HashMap::new();
        for (p, &b) in seq.iter().enumerate() {
            positions.entry(b).or_default().push(p as u32);
        }
        Schedule {
            seq,
            positions,
            cursor: 0,
            trail,
            keys: HashMap::new(),
            by_next_use: BTreeSet::new(),
            touched: VecDeque::new(),
            max_jump: max_jump.max(1),
        }
    }

    pub fn cursor(&self) -> u32 {
        self.cursor
    }

    /// Starts the cursor at `at` (where the job is when the plan applies),
    /// before any block is tracked.
    pub fn start_at(&mut self, at: u32) {
        debug_assert!(self.keys.is_empty());
        self.cursor = at.min(self.seq.len().saturating_sub(1) as u32);
    }

    /// Uses before this position are finished.
    fn frontier(&self) -> u32 {
        self.cursor.saturating_sub(self.trail)
    }

    /// Entries of the plan.
    pub fn entries(&self) -> usize {
        self.seq.len()
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

    /// The process faulted on `b`: the cursor moves to that use of it,
    /// or `b` is marked in use where the cursor is.
    pub fn fault(&mut self, b: u64, resident: impl Fn(u64) -> bool) -> Moved {
        if !self.positions.contains_key(&b) {
            self.touch(b);
            return Moved::Unplanned;
        }
        // A use still within the trail is the job's trailing edge reading
        // the block: not a sign to move (matching it to a later use, such
        // as a refault of the recorded run, would ratchet the cursor ahead
        // of the job).
        if self.next_use(b, self.frontier()) <= self.cursor {
            return Moved::Here;
        }
        let p = self.next_use(b, self.cursor);
        if p == NEVER || (p - self.cursor > self.max_jump && !self.passable(p, resident)) {
            self.touch(b);
            return Moved::Far;
        }
        self.advance(p);
        Moved::Ahead
    }

    /// Whether the job can be at position `to`: few blocks between the
    /// cursor and it are missing.
    fn passable(&self, to: u32, resident: impl Fn(u64) -> bool) -> bool {
        if to - self.cursor > MAX_PASS_SCAN {
            return false;
        }
        let slack = (self.max_jump / 4).max(1);
        let mut missing = 0;
        for q in self.cursor..to {
            missing += u32::from(!resident(self.seq[q as usize]));
            if missing > slack {
                return false;
            }
        }
        true
    }

    /// `b` is in use at the cursor.
    fn touch(&mut self, b: u64) {
        if let Some(&k) = self.keys.get(&b) {
            if k > self.cursor {
                self.rekey(b, k, self.cursor);
            }
        }
        self.touched.push_back((self.cursor, b));
    }

    /// Moves the cursor to `to`; uses that fall behind the new frontier
    /// are finished, and their blocks keyed by their next use.
    fn advance(&mut self, to: u32) {
        let (old, new) = (self.frontier(), to.saturating_sub(self.trail));
        self.cursor = to;
        for p in old..new {
            let b = self.seq[p as usize];
            self.release(b, new);
        }
        while let Some(&(p, b)) = self.touched.front() {
            if p >= new {
                break;
            }
            self.touched.pop_front();
            self.release(b, new);
        }
    }

    /// Keys `b` (if tracked and keyed before `frontier`) by its next use.
    fn release(&mut self, b: u64, frontier: u32) {
        if let Some(&k) = self.keys.get(&b) {
            if k < frontier {
                let n = self.next_use(b, frontier);
                self.rekey(b, k, n);
            }
        }
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
        let n = self.next_use(b, self.frontier());
        self.keys.insert(b, n);
        self.by_next_use.insert((n, b));
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

    /// Evicts Belady's victims while more than `budget` blocks of `l`
    /// stay (blocks leaving already do not); returns how many were taken.
    pub fn settle(&mut self, l: &mut impl Ledger, budget: u64) -> u64 {
        let mut n = 0;
        while l.blocks() - l.leaving() > budget {
            let Some((v, _)) = self.take_victim() else {
                break;
            };
            n += u64::from(l.evict(v));
        }
        n
    }

    /// Prefetches the missing blocks of the next `ahead` in order, each
    /// making room with a victim used after it until fewer than `keep`
    /// blocks stay; stops at the first that has none. A block goes in only
    /// while all counted blocks, those leaving included, are under
    /// `budget`; once one has to wait for its room to leave, the later ones
    /// only take their victims (their evictions run meanwhile) and wait
    /// too, so the order holds.
    ///
    /// Why `keep` below `budget`: the blocks between them (prescientd's
    /// reserve, the engine's `free_target`) are room whose evictions may
    /// still be on their way while prefetches go in. With `keep ==
    /// budget` every prefetch waits for its own victim's UVM_MIGRATE to
    /// the CPU (170-800 us per 2 MB, GPU run 57): GPU run 141's oracle
    /// was 6x slower than Prescient on stream for that alone.
    pub fn fill(&mut self, l: &mut impl Ledger, budget: u64, keep: u64, ahead: usize) -> Filled {
        let mut f = Filled::default();
        let keep = keep.clamp(1, budget.max(1));
        for (pos, b) in self.window(ahead, ahead.saturating_mul(64)) {
            if l.resident(b) || !l.movable(b) {
                continue;
            }
            while l.blocks() - l.leaving() >= keep {
                let Some((v, _)) = self.take_victim_after(pos) else {
                    f.no_room = true;
                    return f;
                };
                f.victims += u64::from(l.evict(v));
            }
            if f.waiting > 0 || l.blocks() >= budget {
                f.waiting += 1;
                continue;
            }
            l.prefetch(b, pos);
            self.track(b);
            f.prefetched += 1;
        }
        f
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
            let mut s = Schedule::new(seq.clone(), NEVER, 0);
            let mut resident: Vec<u64> = Vec::new();
            for _ in 0..n {
                let b = g.next(10); // 8 and 9 are never used
                if g.next(3) == 0 && !resident.contains(&b) {
                    s.track(b);
                    resident.push(b);
                } else if s.next_use(b, s.cursor()) != NEVER {
                    // (A fault on a block not used again marks it in use
                    // instead: a_fault_out_of_order_keeps_its_block.)
                    s.fault(b, |_| false);
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
        let mut s = Schedule::new(seq, 4, 0);
        assert_eq!(s.fault(1, |_| false), Moved::Here);
        assert_eq!(s.fault(3, |_| false), Moved::Ahead);
        assert_eq!(s.cursor(), 2);
        // 2's next use after the cursor is 7: 5 ahead, over the jump limit.
        assert_eq!(s.fault(2, |_| false), Moved::Far);
        assert_eq!(s.cursor(), 2);
        assert_eq!(s.fault(9, |_| false), Moved::Unplanned);
        assert_eq!(s.fault(5, |_| false), Moved::Ahead);
        assert_eq!(s.cursor(), 5);
        // 1 is used no more: far, the cursor stays.
        assert_eq!(s.fault(1, |_| false), Moved::Far);
        assert_eq!(s.cursor(), 5);
    }

    #[test]
    fn a_far_fault_moves_the_cursor_only_past_resident_blocks() {
        let seq: Vec<u64> = (0..100).collect();
        let mut s = Schedule::new(seq, 8, 0);
        // 50 is 50 ahead; 2 (max_jump / 4) missing blocks between are fine.
        assert_eq!(s.fault(50, |b| b != 10 && b != 20), Moved::Ahead);
        assert_eq!(s.cursor(), 50);
        // Three missing between 50 and 90: the job cannot be there.
        assert_eq!(s.fault(90, |b| !(60..63).contains(&b)), Moved::Far);
        assert_eq!(s.cursor(), 50);
        // Within the jump limit, no questions asked.
        assert_eq!(s.fault(58, |_| false), Moved::Ahead);
    }

    #[test]
    fn a_fault_at_the_trailing_edge_does_not_ratchet_the_cursor() {
        // The recorded run refaulted 1 at 3 (its FIFO had evicted it).
        let seq = vec![1, 2, 3, 1, 4, 5, 6];
        let mut s = Schedule::new(seq.clone(), 100, 2);
        assert_eq!(s.fault(3, |_| false), Moved::Ahead); // cursor 2
                                                         // 1 read by a late thread block: its use at 0 is within the trail.
        assert_eq!(s.fault(1, |_| false), Moved::Here);
        assert_eq!(s.cursor(), 2);
        // Without a trail the same fault is the refault at 3.
        let mut s = Schedule::new(seq, 100, 0);
        s.fault(3, |_| false);
        assert_eq!(s.fault(1, |_| false), Moved::Ahead);
        assert_eq!(s.cursor(), 3);
    }

    #[test]
    fn blocks_used_within_the_trail_stay_in_use() {
        //             0  1  2  3  4  5  6  7  8
        let seq = vec![1, 2, 3, 4, 5, 6, 7, 1, 2];
        let mut s = Schedule::new(seq, 100, 3);
        for b in [1, 2, 9] {
            s.track(b);
        }
        assert_eq!(s.fault(5, |_| false), Moved::Ahead); // cursor 4, frontier 1
                                                         // 1 is finished (used at 0, next at 7); 2 (used at 1) is not yet.
        assert_eq!(s.take_victim(), Some((9, NEVER)));
        assert_eq!(s.take_victim(), Some((1, 7)));
        assert_eq!(s.take_victim_after(4), None);
        s.fault(7, |_| false); // cursor 6, frontier 3: 2 is finished too
        assert_eq!(s.take_victim(), Some((2, 8)));
    }

    #[test]
    fn a_fault_out_of_order_keeps_its_block() {
        let seq = vec![1, 2, 3, 4, 5, 6, 1];
        let mut s = Schedule::new(seq, 2, 0);
        s.track(1);
        s.fault(3, |_| false); // cursor 2; 1's next use is 6
        assert_eq!(s.fault(1, |_| false), Moved::Far); // the GPU uses it now anyway
        assert_eq!(s.take_victim_after(2), None, "1 is in use");
        s.fault(4, |_| false);
        assert_eq!(s.take_victim(), Some((1, 6)));
    }

    #[test]
    fn keys_follow_the_cursor() {
        let seq = vec![1, 2, 3, 1, 4, 2];
        let mut s = Schedule::new(seq, 100, 0);
        s.track(1);
        s.track(2);
        s.track(9);
        // 9 is never used: the first victim.
        assert_eq!(s.take_victim(), Some((9, NEVER)));
        s.fault(3, |_| false); // cursor 2: 1 next at 3, 2 next at 5
        assert_eq!(s.take_victim_after(5), None);
        assert_eq!(s.take_victim_after(4), Some((2, 5)));
        s.fault(4, |_| false); // cursor 4: 1 is never used again
        assert_eq!(s.take_victim(), Some((1, NEVER)));
        assert_eq!(s.tracked(), 0);
    }

    #[test]
    fn the_window_lists_distinct_blocks_in_order() {
        let seq = vec![1, 2, 1, 3, 2, 4, 5];
        let s = Schedule::new(seq, 100, 0);
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
        let mut s = Schedule::new(seq.to_vec(), NEVER, 0);
        let mut res: Vec<u64> = Vec::new();
        let mut misses = 0;
        for &b in seq {
            s.fault(b, |_| false);
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

    /// Resident blocks whose prefetches land at once. With `slow`, their
    /// evictions end only when the test says (`end_evictions`; prescientd's
    /// workers: the UVM_MIGRATE to the CPU returns after the copy), without
    /// it at once. A prefetch while the counted blocks fill the budget is
    /// counted as a breach.
    struct Host {
        res: HashSet<u64>,
        slow: bool,
        leaving: Vec<u64>,
        budget: u64,
        breaches: u32,
        prefetched: u64,
    }

    impl Host {
        fn new(budget: u64, slow: bool) -> Host {
            Host {
                res: HashSet::new(),
                slow,
                leaving: Vec::new(),
                budget,
                breaches: 0,
                prefetched: 0,
            }
        }

        /// The evictions started so far complete.
        fn end_evictions(&mut self) {
            for v in self.leaving.drain(..) {
                self.res.remove(&v);
            }
        }
    }

    impl Ledger for Host {
        fn blocks(&self) -> u64 {
            self.res.len() as u64
        }
        fn leaving(&self) -> u64 {
            self.leaving.len() as u64
        }
        fn resident(&self, b: u64) -> bool {
            self.res.contains(&b)
        }
        fn movable(&mut self, _b: u64) -> bool {
            true
        }
        fn evict(&mut self, b: u64) -> bool {
            if !self.slow {
                return self.res.remove(&b);
            }
            if !self.res.contains(&b) || self.leaving.contains(&b) {
                return false;
            }
            self.leaving.push(b);
            true
        }
        fn prefetch(&mut self, b: u64, _pos: u32) {
            if self.res.len() as u64 >= self.budget {
                self.breaches += 1;
            }
            self.res.insert(b);
            self.prefetched += 1;
        }
    }

    /// A loop over 64 blocks, 10 times, under a budget of 32, run by a
    /// "GPU" that reads the plan's blocks in an order shuffled within
    /// stretches of 8 (thread blocks out of step): the cursor stays with
    /// the GPU (never ahead of it by more than the jump limit, at the end
    /// only at the end), and once warm, few accesses fault.
    #[test]
    fn the_schedule_keeps_up_with_a_gpu_out_of_step() {
        let (n, iters, budget, ahead) = (64u64, 10, 32, 8);
        let plan: Vec<u64> = (0..iters).flat_map(|_| 0..n).collect();
        let mut run = plan.clone();
        let mut g = Lcg(3);
        for c in run.chunks_mut(8) {
            for i in (1..c.len()).rev() {
                c.swap(i, g.next(i as u64 + 1) as usize);
            }
        }
        let mut s = Schedule::new(plan.clone(), 16, 16);
        let mut l = Host::new(budget, false);
        let mut faults = 0;
        for (i, &b) in run.iter().enumerate() {
            if !l.res.contains(&b) {
                faults += 1;
                s.fault(b, |x| l.res.contains(&x));
                l.res.insert(b);
                s.track(b);
                s.settle(&mut l, budget);
            }
            s.fill(&mut l, budget, budget, ahead);
            assert!(
                s.cursor() as usize <= i + 16,
                "cursor {} at access {i}",
                s.cursor()
            );
            assert!(l.blocks() <= budget);
        }
        assert!(
            s.cursor() as usize >= plan.len() - 64,
            "cursor {}",
            s.cursor()
        );
        // Demand paging would fault on all 640 accesses (a cyclic loop
        // twice the budget); what is left are the stretches' disorder.
        assert!(faults < 200, "{faults} faults");
    }

    /// The loop of the test above with evictions that end after the turn:
    /// no prefetch goes in while the blocks still leaving fill the budget,
    /// the window's later blocks wait in order, and the loop still runs
    /// ahead of the GPU.
    #[test]
    fn evictions_still_leaving_hold_the_prefetches_back() {
        let (n, iters, budget, ahead) = (64u64, 10, 32, 8);
        let plan: Vec<u64> = (0..iters).flat_map(|_| 0..n).collect();
        let mut s = Schedule::new(plan.clone(), 16, 16);
        let mut l = Host::new(budget, true);
        let mut faults = 0;
        for &b in &plan {
            if !l.res.contains(&b) {
                faults += 1;
                s.fault(b, |x| l.res.contains(&x));
                l.res.insert(b);
                s.track(b);
                s.settle(&mut l, budget);
            }
            // Two turns per access (the loop turns far more often than
            // the GPU faults), the evictions ending after each.
            for _ in 0..2 {
                s.fill(&mut l, budget, budget, ahead);
                assert!(
                    l.blocks() <= budget + 1,
                    "only the fault's block is past it"
                );
                l.end_evictions();
            }
        }
        assert_eq!(l.breaches, 0);
        assert!(l.prefetched > 0);
        assert!(faults < 200, "{faults} faults");
    }

    /// A full budget of 32 under a loop over 64 blocks, evictions that end
    /// only when the test says: with a reserve of 4 (`keep` 28), once the
    /// first victims are gone a turn takes five blocks in while their
    /// victims are still leaving, the counted blocks never over the
    /// budget; without one (`keep` 32), each block waits for its own
    /// victim, one a turn.
    #[test]
    fn a_reserve_lets_prefetches_go_in_while_their_victims_leave() {
        let (budget, ahead) = (32u64, 8);
        let plan: Vec<u64> = (0..4).flat_map(|_| 0..64u64).collect();
        let per_turn = |keep: u64| {
            let mut s = Schedule::new(plan.clone(), 16, 0);
            s.start_at(32);
            let mut l = Host::new(budget, true);
            for b in 0..32 {
                l.res.insert(b);
                s.track(b);
            }
            let mut got = Vec::new();
            for _ in 0..3 {
                let before = l.prefetched;
                let f = s.fill(&mut l, budget, keep, ahead);
                assert!(!f.no_room);
                assert!(l.blocks() <= budget);
                got.push(l.prefetched - before);
                l.end_evictions();
            }
            assert_eq!(l.breaches, 0);
            got
        };
        // Turn 1: the room is made but still leaving; later turns take
        // what the reserve holds (or one block) in.
        assert_eq!(per_turn(28), [0, 5, 3]);
        assert_eq!(per_turn(32), [0, 1, 1]);
    }
}
