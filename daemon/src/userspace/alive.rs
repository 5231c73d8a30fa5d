//! The alive gate: blocks a process has marked alive whose mark its
//! backend thread has not applied yet are held out of every discard, so
//! that an alive mark is answered at once instead of after the backend's
//! next turn.
//!
//! Why: an alive mark is a synchronous round trip (the allocator hands the
//! memory out only after the reply, marks.rs), made for every reuse of a
//! block whose dead mark was sent. Waiting for the backend thread's turn
//! cost the bench transformer 34-43 ms of a 144 ms step (GPU run 144,
//! `alive_wait_ms`) and ResNet-50 about 35 ms a step (run 55).
//!
//! # Why no discard can destroy a block once its alive mark is answered
//! - `open` records the blocks under the gate's lock before the mark is
//!   queued and answered;
//! - every UVM_DISCARD runs while its caller holds the same lock
//!   (`guard`, discard.rs), and discards only the blocks the guard does
//!   not hold: a discard in flight when the mark arrives completes before
//!   `open` returns, and none starts on the blocks afterwards;
//! - the backend `close`s an entry only after it has applied its mark, so
//!   from then on its engine no longer has the blocks dead.
//!
//! Entries are counted per mark (a block marked alive, dead and alive
//! again has two), so applying the first alive mark does not release the
//! second.
//!
//! # Bounded
//! Entries are the alive marks queued for the backend (at most
//! `marks::QUEUE`) plus one revocation per closed connection, each of at
//! most `marks::MAX_RANGES` ranges; `guard` merges them once per discard
//! run (a `RangeSet`), and each block is then one lookup.

use super::ranges::RangeSet;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// One process's gate, shared by its marks senders and its backend thread.
#[derive(Clone, Default)]
pub struct AliveGate(Arc<Mutex<Pending>>);

#[derive(Default)]
struct Pending {
    next_id: u64,
    marks: HashMap<u64, Vec<Range<u64>>>,
}

impl AliveGate {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `blocks` out of discards until `close` of the returned id.
    /// Once it returns, no discard of them is in flight and none can start.
    pub fn open(&self, blocks: Vec<Range<u64>>) -> u64 {
        Self::insert(&mut self.lock(), blocks)
    }

    /// `open`, waiting at most `wait` for a discard in flight: None if the
    /// gate stayed held that long (a UVM_DISCARD that does not return),
    /// and then nothing is held.
    pub fn open_within(&self, blocks: Vec<Range<u64>>, wait: Duration) -> Option<u64> {
        let end = Instant::now() + wait;
        loop {
            match self.0.try_lock() {
                Ok(mut p) => return Some(Self::insert(&mut p, blocks)),
                Err(TryLockError::Poisoned(p)) => {
                    return Some(Self::insert(&mut p.into_inner(), blocks))
                }
                Err(TryLockError::WouldBlock) if Instant::now() >= end => return None,
                // A discard runs one ioctl at a time (discard.rs): short.
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(20)),
            }
        }
    }

    fn insert(p: &mut Pending, blocks: Vec<Range<u64>>) -> u64 {
        let id = p.next_id;
        p.next_id += 1;
        p.marks.insert(id, blocks);
        id
    }

    /// The mark `id` was applied (or will never be): its blocks are free
    /// to be discarded again once the engine says they are dead.
    pub fn close(&self, id: u64) {
        self.lock().marks.remove(&id);
    }

    /// Alive marks not applied yet.
    pub fn pending(&self) -> usize {
        self.lock().marks.len()
    }

    /// Locks alive marks out while the caller discards; the guard says
    /// which blocks it must leave alone.
    pub fn guard(&self) -> Guard<'_> {
        let p = self.lock();
        let mut held = RangeSet::default();
        for r in p.marks.values().flatten() {
            held.insert(r.clone());
        }
        Guard { _lock: p, held }
    }
}

