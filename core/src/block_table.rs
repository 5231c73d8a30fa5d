//! One UM block correlation table (DeepUM section 5.2.2): `rows` x `assoc`
//! entries, each tagged by a 2 MB block number and holding up to `succs`
//! successor blocks in MRU order, plus the kernel's start and end block.
//!
//! Layout of the table's words:
//! `[owner, start, end, stamp]` then `rows * assoc` entries of
//! `[tag, stamp, succ_0 .. succ_{succs-1}]`. An empty tag or successor is
//! [`NONE`]. Within a row the entry with the smallest stamp is replaced first
//! (LRU); stamps come from the engine's clock.

use crate::params::{ENTRY_HEADER, TABLE_HEADER};
use crate::{Block, NONE};

const OWNER: usize = 0;
const START: usize = 1;
const END: usize = 2;
const STAMP: usize = 3;

/// Geometry shared by every table of one engine.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub rows: usize,
    pub assoc: usize,
    pub succs: usize,
}

impl Geometry {
    pub fn entry_words(&self) -> usize {
        ENTRY_HEADER + self.succs
    }

    pub fn table_words(&self) -> usize {
        TABLE_HEADER + self.rows * self.assoc * self.entry_words()
    }
}

/// A mutable view of one table.
pub struct BlockTable<'a> {
    words: &'a mut [u64],
    g: Geometry,
}

/// A read-only view of one table.
pub struct BlockTableRef<'a> {
    words: &'a [u64],
    g: Geometry,
}

/// Row index of a block: consecutive blocks (one tensor) land in consecutive
/// rows, so a streaming kernel never conflicts with itself within `rows` blocks.
fn row_of(g: &Geometry, block: Block) -> usize {
    (block as usize) & (g.rows - 1)
}

fn entry_at(g: &Geometry, row: usize, way: usize) -> usize {
    TABLE_HEADER + (row * g.assoc + way) * g.entry_words()
}

impl<'a> BlockTable<'a> {
    pub fn new(words: &'a mut [u64], g: Geometry) -> Self {
        debug_assert_eq!(words.len(), g.table_words());
        BlockTable { words, g }
    }

    /// Empties the table and gives it to `owner`.
    pub fn clear(&mut self, owner: u64) {
        self.words.fill(NONE);
        self.words[OWNER] = owner;
        self.words[STAMP] = 0;
    }

    pub fn set_owner(&mut self, owner: u64, stamp: u64) {
        self.words[OWNER] = owner;
        self.words[STAMP] = stamp;
    }

    pub fn touch(&mut self, stamp: u64) {
        self.words[STAMP] = stamp;
    }

    pub fn set_start(&mut self, b: Block) {
        self.words[START] = b;
    }

    pub fn set_end(&mut self, b: Block) {
        self.words[END] = b;
    }

    pub fn as_ref(&self) -> BlockTableRef<'_> {
        BlockTableRef {
            words: self.words,
            g: self.g,
        }
    }

    /// Records that `next` faulted right after `prev`: `next` becomes the
    /// MRU successor of `prev`'s entry, which is created (replacing the row's
    /// LRU entry) if missing. Returns true if an entry was replaced.
    pub fn record(&mut self, prev: Block, next: Block, stamp: u64) -> bool {
        if prev == NONE || next == NONE || prev == next {
            return false;
        }
        let g = self.g;
        let row = row_of(&g, prev);
        let mut target = None;
        let mut victim = 0;
        let mut victim_stamp = u64::MAX;
        for way in 0..g.assoc {
            let at = entry_at(&g, row, way);
            let tag = self.words[at];
            if tag == prev {
                target = Some(at);
                break;
            }
            // Stamps start at 1, so an empty way (counted as 0) is always
            // taken before any occupied one.
            let s = if tag == NONE { 0 } else { self.words[at + 1] };
            if s < victim_stamp {
                victim_stamp = s;
                victim = at;
            }
        }
        let (at, replaced) = match target {
            Some(at) => (at, false),
            None => {
                let replaced = self.words[victim] != NONE;
                self.words[victim] = prev;
                self.words[victim + ENTRY_HEADER..victim + g.entry_words()].fill(NONE);
                (victim, replaced)
            }
        };
        self.words[at + 1] = stamp;
        let succ = &mut self.words[at + ENTRY_HEADER..at + g.entry_words()];
        // Move `next` to the front, shifting the more recent ones back; the
        // oldest falls off when the list is full.
        let pos = succ.iter().position(|&s| s == next).unwrap_or(g.succs - 1);
        succ.copy_within(0..pos, 1);
        succ[0] = next;
        replaced
    }
}

impl<'a> BlockTableRef<'a> {
    pub fn new(words: &'a [u64], g: Geometry) -> Self {
        debug_assert_eq!(words.len(), g.table_words());
        BlockTableRef { words, g }
    }

    pub fn owner(&self) -> u64 {
        self.words[OWNER]
    }

    pub fn stamp(&self) -> u64 {
        self.words[STAMP]
    }

    pub fn start(&self) -> Block {
        self.words[START]
    }

    pub fn end(&self) -> Block {
        self.words[END]
    }

    /// The successors of `block`, MRU first, `NONE`-padded; `None` if the
    /// block has no entry.
    pub fn successors(&self, block: Block) -> Option<&'a [u64]> {
        let g = self.g;
        let row = row_of(&g, block);
        let words: &'a [u64] = self.words;
        (0..g.assoc).find_map(|way| {
            let at = entry_at(&g, row, way);
            (words[at] == block).then(|| &words[at + ENTRY_HEADER..at + g.entry_words()])
        })
    }

    pub fn contains(&self, block: Block) -> bool {
        self.successors(block).is_some()
    }

    /// Number of occupied entries (for tests and statistics; walks the table).
    pub fn len(&self) -> usize {
        let g = self.g;
        (0..g.rows * g.assoc)
            .filter(|i| self.words[TABLE_HEADER + i * g.entry_words()] != NONE)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec;

    fn geo(rows: usize, assoc: usize, succs: usize) -> Geometry {
        Geometry { rows, assoc, succs }
    }

    #[test]
    fn successors_are_mru_ordered_and_bounded() {
        let g = geo(4, 2, 3);
        let mut w = vec![0; g.table_words()];
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        for (i, s) in [10, 11, 12, 13, 11].into_iter().enumerate() {
            t.record(1, s, i as u64);
        }
        assert_eq!(t.as_ref().successors(1).unwrap(), &[11, 13, 12]);
    }

    #[test]
    fn row_replaces_least_recent_entry() {
        let g = geo(2, 2, 1);
        let mut w = vec![0; g.table_words()];
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        // Blocks 0, 2, 4 share row 0.
        assert!(!t.record(0, 100, 1));
        assert!(!t.record(2, 100, 2));
        assert!(!t.record(0, 101, 3)); // refreshes 0
        assert!(t.record(4, 100, 4)); // evicts 2, the LRU
        let r = t.as_ref();
        assert!(r.contains(0) && r.contains(4) && !r.contains(2));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn ignores_self_and_empty_pairs() {
        let g = geo(2, 1, 2);
        let mut w = vec![0; g.table_words()];
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        t.record(5, 5, 1);
        t.record(NONE, 5, 1);
        assert!(t.as_ref().is_empty());
    }
}
