//! Transparent mode's history follower: a window that walks the global
//! history of faulted runs (`crate::history`) ahead of the program.
//!
//! There are no kernels. The follower keeps a *cursor* where it believes the
//! program is, emits the blocks recorded after it (up to the window's depth),
//! leaves a few of them to fault as *probes* so that the cursor keeps
//! learning where the program is while the window is full, and copies what
//! the cursor passed back to the history's head, so that the history keeps
//! the whole order of use although blocks prefetched in time never fault.
//! docs/engine.md describes it with measurements.
//!
//! State machine of the follower (`following` and [`ChainState`]):
//! ```text
//!   Lost --fault recorded after the previous miss (or further on)--> Jump
//!   Jump --cursor, emit and copy moved to the new place--> Following
//!   Following --window depth in flight, or HISTORY_AHEAD reached--> Paused
//!   Paused --predicted fault (a hit): cursor moves on--> Following
//!   Following|Paused --unpredicted fault, JUMP_AFTER in a row--> Jump | Lost
//! ```
//! Following is `ChainState::Running`, Paused is `ChainState::Paused`, Lost
//! is `following == false` (`ChainState::Idle`). A fault the window
//! predicted (a *hit*) moves the cursor on; a fault it did not (a *miss*) is
//! recorded at the head.

use super::{ChainState, Engine, Prefetch, STEPS_PER_SLOT};
use crate::block::{Block, NONE};
use crate::history::{History, HistoryRef, HistoryState, Place, CHAIN_STEPS};
use crate::params::{Mode, HISTORY_AHEAD};
use crate::window::{claim_at, mark_probe, window_slot, Visit, PROBE_FLAG};
use core::ops::DerefMut;

/// Faults the history did not predict, in a row, before the window leaves
/// the place it follows (for a place further on, or one that the last two
/// unpredicted faults agree on).
const JUMP_AFTER: u32 = 4;
/// History entries copied to the head per fault at most (the copy also
/// advances one entry per prefetch step).
const COPY_PER_FAULT: usize = 1024;
/// Probes per window: blocks the window leaves to fault (see
/// `offer_fresh`); 0 for none.
const PROBE_EVERY: u64 = 16;
/// A fault predicts where the program is if it is at most this part of a
/// window past what was emitted (0 for a block pre-evicted shortly before:
/// it was needed earlier than its next place in the history).
const SLACK_PART: u64 = 4;
/// Two unpredicted faults are in the same context if the second one was
/// recorded at most this many blocks after the first one before.
const JUMP_CONTEXT: u64 = 64;
/// The history window grows by 1/WINDOW_GROW when the program outruns it.
const WINDOW_GROW: u32 = 8;
/// The history window shrinks by 1/WINDOW_SHRINK on every refault (without
/// the regret window).
const WINDOW_SHRINK: u32 = 1024;
/// The history window's depth never goes below this many blocks.
pub(super) const MIN_HISTORY_WINDOW: u32 = 16;
/// Blocks offered between two probes at least.
const MIN_PROBE_GAP: u64 = 2;
/// History entries scanned past the window's end for a fault.
const SCAN_ENTRIES: usize = 64;

/// The follower's place in the history and its adaptive depth.
#[derive(Clone, Copy, Debug)]
pub(super) struct Follower {
    /// The history ring's bookkeeping outside the storage.
    pub(super) history: HistoryState,
    /// The window follows the history (cursor, emit and copy are valid).
    pub(super) following: bool,
    /// The place after the last fault the history predicted: the program
    /// is believed to be there.
    pub(super) cursor: Place,
    /// The next place to emit a prefetch from.
    pub(super) emit: Place,
    /// The furthest place emitted from since the last jump: below it the
    /// window is walked again, offering only what is still not resident.
    furthest: Place,
    /// The next place to copy to the head.
    copy: Place,
    /// Faults in a row that the history did not predict.
    pub(super) misses: u32,
    /// Blocks the window may have in flight now: adapts between
    /// `MIN_HISTORY_WINDOW` and `Params::history_window`.
    pub(super) depth: u32,
    /// The last fault the history did not predict.
    pub(super) last_miss: Block,
    /// Blocks the window decided to move (probes included): the probe phase.
    emitted: u64,
}

