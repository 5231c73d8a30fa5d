//! Sequential sweeps (*beyond DeepUM*): a stream detector over faulted
//! blocks, for programs whose footprint inside one kernel exceeds the memory.
//!
//! # Why
//! Transparent mode's history predicts the order a loop touched its blocks
//! in before. Under a residency budget smaller than one kernel's footprint
//! the GPU refaults the same blocks within a kernel (a grid that runs in two
//! waves sweeps its operands twice), the fault order jitters with the warps
//! that wait, and the history loses its place most of the time (H100 runs
//! 22-24: four history misses per hit on the DNN-like loop under half its
//! memory). What stays true is that each operand is swept in ascending
//! address order. A sweep is such a run of faults; ahead of it the blocks
//! that follow are prefetched, as readahead does for files.
//!
//! # State machine of one stream
//! ```text
//!   Free --fault matching no stream--> Tentative (the LRU stream replaced)
//!   Tentative --CONFIRM faults just ahead of it--> Sweeping (depth START_DEPTH)
//!   Sweeping --fault in [last, end) or just past it--> Sweeping (depth doubles
//!       up to the caller's bound; `end` moves to the fault + depth)
//!   Sweeping --offers a block the caller does not know--> Sweeping, `end`
//!       cut there (the end of the allocation: nothing past it is fetched)
//!   any --replaced as least recently used--> Tentative (another fault)
//! ```
//! Blocks prefetched in time never fault, so a sweep leaves *probes*: every
//! (depth / PROBE_PART)-th block it passes is not offered but left to fault,
//! and that fault moves the sweep on while the rest of its depth is still in
//! flight (as the history window's probes do).
//!
//! Work per call is constant (`STREAMS` streams); no allocation, no division.

use crate::{Block, NONE};

/// Streams followed at once (the LRU one is replaced by a new fault).
pub const STREAMS: usize = 8;
/// A fault at most this many blocks past a stream's last fault continues it
/// (warps reach the blocks of a sweep a little out of order; a DNN layer that
/// reads four input blocks per output block advances its input by four).
const GAP: Block = 8;
/// Faults that continue a stream before it prefetches.
const CONFIRM: u32 = 2;
/// Blocks a stream prefetches ahead when confirmed; doubles on each advance.
const START_DEPTH: u32 = 4;
/// Probes per depth.
const PROBE_PART: u32 = 4;
/// Blocks offered between two probes at least.
const MIN_PROBE_GAP: u32 = 2;

#[derive(Clone, Copy, Debug)]
struct Stream {
    /// The last block that faulted in it; NONE for a free slot.
    last: Block,
    /// The next block to offer, and the end of what may be offered
    /// (exclusive).
    next: Block,
    end: Block,
    /// Faults that continued it.
    hits: u32,
    /// Blocks it prefetches ahead of its last fault (0 while tentative).
    depth: u32,
    /// Blocks to offer before the next probe.
    to_probe: u32,
    /// When it last moved (for LRU replacement and for order of offers).
    stamp: u64,
}

const FREE: Stream = Stream {
    last: NONE,
    next: 0,
    end: 0,
    hits: 0,
    depth: 0,
    to_probe: 0,
    stamp: 0,
};

/// What [`Sweeps::next_offer`] hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// Which stream (for [`Sweeps::cut`]).
    pub stream: usize,
    pub block: Block,
    /// Left to fault, not to be prefetched.
    pub probe: bool,
}

/// The streams. Plain data; lives inside the engine.
#[derive(Clone, Debug)]
pub struct Sweeps {
    s: [Stream; STREAMS],
    clock: u64,
}

impl Default for Sweeps {
    fn default() -> Self {
        Self::new()
    }
}

