//! The launches the GPU has not finished, per stream, in launch order: the
//! ring's records go in at the back; when the execution-id page shows a
//! stream starting a kernel, the launches before it on that stream have
//! run and leave from the front. The front of each stream is the kernel
//! it runs now; behind it, the kernels to come and their blocks.

use super::recur::Recurrence;
use prescient_uapi::execpage;
use prescient_uapi::launchring::Record;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// Launches kept in all at most: the ring's capacity twice over. Past it,
/// the oldest launch of the stream that grew goes (a stream whose page
/// slot never moves would otherwise grow without end).
pub const MAX_QUEUED: usize = 8192;
/// Launches searched for the kernel a page update names, from the front.
pub const MATCH_WINDOW: usize = 4096;
/// Ranges of the running launches listed at most (`Upcoming::running_ranges`).
pub const MAX_RUNNING_RANGES: usize = 256;
/// Buckets of the queued-launches histogram: 0, 1, 2-3, 4-7, ... 2^14+.
pub const DEPTH_BUCKETS: usize = 16;

/// One launch to come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The 48-bit execution id, as the page shows it.
    pub id: u64,
    /// `(first block, count)` ranges.
    pub ranges: Vec<(u64, u64)>,
    /// Its number among the launches queued, from 1 (0: not counted).
    pub number: u64,
}

/// What the queue saw (the `ahead` object of the stats JSON).
#[derive(Serialize, Default, Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Records taken into the queue; refused (an id that does not decode).
    pub launches: u64,
    pub bad_ids: u64,
    /// Records whose launch had more ranges or words than recorded, and
    /// blocks named by all records (with `launches`: the mean footprint).
    pub truncated: u64,
    pub blocks: u64,
    /// Records with a guessed range (launchring's `GUESSED`: a pointer
    /// with no allocator's block known; GPU run 82: every one of the
    /// transformer's, whose pluggable allocator tells the runtime nothing).
    pub guessed: u64,
    /// Launches dropped from the front because the queue was full.
    pub overflow: u64,
    /// Kernel starts found in the queue, and not found (their record was
    /// dropped or skipped, or came after the page named them).
    pub matched: u64,
    pub unmatched: u64,
    /// Launches that left the front without their start being seen (they
    /// ran between two reads of the page).
    pub ran_unseen: u64,
    /// Launches queued behind the kernel the GPU started, summed over
    /// matches (with `matched`: the mean), the largest, and a histogram
    /// (bucket k: 2^(k-1) to 2^k - 1 launches; bucket 0: none).
    pub queued_sum: u64,
    pub queued_max: u64,
    pub queued_hist: [u64; DEPTH_BUCKETS],
}

/// The launches to come, per stream key.
#[derive(Default)]
pub struct Queue {
    streams: BTreeMap<u64, VecDeque<Launch>>,
    len: usize,
    /// Bumped on every change, and on every change at a stream's front
    /// (the upcoming blocks are recomputed after those).
    pub generation: u64,
    pub front_generation: u64,
    pub stats: QueueStats,
    /// Each block's uses, for its next use (the next-use order).
    pub recur: Option<Recurrence>,
}

/// The histogram bucket of `n` queued launches.
pub fn bucket(n: u64) -> usize {
    ((64 - n.leading_zeros()) as usize).min(DEPTH_BUCKETS - 1)
}

impl Queue {
    /// Adds a record from the ring.
    pub fn push(&mut self, r: &Record) {
        let Some(id) = execpage::decode(r.id) else {
            self.stats.bad_ids += 1;
            return;
        };
        self.stats.launches += 1;
        self.stats.truncated += u64::from(r.truncated);
        self.stats.guessed += u64::from(r.guessed);
        self.stats.blocks += r.blocks().map(|(_, n)| n).sum::<u64>();
        let ranges: Vec<(u64, u64)> = r.blocks().collect();
        let number = self.recur.as_mut().map_or(0, |t| t.launched(id, &ranges));
        let q = self.streams.entry(r.stream).or_default();
        q.push_back(Launch { id, ranges, number });
        self.len += 1;
        if self.len > MAX_QUEUED {
            q.pop_front();
            self.len -= 1;
            self.stats.overflow += 1;
            self.front_generation += 1;
        }
        self.generation += 1;
    }

