//! A set of block numbers kept as disjoint ranges: the dead blocks one
//! connection has marked and not marked alive again (marks.rs), the
//! blocks the alive gate holds (alive.rs).

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent ranges, by start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    by_start: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// How many ranges the set holds (what bounds its memory).
    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// Adds `r`, merging it with the ranges it touches.
    pub fn insert(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let (mut s, mut e) = (r.start, r.end);
        let touching: Vec<(u64, u64)> = self
            .by_start
            .range(..=e)
            .rev()
            .take_while(|(_, &end)| end >= s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in touching {
            self.by_start.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.by_start.insert(s, e);
    }

    /// Removes `r`, splitting the ranges it cuts.
    pub fn remove(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let cut: Vec<(u64, u64)> = self
            .by_start
            .range(..r.end)
            .rev()
            .take_while(|(_, &end)| end > r.start)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in cut {
            self.by_start.remove(&a);
            if a < r.start {
                self.by_start.insert(a, r.start);
            }
            if b > r.end {
                self.by_start.insert(r.end, b);
            }
        }
    }

    /// Whether block `b` is in the set.
    pub fn contains(&self, b: u64) -> bool {
        (self.by_start.range(..=b).next_back()).is_some_and(|(_, &end)| b < end)
    }

    /// The ranges, in order; the set is left empty.
    pub fn take(&mut self) -> Vec<Range<u64>> {
        std::mem::take(&mut self.by_start)
            .into_iter()
            .map(|(s, e)| s..e)
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn inserts_merge_and_removes_split() {
        let mut s = RangeSet::default();
        s.insert(10..20);
        s.insert(30..40);
        s.insert(20..25); // adjacent: merged
        assert_eq!(s.len(), 2);
        s.insert(24..31); // bridges both
        assert_eq!(s.clone().take(), vec![10..40]);
        s.remove(15..18);
        assert_eq!(s.clone().take(), vec![10..15, 18..40]);
        s.remove(0..12);
        s.remove(35..100);
        assert_eq!(s.clone().take(), vec![12..15, 18..35]);
        s.remove(0..100);
        assert!(s.is_empty());
    }

    #[test]
    fn contains_says_which_blocks_are_in() {
        let mut s = RangeSet::default();
        s.insert(10..20);
        s.insert(30..31);
        let got: Vec<u64> = (0..40).filter(|&b| s.contains(b)).collect();
        assert_eq!(got, [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 30]);
    }
}
