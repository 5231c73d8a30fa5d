//! The marks protocol's state: which frees wait for their fence, which
//! blocks the daemon holds as dead, and the two calls that move them
//! (mod.rs states why no discard can hit memory that is live again).
//!
//! It is generic over the link to prescientd and over the GPU fence, so
//! that the tests drive this very code with a model of streams and of the
//! daemon (race_tests.rs).

use super::blocks::{as_bytes, inward, outward, Blocks};
use super::pause::Pause;
use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

/// Ranges in one request: the daemon's limit (marks.rs `MAX_RANGES`).
pub const MAX_RANGES: usize = 128;
/// Fences asked per flush at most: bounds a flush's driver calls.
pub const MAX_QUERIES: usize = 256;
/// Frees waiting for their fence at most; past it the oldest is dropped
/// (not marked: safe, its blocks are only not discarded).
pub const MAX_PENDING: usize = 4096;
/// Retries of an alive mark whose connection failed before it is taken
/// as "prescientd is gone" (with the link's pause, about a minute: longer
/// than the daemon's own wait for a discard in flight, marks.rs
/// `ALIVE_WAIT`).
pub const ALIVE_RETRIES: u32 = 64;

/// prescientd's answer to one mark request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Taken: queued (dead), or held out of every discard and queued
    /// (alive: the daemon's alive gate, daemon/src/userspace/alive.rs).
    Ok,
    /// Not taken now (queue full, or a discard held the daemon's gate too
    /// long).
    Busy,
    /// The process has no backend (not attached yet, detached, exited):
    /// nothing of it is or will be discarded under this attachment.
    NotAttached,
    /// The connection broke, or the daemon closed it, mid-request.
    Closed,
    /// Nothing listens on the socket: no daemon, so nothing discards (a
    /// daemon started again holds no marks of this process).
    NoDaemon,
    /// prescientd is there and its backend is not (prescient.ko unloaded
    /// or not loaded yet): nothing discards now, and the marks it took
    /// went with the module (pause.rs). The reply's message.
    Unavailable(String),
    /// Refused for a reason that will not change.
    Refused(String),
}

/// What a mark says of its ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Freed: the data is dead.
    Dead,
    /// Handed out again: live, and blocks prescientd discarded come back
    /// to the GPU before the reply.
    Alive,
    /// Going back to the driver (a segment freed, cuMemFree): live again,
    /// so that a later allocation there never starts out dead, but nothing
    /// is brought back (the control protocol's `no_populate`).
    Released,
}

/// The way to prescientd.
pub trait Link {
    /// Sends one mark (`[addr, len]` ranges) and returns the answer.
    fn call(&mut self, kind: Kind, ranges: &[[u64; 2]]) -> Reply;
    /// Waits before retry `attempt` of an alive mark.
    fn pause(&mut self, attempt: u32);
}

/// Points in a stream's work, and whether the GPU has passed them.
pub trait Fence {
    type Token;
    /// A point after everything queued on `stream` so far; None when no
    /// point can be recorded now (then the free is not marked).
    fn record(&mut self, stream: u64) -> Option<Self::Token>;
    /// Whether the GPU has passed the point (false on any doubt).
    fn passed(&mut self, t: &Self::Token) -> bool;
    /// The point is no longer needed.
    fn release(&mut self, t: Self::Token);
}

/// A free whose dead mark waits for its fence: the blocks of it not
/// handed out again since.
struct Pending<T> {
    blocks: Vec<Range<u64>>,
    stream: u64,
    token: T,
    /// When the allocator freed it (the hold counts from here).
    freed_at: Instant,
}

/// What the protocol did (printed at exit with the runtime's counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frees with whole blocks inside.
    pub frees: u64,
    /// Blocks the daemon took as dead.
    pub dead_blocks: u64,
    /// Blocks marked alive again (the daemon confirmed).
    pub alive_blocks: u64,
    /// Blocks handed out again before their dead mark was sent.
    pub cancelled_blocks: u64,
    /// Dead blocks not sent or not taken (never discarded, then).
    pub dropped_blocks: u64,
    /// Mark requests sent.
    pub requests: u64,
    /// Time spent waiting for alive marks, ns.
    pub alive_wait_ns: u64,
    /// Of `dead_blocks`, those the flusher thread sent (mod.rs): their
    /// fence passed while the job made no allocator call.
    pub flusher_blocks: u64,
}

