//! Where a pointer argument's data lies: the managed allocations the
//! runtime made (alloc.rs) and, within them, the live blocks PyTorch's
//! caching allocator handed out (its ALLOC events, marks/mod.rs). A
//! pointer into a live block stands for that block; a pointer into a
//! managed allocation with no known block stands for the allocation from
//! the pointer on, capped (at [`UNKNOWN_CAP`] unless the launcher says:
//! PRESCIENT_FOOTPRINT_UNKNOWN_BYTES).

use std::collections::BTreeMap;
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

    fn bounds(&self) -> (u64, u64) {
        let lo = self.0.keys().next().copied().unwrap_or(u64::MAX);
        let hi = (self.0.iter().map(|(s, l)| s + l).max()).unwrap_or(0);
        (lo, hi)
    }
}

/// The process's managed allocations and live blocks.
#[derive(Default)]
pub struct Extents {
    pub managed: Spans,
    pub live: Spans,
}

impl Extents {
    /// The bytes a pointer `addr` stands for (and whether a live block
    /// was known there), or None when it does not point into managed
    /// memory; `unknown_cap`: the bytes from the pointer a pointer with no
    /// known block stands for at most (at least one byte).
    pub fn extent(&self, addr: u64, unknown_cap: u64) -> Option<(Range<u64>, bool)> {
        let alloc = self.managed.holding(addr)?;
        match self.live.holding(addr) {
            Some(b) => Some((b.start..b.end.min(b.start.saturating_add(BLOCK_CAP)), true)),
            None => Some((
                addr..alloc.end.min(addr.saturating_add(unknown_cap.max(1))),
                false,
            )),
        }
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

/// The runtime made a managed allocation.
pub fn managed_allocated(addr: u64, len: u64) {
    update(true, |e| e.managed.insert(addr, len));
}

/// A managed allocation goes back to the driver: its blocks go with it.
pub fn managed_freed(addr: u64, len: u64) {
    update(true, |e| {
        e.managed.remove_within(addr, 1);
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
        let (b, live) = e.extent(0x1000_0000 + (5 << 20), UNKNOWN_CAP).unwrap();
        assert_eq!(b, 0x1000_0000 + (4 << 20)..0x1000_0000 + (7 << 20));
        assert!(live);
        // No block known there: 64 MB from the pointer.
        let (t, live) = e.extent(0x1000_0000 + (100 << 20), UNKNOWN_CAP).unwrap();
        assert_eq!(t.end - t.start, UNKNOWN_CAP);
        assert!(!live);
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
}
