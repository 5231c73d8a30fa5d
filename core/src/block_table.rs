//! One UM block correlation table (DeepUM section 5.2.2), with runs.
//!
//! DeepUM keeps one entry per faulted 2 MB block. DNN kernels walk tensors,
//! which are contiguous, so most successors are "the next block": a kernel
//! over a 32 GiB activation needs 16k entries and overflows any table of
//! DeepUM's size. Here an entry describes a *run* of consecutive blocks
//! `[head, head + len)` that faulted one after the other, plus up to `succs`
//! successor blocks (MRU order) that followed the run's last block. A run
//! never crosses a chunk of `RUN_BLOCKS` blocks, so the entry holding any
//! block is found in the one row of that block's chunk. With a run length of
//! one this is exactly DeepUM's table.
//!
//! Layout of the table's words:
//! `[owner, start, end, stamp]` then `rows * assoc` entries of
//! `[head, stamp, len, succ_0 .. succ_{succs-1}]`. An empty head or successor
//! is [`NONE`]. Within a row the least recently updated entry is replaced
//! first; stamps come from the engine's clock and start at 1.

use crate::block::{Block, NONE, RUN_SHIFT};

const OWNER: usize = 0;
const START: usize = 1;
const END: usize = 2;
const STAMP: usize = 3;

/// Words per block-table header: owner, start, end, stamp.
pub const TABLE_HEADER: usize = 4;
/// Words per block-table way besides its successors: head, stamp, run length.
pub const ENTRY_HEADER: usize = 3;

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

/// The run holding a block, as found in a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub head: Block,
    pub len: u64,
    /// Word offset of the entry (valid until the table changes).
    at: usize,
}

impl Run {
    /// One past the run's last block.
    pub fn end(&self) -> Block {
        self.head + self.len
    }
}

fn chunk(b: Block) -> u64 {
    b >> RUN_SHIFT
}

/// Row of a run (two blocks or more): consecutive chunks (one tensor) land
/// in consecutive rows.
fn chunk_row(g: &Geometry, b: Block) -> usize {
    (chunk(b) as usize) & (g.rows - 1)
}