/// One process's marks.
pub struct Marks<L: Link, F: Fence> {
    link: L,
    fence: F,
    pending: VecDeque<Pending<F::Token>>,
    /// The union of the pending frees' blocks (they are kept disjoint):
    /// an allocation that misses it costs one lookup.
    pending_blocks: Blocks,
    /// Blocks the daemon took as dead and has not confirmed alive since.
    dead: Blocks,
    /// Why no more dead marks are sent (alive marks still are).
    off: Option<String>,
    /// How long a free waits before its dead mark may go (`with_hold`).
    pub hold: Duration,
    /// prescientd refused `no_populate` once (older than the field):
    /// releases go as plain alive marks from then on.
    no_populate_refused: bool,
    /// Dead marks paused while prescientd has no backend (pause.rs).
    pub pause: Pause,
    pub counters: Counters,
}

impl<L: Link, F: Fence> Marks<L, F> {
    pub fn new(link: L, fence: F) -> Self {
        Marks {
            link,
            fence,
            pending: VecDeque::new(),
            pending_blocks: Blocks::default(),
            dead: Blocks::default(),
            off: None,
            hold: Duration::ZERO,
            no_populate_refused: false,
            pause: Pause::default(),
            counters: Counters::default(),
        }
    }

    /// Sends a free's dead mark only once the block has stayed free for
    /// `hold` (its fence passed too).
    ///
    /// Why: a block the allocator hands out again soon after its free
    /// costs a dead mark and a synchronous alive mark, and gains only if
    /// prescientd discarded it in between, which it rarely has that soon.
    /// On the 374M LM (GPU run 163, bench/gpu/markgaps.py), 27-31% of the
    /// blocks marked alive came back within 10 ms of their dead mark, and
    /// 2-3% of the discards were of those. Holding is on the safe side: a
    /// block not marked dead is only not discarded.
    pub fn with_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Why dead marks stopped, if they did.
    pub fn off(&self) -> Option<&str> {
        self.off.as_deref()
    }

    /// True when a flush at `now` may send something: the oldest free's
    /// hold is over (frees are queued in time order).
    pub fn ready_at(&self, now: Instant) -> bool {
        self.off.is_none()
            && !self.pause.active(now)
            && self
                .pending
                .front()
                .is_some_and(|p| now.saturating_duration_since(p.freed_at) >= self.hold)
    }

    /// Blocks the daemon holds as dead now (as far as this side knows).
    pub fn dead_blocks(&self) -> &Blocks {
        &self.dead
    }

    /// The allocator completed a free of `[addr, addr + len)`, last used on
    /// `stream`: its whole blocks become dead once the GPU has passed
    /// what is queued on `stream` now.
    pub fn freed(&mut self, addr: u64, len: u64, stream: u64) {
        self.freed_at(addr, len, stream, Instant::now());
    }

    /// `freed` at `now`.
    pub fn freed_at(&mut self, addr: u64, len: u64, stream: u64, now: Instant) {
        let b = inward(addr, len);
        if self.off.is_some() || b.is_empty() {
            return;
        }
        self.counters.frees += 1;
        if self.pause.active(now) {
            self.counters.dropped_blocks += b.end - b.start;
            return;
        }
        // Keeps pending frees disjoint (a block freed twice with no
        // allocation between would be an allocator bug; the older free's
        // claim on it goes).
        if self.pending_blocks.overlaps(&b) {
            self.cancel(&b);
        }
        let Some(token) = self.fence.record(stream) else {
            self.counters.dropped_blocks += b.end - b.start;
            return;
        };
        self.pending_blocks.insert(b.clone());
        self.pending.push_back(Pending {
            blocks: vec![b],
            stream,
            token,
            freed_at: now,
        });
        if self.pending.len() > MAX_PENDING {
            if let Some(p) = self.pending.pop_front() {
                self.forget(&p.blocks);
                self.counters.dropped_blocks += count(&p.blocks);
                self.fence.release(p.token);
            }
        }
    }