impl Follower {
    pub(super) fn new() -> Self {
        let start = Place { pos: 0, off: 0 };
        Follower {
            history: HistoryState::default(),
            following: false,
            cursor: start,
            emit: start,
            furthest: start,
            copy: start,
            misses: 0,
            depth: 0,
            last_miss: NONE,
            emitted: 0,
        }
    }
}

/// Where a fault lies relative to the window the follower keeps.
#[derive(Clone, Copy, Debug, Default)]
struct Located {
    /// The place the program is at, if the window predicted the fault.
    ahead: Option<Place>,
    /// Found just past the window's end (the program outran it).
    past_end: bool,
    /// Passed a moment ago: nothing new.
    behind: bool,
    /// Further on in the period the window follows.
    onward: Option<Place>,
    /// Recorded shortly after the previous unpredicted fault.
    in_context: Option<Place>,
}

/// What one step of the follower's window produced.
/// One step of a transparent-mode window (this file's or plan.rs's).
pub(super) enum Step {
    Next,
    Stop,
    Offer(Block),
}

/// What the history holds at the window's emit place.
pub(super) enum AtEmit {
    /// The head (or a place the ring overwrote): nothing more to emit.
    Head,
    /// The place's entry was used up; emit moved to the next entry.
    Moved,
    /// Block `b`, needed at history offset `o` (emit not moved yet).
    Block { b: Block, o: u64 },
}

/// The offsets of `b`'s places in the history (none for NONE); returns how
/// many were written.
fn places_of(r: &HistoryRef<'_>, b: Block, out: &mut [u64; CHAIN_STEPS]) -> usize {
    let mut n = 0;
    if b != NONE {
        for (p, e) in r.occurrences(b) {
            let Some(slot) = out.get_mut(n) else {
                break;
            };
            *slot = e.offset + p.off;
            n += 1;
        }
    }
    n
}

/// True if offset `o` comes at most `JUMP_CONTEXT` blocks after one of
/// `before`.
fn in_context_of(before: &[u64], o: u64) -> bool {
    before.iter().any(|&q| q < o && o - q <= JUMP_CONTEXT)
}

/// What a place must satisfy to be a jump target: recorded just after a
/// place of the previous unpredicted fault, and not too close to the head.
struct JumpContext {
    /// The offsets of the previous miss's places.
    before: [u64; CHAIN_STEPS],
    len: usize,
    /// Places this close to the head were just written: following them
    /// would only replay what the program did a moment ago.
    gap: u64,
    /// Blocks recorded so far (the head's offset).
    total: u64,
}

impl JumpContext {
    /// True if the place at offset `o` is a jump target.
    fn admits(&self, o: u64) -> bool {
        o.saturating_add(self.gap) <= self.total && in_context_of(&self.before[..self.len], o)
    }
}

impl<S: DerefMut<Target = [u64]>> Engine<S> {
    /// Forgets the history and the follower's place (not its probe phase).
    pub(super) fn forget_history(&mut self) {
        let f = &mut self.follower;
        f.following = false;
        f.misses = 0;
        f.last_miss = NONE;
        f.depth = self.params.history_window();
        if self.params.mode == Mode::Transparent {
            self.history_mut().clear();
        }
    }

    /// Blocks the history window may have in flight now (adaptive, at most
    /// `Params::history_window`).
    pub(super) fn history_window(&self) -> u64 {
        self.follower.depth.clamp(1, self.params.history_window()) as u64
    }

    /// Transparent mode's history: blocks the window may have in flight now.
    pub fn window_depth(&self) -> u32 {
        self.history_window() as u32
    }

