//! A global history buffer of faulted runs (Nesbit & Smith's GHB, HPCA'04),
//! the sequence predictor of transparent mode.
//!
//! Without execution ids there are no kernels to key tables by, but a
//! training loop repeats the same order of first touches every iteration.
//! The history is that order: a ring of *entries*, each a run of up to
//! [`RUN_BLOCKS`] consecutive blocks inside one chunk (a tensor, as in the
//! block tables), appended at the ring's head. Every entry has a position
//! (monotonic, never reused), the number of blocks appended before it (its
//! *offset*: distances along the history in blocks are differences of
//! offsets), and a link to the previous entry with the same first block. An
//! index maps a block to the newest entry that starts with it. The
//! occurrences of a block are found by following the links of the block
//! itself and of the blocks before it in its chunk (a run holding it may
//! start there), at most [`CHAIN_STEPS`] steps in all. Keying by block, not
//! by chunk, matters: the weights of many layers share a chunk, and their
//! chunk would hold more entries than any bounded walk reaches.
//!
//! Layout of the words: `ring_entries` entries of
//! `[head | len << LEN_SHIFT, prev, offset]` (`prev` is a position or
//! [`NONE`]), then `index_slots` words, each a position or [`NONE`].
//! Entry `p` lives in ring slot `p mod ring_entries`; it is valid while
//! fewer than `ring_entries` entries were appended after it.

use crate::block::{Block, NONE, RUN_BLOCKS, RUN_SHIFT};

/// Words per history entry.
pub const HISTORY_ENTRY_WORDS: usize = 3;
/// Entries examined at most when looking a block up.
pub const CHAIN_STEPS: usize = 64;
const LEN_SHIFT: u32 = 56;
const HEAD_MASK: u64 = (1 << LEN_SHIFT) - 1;

/// A place in the history: entry `pos`, block `off` of its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub pos: u64,
    pub off: u64,
}

/// One valid entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub head: Block,
    pub len: u64,
    /// Blocks appended before this entry.
    pub offset: u64,
    prev: u64,
}

impl Entry {
    pub fn contains(&self, b: Block) -> bool {
        b >= self.head && b - self.head < self.len
    }
}

/// The history's bookkeeping outside the storage slice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryState {
    /// Position the next entry gets (entries appended so far).
    head: u64,
    /// Blocks appended so far.
    blocks: u64,
}

impl HistoryState {
    pub fn head(&self) -> u64 {
        self.head
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }
}

fn chunk(b: Block) -> u64 {
    b >> RUN_SHIFT
}

fn index_slot(b: Block, mask: usize) -> usize {
    (b.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 28) as usize & mask
}

fn read(ring: &[u64], st: &HistoryState, pos: u64) -> Option<Entry> {
    let n = (ring.len() / HISTORY_ENTRY_WORDS) as u64;
    if pos >= st.head || pos.saturating_add(n) < st.head || n == 0 {
        return None;
    }
    let at = (pos % n) as usize * HISTORY_ENTRY_WORDS;
    let w0 = ring[at];
    Some(Entry {
        head: w0 & HEAD_MASK,
        len: w0 >> LEN_SHIFT,
        prev: ring[at + 1],
        offset: ring[at + 2],
    })
}

/// The newest valid entry starting with block `h`, by the index.
fn newest_of(ring: &[u64], index: &[u64], st: &HistoryState, h: Block) -> Option<(u64, Entry)> {
    let pos = index[index_slot(h, index.len() - 1)];
    let e = read(ring, st, pos)?;
    (e.head == h).then_some((pos, e))
}

/// Occurrences of a block (see [`HistoryRef::occurrences`]).
pub struct Occurrences<'a> {
    ring: &'a [u64],
    index: &'a [u64],
    st: &'a HistoryState,
    b: Block,
    /// The first block whose entries are being walked.
    h: Block,
    next: Option<(u64, Entry)>,
    steps: usize,
}

