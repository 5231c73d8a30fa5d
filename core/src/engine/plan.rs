//! Transparent mode on a small memory: a *plan* follower, which prefetches
//! every block it expects and leaves none to fault as a probe.
//!
//! The history follower (`follow.rs`) keeps at most 1/8 of the memory in
//! flight and leaves every so many blocks it expects to fault as *probes*,
//! so that its cursor keeps learning where the program is: a block
//! prefetched and then used sends no event, so faults are its only clock.
//! On a memory of a few dozen blocks that window is 3 blocks deep and every
//! second block it offers is a probe (the VM's scenario, 24 blocks,
//! BENCHMARKS.md section 9), which caps the fault cut near 50%.
//!
//! Here every fault the history predicted starts a *plan* at the place after
//! it: a new window generation claiming the next [`Engine::plan_blocks`]
//! distinct blocks of the history, resident or not; every claimed block not
//! resident is offered. What the probes did, the plan's end does: the first
//! block the program needs past the plan faults, and the follower looks it
//! up ahead of the cursor (within [`Engine::plan_reach`] distinct blocks): a
//! hit places the program and starts the next plan, so each plan is checked
//! by the fault that ends it. A fault not found there is recorded at the
//! history's head; after [`PLAN_JUMP_AFTER`] in a row the follower jumps to
//! a place of the block recorded just after a place of the previous
//! unpredicted fault (the same sequence again), else to its newest place.
//!
//! The history is only appended to with unpredicted faults (no copies of
//! what the cursor passed, unlike `follow.rs`): the plan follows the period
//! it learnt, and the faults it did not predict are the corrections.
//! Measured on the VM's trace (hostsim, vm-tests/README.md): the copies made
//! the followed order drift from period to period.
//!
//! Each predicted fault walks one plan, so only memories of at most
//! [`REPLAN_MAX_BLOCKS`] blocks use it; larger ones keep `follow.rs`.

use super::follow::{AtEmit, Step};
use super::{ChainState, Engine, Prefetch};
use crate::block::{Block, NONE};
use crate::history::Place;
use crate::params::REPLAN_MAX_BLOCKS;
use crate::window::{claim_at, Visit};
use core::ops::DerefMut;

/// A plan claims this part of the memory (distinct blocks). hostsim on the
/// VM's trace (24 blocks, vm-tests/README.md): 1/3 and 1/4 did best, 1/2
/// kept too few victims outside the plan, 1/5 prefetched too little.
const PLAN_PART: u32 = 4;
/// A fault is looked up ahead of the cursor within this many plans: further
/// on, a block the plan did not reach is as likely another use of it.
const PLAN_REACH_PLANS: u64 = 1;
/// Jump targets lie at least this many memories of history before the head
/// (closer ones were just recorded: following them replays the last moment).
const PLAN_GAP_MEMORIES: u64 = 4;
/// Unpredicted faults in a row before the follower jumps (one or two alone
/// are mostly a victim needed again, not a lost place).
const PLAN_JUMP_AFTER: u32 = 3;
/// History entries a plan or a look-up walks at most per distinct block.
const PLAN_SPAN: u64 = 64;

/// What one step of a plan produced.
impl<S: DerefMut<Target = [u64]>> Engine<S> {
    /// True if transparent mode runs the plan follower (a memory of at most
    /// `REPLAN_MAX_BLOCKS` blocks).
    pub(super) fn replans(&self) -> bool {
        self.params.max_resident_blocks <= REPLAN_MAX_BLOCKS
    }

    /// Distinct blocks a plan claims.
    pub(super) fn plan_blocks(&self) -> u64 {
        u64::from((self.params.max_resident_blocks / PLAN_PART).max(1))
    }

    /// Distinct blocks ahead of the cursor a fault is looked up within.
    fn plan_reach(&self) -> u64 {
        PLAN_REACH_PLANS * self.plan_blocks()
    }

    /// A fault, with the plan follower.
    pub(super) fn plan_fault(&mut self, b: Block) {
        if b == self.running.last_fault {
            return;
        }
        self.running.last_fault = b;
        if self.follower.following {
            if let Some(p) = self.find_ahead(b) {
                self.stats.history_hits += 1;
                self.follower.misses = 0;
                self.plan_from(p);
                return;
            }
        }
        self.stats.history_misses += 1;
        if !self.history_mut().newest().is_some_and(|e| e.contains(b)) {
            self.history_mut().append(b, 1);
        }
        let last = self.follower.last_miss;
        self.follower.last_miss = b;
        self.follower.misses = self.follower.misses.saturating_add(1);
        if self.follower.following && self.follower.misses < PLAN_JUMP_AFTER {
            return;
        }
        match self.jump_target(b, last) {
            Some(p) => {
                self.stats.history_jumps += 1;
                self.follower.following = true;
                self.follower.misses = 0;
                self.plan_from(p);
            }
            None => {
                self.follower.following = false;
                self.state = ChainState::Idle;
            }
        }
    }

