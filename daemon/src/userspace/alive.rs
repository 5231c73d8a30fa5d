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
//! # Discarded blocks come back before the reply (`open_populating`)
//! A block discarded with UVM_DISCARD+UNMAP has no pages anywhere. If the
//! GPU touches it first, the driver maps the pages its fault brings in
//! around the faulting one read-only (uvm_va_block.c: "discarded pages are
//! only mapped as RO on read faults", the fault's prefetch region counting
//! as a read), and each of those pages then takes a write-permission fault
//! of its own: about 350 a block, serviced one replay at a time (GPU runs
//! 156-159: 2-12k such faults a step, 86k in a 2.6 s step, none with
//! discards off). UVM_MIGRATE to the GPU instead populates the block with
//! every page writable and no copy. So the gate keeps the set of blocks
//! the backend discarded (`Guard::discarded`, under the same lock as the
//! discard), and an alive mark takes its discarded blocks out of it and
//! has them populated (the backend's `Populate`) before it is answered,
//! that is before the allocator hands the memory to a kernel. The backend
//! then counts them on the GPU (`marks::Mark::populated`) and makes room
//! for them after the fact. The set is advice: a block in it that is no
//! longer discarded is migrated like a prefetch (no data is at risk in a
//! UVM_MIGRATE), and a populate that fails leaves the block to the
//! backend's refetch.
//!
//! # Bounded
//! Entries are the alive marks queued for the backend (at most
//! `marks::QUEUE`) plus one revocation per closed connection, each of at
//! most `marks::MAX_RANGES` ranges; `guard` merges them once per discard
//! run (a `RangeSet`), and each block is then one lookup. The discarded
//! set holds at most one entry per block of the process's managed memory
//! (`MAX_DISCARDED`, beyond which blocks are not recorded: they come back
//! through the backend's refetch as before).

use super::ranges::RangeSet;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// The most discarded blocks the gate records (4 TiB of 2 MB blocks).
const MAX_DISCARDED: usize = 1 << 21;

/// The most blocks one populate call brings back: the allocator waits for
/// them (an ASYNC UVM_MIGRATE takes about 32 us a block, GPU run 57).
const POPULATE_RUN: u64 = 64;

/// Brings `count` discarded blocks from `first` back to the GPU with no
/// copy (the backend's UVM_MIGRATE); true when the driver did.
pub type Populate = Arc<dyn Fn(u64, u64) -> bool + Send + Sync>;

/// One process's gate, shared by its marks senders and its backend thread.
#[derive(Clone, Default)]
pub struct AliveGate(Arc<Mutex<Pending>>, Arc<AliveTimes>);

/// Where an alive mark's answer waits inside prescientd: for the gate
/// (a discard run holding it) and for its populates; nanoseconds and
/// marks, summed (`Snapshot::alive_gate_wait_s`, `alive_populate_s`).
#[derive(Default)]
pub struct AliveTimes {
    pub marks: AtomicU64,
    pub gate_wait_ns: AtomicU64,
    pub populate_ns: AtomicU64,
}