impl Sweeps {
    pub const fn new() -> Self {
        Sweeps {
            s: [FREE; STREAMS],
            clock: 0,
        }
    }

    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// A GPU fault on `b`. `max_depth` bounds how far ahead a stream may
    /// prefetch (blocks, at least 1). Returns true when a sweep moved on
    /// (it may have blocks to offer).
    pub fn fault(&mut self, b: Block, max_depth: u32) -> bool {
        if b == NONE {
            return false;
        }
        self.clock += 1;
        let clock = self.clock;
        let max_depth = max_depth.max(1);
        for s in self.s.iter_mut() {
            if s.last == NONE {
                continue;
            }
            if b <= s.last && b.saturating_add(GAP) >= s.last {
                // A straggler just behind the sweep (or the same block).
                s.stamp = clock;
                return false;
            }
            if b > s.last && b <= s.last.saturating_add(GAP).max(s.end) {
                s.last = b;
                s.hits = s.hits.saturating_add(1);
                s.stamp = clock;
                if s.hits < CONFIRM {
                    return false;
                }
                s.depth = if s.depth == 0 {
                    START_DEPTH
                } else {
                    s.depth.saturating_mul(2)
                }
                .min(max_depth);
                if s.hits == CONFIRM {
                    s.to_probe = (s.depth / PROBE_PART).max(MIN_PROBE_GAP);
                }
                s.next = s.next.max(b + 1);
                s.end = s.end.max(b.saturating_add(1 + s.depth as Block));
                return s.next < s.end;
            }
        }
        // A new stream in the least recently moved slot (free ones first:
        // their stamp is 0).
        let mut lru = 0;
        for i in 1..STREAMS {
            if self.s[i].stamp < self.s[lru].stamp {
                lru = i;
            }
        }
        self.s[lru] = Stream {
            last: b,
            next: b.saturating_add(1),
            end: b.saturating_add(1),
            hits: 0,
            depth: 0,
            to_probe: 0,
            stamp: clock,
        };
        false
    }

    /// The next block to offer: from the stream that moved last. None when
    /// no stream has anything to offer.
    pub fn next_offer(&mut self) -> Option<Offer> {
        let mut best: Option<usize> = None;
        for (i, s) in self.s.iter().enumerate() {
            let offers = s.last != NONE && s.depth > 0 && s.next < s.end;
            if offers && best.is_none_or(|j| self.s[j].stamp < s.stamp) {
                best = Some(i);
            }
        }
        let i = best?;
        let s = &mut self.s[i];
        let block = s.next;
        s.next += 1;
        let probe = s.to_probe == 0;
        if probe {
            s.to_probe = (s.depth / PROBE_PART).max(MIN_PROBE_GAP);
        } else {
            s.to_probe -= 1;
        }
        Some(Offer {
            stream: i,
            block,
            probe,
        })
    }

    /// Stream `stream` offered a block that is not the program's: it ends
    /// there (nothing past it is offered until it faults past it).
    pub fn cut(&mut self, stream: usize, at: Block) {
        if let Some(s) = self.s.get_mut(stream) {
            if s.last != NONE && at < s.end {
                s.end = at.max(s.last.saturating_add(1));
                s.next = s.next.min(s.end);
            }
        }
    }

    /// True when some stream has blocks to offer.
    pub fn pending(&self) -> bool {
        self.s
            .iter()
            .any(|s| s.last != NONE && s.depth > 0 && s.next < s.end)
    }

    /// True when `b` is in a sweep's reach: just behind its last fault
    /// (warps still on it) up to what it may offer. Such blocks are not
    /// pre-evicted.
    pub fn protects(&self, b: Block) -> bool {
        self.s
            .iter()
            .any(|s| s.last != NONE && s.depth > 0 && b < s.end && b.saturating_add(GAP) >= s.last)
    }