    /// Takes blocks that leave the pending list out of its union.
    fn forget(&mut self, blocks: &[Range<u64>]) {
        for r in blocks {
            self.pending_blocks.take(r.clone());
        }
    }

    /// The allocator hands `[addr, addr + len)` out. Returns once none of
    /// its blocks is dead at the daemon: dead marks not sent yet are
    /// cancelled, sent ones are marked alive and the daemon's reply awaited.
    pub fn allocated(&mut self, addr: u64, len: u64) {
        self.live_again(addr, len, Kind::Alive);
    }

    /// `[addr, addr + len)` goes back to the driver: as `allocated`, but
    /// the alive mark brings nothing onto the GPU (`Kind::Released`).
    pub fn released(&mut self, addr: u64, len: u64) {
        self.live_again(addr, len, Kind::Released);
    }

    fn live_again(&mut self, addr: u64, len: u64, kind: Kind) {
        let b = outward(addr, len);
        if b.is_empty() {
            return;
        }
        if self.pending_blocks.overlaps(&b) {
            self.cancel(&b);
        }
        let revive = self.dead.take(b);
        if !revive.is_empty() {
            self.revive(&revive, kind);
        }
    }

    /// Takes `b` out of the frees still waiting for their fence.
    fn cancel(&mut self, b: &Range<u64>) {
        self.pending_blocks.take(b.clone());
        let mut cut = 0;
        for p in self.pending.iter_mut() {
            let mut kept = Vec::with_capacity(p.blocks.len());
            for r in p.blocks.drain(..) {
                let (lo, hi) = (r.start.max(b.start), r.end.min(b.end));
                if lo >= hi {
                    kept.push(r);
                    continue;
                }
                cut += hi - lo;
                if r.start < lo {
                    kept.push(r.start..lo);
                }
                if hi < r.end {
                    kept.push(hi..r.end);
                }
            }
            p.blocks = kept;
        }
        self.counters.cancelled_blocks += cut;
        if cut == 0 {
            return;
        }
        let mut keep = VecDeque::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            if p.blocks.is_empty() {
                self.fence.release(p.token);
            } else {
                keep.push_back(p);
            }
        }
        self.pending = keep;
    }

    /// Marks `blocks` alive (`kind` Alive or Released) and waits until the
    /// daemon has taken it (from then on it discards none of them).
    fn revive(&mut self, blocks: &[Range<u64>], kind: Kind) {
        let t = std::time::Instant::now();
        for chunk in blocks.chunks(MAX_RANGES) {
            let ranges: Vec<[u64; 2]> = chunk.iter().map(as_bytes).collect();
            let mut attempt = 0;
            loop {
                // A prescientd that refused `no_populate` once gets plain
                // alive marks from then on.
                let kind = if kind == Kind::Released && self.no_populate_refused {
                    Kind::Alive
                } else {
                    kind
                };
                self.counters.requests += 1;
                match self.link.call(kind, &ranges) {
                    Reply::Ok => {
                        self.counters.alive_blocks += count(chunk);
                        break;
                    }
                    // Not taken yet: the daemon is there and may discard:
                    // wait until it has taken it.
                    Reply::Busy => {}
                    Reply::Closed if attempt < ALIVE_RETRIES => {}
                    // No backend, or no daemon, for this process: nothing
                    // is discarded for it (marks.rs: a backend that ends
                    // drops its marks; a restarted daemon has none; an
                    // unloaded module took its records with it).
                    Reply::NotAttached
                    | Reply::NoDaemon
                    | Reply::Closed
                    | Reply::Unavailable(_) => break,
                    // A prescientd older than `no_populate` refuses the
                    // field: the blocks must be alive all the same.
                    Reply::Refused(_) if kind == Kind::Released => {
                        self.no_populate_refused = true;
                        continue;
                    }
                    Reply::Refused(m) => {
                        self.turn_off(format!("prescientd refused an alive mark: {m}"));
                        break;
                    }
                }
                attempt += 1;
                self.link.pause(attempt);
            }
        }
        self.counters.alive_wait_ns += t.elapsed().as_nanos() as u64;
    }

    /// Sends the dead marks whose fences the GPU has passed and whose hold
    /// is over; returns how many blocks the daemon took as dead.
    pub fn flush(&mut self) -> u64 {
        self.flush_at(Instant::now())
    }

    /// `flush` as of `now`.
    pub fn flush_at(&mut self, now: Instant) -> u64 {
        if self.off.is_some() || self.pending.is_empty() || self.pause.active(now) {
            return 0;
        }
        let before = self.counters.dead_blocks;
        let mut ready = Vec::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        // A stream's points are passed in the order they were recorded:
        // after one that is not, none later on that stream is.
        let mut behind: Vec<u64> = Vec::new();
        let mut asked = 0;
        while let Some(p) = self.pending.pop_front() {
            // Frees are queued in time order: this one's hold not over,
            // no later one's is.
            if now.saturating_duration_since(p.freed_at) < self.hold {
                keep.push_back(p);
                keep.extend(self.pending.drain(..));
                break;
            }
            let passed = asked < MAX_QUERIES && !behind.contains(&p.stream) && {
                asked += 1;
                self.fence.passed(&p.token)
            };
            if passed {
                self.forget(&p.blocks);
                ready.extend(p.blocks);
                self.fence.release(p.token);
            } else {
                if !behind.contains(&p.stream) {
                    behind.push(p.stream);
                }
                keep.push_back(p);
            }
        }
        self.pending = keep;
        let mut chunks = ready.chunks(MAX_RANGES);
        for chunk in chunks.by_ref() {
            if let Err(why) = self.send_dead(chunk) {
                self.begin_pause(now, why);
                break;
            }
        }
        for chunk in chunks {
            self.counters.dropped_blocks += count(chunk);
        }
        self.counters.dead_blocks - before
    }

    /// Pauses dead marks (pause.rs): the frees waiting are dropped, as
    /// every free until the pause ends will be (their blocks are only not
    /// discarded).
    #[cold]
    fn begin_pause(&mut self, now: Instant, why: String) {
        self.drop_pending();
        self.pause.begin(now, why);
    }

    /// Drops every free waiting for its fence (never marked: its blocks
    /// are only not discarded).
    fn drop_pending(&mut self) {
        while let Some(p) = self.pending.pop_front() {
            self.counters.dropped_blocks += count(&p.blocks);
            self.fence.release(p.token);
        }
        self.pending_blocks = Blocks::default();
    }

    /// One dead mark request; blocks it did not get taken are dropped.
    /// Err: prescientd has no backend now (the reply's message).
    fn send_dead(&mut self, chunk: &[Range<u64>]) -> Result<(), String> {
        let ranges: Vec<[u64; 2]> = chunk.iter().map(as_bytes).collect();
        self.counters.requests += 1;
        match self.link.call(Kind::Dead, &ranges) {
            Reply::Ok => {
                for r in chunk {
                    self.dead.insert(r.clone());
                }
                self.counters.dead_blocks += count(chunk);
                self.pause.taken();
            }
            Reply::Unavailable(m) => {
                self.counters.dropped_blocks += count(chunk);
                return Err(m);
            }
            Reply::Busy | Reply::NotAttached | Reply::NoDaemon | Reply::Closed => {
                self.counters.dropped_blocks += count(chunk)
            }
            Reply::Refused(m) => {
                self.counters.dropped_blocks += count(chunk);
                self.turn_off(format!("prescientd refused a dead mark: {m}"));
            }
        }
        Ok(())
    }

    /// No more dead marks (blocks already dead are still marked alive
    /// when handed out).
    pub fn turn_off(&mut self, why: String) {
        if self.off.is_some() {
            return;
        }
        self.drop_pending();
        self.off = Some(why);
    }
}