/// The gate held for a discard: alive marks wait until it is dropped.
pub struct Guard<'a> {
    _lock: MutexGuard<'a, Pending>,
    /// The held blocks.
    held: RangeSet,
}

impl Guard<'_> {
    /// Whether block `b` is marked alive by a mark not applied yet.
    pub fn holds(&self, b: u64) -> bool {
        self.held.contains(b)
    }

    /// Splits `blocks` into those that may be discarded (kept in place)
    /// and those held alive (returned).
    pub fn take_held(&self, blocks: &mut Vec<u64>) -> Vec<u64> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let (held, free): (Vec<u64>, Vec<u64>) = blocks.iter().partition(|&&b| self.holds(b));
        *blocks = free;
        held
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_block_is_held_until_every_mark_that_holds_it_is_applied() {
        let g = AliveGate::default();
        let a = g.open(vec![3..5]);
        let b = g.open(vec![4..6, 9..10]);
        let held = |g: &AliveGate| (0..12).filter(|&x| g.guard().holds(x)).collect::<Vec<_>>();
        assert_eq!(held(&g), [3, 4, 5, 9]);
        g.close(a);
        assert_eq!(
            held(&g),
            [4, 5, 9],
            "block 4 is still held by the second mark"
        );
        g.close(b);
        assert!(held(&g).is_empty());
        assert_eq!(g.pending(), 0);
    }

    #[test]
    fn take_held_leaves_only_the_blocks_that_may_go() {
        let g = AliveGate::default();
        g.open(vec![10..12]);
        let mut blocks = vec![9, 10, 11, 12];
        assert_eq!(g.guard().take_held(&mut blocks), [10, 11]);
        assert_eq!(blocks, [9, 12]);
    }

    /// A gate held past the wait (a discard that does not return) opens
    /// nothing.
    #[test]
    fn open_within_gives_up_on_a_gate_held_too_long() {
        let g = AliveGate::default();
        let guard = g.guard();
        let t = {
            let g = g.clone();
            std::thread::spawn(move || g.open_within(vec![1..2], Duration::from_millis(30)))
        };
        assert_eq!(t.join().unwrap(), None);
        drop(guard);
        assert_eq!(g.pending(), 0);
        assert!(g
            .open_within(vec![1..2], Duration::from_millis(30))
            .is_some());
    }

    /// A discard in flight (the guard held) makes an alive mark wait; once
    /// the mark is in, a later discard sees its blocks held.
    #[test]
    fn an_alive_mark_waits_for_a_discard_in_flight() {
        let g = AliveGate::default();
        let guard = g.guard();
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let (g, done) = (g.clone(), done.clone());
            std::thread::spawn(move || {
                let id = g.open(vec![7..8]);
                done.store(true, Ordering::SeqCst);
                id
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!done.load(Ordering::SeqCst), "answered while a discard ran");
        drop(guard);
        let id = t.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert!(g.guard().holds(7));
        g.close(id);
        assert!(!g.guard().holds(7));
    }

    proptest! {
        /// `holds` agrees with a plain scan of every open mark's ranges.
        #[test]
        fn holds_agrees_with_a_scan(
            marks in prop::collection::vec(prop::collection::vec((0u64..64, 0u64..8), 0..4), 0..6),
            closed in prop::collection::vec(any::<bool>(), 6),
        ) {
            let g = AliveGate::default();
            let mut open = Vec::new();
            for (i, m) in marks.iter().enumerate() {
                let ranges: Vec<Range<u64>> = m.iter().map(|&(s, l)| s..s + l).collect();
                let id = g.open(ranges.clone());
                if closed[i] {
                    g.close(id);
                } else {
                    open.extend(ranges);
                }
            }
            let guard = g.guard();
            for b in 0..80 {
                prop_assert_eq!(guard.holds(b), open.iter().any(|r| r.contains(&b)), "block {}", b);
            }
        }
    }
}
