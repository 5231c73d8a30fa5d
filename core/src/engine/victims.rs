//! Victim selection, the recent-victim table and the regret window.
//!
//! Victims are dead blocks first (discarded, no copy), then live blocks
//! least recently migrated (or re-used) first, never one the window
//! predicts. Each live victim is remembered in the recent-victim table
//! (`crate::recent`); when one is faulted or offered again soon after, that
//! is a *regret*: pre-eviction pushed out a block needed sooner than what
//! came in. With the regret window on, epochs of victims with too many
//! regrets make transparent mode's window shallower (docs/engine.md gives
//! the measurements behind the rates).

use super::follow::MIN_HISTORY_WINDOW;
use super::{Engine, Victim};
use crate::block::Block;
use crate::ledger::Ledger;
use crate::params::Mode;
use crate::recent;
use crate::window::window_seq;
use core::ops::DerefMut;

/// Live blocks examined per victim search before giving up (bounded work).
pub const VICTIM_SCAN: usize = 1024;
/// With the regret window: an epoch is this many maximal windows of victims.
const REGRET_EPOCH_WINDOWS: u32 = 4;
/// An epoch with more than 1/REGRET_RATE of its victims regretted ...
const REGRET_RATE: u64 = 50;
/// ... takes 1/REGRET_SHRINK off the window's depth.
const REGRET_SHRINK: u32 = 4;

/// The regret window's switch and the current epoch's counts.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Regret {
    /// The window's depth follows its regrets.
    pub(super) enabled: bool,
    /// Victims chosen in this epoch.
    epoch_victims: u32,
    /// Of them, regretted.
    epoch_regrets: u32,
}

impl Regret {
    /// Starts a new epoch; keeps the switch.
    pub(super) fn clear(&mut self) {
        self.epoch_victims = 0;
        self.epoch_regrets = 0;
    }
}

impl<S: DerefMut<Target = [u64]>> Engine<S> {
    /// Transparent mode's history: makes the window's depth follow its
    /// regrets.
    ///
    /// A regret is a block pre-evicted and then needed again (a refault, or
    /// offered by the window) within about a window's depth of victims
    /// (`regret_horizon`). Counted over epochs of `REGRET_EPOCH_WINDOWS`
    /// maximal windows of victims: an epoch with more than 1/`REGRET_RATE`
    /// of its victims regretted takes 1/`REGRET_SHRINK` off the depth; the
    /// window grows only when the program outruns it. A rate, not each
    /// regret: a stream larger than the memory regrets a few of its victims
    /// too. Off: refaults shrink the window by 1/`WINDOW_SHRINK`, which
    /// rounds to nothing below 1024 blocks. Off by default in the engine;
    /// prescientd turns it on under a budget. docs/engine.md has the
    /// measurements and the known limit.
    pub fn set_regret_window(&mut self, on: bool) {
        self.regret.enabled = on;
    }

    /// True if the regret window is on.
    pub fn regret_window(&self) -> bool {
        self.regret.enabled
    }

    /// Victims chosen after a block within which its return is a regret.
    ///
    /// Under pressure each block the window brings in pushes one out, and
    /// what it brings in is needed at most a window's depth ahead: a victim
    /// needed again within about that many victims was needed before the
    /// block that displaced it. Twice the depth, for the slack of
    /// pre-eviction running ahead in bursts.
    fn regret_horizon(&self) -> u64 {
        2 * self.history_window()
    }

    /// A pre-evicted block is needed again, `age` victims after it went:
    /// `offered` by the window, else faulted.
    pub(super) fn regret(&mut self, age: u64, offered: bool) {
        if age > self.regret_horizon() {
            return;
        }
        if offered {
            self.stats.regret_offers += 1;
        } else {
            self.stats.regrets += 1;
        }
        self.regret.epoch_regrets = self.regret.epoch_regrets.saturating_add(1);
    }

    /// Victims in one epoch of the regret window and the thrash guard.
    pub(super) fn epoch_victims(&self) -> u64 {
        u64::from(self.params.history_window()) * u64::from(REGRET_EPOCH_WINDOWS)
    }

