//! The execution-ID correlation table (DeepUM section 5.2.2, Figure 5.3).
//!
//! For every execution id it keeps up to `exec_records` records
//! `(h2, h1, h0) -> next`: "the kernels h2, h1, h0 ran, then this one, then
//! `next`". Prediction prefers the record whose history matches all three
//! previous ids, then two, then one, then the most recent record: a wrong
//! kernel prediction is expensive, a longer matching history makes it rare.
//!
//! Storage: `exec_ids / 8` sets of 8 ways; a way is `[tag, stamp, table]`
//! followed by its records `[h2 << 32 | h1, h0 << 32 | next, stamp]`.
//! Ways and records are replaced LRU by stamp.

use crate::block::{ExecId, NONE};
use crate::params::Params;

/// Ways per set of the execution-id table.
pub const EXEC_WAYS: usize = 8;
/// Words per execution-id way header: tag, stamp, table index.
pub const EXEC_WAY_HEADER: usize = 3;
/// Words per execution-id record: packed (h2, h1), packed (h0, next), stamp.
pub const EXEC_RECORD_WORDS: usize = 3;
// Validation's lower bound on `exec_ids` must give every table one whole set.
const _: () = assert!(EXEC_WAYS as u32 == Params::MIN_EXEC_IDS);

/// "No execution id" inside packed records and histories.
pub const NO_EXEC: ExecId = u32::MAX;

const TAG: usize = 0;
const STAMP: usize = 1;
const TABLE: usize = 2;

pub struct ExecTable<'a> {
    words: &'a mut [u64],
    sets: usize,
    records: usize,
}

/// What inserting an execution id pushed out of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub id: ExecId,
    /// The block table the evicted id owned, if any.
    pub table: Option<u32>,
}