/// Row of a single-block entry: hashed, as DeepUM's table, so that scattered
/// blocks of one chunk do not compete for one row.
fn block_row(g: &Geometry, b: Block) -> usize {
    (b.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (g.rows - 1)
}

fn entry_at(g: &Geometry, row: usize, way: usize) -> usize {
    TABLE_HEADER + (row * g.assoc + way) * g.entry_words()
}

/// Finds the run holding `b` in `words`: a run of two or more in the row of
/// b's chunk, or a single-block entry in b's own row.
fn find(words: &[u64], g: &Geometry, b: Block) -> Option<Run> {
    if b == NONE {
        return None;
    }
    let in_row = |row: usize, single: bool| {
        (0..g.assoc).find_map(|way| {
            let at = entry_at(g, row, way);
            let head = words[at];
            let len = words[at + 2];
            let hit = if single {
                head == b && len == 1
            } else {
                head != NONE && len >= 2 && head <= b && b - head < len
            };
            hit.then_some(Run { head, len, at })
        })
    };
    in_row(chunk_row(g, b), false).or_else(|| in_row(block_row(g, b), true))
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

/// What recording a fault did to the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Head of the run that now holds the faulted block.
    pub head: Block,
    /// An occupied entry was replaced to make room.
    pub replaced: bool,
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

    /// Records that `next` faulted right after `prev` (NONE: nothing before
    /// it). If `next` directly follows `prev` in the same chunk it extends
    /// `prev`'s run; otherwise `next` gets a run (its own, or the one already
    /// holding it) and becomes the MRU successor of `prev`'s run.
    pub fn record(&mut self, prev: Block, next: Block, stamp: u64) -> Recorded {
        if next == NONE {
            return Recorded::default();
        }
        let g = self.g;
        let prev_run = find(self.words, &g, prev);
        if let Some(r) = prev_run {
            if next == r.end()
                && chunk(next) == chunk(r.head)
                && find(self.words, &g, next).is_none()
            {
                // Sequential: grow the run (unless another entry already
                // holds `next`: then fall through and link to it). A single
                // entry becoming a run moves to its chunk's row.
                let row_now = (r.at - TABLE_HEADER) / g.entry_words() / g.assoc;
                if r.len >= 2 || row_now == chunk_row(&g, r.head) {
                    self.words[r.at + 1] = stamp;
                    self.words[r.at + 2] = r.len + 1;
                    return Recorded {
                        head: r.head,
                        replaced: false,
                    };
                }
                let (at, replaced) = self.take_way(chunk_row(&g, r.head), stamp);
                if at != r.at {
                    let ew = g.entry_words();
                    self.words.copy_within(r.at..r.at + ew, at);
                    self.words[r.at..r.at + ew].fill(NONE);
                }
                self.words[at + 1] = stamp;
                self.words[at + 2] = 2;
                return Recorded {
                    head: r.head,
                    replaced,
                };
            }
        }
        let (next_run, replaced) = match find(self.words, &g, next) {
            Some(r) => (r, false),
            None => self.insert(next, stamp),
        };
        self.words[next_run.at + 1] = stamp;
        if next_run.head == next && prev_run.is_some_and(|r| r.at == next_run.at) {
            // Replaced prev's own entry: nothing left to link from.
            return Recorded {
                head: next,
                replaced,
            };
        }
        // Re-find prev: inserting `next` may have replaced its entry.
        if let Some(r) = find(self.words, &g, prev) {
            if r.at != next_run.at {
                self.push_successor(r.at, next, stamp);
            }
        }
        Recorded {
            head: next_run.head,
            replaced,
        }
    }

    /// The least recently updated way of `row` (an empty one first),
    /// emptied. Returns its offset and whether an entry was replaced.
    fn take_way(&mut self, row: usize, stamp: u64) -> (usize, bool) {
        let g = self.g;
        let mut victim = entry_at(&g, row, 0);
        let mut oldest = u64::MAX;
        for way in 0..g.assoc {
            let at = entry_at(&g, row, way);
            // Empty ways count as stamp 0: taken before any occupied one.
            let s = if self.words[at] == NONE {
                0
            } else {
                self.words[at + 1]
            };
            if s < oldest {
                oldest = s;
                victim = at;
            }
        }
        let replaced = self.words[victim] != NONE;
        self.words[victim..victim + g.entry_words()].fill(NONE);
        self.words[victim + 1] = stamp;
        (victim, replaced)
    }

    /// A new one-block entry for `b`, in b's own row.
    fn insert(&mut self, b: Block, stamp: u64) -> (Run, bool) {
        let row = block_row(&self.g, b);
        let (at, replaced) = self.take_way(row, stamp);
        self.words[at] = b;
        self.words[at + 2] = 1;
        (
            Run {
                head: b,
                len: 1,
                at,
            },
            replaced,
        )
    }

    fn push_successor(&mut self, at: usize, next: Block, stamp: u64) {
        let g = self.g;
        self.words[at + 1] = stamp;
        let succ = &mut self.words[at + ENTRY_HEADER..at + g.entry_words()];
        // Move `next` to the front; the oldest falls off a full list.
        let pos = succ.iter().position(|&s| s == next).unwrap_or(g.succs - 1);
        succ.copy_within(0..pos, 1);
        succ[0] = next;
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

    /// The run holding `b`, if any.
    pub fn run(&self, b: Block) -> Option<Run> {
        find(self.words, &self.g, b)
    }

    /// The successors of a run, MRU first, `NONE`-padded.
    pub fn successors(&self, r: &Run) -> &'a [u64] {
        let words: &'a [u64] = self.words;
        &words[r.at + ENTRY_HEADER..r.at + self.g.entry_words()]
    }

    pub fn contains(&self, b: Block) -> bool {
        self.run(b).is_some()
    }

    /// Number of occupied entries (walks the table).
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
    use std::vec::Vec;

    fn table(rows: usize, assoc: usize, succs: usize) -> (Vec<u64>, Geometry) {
        let g = Geometry { rows, assoc, succs };
        (vec![0; g.table_words()], g)
    }

    fn succ_of(t: &BlockTable<'_>, b: Block) -> Vec<u64> {
        let r = t.as_ref();
        let run = r.run(b).unwrap();
        r.successors(&run)
            .iter()
            .copied()
            .filter(|&s| s != NONE)
            .collect()
    }

    #[test]
    fn successors_are_mru_ordered_and_bounded() {
        let (mut w, g) = table(16, 2, 3);
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        t.record(NONE, 1, 1);
        for (i, s) in [20, 40, 70, 100, 40].into_iter().enumerate() {
            t.record(1, s, 2 + i as u64);
        }
        assert_eq!(succ_of(&t, 1), [40, 100, 70]);
    }

    #[test]
    fn sequential_faults_form_runs_that_stop_at_chunk_edges() {
        let (mut w, g) = table(8, 2, 2);
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        let mut prev = NONE;
        for (i, b) in (14..20).enumerate() {
            t.record(prev, b, 1 + i as u64);
            prev = b;
        }
        let r = t.as_ref();
        let first = r.run(15).unwrap();
        assert_eq!((first.head, first.len), (14, 2));
        let second = r.run(19).unwrap();
        assert_eq!((second.head, second.len), (16, 4));
        assert_eq!(r.successors(&first)[0], 16);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn row_replaces_least_recent_entry() {
        let (mut w, g) = table(1, 2, 1);
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        // One row: every entry competes for its two ways.
        assert!(!t.record(NONE, 100, 1).replaced);
        assert!(!t.record(NONE, 200, 2).replaced);
        t.record(NONE, 100, 3); // refreshes 100
        assert!(t.record(NONE, 300, 4).replaced); // evicts 200, the LRU
        let r = t.as_ref();
        assert!(r.contains(100) && r.contains(300) && !r.contains(200));
    }

    #[test]
    fn a_fault_inside_a_known_run_links_to_it() {
        let (mut w, g) = table(8, 2, 2);
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        for (i, b) in (0..8).enumerate() {
            t.record(if i == 0 { NONE } else { b - 1 }, b, 1 + i as u64);
        }
        t.record(NONE, 40, 19);
        let rec = t.record(40, 5, 20);
        assert_eq!(rec.head, 0);
        assert_eq!(succ_of(&t, 40), [5]);
        assert_eq!(t.as_ref().run(7).unwrap().len, 8);
    }

    #[test]
    fn ignores_empty_next() {
        let (mut w, g) = table(2, 1, 2);
        let mut t = BlockTable::new(&mut w, g);
        t.clear(0);
        t.record(5, NONE, 1);
        assert!(t.as_ref().is_empty());
    }
}