    /// `n` more victims chosen: at the end of an epoch, the regret window
    /// shrinks if too many of the epoch's victims were regretted, and the
    /// thrash guard takes its count of victims back within the reserve.
    fn end_regret_epoch(&mut self, n: u32) {
        if n > 0 {
            self.thrash.victim();
        }
        self.regret.epoch_victims = self.regret.epoch_victims.saturating_add(n);
        if u64::from(self.regret.epoch_victims) < self.epoch_victims() {
            return;
        }
        let rate = u64::from(self.regret.epoch_regrets) * REGRET_RATE;
        let victims = u64::from(self.regret.epoch_victims);
        if self.thrash.end_epoch(victims) {
            self.stats.thrash_guards += 1;
        }
        let r = &mut self.regret;
        if r.enabled && self.params.mode == Mode::Transparent && rate > victims {
            let d = self.follower.depth;
            let cut = (d / REGRET_SHRINK).max(1);
            self.follower.depth = d.saturating_sub(cut).max(MIN_HISTORY_WINDOW);
        }
        r.clear();
    }

    /// The recent-victim table's words.
    fn recent_victims(&mut self) -> &mut [u64] {
        &mut self.storage[self.layout.victims.clone()]
    }

    /// If `b` is a remembered victim: how many victims were chosen after it.
    pub(super) fn recent_victim_age(&self, b: Block) -> Option<u64> {
        let table = &self.storage[self.layout.victims.clone()];
        recent::age(table, b, self.stats.victims_evict)
    }

    /// [`Engine::recent_victim_age`], and forgets `b`.
    pub(super) fn take_recent_victim(&mut self, b: Block) -> Option<u64> {
        let victims = self.stats.victims_evict;
        recent::take(self.recent_victims(), b, victims)
    }

    /// Fills `out` with distinct blocks to take off the GPU: dead blocks
    /// (discard) first, then live blocks least recently migrated first.
    ///
    /// Live blocks re-used soon after a predicted use count as migrated
    /// again (see `REUSE_KERNELS` in `chain.rs`; in transparent mode every
    /// resident block the history window claims, see `history_step` in
    /// `follow.rs`); a block predicted for the
    /// running or the next `lookahead` kernels is never chosen. Examines at
    /// most `VICTIM_SCAN` live blocks. The caller reports each one it acts
    /// on through [`Engine::evicted`].
    pub fn victims(&mut self, out: &mut [Victim]) -> usize {
        let mut n = 0;
        for b in self.regions().ledger.oldest_dead(out.len()) {
            out[n] = Victim {
                block: b,
                discard: true,
            };
            n += 1;
        }
        self.stats.victims_discard += n as u64;
        if n == out.len() {
            return n;
        }
        let before = n;
        n += self.live_victims(&mut out[n..]);
        for (v, count) in out[before..n].iter().zip(self.stats.victims_evict..) {
            recent::note(self.recent_victims(), v.block, count);
        }
        self.stats.victims_evict += (n - before) as u64;
        self.end_regret_epoch((n - before) as u32);
        if n < out.len() {
            self.stats.victim_shortfall += 1;
        }
        n
    }

    /// Fills `out` with live blocks the window does not predict, least
    /// recently migrated first; returns how many.
    fn live_victims(&mut self, out: &mut [Victim]) -> usize {
        let l = &self.layout;
        let (head, rest) = self.storage[..l.total].split_at_mut(l.ledger_slots.start);
        let win = &head[l.window.clone()];
        let (slots, rest) = rest.split_at_mut(l.ledger_slots.len());
        let index = &mut rest[..l.ledger_index.len()];
        let ledger = Ledger::new(&mut self.ledger, slots, index);
        let (gen, seq) = (self.window.generation, self.running.seq);
        let predicted = |b: Block| window_seq(win, gen, b).is_some_and(|s| s >= seq);
        let mut n = 0;
        for b in ledger.oldest_live(VICTIM_SCAN) {
            if n == out.len() {
                break;
            }
            if !predicted(b) {
                out[n] = Victim {
                    block: b,
                    discard: false,
                };
                n += 1;
            }
        }
        n
    }
}