fn count(rs: &[Range<u64>]) -> u64 {
    rs.iter().map(|r| r.end - r.start).sum()
}

#[cfg(test)]
mod tests {
    use super::super::pause;
    use super::*;

    /// Records each request; prescientd takes every one, except (`old`)
    /// `no_populate`, as a prescientd from before it refuses the field.
    #[derive(Default)]
    struct Recorder(Vec<(Kind, usize)>, bool);

    impl Link for Recorder {
        fn call(&mut self, kind: Kind, ranges: &[[u64; 2]]) -> Reply {
            self.0.push((kind, ranges.len()));
            if self.1 && kind == Kind::Released {
                return Reply::Refused(
                    r#"{"error":{"kind":"invalid","message":"unknown field `no_populate`"}}"#
                        .into(),
                );
            }
            Reply::Ok
        }
        fn pause(&mut self, _attempt: u32) {}
    }

    /// A GPU that has passed every point.
    struct Idle;

    impl Fence for Idle {
        type Token = ();
        fn record(&mut self, _stream: u64) -> Option<()> {
            Some(())
        }
        fn passed(&mut self, _t: &()) -> bool {
            true
        }
        fn release(&mut self, _t: ()) {}
    }

    const BLOCK: u64 = 2 << 20;

    /// prescientd's reply to a mark while prescient.ko is unloaded, as its
    /// test `a_mark_while_the_module_is_gone_is_unavailable`
    /// (daemon/src/service/requests.rs) pins it.
    const UNLOADED: &str = r#"{"error":{"kind":"unavailable","message":"prescient.ko is not loaded (No such file or directory (os error 2))"}}"#;