    /// The page shows stream `key` starting the kernel with id `id`: the
    /// launches before the first such one on that stream have run.
    /// Returns the number of the launch the GPU runs now if that moved
    /// (launches are numbered with the next-use order only).
    pub fn started(&mut self, key: u64, id: u64) -> Option<u64> {
        let Some(q) = self.streams.get_mut(&key) else {
            self.stats.unmatched += 1;
            return None;
        };
        let Some(i) = q.iter().take(MATCH_WINDOW).position(|l| l.id == id) else {
            self.stats.unmatched += 1;
            return None;
        };
        q.drain(..i);
        self.len -= i;
        let s = &mut self.stats;
        s.ran_unseen += i as u64;
        s.matched += 1;
        let behind = (q.len() - 1) as u64;
        s.queued_sum += behind;
        s.queued_max = s.queued_max.max(behind);
        s.queued_hist[bucket(behind)] += 1;
        if i == 0 {
            return None;
        }
        self.generation += 1;
        self.front_generation += 1;
        self.recur.is_some().then(|| self.now())
    }

    /// The number of the launch the GPU runs now: the earliest at a
    /// stream's front, else one past the last queued.
    fn now(&self) -> u64 {
        let last = self.recur.as_ref().map_or(0, Recurrence::last_launch);
        (self
            .streams
            .values()
            .filter_map(|q| q.front())
            .map(|l| l.number))
        .min()
        .unwrap_or(last + 1)
    }

    /// Launches queued in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Forgets every launch (the counters stay).
    pub fn clear(&mut self) {
        self.streams.clear();
        self.len = 0;
        self.generation += 1;
        self.front_generation += 1;
    }

    /// The blocks of the launches to come, the running ones first, in
    /// launch order (streams taken in turn, one launch each), each once,
    /// at most `max`, into `up.blocks`; and, if asked for, the running
    /// launches' blocks (those a later launch also uses first) into
    /// `up.running` and when blocks left the list into `up.left`.
    pub fn upcoming(&self, max: usize, up: &mut Upcoming) {
        // The list before is kept only for `left`; else its room is reused.
        let old = match up.left {
            Some(_) => std::mem::take(&mut up.blocks),
            None => {
                up.blocks.clear();
                Vec::new()
            }
        };
        let want_running = up.running.is_some();
        let out = &mut up.blocks;
        let mut seen = HashSet::new();
        // Blocks met again after the first round: the running launches'
        // among them are used later too.
        let mut again = HashSet::new();
        let mut running = None;
        up.running_ranges.clear();
        let mut iters: Vec<_> = self.streams.values().map(|q| q.iter()).collect();
        while out.len() < max && !iters.is_empty() {
            iters.retain_mut(|it| match it.next() {
                Some(l) => {
                    if want_running && running.is_none() {
                        let room = MAX_RUNNING_RANGES.saturating_sub(up.running_ranges.len());
                        up.running_ranges.extend(l.ranges.iter().take(room));
                    }
                    // Bounded by `max` whatever a range claims (the ring
                    // is the process's memory: its counts are not trusted).
                    for &(first, count) in &l.ranges {
                        for b in first..first.saturating_add(count) {
                            if out.len() >= max {
                                break;
                            }
                            if seen.insert(b) {
                                out.push(b);
                            } else if want_running && running.is_some() {
                                again.insert(b);
                            }
                        }
                    }
                    true
                }
                None => false,
            });
            running.get_or_insert(out.len());
        }
        up.generation = self.front_generation;
        if let Some(left) = up.left.as_mut() {
            left.update(&old, out, &seen);
        }
        if let (Some(next), Some(recur)) = (up.next_use.as_mut(), self.recur.as_ref()) {
            next.update(recur, self.now());
        }
        if let Some(r) = up.running.as_mut() {
            let first = &out[..running.unwrap_or(0)];
            r.clear();
            r.extend(first.iter().filter(|b| again.contains(b)));
            r.extend(first.iter().filter(|b| !again.contains(b)));
        }
    }
}

