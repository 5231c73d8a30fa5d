//! The residency ledger: which blocks are on the GPU, in the order they were
//! migrated there, and which of them hold only dead data.
//!
//! Two intrusive lists over a fixed slot array: `live`, least recently
//! migrated first, and `dead`, blocks the application declared dead (they are
//! discarded, with no copy, before anything is evicted). A block is in exactly
//! one list while resident and in none otherwise. An open-addressing index
//! (linear probing, backward-shift deletion, so no tombstones) maps a block
//! number to its slot.
//!
//! A live block re-used soon after its previous use (`Ledger::use_at`) moves
//! to the tail of `live` as if migrated again.
//!
//! Slot words: `[block, prev << 32 | next, last use << 1 | dead]`; index
//! words: slot or NONE.

use crate::block::{Block, NONE};

/// Words per ledger slot: block, links, flags.
pub const LEDGER_SLOT_WORDS: usize = 3;

const NIL: u32 = u32::MAX;
const FLAG_DEAD: u64 = 1;
/// The flags word holds, above these bits, the time (`Ledger::use_at`)
/// the block was last needed.
const USE_SHIFT: u32 = 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

/// The ledger's bookkeeping outside the storage slice.
#[derive(Clone, Copy, Debug)]
pub struct LedgerState {
    live: List,
    dead: List,
    free: u32,
    len: u32,
    capacity: u32,
}

impl LedgerState {
    pub fn new(capacity: u32) -> Self {
        LedgerState {
            live: EMPTY,
            dead: EMPTY,
            free: NIL,
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Which list a resident block is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    Live,
    Dead,
}

pub struct Ledger<'a> {
    pub(crate) st: &'a mut LedgerState,
    slots: &'a mut [u64],
    index: &'a mut [u64],
}

fn hash(block: Block, mask: usize) -> usize {
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize & mask
}

impl<'a> Ledger<'a> {
    pub fn new(st: &'a mut LedgerState, slots: &'a mut [u64], index: &'a mut [u64]) -> Self {
        debug_assert_eq!(slots.len(), st.capacity as usize * LEDGER_SLOT_WORDS);
        debug_assert!(index.len().is_power_of_two() && index.len() > st.capacity as usize);
        Ledger { st, slots, index }
    }

    /// Forgets every block and threads all slots on the free list.
    pub fn clear(&mut self) {
        let cap = self.st.capacity;
        *self.st = LedgerState::new(cap);
        self.index.fill(NONE);
        for s in (0..cap).rev() {
            self.set_block(s, NONE);
            self.set_links(s, NIL, self.st.free);
            self.slots[s as usize * LEDGER_SLOT_WORDS + 2] = 0;
            self.st.free = s;
        }
    }

    fn block(&self, s: u32) -> Block {
        self.slots[s as usize * LEDGER_SLOT_WORDS]
    }

    fn set_block(&mut self, s: u32, b: Block) {
        self.slots[s as usize * LEDGER_SLOT_WORDS] = b;
    }

    fn links(&self, s: u32) -> (u32, u32) {
        let w = self.slots[s as usize * LEDGER_SLOT_WORDS + 1];
        ((w >> 32) as u32, w as u32)
    }

    fn set_links(&mut self, s: u32, prev: u32, next: u32) {
        self.slots[s as usize * LEDGER_SLOT_WORDS + 1] = ((prev as u64) << 32) | next as u64;
    }

    fn set_prev(&mut self, s: u32, prev: u32) {
        let (_, next) = self.links(s);
        self.set_links(s, prev, next);
    }

    fn set_next(&mut self, s: u32, next: u32) {
        let (prev, _) = self.links(s);
        self.set_links(s, prev, next);
    }

    fn is_dead_slot(&self, s: u32) -> bool {
        self.slots[s as usize * LEDGER_SLOT_WORDS + 2] & FLAG_DEAD != 0
    }

    fn set_dead_flag(&mut self, s: u32, dead: bool) {
        let f = self.flags(s) & !FLAG_DEAD;
        self.set_flags(s, f | if dead { FLAG_DEAD } else { 0 });
    }

    fn flags(&self, s: u32) -> u64 {
        self.slots[s as usize * LEDGER_SLOT_WORDS + 2]
    }

    fn set_flags(&mut self, s: u32, f: u64) {
        self.slots[s as usize * LEDGER_SLOT_WORDS + 2] = f;
    }

    fn list_mut(&mut self, dead: bool) -> &mut List {
        if dead {
            &mut self.st.dead
        } else {
            &mut self.st.live
        }
    }

    fn push_tail(&mut self, s: u32, dead: bool) {
        let tail = self.list_mut(dead).tail;
        self.set_links(s, tail, NIL);
        if tail == NIL {
            self.list_mut(dead).head = s;
        } else {
            self.set_next(tail, s);
        }
        self.list_mut(dead).tail = s;
        self.set_dead_flag(s, dead);
    }