    /// prescientd with its module unloaded while `gone` is set: it answers
    /// every mark with `UNLOADED`, and takes them otherwise.
    #[derive(Default)]
    struct Reloading {
        gone: bool,
        calls: Vec<(Kind, bool)>,
    }

    impl Link for Reloading {
        fn call(&mut self, kind: Kind, _ranges: &[[u64; 2]]) -> Reply {
            self.calls.push((kind, self.gone));
            if self.gone {
                super::super::link::parse_reply(UNLOADED)
            } else {
                Reply::Ok
            }
        }
        fn pause(&mut self, _attempt: u32) {}
    }

    /// A module reload under the job pauses its dead marks instead of
    /// turning them off for good; they are sent again once the pause is
    /// over and taken once the module is back.
    #[test]
    fn an_unloaded_module_pauses_dead_marks_until_it_is_back() {
        let mut m = Marks::new(Reloading::default(), Idle);
        let t0 = Instant::now();
        m.freed_at(BLOCK, 2 * BLOCK, 1, t0);
        assert_eq!(m.flush_at(t0), 2);
        m.link.gone = true;
        // The alive mark of a block the unloaded module had: nothing to
        // wait for (its records went with it), no retries.
        m.allocated(BLOCK, 2 * BLOCK);
        assert_eq!(m.link.calls.len(), 2);
        m.freed_at(4 * BLOCK, BLOCK, 1, t0);
        m.freed_at(8 * BLOCK, BLOCK, 1, t0);
        assert_eq!(m.flush_at(t0), 0);
        assert_eq!(m.link.calls.len(), 3, "one request, then paused");
        assert_eq!(m.pause.count, 1);
        assert!(m
            .pause
            .why
            .as_deref()
            .unwrap()
            .contains("prescient.ko is not loaded"));
        assert!(m.off().is_none(), "paused, not off");
        assert_eq!(m.counters.dropped_blocks, 2);
        // Paused: frees are dropped, nothing is sent.
        let t1 = t0 + pause::FIRST / 2;
        m.freed_at(12 * BLOCK, BLOCK, 1, t1);
        assert!(!m.ready_at(t1));
        assert_eq!((m.flush_at(t1), m.counters.dropped_blocks), (0, 3));
        // Over: tried again, still gone: paused twice as long.
        let t2 = t0 + pause::FIRST;
        m.freed_at(12 * BLOCK, BLOCK, 1, t2);
        assert_eq!(m.flush_at(t2), 0);
        assert_eq!(m.pause.count, 2);
        assert!(m.pause.active(t2 + pause::FIRST));
        // Back: the next free after the pause is taken.
        m.link.gone = false;
        let t3 = t2 + 2 * pause::FIRST;
        m.freed_at(16 * BLOCK, BLOCK, 1, t3);
        assert_eq!(m.flush_at(t3), 1);
        assert_eq!(m.pause.resumed, 1);
        assert_eq!(m.link.calls.len(), 5);
        m.allocated(16 * BLOCK, BLOCK);
        assert_eq!(m.link.calls[5], (Kind::Alive, false));
        assert!(m.dead_blocks().is_empty() && m.off().is_none());
    }

