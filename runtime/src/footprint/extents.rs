//! Where a pointer argument's data lies: the managed allocations the
//! runtime made (alloc.rs) and, within them, the live blocks PyTorch's
//! caching allocator handed out (its ALLOC events, marks/mod.rs). A
//! pointer into a live block stands for that block. A pointer into an
//! allocation the job made itself with `cuMemAllocManaged`, with no live
//! block known in it, stands for the allocation from the pointer on (a
//! program written for managed memory allocates its buffers, or a
//! pluggable allocator its tensors, one by one: GPU run 82 found every one
//! of train.py's footprints guessed, and dnn's first kernel seen as 64 MB
//! of its 1.25 GiB). Any other pointer into a managed allocation (the
//! runtime's own, which a caching allocator may carve up) stands for the
//! allocation from the pointer on, capped (at [`UNKNOWN_CAP`] unless the
//! launcher says: PRESCIENT_FOOTPRINT_UNKNOWN_BYTES): a guess.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// Bytes a pointer into a managed allocation stands for when no live
/// block is known there: a caching allocator's segment is far larger than
/// most tensors in it (PyTorch's large segments start at 20 MB and grow).
pub const UNKNOWN_CAP: u64 = 64 << 20;
/// Bytes a live block stands for at most (a sanity cap: an argument that
/// is a huge embedding table is prefetched in pieces by the engine).
pub const BLOCK_CAP: u64 = 1 << 30;

/// Start to length, of allocations or of live blocks.
#[derive(Default)]
pub struct Spans(BTreeMap<u64, u64>);

impl Spans {
    /// Adds `[start, start + len)`, replacing what started there.
    pub fn insert(&mut self, start: u64, len: u64) {
        if len > 0 {
            self.0.insert(start, len);
        }
    }

    /// Removes every span that starts inside `[start, start + len)`.
    pub fn remove_within(&mut self, start: u64, len: u64) {
        let gone: Vec<u64> = (self.0.range(start..start.saturating_add(len)))
            .map(|(&s, _)| s)
            .collect();
        for s in gone {
            self.0.remove(&s);
        }
    }

    /// The span that holds `addr`.
    pub fn holding(&self, addr: u64) -> Option<Range<u64>> {
        let (&s, &l) = self.0.range(..=addr).next_back()?;
        (addr < s.saturating_add(l)).then(|| s..s.saturating_add(l))
    }

    /// True if some span starts inside `range`.
    fn any_within(&self, range: Range<u64>) -> bool {
        self.0.range(range).next().is_some()
    }

    fn bounds(&self) -> (u64, u64) {
        let lo = self.0.keys().next().copied().unwrap_or(u64::MAX);
        let hi = (self.0.iter().map(|(s, l)| s + l).max()).unwrap_or(0);
        (lo, hi)
    }
}

/// The process's managed allocations, the starts of those the job made
/// itself, and live blocks.
#[derive(Default)]
pub struct Extents {
    pub managed: Spans,
    pub own: BTreeSet<u64>,
    pub live: Spans,
}

/// What a pointer's extent rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// A live block of a caching allocator.
    Live,
    /// The job's own allocation, with no live block known in it.
    Own,
    /// Neither: the allocation from the pointer on, capped.
    Guess,
}

impl Extents {
    /// The bytes a pointer `addr` stands for, and what that rests on, or
    /// None when it does not point into managed memory; `unknown_cap`:
    /// the bytes from the pointer a guessed extent covers at most (at
    /// least one byte).
    pub fn extent(&self, addr: u64, unknown_cap: u64) -> Option<(Range<u64>, Basis)> {
        let alloc = self.managed.holding(addr)?;
        if let Some(b) = self.live.holding(addr) {
            return Some((
                b.start..b.end.min(b.start.saturating_add(BLOCK_CAP)),
                Basis::Live,
            ));
        }
        // A live block elsewhere in it: the job carves this one up.
        let own = self.own.contains(&alloc.start) && !self.live.any_within(alloc.clone());
        let (cap, basis) = if own {
            (BLOCK_CAP, Basis::Own)
        } else {
            (unknown_cap.max(1), Basis::Guess)
        };
        Some((addr..alloc.end.min(addr.saturating_add(cap)), basis))
    }
}

static EXTENTS: RwLock<Option<Extents>> = RwLock::new(None);
/// The lowest and highest managed address (a word outside is no pointer
/// of ours: most argument words are rejected without the lock).
static LO: AtomicU64 = AtomicU64::new(u64::MAX);
static HI: AtomicU64 = AtomicU64::new(0);

/// Changes the extents; `managed`: the managed allocations changed (the
/// bounds are computed again then only: PyTorch's allocator events come
/// thousands of times a step, its managed allocations rarely).
fn update(managed: bool, f: impl FnOnce(&mut Extents)) {
    let mut g = EXTENTS.write().unwrap_or_else(|e| e.into_inner());
    let e = g.get_or_insert_with(Extents::default);
    f(e);
    if managed {
        let (lo, hi) = e.managed.bounds();
        LO.store(lo, Ordering::Relaxed);
        HI.store(hi, Ordering::Relaxed);
    }
}