    /// The first place of `b` ahead of the cursor within `plan_reach`
    /// distinct blocks.
    fn find_ahead(&self, b: Block) -> Option<Place> {
        let reach = self.plan_reach() as usize;
        let mut seen = [NONE; 2 * REPLAN_MAX_BLOCKS as usize];
        let mut n = 0;
        let r = self.history_ref();
        let mut at = self.follower.cursor;
        for _ in 0..reach as u64 * PLAN_SPAN {
            let e = r.entry(at.pos)?;
            for off in at.off..e.len {
                let x = e.head + off;
                if x == b {
                    return Some(Place { pos: at.pos, off });
                }
                if !seen[..n].contains(&x) {
                    if n == reach.min(seen.len()) {
                        return None;
                    }
                    seen[n] = x;
                    n += 1;
                }
            }
            at = Place {
                pos: at.pos + 1,
                off: 0,
            };
        }
        None
    }

    /// Where to jump after unpredicted faults ending with `b`: its newest
    /// place recorded shortly after a place of `last` (the previous
    /// unpredicted fault), else its newest place; never one within the
    /// plan gap of the head.
    fn jump_target(&self, b: Block, last: Block) -> Option<Place> {
        let mem = u64::from(self.params.max_resident_blocks);
        let gap = mem * PLAN_GAP_MEMORIES;
        let total = self.follower.history.blocks();
        let r = self.history_ref();
        let (mut in_context, mut newest): (Option<Place>, Option<Place>) = (None, None);
        for (p, e) in r.occurrences(b) {
            if (e.offset + p.off).saturating_add(gap) > total {
                continue;
            }
            newest = Some(newest.map_or(p, |q| q.max(p)));
            if last != NONE && self.recorded_before(p, last, self.plan_blocks()) {
                in_context = Some(in_context.map_or(p, |q| q.max(p)));
            }
        }
        in_context.or(newest)
    }

    /// True if `b` is among the `k` blocks recorded just before place `p`.
    fn recorded_before(&self, p: Place, b: Block, k: u64) -> bool {
        let r = self.history_ref();
        let mut left = k;
        let mut at = p;
        while left > 0 {
            let Some(e) = r.entry(at.pos) else {
                return false;
            };
            let mut off = at.off.min(e.len);
            while off > 0 && left > 0 {
                off -= 1;
                left -= 1;
                if e.head + off == b {
                    return true;
                }
            }
            let Some(pos) = at.pos.checked_sub(1) else {
                return false;
            };
            at = Place { pos, off: u64::MAX };
        }
        false
    }

    /// The program is at `p`: a new plan from the place after it.
    fn plan_from(&mut self, p: Place) {
        let to = Place {
            pos: p.pos,
            off: p.off + 1,
        };
        self.follower.cursor = to;
        self.running.seq = self.history_ref().offset_of(to).unwrap_or(self.running.seq);
        self.stats.windows += 1;
        self.window.restart();
        self.follower.emit = to;
        self.state = ChainState::Running;
    }

    /// Fills `out` with the plan's next blocks; returns how many.
    pub(super) fn plan_prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        self.offer_steps(out, Self::plan_step)
    }

    /// One step of the plan: the next place, at most one offer.
    fn plan_step(&mut self) -> Step {
        let plan = self.plan_blocks();
        if !self.follower.following || u64::from(self.window.claimed) >= plan {
            self.state = ChainState::Paused;
            return Step::Stop;
        }
        let pos = self.follower.emit.pos;
        let (b, o) = match self.at_emit() {
            AtEmit::Head => {
                self.state = ChainState::Paused;
                return Step::Stop;
            }
            AtEmit::Moved => return Step::Next,
            AtEmit::Block { b, o } => (b, o),
        };
        if o >= self.running.seq.saturating_add(plan * PLAN_SPAN) {
            self.state = ChainState::Paused;
            return Step::Stop;
        }
        self.follower.emit.off += 1;
        let (gen, now) = (self.window.generation, self.running.seq);
        if claim_at(self.window_set_mut(), gen, now, b, o, pos) != Visit::Emit {
            // Claimed earlier in this plan: now protected until this use too.
            return Step::Next;
        }
        self.window.claimed += 1;
        if self.regions().ledger.contains(b) {
            // Resident and needed: to the back of the victim order.
            self.regions().ledger.use_at(b, o + 1, u64::MAX);
            return Step::Next;
        }
        Step::Offer(b)
    }
}