    #[test]
    fn a_block_handed_out_within_the_hold_costs_no_request() {
        let hold = Duration::from_millis(10);
        let mut m = Marks::new(Recorder::default(), Idle).with_hold(hold);
        let t0 = Instant::now();
        m.freed(BLOCK, 4 * BLOCK, 7);
        assert_eq!(m.flush_at(t0), 0, "held: not sent");
        assert!(!m.ready_at(t0) && m.ready_at(t0 + 2 * hold));
        m.allocated(BLOCK, 4 * BLOCK);
        assert!(m.link.0.is_empty(), "cancelled before it was sent");
        assert_eq!(m.counters.cancelled_blocks, 4);
        m.freed(8 * BLOCK, 2 * BLOCK, 7);
        assert_eq!(m.flush_at(Instant::now() + hold), 2, "sent once held");
        assert_eq!(m.link.0, [(Kind::Dead, 1)]);
        m.allocated(8 * BLOCK, BLOCK);
        assert_eq!(m.link.0[1], (Kind::Alive, 1), "a sent one is marked alive");
    }

    #[test]
    fn frees_past_their_hold_go_in_one_request_and_no_hold_sends_at_once() {
        let mut m = Marks::new(Recorder::default(), Idle).with_hold(Duration::from_millis(50));
        let t0 = Instant::now();
        m.freed(BLOCK, BLOCK, 1);
        let later = Instant::now() + Duration::from_millis(60);
        m.freed(4 * BLOCK, BLOCK, 2);
        assert!(!m.ready_at(t0) && m.ready_at(later));
        assert_eq!(m.flush_at(t0), 0);
        // Both are older than the hold by `later`: both go, in one request.
        assert_eq!(m.flush_at(later), 2);
        assert_eq!(m.link.0, [(Kind::Dead, 2)]);
        // Without a hold a free goes at the next flush, as before.
        let mut m = Marks::new(Recorder::default(), Idle);
        m.freed(BLOCK, BLOCK, 1);
        assert_eq!(m.flush(), 1);
    }

    /// Memory going back to the driver is marked alive with nothing
    /// brought back; a prescientd that does not know `no_populate` gets
    /// the plain alive mark instead, and marks stay on.
    #[test]
    fn a_release_marks_alive_without_populating_even_at_an_old_daemon() {
        for old in [false, true] {
            let mut m = Marks::new(Recorder(Vec::new(), old), Idle);
            for at in [BLOCK, 8 * BLOCK] {
                m.freed(at, 2 * BLOCK, 7);
                assert_eq!(m.flush(), 2);
                m.released(at, 2 * BLOCK);
            }
            // An old daemon refuses the field once; the second release goes
            // as a plain alive mark at once.
            let want: &[(Kind, usize)] = if old {
                &[
                    (Kind::Dead, 1),
                    (Kind::Released, 1),
                    (Kind::Alive, 1),
                    (Kind::Dead, 1),
                    (Kind::Alive, 1),
                ]
            } else {
                &[
                    (Kind::Dead, 1),
                    (Kind::Released, 1),
                    (Kind::Dead, 1),
                    (Kind::Released, 1),
                ]
            };
            assert_eq!(m.link.0, want);
            assert!(m.dead_blocks().is_empty() && m.off().is_none());
            assert_eq!(m.counters.alive_blocks, 4);
        }
    }
}