impl Iterator for Occurrences<'_> {
    type Item = (Place, Entry);

    fn next(&mut self) -> Option<(Place, Entry)> {
        while self.steps > 0 {
            self.steps -= 1;
            let Some((pos, e)) = self.next.take() else {
                // This first block is done: a run holding b may start at
                // an earlier block of its chunk.
                if self.h == 0 || chunk(self.h - 1) != chunk(self.b) {
                    return None;
                }
                self.h -= 1;
                self.next = newest_of(self.ring, self.index, self.st, self.h);
                continue;
            };
            // Links only go back; anything else is a stale word.
            if e.prev < pos {
                self.next = read(self.ring, self.st, e.prev)
                    .filter(|p| p.head == self.h)
                    .map(|p| (e.prev, p));
            }
            if e.contains(self.b) {
                return Some((
                    Place {
                        pos,
                        off: self.b - e.head,
                    },
                    e,
                ));
            }
        }
        None
    }
}

/// A read-only view of the history.
pub struct HistoryRef<'a> {
    st: &'a HistoryState,
    ring: &'a [u64],
    index: &'a [u64],
}

impl<'a> HistoryRef<'a> {
    pub fn new(st: &'a HistoryState, ring: &'a [u64], index: &'a [u64]) -> Self {
        debug_assert!(index.len().is_power_of_two());
        HistoryRef { st, ring, index }
    }

    /// Entry `pos`, if it is still in the ring.
    pub fn entry(&self, pos: u64) -> Option<Entry> {
        read(self.ring, self.st, pos)
    }

    /// The places holding `b`: runs starting at `b` newest first, then
    /// runs starting at `b - 1`, and so on down to its chunk's first block;
    /// at most [`CHAIN_STEPS`] entries examined.
    pub fn occurrences(&self, b: Block) -> Occurrences<'a> {
        let st: &'a HistoryState = self.st;
        let ring: &'a [u64] = self.ring;
        let index: &'a [u64] = self.index;
        Occurrences {
            ring,
            index,
            st,
            b,
            h: b,
            next: newest_of(ring, index, st, b),
            steps: CHAIN_STEPS,
        }
    }

    /// Blocks appended before `p` (the history's distance measure); the
    /// head (one past the newest entry) is at the end of the history.
    pub fn offset_of(&self, p: Place) -> Option<u64> {
        if p.pos == self.st.head {
            return Some(self.st.blocks);
        }
        self.entry(p.pos).map(|e| e.offset + p.off.min(e.len))
    }
}

/// A mutable view of the history.
pub struct History<'a> {
    st: &'a mut HistoryState,
    ring: &'a mut [u64],
    index: &'a mut [u64],
}

impl<'a> History<'a> {
    pub fn new(st: &'a mut HistoryState, ring: &'a mut [u64], index: &'a mut [u64]) -> Self {
        debug_assert!(index.len().is_power_of_two());
        debug_assert!(ring.len().is_multiple_of(HISTORY_ENTRY_WORDS) && !ring.is_empty());
        History { st, ring, index }
    }

    pub fn as_ref(&self) -> HistoryRef<'_> {
        HistoryRef {
            st: self.st,
            ring: self.ring,
            index: self.index,
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.ring.fill(NONE);
        self.index.fill(NONE);
        *self.st = HistoryState::default();
    }

    /// The newest entry, if any.
    pub fn newest(&self) -> Option<Entry> {
        self.st
            .head
            .checked_sub(1)
            .and_then(|p| read(self.ring, self.st, p))
    }

    /// Appends the blocks `[b, b + n)` in order: the newest entry grows when
    /// `b` continues it inside its chunk, otherwise new entries are made
    /// (one per chunk the range crosses).
    pub fn append(&mut self, mut b: Block, mut n: u64) {
        // Block numbers fit in 43 bits (64-bit addresses, 2 MB blocks).
        if b > HEAD_MASK || n > HEAD_MASK - b {
            return;
        }
        while n > 0 {
            let room = RUN_BLOCKS - (b & (RUN_BLOCKS - 1));
            let take = n.min(room);
            self.append_in_chunk(b, take);
            b += take;
            n -= take;
        }
    }