/// The blocks of the launches to come (`Queue::upcoming`).
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Upcoming {
    /// Each once, in order of use.
    pub blocks: Vec<u64>,
    /// If asked for (`Some`): the running launches' blocks (the front of
    /// each stream), those a later launch also uses first, each part in
    /// order of use: what to keep of running launches larger than the
    /// budget (issue.rs `window`), and whether they are (order.rs).
    pub running: Option<Vec<u64>>,
    /// With `running`: the running launches' `(first block, count)`
    /// ranges as their records claim them (sweep.rs places the blocks of
    /// `running` in them; nothing walks them).
    pub running_ranges: Vec<(u64, u64)>,
    /// The queue's front generation when computed (`running` changes
    /// only with it).
    pub generation: u64,
    /// When each block left the list, if asked for (`--cyclic-victims`).
    pub left: Option<Left>,
    /// If asked for (the next-use order): every block's next use.
    pub next_use: Option<NextUses>,
}

impl Upcoming {
    /// The running launches' blocks, those used later first (empty unless
    /// asked for).
    pub fn running(&self) -> &[u64] {
        self.running.as_deref().unwrap_or_default()
    }

    /// Do the running launches alone use more blocks than `limit_blocks`?
    pub fn running_exceeds(&self, limit_blocks: u64) -> bool {
        self.running().len() as u64 > limit_blocks
    }
}

/// `(next use, block)` of every block with a use known, the farthest
/// first (`u64::MAX`: not expected back; those go first of all), as of
/// launch `now`; empty while no period is known (the engine's order
/// stands). Blocks the list holds are in it too: the pass orders those
/// after (order.rs `order_next_use`).
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct NextUses {
    pub farthest_first: Vec<(u64, u64)>,
    pub now: u64,
    /// Bumped at each computation: the pass orders the blocks again only
    /// then (policy.rs `issue_upcoming`).
    pub generation: u64,
}

/// The next uses are computed again this many times a period (a step).
///
/// Why 256: a block's next use changes only when the GPU passes it, and
/// the computation costs about 0.1 us a block (0.6 ms for the list and
/// 5,700 blocks on this 2-core machine, BENCHMARKS.md section 11), too
/// much for every kernel start; between two computations the blocks the
/// GPU has just used stay at the most recent end whatever their next use.
/// Every 32nd of a step (runs 110-175), the 374M LM's optimizer, which
/// streams its 6 GB of model states through a 4 GB budget, evicted 1.5x
/// the blocks Belady would; every 256th (GPU run 176), 11% fewer bytes to
/// the host and 1.08x faster steps, the 220M LM level.
pub const NEXT_USE_PASSES: u64 = 256;

impl NextUses {
    /// Computes the order again once the GPU is a [`NEXT_USE_PASSES`]th of
    /// a period past the last time.
    fn update(&mut self, recur: &Recurrence, now: u64) {
        let Some(period) = recur.period() else {
            self.farthest_first.clear();
            return;
        };
        let fresh =
            !self.farthest_first.is_empty() && now < self.now + (period / NEXT_USE_PASSES).max(1);
        if fresh && now >= self.now {
            return;
        }
        self.now = now;
        self.generation += 1;
        self.farthest_first.clear();
        self.farthest_first.extend(
            recur
                .next_uses(now, period)
                .map(|(b, at)| (at.unwrap_or(u64::MAX), b)),
        );
        self.farthest_first.sort_unstable_by(|x, y| y.cmp(x));
    }
}