    fn unlink(&mut self, s: u32) {
        let dead = self.is_dead_slot(s);
        let (prev, next) = self.links(s);
        if prev == NIL {
            self.list_mut(dead).head = next;
        } else {
            self.set_next(prev, next);
        }
        if next == NIL {
            self.list_mut(dead).tail = prev;
        } else {
            self.set_prev(next, prev);
        }
        self.set_links(s, NIL, NIL);
    }

    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    /// Index position holding `block`, or the empty position where it would go.
    fn probe(&self, block: Block) -> (usize, bool) {
        let mask = self.mask();
        let mut i = hash(block, mask);
        loop {
            let w = self.index[i];
            if w == NONE {
                return (i, false);
            }
            if self.block(w as u32) == block {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    fn slot_of(&self, block: Block) -> Option<u32> {
        match self.probe(block) {
            (i, true) => Some(self.index[i] as u32),
            _ => None,
        }
    }

    /// Deletes index position `i`, shifting later members of its probe run
    /// back so that every lookup still finds them.
    fn index_remove(&mut self, mut i: usize) {
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let w = self.index[j];
            if w == NONE {
                break;
            }
            let home = hash(self.block(w as u32), mask);
            // Move w back to i unless its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.index[i] = w;
                i = j;
            }
        }
        self.index[i] = NONE;
    }

    pub fn residency(&self, block: Block) -> Option<Residency> {
        self.slot_of(block).map(|s| {
            if self.is_dead_slot(s) {
                Residency::Dead
            } else {
                Residency::Live
            }
        })
    }

    pub fn contains(&self, block: Block) -> bool {
        self.slot_of(block).is_some()
    }

    /// `block` was just migrated to the GPU (or populated there): it becomes
    /// the most recently migrated live block. Returns false if the ledger is
    /// full (the caller tracks fewer blocks than are resident: a sizing error
    /// it should count, never a reason to fail).
    pub fn migrated_in(&mut self, block: Block) -> bool {
        match self.probe(block) {
            (i, true) => {
                let s = self.index[i] as u32;
                self.unlink(s);
                self.push_tail(s, false);
                true
            }
            (i, false) => {
                let s = self.st.free;
                if s == NIL {
                    return false;
                }
                self.st.free = self.links(s).1;
                self.set_block(s, block);
                self.index[i] = s as u64;
                self.push_tail(s, false);
                self.st.len += 1;
                true
            }
        }
    }

    /// `block` left the GPU (evicted, discarded or freed).
    pub fn evicted(&mut self, block: Block) -> bool {
        let (i, found) = self.probe(block);
        if !found {
            return false;
        }
        let s = self.index[i] as u32;
        self.unlink(s);
        self.index_remove(i);
        self.set_block(s, NONE);
        self.set_flags(s, 0);
        self.set_links(s, NIL, self.st.free);
        self.st.free = s;
        self.st.len -= 1;
        true
    }

    /// Moves a resident block between the live and dead lists. A block that
    /// comes alive again goes to the tail: it is about to be used.
    pub fn set_dead(&mut self, block: Block, dead: bool) -> bool {
        let Some(s) = self.slot_of(block) else {
            return false;
        };
        if self.is_dead_slot(s) != dead {
            self.unlink(s);
            self.push_tail(s, dead);
        }
        true
    }

    /// Records that a live resident block is needed at time `now` (> 0); if
    /// it was last needed at most `recent` before, it becomes the most
    /// recently migrated one. Returns whether it moved.
    pub fn use_at(&mut self, block: Block, now: u64, recent: u64) -> bool {
        let Some(s) = self.slot_of(block) else {
            return false;
        };
        if self.is_dead_slot(s) {
            return false;
        }
        let f = self.flags(s);
        let last = f >> USE_SHIFT;
        self.set_flags(s, (f & FLAG_DEAD) | (now << USE_SHIFT));
        if last != 0 && now > last && now - last <= recent {
            self.unlink(s);
            self.push_tail(s, false);
            return true;
        }
        false
    }

    /// Dead blocks, oldest first, at most `limit`.
    pub fn oldest_dead(&self, limit: usize) -> impl Iterator<Item = Block> + '_ {
        self.slots_from(self.st.dead.head, limit)
            .map(|s| self.block(s))
    }

    /// Live blocks from the least recently migrated on, at most `limit`.
    pub fn oldest_live(&self, limit: usize) -> impl Iterator<Item = Block> + '_ {
        self.slots_from(self.st.live.head, limit)
            .map(|s| self.block(s))
    }

    /// The slots of a list from `head` on, at most `limit`.
    fn slots_from(&self, head: u32, limit: usize) -> SlotIter<'_, 'a> {
        SlotIter {
            ledger: self,
            at: head,
            left: limit,
        }
    }
}

struct SlotIter<'l, 'a> {
    ledger: &'l Ledger<'a>,
    at: u32,
    left: usize,
}