#[derive(Default)]
struct Pending {
    next_id: u64,
    marks: HashMap<u64, Vec<Range<u64>>>,
    /// Blocks discarded and not brought back since (advice: module comment).
    discarded: HashSet<u64>,
    /// How an alive mark brings its discarded blocks back; None: it leaves
    /// them to the backend's refetch (no backend yet, or several GPUs).
    populate: Option<Populate>,
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
        self.lock_within(wait)
            .map(|mut p| Self::insert(&mut p, blocks))
    }

    /// The lock, waiting at most `wait` for a discard in flight.
    fn lock_within(&self, wait: Duration) -> Option<MutexGuard<'_, Pending>> {
        let end = Instant::now() + wait;
        loop {
            match self.0.try_lock() {
                Ok(p) => return Some(p),
                Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() >= end => return None,
                // A discard runs one ioctl at a time (discard.rs): short.
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(20)),
            }
        }
    }

    /// `open_within`, and the mark's blocks dropped from the discarded
    /// record (memory going back to the driver: nothing will bring them
    /// back, and a stale entry would cost a populate of someone else's
    /// memory at the same address later).
    pub fn open_forgetting(&self, blocks: Vec<Range<u64>>, wait: Duration) -> Option<u64> {
        // Taken out of the record and not brought back: forgotten.
        let (id, _forgotten, _) = Self::insert_taking(&mut *self.lock_within(wait)?, blocks);
        Some(id)
    }

    /// `open_within`, and the mark's discarded blocks brought back to the
    /// GPU before it returns (module comment): the id and the blocks the
    /// populate brought back, in order.
    pub fn open_populating(
        &self,
        blocks: Vec<Range<u64>>,
        wait: Duration,
    ) -> Option<(u64, Vec<u64>)> {
        let t = Instant::now();
        // The guard is a temporary: the lock is released here.
        let (id, mut taken, populate) = Self::insert_taking(&mut *self.lock_within(wait)?, blocks);
        let gated = Instant::now();
        self.1.marks.fetch_add(1, Ordering::Relaxed);
        self.1
            .gate_wait_ns
            .fetch_add(nanos(gated - t), Ordering::Relaxed);
        // Outside the lock: the mark holds the blocks, so no discard of
        // them can start while they come back.
        let Some(populate) = populate else {
            return Some((id, Vec::new()));
        };
        taken.sort_unstable();
        let mut back = Vec::with_capacity(taken.len());
        for (first, count) in super::migrator::runs(taken.iter().copied(), POPULATE_RUN) {
            if populate(first, count) {
                back.extend(first..first + count);
            }
        }
        if !taken.is_empty() {
            self.1
                .populate_ns
                .fetch_add(nanos(gated.elapsed()), Ordering::Relaxed);
        }
        Some((id, back))
    }

    /// The alive marks' waits so far (`AliveTimes`).
    pub fn times(&self) -> &AliveTimes {
        &self.1
    }

    /// `insert`, taking the mark's blocks out of the discarded set.
    fn insert_taking(
        p: &mut Pending,
        blocks: Vec<Range<u64>>,
    ) -> (u64, Vec<u64>, Option<Populate>) {
        let populate = p.populate.clone();
        let mut taken = Vec::new();
        if populate.is_some() && !p.discarded.is_empty() {
            for b in blocks.iter().flat_map(|r| r.clone()) {
                if p.discarded.remove(&b) {
                    taken.push(b);
                }
            }
        }
        (Self::insert(p, blocks), taken, populate)
    }

    /// Sets how alive marks bring discarded blocks back (None: they don't;
    /// the recorded blocks are forgotten then, as nobody would use them).
    pub fn set_populate(&self, populate: Option<Populate>) {
        let mut p = self.lock();
        if populate.is_none() {
            p.discarded = HashSet::new();
        }
        p.populate = populate;
    }

    /// Block `b` is no longer discarded (the GPU faulted on it, or the
    /// backend brought it back itself).
    pub fn forget(&self, b: u64) {
        let mut p = self.lock();
        if !p.discarded.is_empty() {
            p.discarded.remove(&b);
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
        Guard { lock: p, held }
    }
}

