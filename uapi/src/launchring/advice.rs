//! The host-advice table at the ring's end: the byte ranges the process
//! itself advised to stay in host memory (`cudaMemAdvise` /
//! `cuMemAdvise` SetPreferredLocation to the host), so that prescientd
//! leaves them there instead of prefetching them to the GPU.
//!
//! Why: prescientd migrates a launch's footprint with UVM_MIGRATE, which
//! moves pages whatever their preferred location, and it cannot read
//! another process's advice from the driver (UVM has no call that returns
//! a range's policy). A user who kept a buffer in host memory on purpose
//! (FDTD-2D with two fields advised by hand: 155.6 ms a step under the
//! driver, 182.6 under Prescient, GPU run 125) lost that choice.
//!
//! # Layout (words from [`ADVICE_AT`])
//! - word 0: the sequence, odd while the writer writes the table, even
//!   once it is whole (a seqlock: one writer at a time, the runtime's
//!   lock held);
//! - word 1: ranges in the table (at most [`ADVICE_SLOTS`]); word 2:
//!   ranges the process advised beyond them, left out;
//! - words 8..: [`ADVICE_SLOTS`] pairs `[start, end)` of byte addresses,
//!   ascending and disjoint as the writer keeps them.
//!
//! The reader takes a table only if the sequence was even and unchanged
//! across its copy, and every range in it non-empty: the process's memory
//! is not trusted, so a torn or absurd table is refused, never used.

use super::{Ring, CAPACITY, HEADER_WORDS, RECORD_WORDS};
use core::sync::atomic::{fence, Ordering};

/// Ranges the table holds at most.
pub const ADVICE_SLOTS: usize = 64;
/// Words of the table.
pub const ADVICE_WORDS: usize = 8 + 2 * ADVICE_SLOTS;
/// The table's first word in the ring.
pub const ADVICE_AT: usize = HEADER_WORDS + CAPACITY * RECORD_WORDS;
const A_SEQ: usize = ADVICE_AT;
const A_COUNT: usize = ADVICE_AT + 1;
const A_LEFT_OUT: usize = ADVICE_AT + 2;
const A_SLOTS: usize = ADVICE_AT + 8;

/// A whole table as the reader copied it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAdvice {
    /// The sequence it was read at (a new table has a new one).
    pub seq: u64,
    /// `[start, end)` byte ranges; the first `n` are in use.
    pub ranges: [(u64, u64); ADVICE_SLOTS],
    pub n: usize,
    /// Ranges the process advised beyond the table's room.
    pub left_out: u64,
}

impl HostAdvice {
    /// The ranges in use.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges[..self.n]
    }
}