impl Iterator for SlotIter<'_, '_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.at == NIL || self.left == 0 {
            return None;
        }
        let s = self.at;
        self.at = self.ledger.links(s).1;
        self.left -= 1;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    fn with_ledger<R>(cap: u32, f: impl FnOnce(&mut Ledger<'_>) -> R) -> R {
        let mut st = LedgerState::new(cap);
        let mut slots = vec![0; cap as usize * LEDGER_SLOT_WORDS];
        let mut index = vec![0; (2 * cap as usize).next_power_of_two()];
        let mut l = Ledger::new(&mut st, &mut slots, &mut index);
        l.clear();
        f(&mut l)
    }

    #[test]
    fn orders_by_migration_and_moves_dead_aside() {
        with_ledger(8, |l| {
            for b in [5, 6, 7, 8] {
                assert!(l.migrated_in(b));
            }
            l.migrated_in(5); // re-migrated: now newest
            assert!(l.set_dead(7, true));
            let live: Vec<_> = l.oldest_live(10).collect();
            assert_eq!(live, [6, 8, 5]);
            assert_eq!(l.oldest_dead(9).collect::<Vec<_>>(), [7]);
            assert_eq!(l.residency(7), Some(Residency::Dead));
            l.set_dead(7, false);
            assert_eq!(l.oldest_live(10).collect::<Vec<_>>(), [6, 8, 5, 7]);
            assert_eq!(l.oldest_dead(9).next(), None);
        });
    }

    #[test]
    fn reuse_soon_after_the_last_use_moves_to_the_tail() {
        with_ledger(8, |l| {
            for b in [1, 2, 3] {
                assert!(l.migrated_in(b));
                assert!(!l.use_at(b, 10, 0)); // first use: recorded only
            }
            assert!(!l.use_at(1, 10, 24)); // same use again: no move
            assert!(!l.use_at(2, 40, 24)); // 30 kernels later: too far
            assert_eq!(l.oldest_live(9).collect::<Vec<_>>(), [1, 2, 3]);
            assert!(l.use_at(1, 30, 24)); // 20 kernels later: re-used
            assert_eq!(l.oldest_live(9).collect::<Vec<_>>(), [2, 3, 1]);
            assert!(l.use_at(2, 64, 24)); // measured from its use at 40
            assert_eq!(l.oldest_live(9).collect::<Vec<_>>(), [3, 1, 2]);
            l.set_dead(3, true);
            assert!(!l.use_at(3, 20, 24)); // dead blocks stay aside
            assert!(!l.use_at(9, 20, 24)); // not resident
                                           // Eviction forgets the use: back in, it starts afresh.
            l.evicted(1);
            l.migrated_in(1);
            assert!(!l.use_at(1, 31, 24));
            assert_eq!(l.residency(3), Some(Residency::Dead));
        });
    }

    proptest::proptest! {
        /// Against a model (a Vec in victim order, last use per block):
        /// migrations, evictions, deaths and uses keep the live and dead
        /// orders, residency and length exact.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..5, 0u64..12, 1u64..40), 0..200)) {
            with_ledger(8, |l| {
                let mut live: Vec<u64> = Vec::new();
                let mut dead: Vec<u64> = Vec::new();
                let mut last = [0u64; 12];
                for (op, b, t) in ops {
                    let resident = live.contains(&b) || dead.contains(&b);
                    match op {
                        0 => {
                            let ok = l.migrated_in(b);
                            proptest::prop_assert_eq!(ok, resident || live.len() + dead.len() < 8);
                            if ok {
                                live.retain(|&x| x != b);
                                dead.retain(|&x| x != b);
                                live.push(b);
                            }
                        }
                        1 => {
                            proptest::prop_assert_eq!(l.evicted(b), resident);
                            live.retain(|&x| x != b);
                            dead.retain(|&x| x != b);
                            last[b as usize] = 0;
                        }
                        2 | 3 => {
                            let d = op == 2;
                            proptest::prop_assert_eq!(l.set_dead(b, d), resident);
                            let was_dead = dead.contains(&b);
                            if resident && was_dead != d {
                                live.retain(|&x| x != b);
                                dead.retain(|&x| x != b);
                                if d { dead.push(b) } else { live.push(b) }
                            }
                        }
                        _ => {
                            let is_live = live.contains(&b);
                            let prev = last[b as usize];
                            let moves = is_live && prev != 0 && t > prev && t - prev <= 8;
                            proptest::prop_assert_eq!(l.use_at(b, t, 8), moves);
                            if is_live {
                                last[b as usize] = t;
                            }
                            if moves {
                                live.retain(|&x| x != b);
                                live.push(b);
                            }
                        }
                    }
                    proptest::prop_assert_eq!(l.oldest_live(99).collect::<Vec<_>>(), live.clone());
                    proptest::prop_assert_eq!(l.oldest_dead(99).collect::<Vec<_>>(), dead.clone());
                    proptest::prop_assert_eq!(l.st.len() as usize, live.len() + dead.len());
                }
                Ok(())
            })?;
        }
    }

    #[test]
    fn full_ledger_refuses_and_recovers() {
        with_ledger(2, |l| {
            assert!(l.migrated_in(1));
            assert!(l.migrated_in(2));
            assert!(!l.migrated_in(3));
            assert!(l.evicted(1));
            assert!(!l.evicted(1));
            assert!(l.migrated_in(3));
            assert_eq!(l.st.len(), 2);
        });
    }
}
