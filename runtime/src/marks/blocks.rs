//! Sets of 2 MB block numbers as disjoint ranges, and the rounding of byte
//! ranges to blocks the daemon uses (daemon/src/userspace/marks.rs):
//! inward for dead marks, outward for alive ones.

use std::collections::BTreeMap;
use std::ops::Range;

/// log2 of the block size (2 MB, prescient_core::BLOCK_BYTES).
pub const BLOCK_SHIFT: u32 = 21;

/// The blocks wholly inside `[addr, addr + len)` (may be empty).
pub fn inward(addr: u64, len: u64) -> Range<u64> {
    let end = addr.saturating_add(len);
    let lo = addr.div_ceil(1 << BLOCK_SHIFT);
    let hi = end >> BLOCK_SHIFT;
    lo..hi.max(lo)
}

/// Every block `[addr, addr + len)` touches (empty when `len` is 0).
pub fn outward(addr: u64, len: u64) -> Range<u64> {
    if len == 0 {
        return 0..0;
    }
    let end = addr.saturating_add(len);
    (addr >> BLOCK_SHIFT)..end.div_ceil(1 << BLOCK_SHIFT)
}

/// A range of blocks as the `[addr, len]` pair of a mark request.
pub fn as_bytes(r: &Range<u64>) -> [u64; 2] {
    [r.start << BLOCK_SHIFT, (r.end - r.start) << BLOCK_SHIFT]
}

/// Disjoint block ranges, by start.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    by_start: BTreeMap<u64, u64>,
}

impl Blocks {
    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// Number of blocks in the set.
    pub fn count(&self) -> u64 {
        self.by_start.iter().map(|(s, e)| e - s).sum()
    }

    /// Adds `r` (what it overlaps is taken out first, so ranges stay disjoint).
    pub fn insert(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        self.take(r.clone());
        self.by_start.insert(r.start, r.end);
    }

    /// Removes the part of the set inside `r` and returns it, in order.
    pub fn take(&mut self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        if r.is_empty() {
            return out;
        }
        // The range starting before r.start may reach into r.
        let first = self
            .by_start
            .range(..r.start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(r.start);
        let hits: Vec<(u64, u64)> = self
            .by_start
            .range(first..r.end)
            .map(|(&s, &e)| (s, e))
            .filter(|&(_, e)| e > r.start)
            .collect();
        for (s, e) in hits {
            self.by_start.remove(&s);
            if s < r.start {
                self.by_start.insert(s, r.start);
            }
            if e > r.end {
                self.by_start.insert(r.end, e);
            }
            out.push(s.max(r.start)..e.min(r.end));
        }
        out
    }

    /// Whether any block of `r` is in the set.
    pub fn overlaps(&self, r: &Range<u64>) -> bool {
        if r.is_empty() {
            return false;
        }
        let before = self.by_start.range(..r.start).next_back();
        before.is_some_and(|(_, &e)| e > r.start) || self.by_start.range(r.clone()).next().is_some()
    }

    /// The ranges, in order.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.by_start.iter().map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MB2: u64 = 1 << BLOCK_SHIFT;

    #[test]
    fn rounding_matches_the_daemons() {
        // daemon marks.rs test: 1 MB into block 1 .. 1 MB into block 4.
        assert_eq!(inward(MB2 + (1 << 20), 3 * MB2), 2..4);
        assert_eq!(outward(MB2 + (1 << 20), 3 * MB2), 1..5);
        assert!(inward(MB2 + 4096, 8192).is_empty());
        assert_eq!(outward(MB2 + 4096, 8192), 1..2);
        assert_eq!(inward(0, MB2), 0..1);
        assert_eq!(outward(0, MB2), 0..1);
        assert!(outward(5, 0).is_empty());
        assert_eq!(as_bytes(&(2..5)), [2 * MB2, 3 * MB2]);
    }

    proptest! {
        #[test]
        fn take_returns_exactly_the_overlap(
            ins in proptest::collection::vec((0u64..64, 1u64..8), 0..12),
            t in (0u64..70, 0u64..20),
        ) {
            let mut s = Blocks::default();
            let mut model = [false; 96];
            for (a, l) in ins {
                s.insert(a..a + l);
                for b in a..a + l { model[b as usize] = true; }
            }
            let had = s.overlaps(&(t.0..t.0 + t.1));
            let got = s.take(t.0..t.0 + t.1);
            prop_assert_eq!(had, !got.is_empty());
            let mut took = [false; 96];
            for r in &got { for b in r.clone() { took[b as usize] = true; } }
            for b in 0..96u64 {
                let inside = (t.0..t.0 + t.1).contains(&b);
                prop_assert_eq!(took[b as usize], inside && model[b as usize]);
            }
            let overlapped = model[t.0 as usize..(t.0 + t.1) as usize].iter().any(|&x| x);
            prop_assert_eq!(!got.is_empty(), overlapped);
            let left: Vec<u64> = s.ranges().flatten().collect();
            for b in 0..96u64 {
                let inside = (t.0..t.0 + t.1).contains(&b);
                prop_assert_eq!(left.contains(&b), model[b as usize] && !inside);
            }
        }
    }
}