    pub(super) fn history_mut(&mut self) -> History<'_> {
        let l = &self.layout;
        let (ring, index) =
            self.storage[l.history.start..l.history_index.end].split_at_mut(l.history.len());
        History::new(&mut self.follower.history, ring, index)
    }

    pub(super) fn history_ref(&self) -> HistoryRef<'_> {
        let l = &self.layout;
        HistoryRef::new(
            &self.follower.history,
            &self.storage[l.history.clone()],
            &self.storage[l.history_index.clone()],
        )
    }

    /// Copies what the cursor passed to the head, at most `budget` entries.
    fn copy_step(&mut self, mut budget: usize) {
        while budget > 0 && self.follower.following && self.follower.copy < self.follower.cursor {
            budget -= 1;
            let (copy, cursor) = (self.follower.copy, self.follower.cursor);
            let Some(e) = self.history_ref().entry(copy.pos) else {
                self.follower.copy = cursor;
                break;
            };
            let last = copy.pos == cursor.pos;
            let end = if last { cursor.off.min(e.len) } else { e.len };
            if copy.off < end {
                self.history_mut().append(e.head + copy.off, end - copy.off);
            }
            self.follower.copy = if last {
                Place {
                    pos: copy.pos,
                    off: end.max(copy.off),
                }
            } else {
                Place {
                    pos: copy.pos + 1,
                    off: 0,
                }
            };
            if last {
                break;
            }
        }
    }

    /// Starts a new window generation at the cursor: nothing emitted yet.
    fn history_rearm(&mut self) {
        self.stats.windows += 1;
        self.window.restart();
        self.follower.emit = self.follower.cursor;
        self.follower.furthest = self.follower.cursor;
        self.state = ChainState::Running;
    }

    /// The cursor moved to `to`: blocks emitted before it are behind the
    /// program now (no longer protected, no longer counted in the window).
    fn history_advance(&mut self, to: Place) {
        self.follower.cursor = to;
        self.running.seq = self.history_ref().offset_of(to).unwrap_or(self.running.seq);
        let ring = &self.storage[self.layout.frontier.clone()];
        self.window.frontier.drop_below(ring, self.running.seq);
        // Walk the window again from here: what the backend dropped is
        // offered again (see `history_step`).
        let f = &mut self.follower;
        f.furthest = f.furthest.max(f.emit).max(to);
        f.emit = to;
        if self.state != ChainState::Running {
            self.state = ChainState::Running;
        }
    }

    /// A fault in transparent mode: move the window on if it predicted the
    /// fault, else record it and, after enough misses, find the program's
    /// place again.
    pub(super) fn history_fault(&mut self, b: Block, refault: bool) {
        if b == self.running.last_fault {
            // The same block faulting again (another page of it).
            return;
        }
        self.running.last_fault = b;
        self.copy_step(COPY_PER_FAULT);
        let w = self.history_window();
        let last_miss = self.follower.last_miss;
        let found = self.locate(b, refault);
        if refault && !self.regret.enabled {
            // Pre-eviction took a block that was needed: the window, which
            // it must not touch, is too large. (The regret window judges
            // refaults by their rate instead.)
            let d = self.follower.depth;
            self.follower.depth = (d - d / WINDOW_SHRINK).max(MIN_HISTORY_WINDOW);
        }
        if let Some(p) = found.ahead {
            self.history_hit(p, found.past_end, w);
            return;
        }
        if found.behind {
            // Passed a moment ago (a late or lost prefetch of a block the
            // cursor already passed): nothing new.
            return;
        }
        self.record_miss(b, refault);
        let misses = self.follower.misses;
        let sure = found.in_context.is_some() && last_miss != NONE;
        if self.follower.following && misses < JUMP_AFTER && !(sure && misses >= 2) {
            return;
        }
        // A place is only taken on evidence: the previous unpredicted fault
        // was recorded just before it (the same sequence again), or it lies
        // further on in the period the window was following.
        match found.in_context.or(found.onward) {
            Some(p) => self.relocate(p),
            None => {
                self.follower.following = false;
                self.state = ChainState::Idle;
            }
        }
    }

    /// Where `b` lies relative to the window, or (lost) where the history
    /// has it after the previous miss.
    fn locate(&mut self, b: Block, refault: bool) -> Located {
        let at = if self.follower.following {
            let r = self.history_ref();
            r.offset_of(self.follower.cursor)
                .zip(r.offset_of(self.follower.emit))
        } else {
            None
        };
        match at {
            Some((cur, emit)) => self.locate_following(b, refault, cur, emit),
            None => {
                let found = self.locate_lost(b);
                self.follower.following = false;
                found
            }
        }
    }

    /// [`Engine::locate`] while following, the cursor at offset `cur` and
    /// the next emission at `emit`.
    fn locate_following(&self, b: Block, refault: bool, cur: u64, emit: u64) -> Located {
        let w = self.history_window();
        // A fault at most one window past what was emitted, and at most half
        // the distance to the head (beyond that it is the copy of what the
        // program already passed).
        let span = self.follower.history.blocks().saturating_sub(cur) / 2;
        let slack = if refault { 0 } else { w / SLACK_PART };
        let limit = emit.saturating_add(slack).min(cur.saturating_add(span));
        let mut found = self.locate_in_window(b, cur, emit, w);
        if found.ahead.is_none() && !found.behind {
            found.ahead = self.scan_past_end(b, limit);
            found.past_end = found.ahead.is_some();
        }
        if found.ahead.is_none() && !found.behind {
            self.search_occurrences(b, cur, limit, span, &mut found);
        }
        found
    }

    /// Looks `b` up in the window set: emitted by this window, its first
    /// place is there.
    fn locate_in_window(&self, b: Block, cur: u64, emit: u64, w: u64) -> Located {
        let mut found = Located::default();
        let Some(s) = window_slot(self.window_set(), self.window.generation, b) else {
            return found;
        };
        let r = self.history_ref();
        // The first place it is needed at (o: the last).
        let (o, pos) = (s[2], s[3] & !PROBE_FLAG);
        let first = r.entry(pos).filter(|e| e.contains(b)).map(|e| Place {
            pos,
            off: b - e.head,
        });
        let first_o = first.and_then(|p| r.offset_of(p)).unwrap_or(o);
        if o >= cur && first_o < emit {
            found.ahead = first.filter(|_| first_o >= cur);
            found.behind = found.ahead.is_none();
        } else if o < cur && o.saturating_add(w) >= cur {
            found.behind = true;
        }
        found
    }

    /// Just past the window's end: looks a few entries ahead of the next
    /// emission, up to offset `limit`.
    fn scan_past_end(&self, b: Block, limit: u64) -> Option<Place> {
        let r = self.history_ref();
        let mut at = self.follower.emit;
        for _ in 0..SCAN_ENTRIES {
            let e = r.entry(at.pos)?;
            if e.offset + at.off > limit {
                return None;
            }
            if e.contains(b) && b - e.head >= at.off {
                return Some(Place {
                    pos: at.pos,
                    off: b - e.head,
                });
            }
            at = Place {
                pos: at.pos + 1,
                off: 0,
            };
        }
        None
    }

    /// Walks `b`'s occurrences in the history: ahead of the cursor within
    /// `limit`, just behind it, further on in this period, or recorded just
    /// after the previous miss.
    fn search_occurrences(&self, b: Block, cur: u64, limit: u64, span: u64, found: &mut Located) {
        let w = self.history_window();
        let r = self.history_ref();
        let context = self.jump_context();
        let cursor = self.follower.cursor;
        for (p, e) in r.occurrences(b) {
            let o = e.offset + p.off;
            if p >= cursor && o <= limit {
                found.ahead = Some(p);
                return;
            } else if p < cursor && o.saturating_add(w) >= cur {
                found.behind = true;
                return;
            } else if p > cursor && o <= cur.saturating_add(span) {
                // Further on in this period: the program ran past the
                // window unseen. The nearest such place.
                found.onward = Some(found.onward.map_or(p, |q| q.min(p)));
            } else if context.admits(o) {
                found.in_context = Some(found.in_context.map_or(p, |q| q.max(p)));
            }
        }
    }

    /// The jump targets' test for this fault: the previous miss's places,
    /// and how close to the head a target may be.
    fn jump_context(&self) -> JumpContext {
        let total = self.follower.history.blocks();
        let mut before = [0u64; CHAIN_STEPS];
        let len = places_of(&self.history_ref(), self.follower.last_miss, &mut before);
        JumpContext {
            before,
            len,
            gap: self.history_window().min(total / 2),
            total,
        }
    }

    /// Lost: the latest place of `b` recorded just after the previous miss.
    fn locate_lost(&self, b: Block) -> Located {
        let r = self.history_ref();
        let context = self.jump_context();
        let mut found = Located::default();
        for (p, e) in r.occurrences(b) {
            if context.admits(e.offset + p.off) {
                found.in_context = Some(found.in_context.map_or(p, |q| q.max(p)));
            }
        }
        found
    }

    /// The window predicted the fault at `p`: the program is there. `w` is
    /// the depth the fault was judged with.
    fn history_hit(&mut self, p: Place, past_end: bool, w: u64) {
        if past_end && self.window.frontier.len() as u64 >= w {
            // The program outran a full window: it may be larger.
            let max = self.params.history_window();
            let d = self.follower.depth;
            self.follower.depth = (d + d / WINDOW_GROW + 1).min(max);
        }
        self.stats.history_hits += 1;
        self.follower.misses = 0;
        self.history_advance(Place {
            pos: p.pos,
            off: p.off + 1,
        });
    }

    /// Records an unpredicted fault where the program is now (after what the
    /// cursor passed).
    fn record_miss(&mut self, b: Block, refault: bool) {
        self.stats.history_misses += 1;
        self.copy_step(COPY_PER_FAULT);
        if !self.history_mut().newest().is_some_and(|e| e.contains(b)) {
            self.history_mut().append(b, 1);
        }
        if !refault {
            // A block pre-evicted too early says nothing about where the
            // program is.
            self.follower.misses = self.follower.misses.saturating_add(1);
        }
        self.follower.last_miss = b;
    }

    /// Jumps the window to the place after `p`.
    ///
    /// Blocks claimed before stay protected while they are ahead of the new
    /// cursor; nothing emitted counts any more.
    #[cold]
    fn relocate(&mut self, p: Place) {
        self.stats.history_jumps += 1;
        let to = Place {
            pos: p.pos,
            off: p.off + 1,
        };
        let f = &mut self.follower;
        f.following = true;
        f.misses = 0;
        f.copy = to;
        f.emit = to;
        f.furthest = to;
        self.window.frontier.clear();
        self.stats.windows += 1;
        self.history_advance(to);
    }

    /// Fills `out` with the history window's next blocks; returns how many.
    pub(super) fn history_prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        let w = self.history_window();
        self.offer_steps(out, |e| e.history_step(w))
    }

    /// Runs a window's `step` until `out` is full, the step stops or the
    /// chain pauses (at most `STEPS_PER_SLOT` steps per slot); returns how
    /// many blocks were offered.
    pub(super) fn offer_steps(
        &mut self,
        out: &mut [Prefetch],
        mut step: impl FnMut(&mut Self) -> Step,
    ) -> usize {
        let mut n = 0;
        let mut steps = STEPS_PER_SLOT * out.len();
        while n < out.len() && steps > 0 && self.state == ChainState::Running {
            steps -= 1;
            match step(self) {
                Step::Next => {}
                Step::Stop => break,
                Step::Offer(b) => {
                    out[n] = Prefetch { block: b, ahead: 0 };
                    n += 1;
                }
            }
        }
        n
    }

    /// The block at the window's emit place; moves emit past a used-up
    /// entry.
    pub(super) fn at_emit(&mut self) -> AtEmit {
        let emit = self.follower.emit;
        let Some(e) = self.history_ref().entry(emit.pos) else {
            return AtEmit::Head;
        };
        if emit.off >= e.len {
            self.follower.emit = Place {
                pos: emit.pos + 1,
                off: 0,
            };
            return AtEmit::Moved;
        }
        AtEmit::Block {
            b: e.head + emit.off,
            o: e.offset + emit.off,
        }
    }

    /// One step of the history window: the next place, at most one offer.
    fn history_step(&mut self, w: u64) -> Step {
        if !self.follower.following {
            self.state = ChainState::Idle;
            return Step::Stop;
        }
        self.copy_step(1);
        let rewalk = self.follower.emit < self.follower.furthest;
        if !rewalk && self.window.frontier.len() as u64 >= w {
            // The memory budget is in flight: wait for the next fault.
            self.state = ChainState::Paused;
            return Step::Stop;
        }
        if self.window.claimed as usize >= self.layout.window_slots / 2 {
            // The window set is full of blocks the cursor passed: a new
            // generation, emitting again from the cursor.
            self.stats.window_full += 1;
            self.history_rearm();
            return Step::Next;
        }
        let (b, o) = match self.at_emit() {
            AtEmit::Head => {
                self.state = ChainState::Paused;
                return Step::Stop;
            }
            AtEmit::Moved => return Step::Next,
            AtEmit::Block { b, o } => (b, o),
        };
        if !rewalk && o >= self.running.seq.saturating_add(HISTORY_AHEAD * w) {
            self.state = ChainState::Paused;
            return Step::Stop;
        }
        let f = &mut self.follower;
        f.emit.off += 1;
        f.furthest = f.furthest.max(f.emit);
        let (gen, now, pos) = (self.window.generation, self.running.seq, f.emit.pos);
        let fresh = claim_at(self.window_set_mut(), gen, now, b, o, pos) == Visit::Emit;
        if fresh {
            self.window.claimed += 1;
        }
        if self.regions().ledger.contains(b) {
            // Resident: protected now, nothing to move. Its use here moves
            // it to the back of the victim order, as a migration would: a
            // block used again and again stays resident without migrating,
            // so by migration order alone it would be the first victim (the
            // VM trace's hot blocks; docs/engine.md). Any distance counts:
            // 64 blocks of history did worse there.
            if fresh {
                self.regions().ledger.use_at(b, o + 1, u64::MAX);
            }
            return Step::Next;
        }
        if !fresh {
            // Emitted before and still not resident: the backend dropped it
            // (no room, or a queue it cleared). Offer it again, unless it is
            // a probe.
            let slot = window_slot(self.window_set(), gen, b);
            if slot.is_none_or(|s| s[3] & PROBE_FLAG != 0) {
                return Step::Next;
            }
            return Step::Offer(b);
        }
        self.offer_fresh(b, o, w)
    }

    /// A block new to the window and not resident, needed at offset `o`:
    /// offered, or left to fault as a probe.
    fn offer_fresh(&mut self, b: Block, o: u64, w: u64) -> Step {
        self.follower.emitted = self.follower.emitted.wrapping_add(1);
        // Offered again after pre-eviction took it. With the regret window
        // on, the offer settles it (a later fault is no refault, see
        // docs/engine.md); off, it is only counted.
        let age = if self.regret.enabled {
            self.take_recent_victim(b)
        } else {
            self.recent_victim_age(b)
        };
        if let Some(age) = age {
            self.regret(age, true);
        }
        let gap = (w / PROBE_EVERY).max(MIN_PROBE_GAP);
        if PROBE_EVERY > 0 && self.follower.emitted.is_multiple_of(gap) {
            // A probe: left to fault, so that the cursor learns where the
            // program is while the window is still full.
            let gen = self.window.generation;
            mark_probe(self.window_set_mut(), gen, b);
            return Step::Next;
        }
        let ring = &mut self.storage[self.layout.frontier.clone()];
        self.window.frontier.push(ring, o);
        Step::Offer(b)
    }
}