/// A managed allocation was made: by the job itself (`own`, its own
/// `cuMemAllocManaged`) or by the runtime in place of device memory.
pub fn managed_allocated(addr: u64, len: u64, own: bool) {
    update(true, |e| {
        e.managed.insert(addr, len);
        // A fresh allocation may reuse the start of one freed earlier.
        e.own.remove(&addr);
        if own {
            e.own.insert(addr);
        }
    });
}

/// A managed allocation goes back to the driver: its blocks go with it.
pub fn managed_freed(addr: u64, len: u64) {
    update(true, |e| {
        e.managed.remove_within(addr, 1);
        e.own.remove(&addr);
        e.live.remove_within(addr, len);
    });
}

/// The caching allocator handed out `[addr, addr + len)`.
pub fn block_allocated(addr: u64, len: u64) {
    update(false, |e| e.live.insert(addr, len));
}

/// The caching allocator freed the block at `addr` (or a whole segment).
pub fn block_freed(addr: u64, len: u64) {
    update(false, |e| e.live.remove_within(addr, len.max(1)));
}

/// Might `w` point into managed memory? (No lock.)
pub fn maybe_managed(w: u64) -> bool {
    w >= LO.load(Ordering::Relaxed) && w < HI.load(Ordering::Relaxed)
}

/// Runs `f` with the extents, unless an allocation holds the lock now (a
/// launch never waits: it goes without a footprint).
pub fn with<R>(f: impl FnOnce(&Extents) -> R) -> Option<R> {
    let g = EXTENTS.try_read().ok()?;
    g.as_ref().map(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_stand_for_their_live_block_else_a_capped_tail() {
        let mut e = Extents::default();
        e.managed.insert(0x1000_0000, 200 << 20);
        e.live.insert(0x1000_0000 + (4 << 20), 3 << 20);
        // Inside the live block (a view at an offset): the whole block.
        let (b, basis) = e.extent(0x1000_0000 + (5 << 20), UNKNOWN_CAP).unwrap();
        assert_eq!(b, 0x1000_0000 + (4 << 20)..0x1000_0000 + (7 << 20));
        assert_eq!(basis, Basis::Live);
        // No block known there: 64 MB from the pointer.
        let (t, basis) = e.extent(0x1000_0000 + (100 << 20), UNKNOWN_CAP).unwrap();
        assert_eq!(t.end - t.start, UNKNOWN_CAP);
        assert_eq!(basis, Basis::Guess);
        let (t, _) = e.extent(0x1000_0000 + (100 << 20), 0).unwrap();
        assert_eq!(t.end - t.start, 1, "at least the pointed-at byte");
        // ... or to the allocation's end.
        let (t, _) = e.extent(0x1000_0000 + (190 << 20), UNKNOWN_CAP).unwrap();
        assert_eq!(t.end, 0x1000_0000 + (200 << 20));
        assert_eq!(e.extent(0x0fff_ffff, UNKNOWN_CAP), None);
        assert_eq!(e.extent(0x1000_0000 + (200 << 20), UNKNOWN_CAP), None);
        e.live.remove_within(0x1000_0000, 200 << 20);
        assert_eq!(
            e.extent(0x1000_0000 + (5 << 20), UNKNOWN_CAP)
                .unwrap()
                .0
                .start,
            0x1000_0000 + (5 << 20)
        );
    }

    /// The job's own allocations stand for themselves from the pointer
    /// on (a buffer, or a pluggable allocator's tensor), capped at
    /// BLOCK_CAP; one a caching allocator carves up (a live block known in
    /// it) is guessed at like the runtime's; a fresh allocation at a
    /// reused address is the runtime's again.
    #[test]
    fn the_jobs_own_allocations_stand_for_themselves() {
        let mut e = Extents::default();
        let (a, big) = (0x1000_0000u64, 0x1_0000_0000u64);
        e.managed.insert(a, 1 << 30);
        e.own.insert(a);
        e.managed.insert(big, 3 << 30);
        e.own.insert(big);
        let (t, basis) = e.extent(a, UNKNOWN_CAP).unwrap();
        assert_eq!((t, basis), (a..a + (1 << 30), Basis::Own));
        let (t, _) = e.extent(a + (1 << 20), UNKNOWN_CAP).unwrap();
        assert_eq!(t, a + (1 << 20)..a + (1 << 30), "from the pointer on");
        let (t, _) = e.extent(big, UNKNOWN_CAP).unwrap();
        assert_eq!(t.end - t.start, BLOCK_CAP);
        e.live.insert(a + (8 << 20), 2 << 20);
        let (t, basis) = e.extent(a, UNKNOWN_CAP).unwrap();
        assert_eq!((t.end - t.start, basis), (UNKNOWN_CAP, Basis::Guess));
        assert_eq!(e.extent(a + (9 << 20), 0).unwrap().1, Basis::Live);
        e.own.remove(&big);
        assert_eq!(e.extent(big, UNKNOWN_CAP).unwrap().1, Basis::Guess);
    }
}
