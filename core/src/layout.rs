//! Where each region lives inside the engine's one storage slice, and how
//! many words a parameter set needs.
//!
//! Every region's word size comes from the component that owns the region,
//! so this file depends on them and they never depend on it.

use crate::block_table::{ENTRY_HEADER, TABLE_HEADER};
use crate::exec_table::{EXEC_RECORD_WORDS, EXEC_WAYS, EXEC_WAY_HEADER};
use crate::history::HISTORY_ENTRY_WORDS;
use crate::ledger::LEDGER_SLOT_WORDS;
use crate::params::{Mode, Params, HISTORY_AHEAD};
use crate::recent::RECENT_VICTIM_WORDS;
use crate::window::WINDOW_SLOT_WORDS;
use core::ops::Range;

/// The offsets of every storage region, for one validated [`Params`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub exec_way_words: usize,
    pub exec_sets: usize,
    pub exec: Range<usize>,
    pub entry_words: usize,
    pub table_words: usize,
    pub tables: Range<usize>,
    pub window_slots: usize,
    pub window: Range<usize>,
    pub frontier: Range<usize>,
    pub ledger_index_slots: usize,
    pub ledger_slots: Range<usize>,
    pub ledger_index: Range<usize>,
    /// Recently pre-evicted blocks, direct-mapped, to notice re-faults.
    pub victims: Range<usize>,
    /// Transparent mode's history: entries, then its index (one word per
    /// entry). Empty in execution-id mode.
    pub history: Range<usize>,
    pub history_index: Range<usize>,
    pub total: usize,
}

impl Layout {
    fn new(p: &Params) -> Layout {
        let exec_way_words = EXEC_WAY_HEADER + EXEC_RECORD_WORDS * p.exec_records as usize;
        let exec_sets = (p.exec_ids as usize) / EXEC_WAYS;
        let exec_len = exec_sets * EXEC_WAYS * exec_way_words;
        let entry_words = ENTRY_HEADER + p.succs as usize;
        let table_words = TABLE_HEADER + p.rows as usize * p.assoc as usize * entry_words;
        let tables_len = p.tables() as usize * table_words;
        // Twice the window, rounded to a power of two, keeps linear probing
        // short. Transparent mode's history window also claims the resident
        // blocks it passes, up to `HISTORY_AHEAD` windows ahead: four times
        // that, so that a new generation (which claims those again) is rare.
        let window_slots = match p.mode {
            Mode::ExecId => 2 * p.window_blocks as usize,
            Mode::Transparent => 4 * HISTORY_AHEAD as usize * p.history_window() as usize,
        }
        .next_power_of_two();
        let window_len = window_slots * WINDOW_SLOT_WORDS;
        let frontier_len = p.window_blocks as usize;
        let ledger_slots_len = p.max_resident_blocks as usize * LEDGER_SLOT_WORDS;
        let ledger_index_slots = (2 * p.max_resident_blocks as usize).next_power_of_two();

        let mut at = 0;
        let mut take = |len: usize| {
            let r = at..at + len;
            at += len;
            r
        };
        let exec = take(exec_len);
        let tables = take(tables_len);
        let window = take(window_len);
        let frontier = take(frontier_len);
        let ledger_slots = take(ledger_slots_len);
        let ledger_index = take(ledger_index_slots);
        // Recent victims: (block, victim count when it was chosen) per slot.
        let victims = take(RECENT_VICTIM_WORDS * window_slots);
        let history_entries = p.history_entries() as usize;
        let history = take(history_entries * HISTORY_ENTRY_WORDS);
        let history_index = take(history_entries);
        Layout {
            exec_way_words,
            exec_sets,
            exec,
            entry_words,
            table_words,
            tables,
            window_slots,
            window,
            frontier,
            ledger_index_slots,
            ledger_slots,
            ledger_index,
            victims,
            history,
            history_index,
            total: at,
        }
    }
}

impl Params {
    /// The storage layout these parameters need.
    ///
    /// Only meaningful for validated parameters.
    pub fn layout(&self) -> Layout {
        Layout::new(self)
    }

    /// Storage words (u64) the engine needs: allocate this many and hand them
    /// to [`crate::Engine::new`].
    pub fn storage_words(&self) -> usize {
        self.layout().total
    }

    /// Bytes of table storage (the engine's whole memory footprint).
    pub fn storage_bytes(&self) -> usize {
        self.storage_words() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_regions_are_disjoint_and_cover_total() {
        let l = Params::DEEPUM.layout();
        let regions = [
            &l.exec,
            &l.tables,
            &l.window,
            &l.frontier,
            &l.ledger_slots,
            &l.ledger_index,
            &l.victims,
            &l.history,
            &l.history_index,
        ];
        let mut at = 0;
        for r in regions {
            assert_eq!(r.start, at);
            at = r.end;
        }
        assert_eq!(at, l.total);
    }
}
