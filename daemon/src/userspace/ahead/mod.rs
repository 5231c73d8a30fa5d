//! Launch footprints (`--footprints`): the kernels the GPU will run next
//! and the blocks they use, from the process's launch ring
//! (prescient_uapi::launchring, written by prescient-runtime before each
//! launch), prefetched ahead of the kernel the GPU is on.
//!
//! A plan learnt from faults (the engine's tables, or the oracle's
//! recorded faults) misses the accesses that hit; the runtime sees every
//! launch, with its arguments, before the GPU runs it. Each turn the loop
//! reads the ring into a per-stream queue (queue.rs); the execution-id
//! page says which queued launch each stream runs now; the blocks of that
//! launch and the ones behind it, in order, within a part of the budget
//! (`--footprint-window-pct`), are prefetched first (issue.rs), and kept
//! from eviction as long as blocks outside them can go; running launches
//! larger than the budget keep most of it instead (issue.rs `window`).
//! The engine then prefetches as before with what room is left, and
//! chooses the victims.
//!
//! - queue.rs: the launches to come, and how far ahead of the GPU they are;
//! - issue.rs: their blocks, prefetched in order under the budget;
//! - order.rs: victim orders over the whole queue (the next-use order, on,
//!   and research knobs), recur.rs: each block's next use from its uses a
//!   step ago (for the next-use order); sweep.rs: where the GPU is in
//!   running launches larger than the limit (their victims and window);
//! - ring.rs: finding and mapping the ring; turn.rs: reading it each turn.

pub(super) mod issue;
pub(super) mod order;
pub(super) mod queue;
mod recur;
mod ring;
pub(super) mod sweep;
mod turn;

use prescient_uapi::launchring::{Reader, Record, CAPACITY};
use queue::{Queue, QueueStats, Upcoming};
pub(super) use ring::Foreign;
use serde::Serialize;

/// Blocks of upcoming launches computed at most (each lane takes its
/// window's part): 8 GB.
pub const MAX_UPCOMING: usize = 4096;

/// The ring's counters and the queue's, for the stats JSON.
#[derive(Serialize, Default, Clone, Debug, PartialEq, Eq)]
pub struct AheadStats {
    /// Records read from the ring; skipped (a writer that never committed,
    /// or torn); dropped by the runtime on a full ring; committed by it.
    pub records_read: u64,
    pub records_skipped: u64,
    pub records_torn: u64,
    pub records_dropped: u64,
    pub records_committed: u64,
    #[serde(flatten)]
    pub queue: QueueStats,
    /// Blocks of upcoming launches prefetched, found resident already,
    /// declined by the host (no GPU, back-off); turns that ran out of room.
    pub prefetched_blocks: u64,
    pub resident_blocks: u64,
    pub declined_blocks: u64,
    pub no_room: u64,
    /// Turns that stopped to wait for evictions to complete (the room made
    /// for the next block was still leaving the GPU).
    pub waiting: u64,
    /// The window's size in blocks at the last turn, and the launches
    /// queued at the last snapshot.
    pub window_blocks: u64,
    pub queued_now: u64,
    /// The next-use order: launches in a step (0: none known yet), and
    /// times the table of uses started again at its bound.
    pub next_use_period: u64,
    pub next_use_restarts: u64,
    /// Orders of running launches larger than the limit by where the GPU
    /// is in them (sweep.rs), and launches it stood aside for (their
    /// faults came behind the front).
    pub sweep_orders: u64,
    pub sweep_asides: u64,
}

/// The process's ring, its reader, and the launches to come.
pub(super) struct Ahead {
    ring: ring::Mapped,
    reader: Reader,
    pub(super) queue: Queue,
    upcoming: Upcoming,
    /// The queue's generations the list was computed at, and its bound.
    upcoming_gen: Option<u64>,
    upcoming_max: usize,
    /// What the list carries besides its blocks (`track_left`,
    /// `track_running`).
    want_left: bool,
    want_running: bool,
    want_next_use: bool,
    seen_gen: u64,
    wanted: bool,
    /// The sequence of the host-advice table last taken.
    advice_seq: Option<u64>,
    /// Records read since the block log last took them (`log_launches`).
    logged: Option<Vec<Record>>,
    pub(super) stats: AheadStats,
}