/// When blocks left the list of upcoming blocks: a block no queued launch
/// uses any more, stamped with the number of the list that dropped it.
///
/// Why: in a program that repeats itself (a training step, a solver's
/// sweep), the block that left the queue last is used again last: the
/// victim Belady's rule picks among blocks no queued launch uses
/// (issue.rs `order_cyclic`).
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// Lists computed.
    seq: u64,
    /// Block -> the list that dropped it; a block back in the list is
    /// not here.
    pub at: HashMap<u64, u64>,
}

impl Left {
    /// The list went from `old` to `new` (`in_new`: its blocks).
    fn update(&mut self, old: &[u64], new: &[u64], in_new: &HashSet<u64>) {
        self.seq += 1;
        for &b in old {
            if !in_new.contains(&b) {
                self.at.insert(b, self.seq);
            }
        }
        for b in new {
            self.at.remove(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_uapi::execpage::encode;

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

    /// A training step's launches on one stream, the same ids every step
    /// (PyTorch's caching allocator hands out the same addresses): the
    /// page naming a kernel drops the launches before its first
    /// occurrence, never a later step's copy of it.
    #[test]
    fn a_started_kernel_drops_what_ran_before_it_on_its_stream() {
        let mut q = Queue::default();
        for step in 0..2 {
            for (k, id) in [10, 11, 12].into_iter().enumerate() {
                q.push(&rec(0x7000, id, &[(100 * step + k as u64, 1)]));
            }
        }
        q.push(&rec(0x8000, 99, &[(500, 2)]));
        let mut up = Upcoming {
            running: Some(Vec::new()),
            ..Upcoming::default()
        };
        // Streams in turn: 0x7000's first launch, then 0x8000's, ...
        q.upcoming(100, &mut up);
        assert_eq!(up.blocks, [0, 500, 501, 1, 2, 100, 101, 102]);
        assert_eq!(
            up.running(),
            [0, 500, 501],
            "the fronts; nothing used again"
        );
        q.started(0x7000, 12);
        assert_eq!(q.stats.ran_unseen, 2);
        assert_eq!(q.stats.queued_sum, 3, "12 of step 0, then step 1's three");
        q.upcoming(100, &mut up);
        assert_eq!(up.blocks, [2, 500, 501, 100, 101, 102]);
        q.started(0x7000, 10);
        assert_eq!(q.len(), 4);
        q.started(0x7000, 77);
        assert_eq!(q.stats.unmatched, 1);
        assert_eq!(q.len(), 4, "an unknown kernel changes nothing");
        // 3 and 2 launches behind: both in bucket 2 (2-3).
        assert_eq!(q.stats.queued_hist[2], 2);
        q.upcoming(2, &mut up);
        assert_eq!(up.blocks, [100, 500]);
        // A range of 2^32 - 1 blocks costs no more than `max`.
        q.push(&rec(0x9000, 5, &[(1, u32::MAX as u64)]));
        q.upcoming(10, &mut up);
        assert_eq!(up.blocks.len(), 10);
    }

    /// A layer's kernel reads its input (0-3) and writes its output
    /// (10-11), which the next kernel reads: of the running launch's
    /// blocks, the output comes first in `running` (a later launch uses
    /// it), then the input, each in order; a stream's later launches are
    /// not running.
    #[test]
    fn the_running_launchs_blocks_used_later_come_first() {
        let mut q = Queue::default();
        q.push(&rec(0x7000, 1, &[(0, 4), (10, 2)]));
        q.push(&rec(0x7000, 2, &[(10, 2), (20, 2)]));
        q.push(&rec(0x7000, 3, &[(20, 2), (1, 1)]));
        let mut up = Upcoming {
            running: Some(Vec::new()),
            ..Upcoming::default()
        };
        q.upcoming(100, &mut up);
        assert_eq!(up.blocks, [0, 1, 2, 3, 10, 11, 20, 21]);
        assert_eq!(up.running(), [1, 10, 11, 0, 2, 3]);
        assert!(up.running_exceeds(5) && !up.running_exceeds(6));
        q.started(0x7000, 2);
        q.upcoming(100, &mut up);
        assert_eq!(up.running(), [20, 21, 10, 11]);
        // Not asked for: nothing is kept.
        let mut plain = Upcoming::default();
        q.upcoming(100, &mut plain);
        assert!(plain.running.is_none() && !plain.running_exceeds(0));
    }

    /// `started` returns the number of the launch the GPU runs when the
    /// front moved (the block log's `K` lines), with launches numbered.
    #[test]
    fn a_start_that_moves_the_front_returns_the_gpus_launch() {
        let mut q = Queue::default();
        q.push(&rec(0x7000, 1, &[(0, 1)]));
        assert_eq!(q.started(0x7000, 1), None, "not numbered");
        q.recur = Some(Default::default());
        for id in 2..=4 {
            q.push(&rec(0x7000, id, &[(id, 1)]));
        }
        assert_eq!(q.started(0x7000, 3), Some(2), "the second numbered");
        assert_eq!(q.started(0x7000, 3), None, "the front stayed");
        assert_eq!(q.started(0x7000, 9), None, "not queued");
        assert_eq!(q.started(0x7000, 4), Some(3));
    }

    /// With `left` asked for, a block is stamped with the list that
    /// dropped it (the launches that used it ran), and unstamped when a
    /// launch to come uses it again.
    #[test]
    fn blocks_are_stamped_when_they_leave_the_list() {
        let mut q = Queue::default();
        q.push(&rec(0x7000, 1, &[(0, 2)]));
        q.push(&rec(0x7000, 2, &[(2, 2)]));
        q.push(&rec(0x7000, 3, &[(4, 1)]));
        let mut up = Upcoming {
            left: Some(Left::default()),
            ..Upcoming::default()
        };
        q.upcoming(100, &mut up);
        assert!(up.left.as_ref().unwrap().at.is_empty());
        q.started(0x7000, 2);
        q.upcoming(100, &mut up);
        q.started(0x7000, 3);
        q.upcoming(100, &mut up);
        let at = &up.left.as_ref().unwrap().at;
        assert_eq!((at[&0], at[&1], at[&2], at[&3]), (2, 2, 3, 3));
        assert!(!at.contains_key(&4), "still to come");
        q.push(&rec(0x7000, 1, &[(1, 1)]));
        q.upcoming(100, &mut up);
        let at = &up.left.as_ref().unwrap().at;
        assert!(!at.contains_key(&1), "queued again");
        assert_eq!(at.len(), 3);
        // Not asked for: nothing is kept.
        let mut plain = Upcoming::default();
        q.upcoming(100, &mut plain);
        assert!(plain.left.is_none());
    }

    /// Launches whose ranges include the runtime's guess are counted.
    #[test]
    fn guessed_launches_are_counted() {
        let mut q = Queue::default();
        q.push(&rec(0x7000, 10, &[(0, 2)]));
        let mut g = rec(0x7000, 11, &[(40, 32)]);
        g.guessed = true;
        q.push(&g);
        assert_eq!((q.stats.launches, q.stats.guessed), (2, 1));
    }

    #[test]
    fn the_queue_is_bounded_and_refuses_ids_that_do_not_decode() {
        let mut q = Queue::default();
        for i in 0..MAX_QUEUED as u64 + 5 {
            q.push(&rec(1, i + 1, &[]));
        }
        assert_eq!(q.len(), MAX_QUEUED);
        assert_eq!(q.stats.overflow, 5);
        let mut bad = rec(1, 5, &[]);
        bad.id ^= 1 << 50;
        q.push(&bad);
        assert_eq!(q.stats.bad_ids, 1);
        assert_eq!(
            (bucket(0), bucket(1), bucket(2), bucket(3), bucket(4)),
            (0, 1, 2, 2, 3)
        );
        assert_eq!(bucket(u64::MAX), DEPTH_BUCKETS - 1);
    }
}