impl Ring<'_> {
    /// Writes the table (writer side, one writer at a time): the first
    /// [`ADVICE_SLOTS`] of `ranges`, the rest counted with `left_out`.
    pub fn publish_host_advice(&self, ranges: &[(u64, u64)], left_out: u64) {
        let seq = &self.words[A_SEQ];
        let s = seq.load(Ordering::Relaxed) & !1;
        seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let n = ranges.len().min(ADVICE_SLOTS);
        for (i, &(start, end)) in ranges[..n].iter().enumerate() {
            self.words[A_SLOTS + 2 * i].store(start, Ordering::Relaxed);
            self.words[A_SLOTS + 2 * i + 1].store(end, Ordering::Relaxed);
        }
        self.words[A_COUNT].store(n as u64, Ordering::Relaxed);
        let more = (ranges.len() - n) as u64;
        (self.words[A_LEFT_OUT]).store(left_out.saturating_add(more), Ordering::Relaxed);
        seq.store(s + 2, Ordering::Release);
    }

    /// The table, if it is whole, valid, and not the one read at `last`
    /// (None also while the writer writes it: the next poll takes it).
    pub fn host_advice(&self, last: Option<u64>) -> Option<HostAdvice> {
        let seq = &self.words[A_SEQ];
        let s = seq.load(Ordering::Acquire);
        if s & 1 == 1 || Some(s) == last {
            return None;
        }
        let n = self.words[A_COUNT].load(Ordering::Relaxed);
        if n > ADVICE_SLOTS as u64 {
            return None;
        }
        let mut t = HostAdvice {
            seq: s,
            ranges: [(0, 0); ADVICE_SLOTS],
            n: n as usize,
            left_out: self.words[A_LEFT_OUT].load(Ordering::Relaxed),
        };
        for (i, r) in t.ranges[..t.n].iter_mut().enumerate() {
            *r = (
                self.words[A_SLOTS + 2 * i].load(Ordering::Relaxed),
                self.words[A_SLOTS + 2 * i + 1].load(Ordering::Relaxed),
            );
        }
        fence(Ordering::Acquire);
        let whole = seq.load(Ordering::Relaxed) == s;
        (whole && t.ranges().iter().all(|&(a, b)| a < b)).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ring, RING_WORDS};
    use super::*;
    use core::sync::atomic::AtomicU64;
    use std::vec::Vec;

    fn words() -> Vec<AtomicU64> {
        (0..RING_WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    /// A table written is read once, whole; a new one again; one past the
    /// slots keeps the first 64 and counts the rest.
    #[test]
    fn a_table_is_read_once_per_publication_and_bounded() {
        let w = words();
        let r = Ring::new(&w).unwrap();
        let first = r.host_advice(None).expect("the empty table at sequence 0");
        assert_eq!((first.n, first.seq), (0, 0));
        assert_eq!(r.host_advice(Some(0)), None, "nothing new");
        r.publish_host_advice(&[(4096, 8192), (1 << 30, 2 << 30)], 0);
        let t = r.host_advice(Some(first.seq)).expect("published");
        assert_eq!(t.ranges(), [(4096, 8192), (1 << 30, 2 << 30)]);
        assert_eq!(r.host_advice(Some(t.seq)), None);
        let many: Vec<(u64, u64)> = (0..70).map(|i| (i * 100, i * 100 + 50)).collect();
        r.publish_host_advice(&many, 1);
        let t = r.host_advice(Some(t.seq)).unwrap();
        assert_eq!((t.n, t.left_out), (ADVICE_SLOTS, 7));
        assert_eq!(t.ranges()[63], (6300, 6350));
    }

    /// A table the writer is writing (odd sequence), rewritten during the
    /// copy, with an absurd count or an empty range is refused.
    #[test]
    fn torn_or_absurd_tables_are_refused() {
        let w = words();
        let r = Ring::new(&w).unwrap();
        r.publish_host_advice(&[(10, 20)], 0);
        w[A_SEQ].store(3, Ordering::Relaxed);
        assert_eq!(r.host_advice(None), None, "being written");
        w[A_SEQ].store(4, Ordering::Relaxed);
        w[A_COUNT].store(ADVICE_SLOTS as u64 + 1, Ordering::Relaxed);
        assert_eq!(r.host_advice(None), None, "count past the slots");
        w[A_COUNT].store(1, Ordering::Relaxed);
        w[A_SLOTS + 1].store(10, Ordering::Relaxed);
        assert_eq!(r.host_advice(None), None, "an empty range");
        w[A_SLOTS + 1].store(20, Ordering::Relaxed);
        assert_eq!(r.host_advice(None).unwrap().ranges(), [(10, 20)]);
    }

    /// The table lies past the last record: writing every record leaves
    /// it as published.
    #[test]
    fn records_never_overwrite_the_table() {
        let w = words();
        let r = Ring::new(&w).unwrap();
        r.init(1);
        r.publish_host_advice(&[(1, 2)], 0);
        let mut rec = super::super::Record::default();
        rec.push(5, 1);
        for _ in 0..CAPACITY {
            assert!(r.push(&rec));
        }
        assert_eq!(r.host_advice(None).unwrap().ranges(), [(1, 2)]);
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Whatever the process wrote into the table's words, the reader
        /// never panics and takes only a table of at most 64 non-empty
        /// ranges, read at an even sequence.
        #[test]
        fn any_table_words_are_read_safely(
            seq in any::<u64>(),
            count in prop_oneof![0u64..=70, any::<u64>()],
            slots in proptest::collection::vec(any::<u64>(), 2 * ADVICE_SLOTS),
        ) {
            let w = words();
            let r = Ring::new(&w).unwrap();
            w[A_SEQ].store(seq, Ordering::Relaxed);
            w[A_COUNT].store(count, Ordering::Relaxed);
            for (i, &x) in slots.iter().enumerate() {
                w[A_SLOTS + i].store(x, Ordering::Relaxed);
            }
            if let Some(t) = r.host_advice(None) {
                prop_assert!(t.seq.is_multiple_of(2) && t.seq == seq);
                prop_assert!(t.n as u64 == count && t.n <= ADVICE_SLOTS);
                prop_assert!(t.ranges().iter().all(|&(a, b)| a < b));
            }
        }

        /// Any list of non-empty ranges published is read back as its
        /// first 64, the rest counted, at a new even sequence each time.
        #[test]
        fn published_tables_round_trip(
            lists in proptest::collection::vec(
                proptest::collection::vec((0u64..1 << 40, 1u64..1 << 30), 0..80), 1..4),
        ) {
            let w = words();
            let r = Ring::new(&w).unwrap();
            let mut last = r.host_advice(None).map(|t| t.seq);
            for l in lists {
                let ranges: Vec<(u64, u64)> = l.iter().map(|&(a, n)| (a, a + n)).collect();
                r.publish_host_advice(&ranges, 0);
                let t = r.host_advice(last).expect("a new table");
                prop_assert!(t.seq.is_multiple_of(2) && Some(t.seq) != last);
                prop_assert_eq!(t.ranges(), &ranges[..ranges.len().min(ADVICE_SLOTS)]);
                prop_assert_eq!(t.left_out, ranges.len().saturating_sub(ADVICE_SLOTS) as u64);
                last = Some(t.seq);
            }
        }
    }
}