impl Ahead {
    /// Maps the ring of process `pid`, if its runtime made one, and asks
    /// for records; `Err` if the ring is of another format (a runtime of
    /// another release).
    pub(super) fn find(pid: i32) -> Result<Option<Ahead>, Foreign> {
        let Some(ring) = ring::Mapped::find(pid)? else {
            return Ok(None);
        };
        let reader = Reader::attach(&ring.ring());
        ring.ring().want(true);
        Ok(Some(Ahead {
            ring,
            reader,
            queue: Queue::default(),
            upcoming: Upcoming::default(),
            upcoming_gen: None,
            upcoming_max: 0,
            want_left: false,
            want_running: false,
            want_next_use: false,
            seen_gen: 0,
            wanted: true,
            advice_seq: None,
            logged: None,
            stats: AheadStats::default(),
        }))
    }

    /// Asks for records or stops asking (with the page's ids: a record is
    /// of no use without the id that places it). Stopping forgets the
    /// queue: records written meanwhile are missing from it.
    pub(super) fn want(&mut self, on: bool) {
        if on == self.wanted {
            return;
        }
        self.wanted = on;
        self.ring.ring().want(on);
        if !on {
            self.queue.clear();
            self.reader = Reader::attach(&self.ring.ring());
        }
    }

    /// Stamps blocks when they leave the list of upcoming blocks
    /// (`queue::Left`, for `--cyclic-victims`), from the next list on.
    pub(super) fn track_left(&mut self) {
        self.want_left = true;
    }

    /// Predicts each block's next use from its uses a step ago
    /// (`Upcoming::next_use`, for the next-use order), from the next
    /// record on.
    pub(super) fn track_next_use(&mut self) {
        if !self.want_next_use {
            self.want_next_use = true;
            self.queue.recur.get_or_insert_with(Default::default);
        }
    }

    /// Lists the running launches' blocks too (`Upcoming::running`, for
    /// the large window and the whole-queue passes), from the next list on.
    pub(super) fn track_running(&mut self) {
        self.want_running = true;
    }

    /// Keeps each record read for the block log's `L` lines
    /// (`take_logged`), from the next poll on.
    pub(super) fn log_launches(&mut self) {
        self.logged.get_or_insert_with(Vec::new);
    }