    fn append_in_chunk(&mut self, b: Block, n: u64) {
        let entries = (self.ring.len() / HISTORY_ENTRY_WORDS) as u64;
        if entries == 0 || self.index.is_empty() {
            return;
        }
        if let Some(e) = self.newest() {
            if e.head + e.len == b && chunk(e.head) == chunk(b) {
                let at = ((self.st.head - 1) % entries) as usize * HISTORY_ENTRY_WORDS;
                self.ring[at] = e.head | (e.len + n) << LEN_SHIFT;
                self.st.blocks += n;
                return;
            }
        }
        let prev = newest_of(self.ring, self.index, self.st, b).map_or(NONE, |(p, _)| p);
        let pos = self.st.head;
        let at = (pos % entries) as usize * HISTORY_ENTRY_WORDS;
        self.ring[at] = b | n << LEN_SHIFT;
        self.ring[at + 1] = prev;
        self.ring[at + 2] = self.st.blocks;
        let slot = index_slot(b, self.index.len() - 1);
        self.index[slot] = pos;
        self.st.head += 1;
        self.st.blocks += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    fn hist(entries: usize, slots: usize) -> (HistoryState, Vec<u64>, Vec<u64>) {
        let mut st = HistoryState::default();
        let mut ring = vec![0; entries * HISTORY_ENTRY_WORDS];
        let mut index = vec![0; slots];
        History::new(&mut st, &mut ring, &mut index).clear();
        (st, ring, index)
    }

    fn places(h: &History<'_>, b: Block) -> Vec<(u64, u64)> {
        h.as_ref()
            .occurrences(b)
            .map(|(p, _)| (p.pos, p.off))
            .collect()
    }

    #[test]
    fn consecutive_blocks_form_runs_split_at_chunks() {
        let (mut st, mut ring, mut index) = hist(16, 16);
        let mut h = History::new(&mut st, &mut ring, &mut index);
        for b in 14..20 {
            h.append(b, 1);
        }
        let r = h.as_ref();
        let e0 = r.entry(0).unwrap();
        let e1 = r.entry(1).unwrap();
        assert_eq!((e0.head, e0.len, e0.offset), (14, 2, 0));
        assert_eq!((e1.head, e1.len, e1.offset), (16, 4, 2));
        assert!(r.entry(2).is_none());
        assert_eq!(r.offset_of(Place { pos: 1, off: 3 }), Some(5));
        h.append(100, 20);
        assert_eq!(h.as_ref().entry(2).unwrap().len, 12);
        assert_eq!(h.as_ref().entry(3).unwrap().head, 112);
    }

    #[test]
    fn occurrences_are_newest_first_and_forget_overwritten_entries() {
        let (mut st, mut ring, mut index) = hist(4, 1024);
        let mut h = History::new(&mut st, &mut ring, &mut index);
        h.append(5, 1); // 0
        h.append(40, 1); // 1
        h.append(5, 1); // 2
        h.append(3, 4); // 3: blocks 3..7 hold 5 too
        assert_eq!(places(&h, 5), [(2, 0), (0, 0), (3, 2)]);
        h.append(90, 1); // 4 overwrites 0
        assert_eq!(places(&h, 5), [(2, 0), (3, 2)]);
        assert!(h.as_ref().entry(0).is_none());
        assert_eq!(places(&h, 41), []);
    }

    #[test]
    fn colliding_blocks_never_return_foreign_entries() {
        // One index slot: every block collides.
        let (mut st, mut ring, mut index) = hist(8, 1);
        let mut h = History::new(&mut st, &mut ring, &mut index);
        h.append(1, 1);
        h.append(33, 1);
        assert_eq!(places(&h, 1), []);
        assert_eq!(places(&h, 33), [(1, 0)]);
    }

    #[test]
    fn blocks_of_one_chunk_have_their_own_chains() {
        // Block 0 and block 1 of one chunk alternate with other chunks:
        // each block's occurrences stay reachable however many its chunk has.
        let (mut st, mut ring, mut index) = hist(256, 256);
        let mut h = History::new(&mut st, &mut ring, &mut index);
        for i in 0..100 {
            h.append(i % 2, 1);
            h.append(1000 + 20 * i, 1);
        }
        // 100 entries in chunk 0, more than a walk examines; 50 hold block 0.
        let p = places(&h, 0);
        assert_eq!(p.len(), 50);
        assert_eq!(p[0], (196, 0));
        assert_eq!(p[49], (0, 0));
    }

    #[test]
    fn rejects_blocks_beyond_43_bits() {
        let (mut st, mut ring, mut index) = hist(4, 4);
        let mut h = History::new(&mut st, &mut ring, &mut index);
        h.append(NONE, 1);
        h.append(HEAD_MASK, 2);
        assert_eq!(h.st.head, 0);
    }
}