/// The gate held for a discard: alive marks wait until it is dropped.
pub struct Guard<'a> {
    lock: MutexGuard<'a, Pending>,
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

    /// Records `blocks` as discarded (the UVM_DISCARD returned while this
    /// guard was held), while someone can bring them back.
    pub fn discarded(&mut self, blocks: impl IntoIterator<Item = u64>) {
        let p = &mut *self.lock;
        if p.populate.is_none() {
            return;
        }
        for b in blocks {
            if p.discarded.len() >= MAX_DISCARDED {
                break;
            }
            p.discarded.insert(b);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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

    /// The populate calls a double saw: (first block, count).
    type Calls = Arc<Mutex<Vec<(u64, u64)>>>;

    /// A populate double that records its calls and refuses block 13.
    fn recording() -> (Populate, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = calls.clone();
        let p: Populate = Arc::new(move |first, count| {
            c.lock().unwrap().push((first, count));
            !(first..first + count).contains(&13)
        });
        (p, calls)
    }

    /// Blocks recorded under the guard come back with the alive mark that
    /// names them, in runs, once; a refused run stays with the backend.
    #[test]
    fn an_alive_mark_brings_back_its_discarded_blocks_before_it_returns() {
        let g = AliveGate::default();
        let (p, calls) = recording();
        g.set_populate(Some(p));
        g.guard().discarded([4, 5, 6, 9, 13]);
        let (id, back) = g
            .open_populating(vec![3..7, 9..10], Duration::from_millis(30))
            .unwrap();
        assert_eq!(back, [4, 5, 6, 9]);
        assert_eq!(*calls.lock().unwrap(), [(4, 3), (9, 1)]);
        assert!(g.guard().holds(5), "held like any alive mark");
        g.close(id);
        // Taken once: a second mark finds nothing to bring back.
        let (_, back) = g
            .open_populating(vec![3..7], Duration::from_millis(30))
            .unwrap();
        assert!(back.is_empty());
        // 13's populate fails: not reported, and not recorded any more.
        let (_, back) = g
            .open_populating(vec![13..14], Duration::from_millis(30))
            .unwrap();
        assert!(back.is_empty());
        assert_eq!(calls.lock().unwrap().last(), Some(&(13, 1)));
        let (_, back) = g
            .open_populating(vec![13..14], Duration::from_millis(30))
            .unwrap();
        assert!(back.is_empty());
        assert_eq!(calls.lock().unwrap().len(), 3);
    }

    /// An alive mark's wait for a discard run holding the gate is counted,
    /// and so are the marks; a mark with nothing to bring back adds no
    /// populate time.
    #[test]
    fn alive_marks_count_their_wait_for_the_gate() {
        let g = AliveGate::default();
        let hold = Duration::from_millis(20);
        std::thread::scope(|s| {
            let guard = g.guard();
            let (started_tx, started) = std::sync::mpsc::channel();
            let g = &g;
            let waiter = s.spawn(move || {
                let t = Instant::now();
                started_tx.send(()).unwrap();
                let opened = g.open_populating(vec![1..2], Duration::from_secs(5));
                (opened, t.elapsed())
            });
            started.recv().unwrap();
            std::thread::sleep(hold);
            drop(guard);
            let (opened, waited) = waiter.join().unwrap();
            assert!(opened.is_some());
            // Counted: at least the hold, at most what the waiter saw.
            let counted = g.times().gate_wait_ns.load(Ordering::Relaxed);
            assert!(counted <= nanos(waited), "{counted} > {waited:?}");
            assert!(
                counted >= nanos(hold) / 2,
                "{counted} ns for a {hold:?} hold"
            );
        });
        let t = g.times();
        assert_eq!(t.marks.load(Ordering::Relaxed), 1);
        assert_eq!(t.populate_ns.load(Ordering::Relaxed), 0);
    }

    /// Without a populate nothing is recorded or brought back; forgetting a
    /// block or turning the populate off drops what was recorded.
    #[test]
    fn discarded_blocks_are_recorded_only_while_someone_populates() {
        let g = AliveGate::default();
        g.guard().discarded([1, 2]);
        let (p, calls) = recording();
        g.set_populate(Some(p.clone()));
        let (_, back) = g
            .open_populating(vec![1..3], Duration::from_millis(30))
            .unwrap();
        assert!(back.is_empty(), "recorded before anyone could populate");
        g.guard().discarded([1, 2, 3]);
        g.forget(2);
        let (_, back) = g
            .open_populating(vec![1..3], Duration::from_millis(30))
            .unwrap();
        assert_eq!(back, [1]);
        g.guard().discarded([7]);
        g.set_populate(None);
        g.set_populate(Some(p));
        let (_, back) = g
            .open_populating(vec![7..8], Duration::from_millis(30))
            .unwrap();
        assert!(back.is_empty());
        assert_eq!(*calls.lock().unwrap(), [(1, 1)]);
    }

    /// The populate runs with the gate unlocked: a discard of other blocks
    /// (or another mark) need not wait for it.
    #[test]
    fn the_populate_runs_outside_the_lock() {
        let g = AliveGate::default();
        let free = Arc::new(AtomicBool::new(false));
        let (g2, f2) = (g.clone(), free.clone());
        g.set_populate(Some(Arc::new(move |_, _| {
            f2.store(g2.0.try_lock().is_ok(), Ordering::SeqCst);
            true
        })));
        g.guard().discarded([2]);
        let (_, back) = g
            .open_populating(vec![2..3], Duration::from_millis(30))
            .unwrap();
        assert_eq!(back, [2]);
        assert!(free.load(Ordering::SeqCst));
    }

    /// A mark waits for a discard in flight, and sees what it discarded.
    #[test]
    fn a_block_discarded_while_the_mark_waited_comes_back_with_it() {
        let g = AliveGate::default();
        let (p, _) = recording();
        g.set_populate(Some(p));
        let mut guard = g.guard();
        let t = {
            let g = g.clone();
            std::thread::spawn(move || g.open_populating(vec![8..9], Duration::from_secs(5)))
        };
        std::thread::sleep(Duration::from_millis(20));
        guard.discarded([8]);
        drop(guard);
        let (_, back) = t.join().unwrap().unwrap();
        assert_eq!(back, [8]);
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