    /// The records read since the last call (none unless `log_launches`).
    pub(super) fn take_logged(&mut self) -> Vec<Record> {
        self.logged.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Reads what the runtime wrote since the last turn.
    pub(super) fn poll(&mut self) {
        let ring = self.ring.ring();
        let q = &mut self.queue;
        let logged = &mut self.logged;
        self.reader.poll(&ring, CAPACITY, |r| {
            if let Some(l) = logged.as_mut() {
                l.push(r);
            }
            q.push(&r);
        });
        let (dropped, committed) = ring.counts();
        let s = &mut self.stats;
        (s.records_read, s.records_skipped, s.records_torn) =
            (self.reader.read, self.reader.skipped, self.reader.torn);
        (s.records_dropped, s.records_committed) = (dropped, committed);
    }

    /// The ranges the job advised to stay in host memory, when the
    /// runtime published a new table since the last call (a torn one is
    /// taken at a later call).
    pub(super) fn host_advice(&mut self) -> Option<Vec<(u64, u64)>> {
        let t = self.ring.ring().host_advice(self.advice_seq)?;
        self.advice_seq = Some(t.seq);
        Some(t.ranges().to_vec())
    }

    /// The blocks of the launches to come, in order (recomputed when the
    /// queue changed), lent to the policy's turn: [`Ahead::put_back`]
    /// returns them with what the turn did.
    /// At most `max` blocks (at most [`MAX_UPCOMING`]): the largest
    /// window the lanes may take, or the whole list for the passes that
    /// order it (policy.rs `upcoming_needed`).
    ///
    /// Why the bound: the list is computed again at every kernel start,
    /// and its cost grows with its length (BENCHMARKS.md section 10: 130
    /// us a list of 4,096 blocks, 24 us one of 600, the 220M LM's window
    /// under its 4800M budget).
    pub(super) fn take_upcoming(&mut self, max: usize) -> Upcoming {
        let max = max.min(MAX_UPCOMING);
        // Launches added behind a full list change nothing in it.
        let stale = self.upcoming_gen != Some(self.queue.front_generation)
            || self.upcoming_max != max
            || (self.upcoming.blocks.len() < max && self.seen_gen != self.queue.generation);
        if stale {
            let up = &mut self.upcoming;
            if self.want_left {
                up.left.get_or_insert_with(Default::default);
            }
            if self.want_running {
                up.running.get_or_insert_with(Vec::new);
            }
            if self.want_next_use {
                up.next_use.get_or_insert_with(Default::default);
            }
            self.queue.upcoming(max, up);
            self.upcoming_gen = Some(self.queue.front_generation);
            self.seen_gen = self.queue.generation;
            self.upcoming_max = max;
        }
        std::mem::take(&mut self.upcoming)
    }

    /// Takes back the upcoming blocks and counts what a turn did.
    pub(super) fn put_back(&mut self, upcoming: Upcoming, done: &[issue::Issued], window: u64) {
        self.upcoming = upcoming;
        let s = &mut self.stats;
        for d in done {
            s.prefetched_blocks += d.prefetched;
            s.resident_blocks += d.resident;
            s.declined_blocks += d.declined;
            s.no_room += u64::from(d.no_room);
            s.waiting += u64::from(d.waiting);
        }
        s.window_blocks = window;
    }

    /// The counters, with the queue's.
    pub(super) fn snapshot(&self) -> AheadStats {
        let recur = self.queue.recur.as_ref();
        AheadStats {
            queue: self.queue.stats.clone(),
            queued_now: self.queue.len() as u64,
            next_use_period: recur.and_then(|r| r.period()).unwrap_or(0),
            next_use_restarts: recur.map_or(0, |r| r.restarts),
            ..self.stats.clone()
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.ring.ring().want(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_uapi::execpage::encode;
    use prescient_uapi::launchring::{Record, Ring};

    /// The host-advice table of the runtime's ring in this process: taken
    /// once per publication (the empty table a fresh ring holds first),
    /// not while the writer writes it.
    #[test]
    fn the_jobs_host_advice_is_taken_once_per_publication() {
        let _one = ring::tests::ONE_RING
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (_f, w) = ring::tests::runtime_ring();
        let r = Ring::new(w).unwrap();
        r.init(std::process::id());
        let mut a = Ahead::find(std::process::id() as i32)
            .unwrap()
            .expect("found");
        assert_eq!(a.host_advice(), Some(vec![]), "a fresh ring's table");
        assert_eq!(a.host_advice(), None);
        r.publish_host_advice(&[(1 << 30, 2 << 30)], 0);
        assert_eq!(a.host_advice(), Some(vec![(1 << 30, 2 << 30)]));
        assert_eq!(a.host_advice(), None);
        let seq = prescient_uapi::launchring::advice::ADVICE_AT;
        w[seq].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(a.host_advice(), None, "being written");
        w[seq].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(a.host_advice(), Some(vec![(1 << 30, 2 << 30)]));
    }

    /// The runtime's ring in this process: the reader starts at what is
    /// written after it came, queues the launches per stream, follows the
    /// page's kernel starts, and stops asking (and forgets the queue) when
    /// ids are no longer asked for.
    #[test]
    fn the_reader_queues_launches_and_follows_the_gpu() {
        let _one = ring::tests::ONE_RING
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (_f, w) = ring::tests::runtime_ring();
        let r = Ring::new(w).unwrap();
        r.init(std::process::id());
        let launch = |id: u64, block: u64| {
            let mut x = Record {
                id: encode(id),
                stream: 0x7000,
                ..Record::default()
            };
            x.push(block, 2);
            x
        };
        assert!(r.push(&launch(1, 10)), "written before the reader came");
        let mut a = Ahead::find(std::process::id() as i32)
            .unwrap()
            .expect("found");
        a.track_running();
        assert!(r.wanted());
        for (id, b) in [(2, 20), (3, 30), (4, 40)] {
            assert!(r.push(&launch(id, b)));
        }
        a.poll();
        assert_eq!(
            a.take_upcoming(MAX_UPCOMING).blocks,
            [20, 21, 30, 31, 40, 41]
        );
        a.queue.started(0x7000, 3);
        let up = a.take_upcoming(MAX_UPCOMING);
        assert_eq!(
            (&up.blocks[..], up.running()),
            (&[30, 31, 40, 41][..], &[30, 31][..])
        );
        a.put_back(up, &[], 4);
        let s = a.snapshot();
        assert_eq!(
            (s.records_read, s.queue.matched, s.queue.ran_unseen),
            (3, 1, 1)
        );
        assert_eq!(
            (s.queued_now, s.queue.queued_sum, s.window_blocks),
            (2, 1, 4)
        );
        // A smaller bound computes the list again, within it; a larger
        // one, again in full.
        let one = a.take_upcoming(1);
        assert_eq!(one.blocks, [30]);
        a.put_back(one, &[], 1);
        assert_eq!(a.take_upcoming(MAX_UPCOMING).blocks, [30, 31, 40, 41]);
        a.want(false);
        assert!(!r.wanted());
        assert!(a.take_upcoming(MAX_UPCOMING).blocks.is_empty());
        drop(a);
        assert!(!r.wanted(), "a dropped reader stops asking");
    }
}