    /// Streams that prefetch now.
    pub fn sweeping(&self) -> usize {
        self.s
            .iter()
            .filter(|s| s.last != NONE && s.depth > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    fn offers(s: &mut Sweeps) -> Vec<Offer> {
        let mut v = Vec::new();
        while let Some(o) = s.next_offer() {
            v.push(o);
        }
        v
    }

    #[test]
    fn one_fault_prefetches_nothing() {
        let mut s = Sweeps::new();
        assert!(!s.fault(100, 64));
        assert!(!s.pending());
        assert_eq!(s.next_offer(), None);
        assert!(!s.protects(101));
    }

    #[test]
    fn ascending_faults_prefetch_ahead_with_probes() {
        let mut s = Sweeps::new();
        s.fault(100, 64);
        s.fault(101, 64);
        assert!(s.fault(102, 64), "confirmed after two continuing faults");
        let o = offers(&mut s);
        // Depth 4 beyond 102: 103..=106, the third one a probe.
        assert_eq!(
            o.iter().map(|o| o.block).collect::<Vec<_>>(),
            [103, 104, 105, 106]
        );
        assert_eq!(
            o.iter().map(|o| o.probe).collect::<Vec<_>>(),
            [false, false, true, false]
        );
        assert!(s.protects(103) && s.protects(106) && !s.protects(107));
        assert!(s.protects(95), "warps may still be just behind the sweep");
        // The probe faults: depth doubles, the sweep moves on from 106.
        assert!(s.fault(105, 64));
        let o = offers(&mut s);
        assert_eq!(o.first().map(|o| o.block), Some(107));
        assert_eq!(o.last().map(|o| o.block), Some(105 + 8));
        assert!(o.iter().any(|o| o.probe), "probes keep the sweep moving");
    }

    #[test]
    fn depth_is_bounded_by_the_caller() {
        let mut s = Sweeps::new();
        let mut b = 1000;
        for _ in 0..20 {
            s.fault(b, 16);
            offers(&mut s);
            b += 3;
        }
        let last = b - 3;
        s.fault(b, 16);
        let o = offers(&mut s);
        assert!(
            o.iter().all(|o| o.block > last && o.block <= b + 16),
            "{o:?}"
        );
    }

    #[test]
    fn jittered_order_still_sweeps() {
        // Faults come in sorted batches of four, batches a little out of order.
        let mut s = Sweeps::new();
        let order = [0u64, 2, 1, 3, 6, 4, 5, 7, 9, 8, 11, 10];
        let mut offered = 0;
        for &b in &order {
            s.fault(500 + b, 32);
            offered += offers(&mut s).len();
        }
        assert!(offered >= 8, "{offered}");
    }

    #[test]
    fn scattered_faults_never_prefetch() {
        let mut s = Sweeps::new();
        for i in 0..1000u64 {
            // Strides of 37 blocks: never within GAP of each other.
            s.fault(i * 37 % 4096 + 10_000 * (i % 3), 64);
        }
        assert!(!s.pending());
        assert_eq!(s.sweeping(), 0);
    }

    #[test]
    fn a_cut_stops_offers_at_the_end_of_the_allocation() {
        let mut s = Sweeps::new();
        for b in 10..13 {
            s.fault(b, 64);
        }
        let o = s.next_offer().expect("an offer");
        s.cut(o.stream, o.block + 1);
        let rest = offers(&mut s);
        assert!(rest.is_empty(), "{rest:?}");
        assert!(!s.pending());
    }

    #[test]
    fn eight_streams_at_once_and_the_lru_one_goes() {
        let mut s = Sweeps::new();
        let base = |k: u64| 1_000 + k * 1_000;
        for step in 0..3 {
            for k in 0..STREAMS as u64 {
                s.fault(base(k) + step, 8);
            }
        }
        assert_eq!(s.sweeping(), STREAMS);
        // A ninth stream replaces the first one, the least recently moved.
        s.fault(50_000, 8);
        assert_eq!(s.sweeping(), STREAMS - 1);
        assert!(!s.protects(base(0) + 3));
        assert!(s.protects(base(1) + 3));
    }

    proptest! {
        /// Whatever the faults: offers stay within a stream's reach (never
        /// more than max_depth past a fault the stream saw), and offers run dry
        /// (at most max_depth per fault).
        #[test]
        fn offers_are_bounded(
            faults in prop::collection::vec(0u64..512, 1..300),
            max_depth in 1u32..64,
        ) {
            let mut s = Sweeps::new();
            let mut seen: Vec<u64> = Vec::new();
            for &f in &faults {
                s.fault(f, max_depth);
                seen.push(f);
                let mut k = 0;
                while let Some(o) = s.next_offer() {
                    k += 1;
                    prop_assert!(k <= max_depth as usize + 1, "runs dry");
                    prop_assert!(
                        seen.iter().any(|&x| o.block > x && o.block <= x + max_depth as u64),
                        "{} offered, far from every fault", o.block
                    );
                }
                prop_assert!(!s.pending());
            }
        }
    }
}