fn set_of(id: ExecId, sets: usize) -> usize {
    // Fibonacci hashing: runtime ids are often small and dense.
    ((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (sets - 1)
}

fn pack(hi: ExecId, lo: ExecId) -> u64 {
    ((hi as u64) << 32) | lo as u64
}

fn unpack(w: u64) -> (ExecId, ExecId) {
    ((w >> 32) as u32, w as u32)
}

impl<'a> ExecTable<'a> {
    pub fn new(words: &'a mut [u64], sets: usize, records: usize) -> Self {
        debug_assert_eq!(
            words.len(),
            sets * EXEC_WAYS * (EXEC_WAY_HEADER + records * EXEC_RECORD_WORDS)
        );
        ExecTable {
            words,
            sets,
            records,
        }
    }

    pub fn clear(&mut self) {
        self.words.fill(NONE);
    }

    fn way_words(&self) -> usize {
        EXEC_WAY_HEADER + self.records * EXEC_RECORD_WORDS
    }

    fn way_at(&self, set: usize, way: usize) -> usize {
        (set * EXEC_WAYS + way) * self.way_words()
    }

    fn find(&self, id: ExecId) -> Option<usize> {
        let set = set_of(id, self.sets);
        (0..EXEC_WAYS)
            .map(|w| self.way_at(set, w))
            .find(|&at| self.words[at + TAG] == id as u64)
    }

    /// The way of `id`, created if missing (replacing the set's LRU way).
    fn find_or_insert(&mut self, id: ExecId, stamp: u64) -> (usize, Option<Evicted>) {
        if let Some(at) = self.find(id) {
            self.words[at + STAMP] = stamp;
            return (at, None);
        }
        let set = set_of(id, self.sets);
        let mut victim = self.way_at(set, 0);
        let mut oldest = u64::MAX;
        for w in 0..EXEC_WAYS {
            let at = self.way_at(set, w);
            let s = if self.words[at + TAG] == NONE {
                0
            } else {
                self.words[at + STAMP]
            };
            if s < oldest {
                oldest = s;
                victim = at;
            }
        }
        let evicted = (self.words[victim + TAG] != NONE).then(|| Evicted {
            id: self.words[victim + TAG] as ExecId,
            table: table_index(self.words[victim + TABLE]),
        });
        let ww = self.way_words();
        self.words[victim..victim + ww].fill(NONE);
        self.words[victim + TAG] = id as u64;
        self.words[victim + STAMP] = stamp;
        (victim, evicted)
    }

    /// Makes sure `id` has a way; returns what that pushed out.
    pub fn ensure(&mut self, id: ExecId, stamp: u64) -> Option<Evicted> {
        self.find_or_insert(id, stamp).1
    }

    /// The block table owned by `id`.
    pub fn table_of(&self, id: ExecId) -> Option<u32> {
        self.find(id)
            .and_then(|at| table_index(self.words[at + TABLE]))
    }

    /// Gives `id` (which must be present) the block table `table`, or none.
    pub fn set_table(&mut self, id: ExecId, table: Option<u32>) {
        if let Some(at) = self.find(id) {
            self.words[at + TABLE] = table.map_or(NONE, |t| t as u64);
        }
    }

    /// Records that after history `hist` (oldest first) and `cur`, `next` ran.
    pub fn record(
        &mut self,
        hist: [ExecId; 3],
        cur: ExecId,
        next: ExecId,
        stamp: u64,
    ) -> Option<Evicted> {
        let (at, evicted) = self.find_or_insert(cur, stamp);
        let key = pack(hist[0], hist[1]);
        let mut slot = None;
        let mut victim = at + EXEC_WAY_HEADER;
        let mut oldest = u64::MAX;
        for r in 0..self.records {
            let rec = at + EXEC_WAY_HEADER + r * EXEC_RECORD_WORDS;
            let w = &self.words[rec..rec + EXEC_RECORD_WORDS];
            if w[0] == key && unpack(w[1]).0 == hist[2] {
                slot = Some(rec);
                break;
            }
            let s = if w[2] == NONE { 0 } else { w[2] };
            if s < oldest {
                oldest = s;
                victim = rec;
            }
        }
        let rec = slot.unwrap_or(victim);
        self.words[rec] = key;
        self.words[rec + 1] = pack(hist[2], next);
        self.words[rec + 2] = stamp;
        evicted
    }

    /// Predicts the id that runs after `cur`, given the ids before it.
    pub fn predict(&self, hist: [ExecId; 3], cur: ExecId) -> Option<ExecId> {
        let at = self.find(cur)?;
        // Score: matching history suffix length, then recency.
        let mut best: Option<(u32, u64, ExecId)> = None;
        for r in 0..self.records {
            let rec = at + EXEC_WAY_HEADER + r * EXEC_RECORD_WORDS;
            let w = &self.words[rec..rec + EXEC_RECORD_WORDS];
            if w[2] == NONE {
                continue;
            }
            let (h2, h1) = unpack(w[0]);
            let (h0, next) = unpack(w[1]);
            let score = if h0 != hist[2] {
                0
            } else if h1 != hist[1] {
                1
            } else if h2 != hist[0] {
                2
            } else {
                3
            };
            if best.is_none_or(|(bs, bt, _)| (score, w[2]) > (bs, bt)) {
                best = Some((score, w[2], next));
            }
        }
        best.map(|(_, _, next)| next)
    }
}

fn table_index(w: u64) -> Option<u32> {
    (w != NONE).then_some(w as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec;

    fn table(sets: usize, records: usize) -> std::vec::Vec<u64> {
        vec![NONE; sets * EXEC_WAYS * (EXEC_WAY_HEADER + records * EXEC_RECORD_WORDS)]
    }

    #[test]
    fn predicts_by_longest_matching_history() {
        let mut w = table(4, 4);
        let mut t = ExecTable::new(&mut w, 4, 4);
        // Kernel 5 is followed by 6 after (1,2,3) and by 9 after (7,8,3).
        t.record([1, 2, 3], 5, 6, 1);
        t.record([7, 8, 3], 5, 9, 2);
        assert_eq!(t.predict([1, 2, 3], 5), Some(6));
        assert_eq!(t.predict([7, 8, 3], 5), Some(9));
        assert_eq!(t.predict([0, 2, 3], 5), Some(6)); // two ids match
        assert_eq!(t.predict([0, 0, 0], 5), Some(9)); // most recent
        assert_eq!(t.predict([0, 0, 0], 4), None);
    }

    #[test]
    fn same_history_updates_in_place() {
        let mut w = table(4, 2);
        let mut t = ExecTable::new(&mut w, 4, 2);
        t.record([1, 2, 3], 5, 6, 1);
        t.record([1, 2, 3], 5, 7, 2);
        t.record([4, 4, 4], 5, 8, 3);
        assert_eq!(t.predict([1, 2, 3], 5), Some(7));
        assert_eq!(t.predict([4, 4, 4], 5), Some(8));
    }

    #[test]
    fn full_set_evicts_lru_id_and_reports_its_table() {
        let mut w = table(1, 1);
        let mut t = ExecTable::new(&mut w, 1, 1);
        for id in 0..EXEC_WAYS as u32 {
            assert_eq!(t.ensure(id, 1 + id as u64), None);
            t.set_table(id, Some(id * 10));
        }
        t.ensure(0, 10); // refresh 0: id 1 is now the LRU
        let ev = t.ensure(99, 100).unwrap();
        assert_eq!(
            ev,
            Evicted {
                id: 1,
                table: Some(10)
            }
        );
        assert_eq!(t.table_of(1), None);
        assert_eq!(t.table_of(0), Some(0));
        assert_eq!(t.table_of(99), None);
    }
}
