// SPDX-License-Identifier: GPL-2.0
//! Execution ids from a runtime's page (SET_EXEC_PAGE), read on the fault
//! path.
//!
//! The runtime (prescient-runtime) writes, in stream order, the id of the
//! kernel each stream runs into a memfd page (uapi's `execpage` format).
//! SET_EXEC_PAGE pins that page ([`PinnedPage`]) and publishes its address
//! in the space's slot here. At each GPU fault of the space the kprobe scans
//! the page ([`SharedReader`]: one load per slot, bounded); when a slot
//! changed to a new id, it queues a kernel start for it before the fault,
//! through the same ring, so the engine sees "kernel X starts, then X
//! faults" in the order the GPU produced them.
//!
//! Why at the fault and not in the worker: the worker runs later, when the
//! stream may have moved on to the next kernel; the faulting kernel is
//! stalled on its fault, so at the fault its id is the one in its slot.
//! With several streams the id last seen changing is taken (the daemon's
//! reader does the same): attribution precision, never correctness.
//!
//! Between faults the worker polls the pages ([`prescient_rs_poll`],
//! without the State mutex, inside rcu_read_lock) and announces, through
//! the ring, kernels that started without faulting; the engine's chain
//! needs every kernel start (vm-tests/README.md, `replay-exec-page-short`).
//!
//! Lifetime: the address is published and cleared under the State mutex;
//! the page is unpinned only after a grace period ([`PinnedPage`]'s drop:
//! synchronize_rcu), which waits for every kprobe handler (preemption off)
//! and every poll (rcu_read_lock) that may still read it.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::abi::MAX_SPACES;
use crate::execpage::{engine_id, Page, SharedReader};
use crate::glue::{PinnedPage, PublishedPage};
use crate::ring::{Record, ATTACHED, RING};

/// The fault path's view of each attached slot's page.
pub(crate) struct Feeds {
    page: [PublishedPage; MAX_SPACES],
    reader: [SharedReader; MAX_SPACES],
    /// The engine id (+ 1) the slot's faults are charged to; 0 = none yet.
    current: [AtomicU64; MAX_SPACES],
    /// Ids read (a slot changed to a new id), since the page was set.
    ids: [AtomicU64; MAX_SPACES],
    /// Faults charged to an id, since the page was set.
    faults: [AtomicU64; MAX_SPACES],
}

/// The module's one table of pages.
pub(crate) static FEEDS: Feeds = Feeds {
    page: [const { PublishedPage::new() }; MAX_SPACES],
    reader: [const { SharedReader::new() }; MAX_SPACES],
    current: [const { AtomicU64::new(0) }; MAX_SPACES],
    ids: [const { AtomicU64::new(0) }; MAX_SPACES],
    faults: [const { AtomicU64::new(0) }; MAX_SPACES],
};

impl Feeds {
    /// Publishes `p` for `slot` with fresh counters (under the State mutex;
    /// the slot had no page).
    pub(crate) fn set(&self, slot: usize, p: &PinnedPage) {
        if let (Some(pg), Some(r), Some(c), Some(i), Some(f)) = (
            self.page.get(slot),
            self.reader.get(slot),
            self.current.get(slot),
            self.ids.get(slot),
            self.faults.get(slot),
        ) {
            r.reset();
            c.store(0, Ordering::Relaxed);
            i.store(0, Ordering::Relaxed);
            f.store(0, Ordering::Relaxed);
            pg.set(p);
        }
    }

    /// Unpublishes `slot`'s page (under the State mutex, before the page
    /// is dropped).
    pub(crate) fn clear(&self, slot: usize) {
        if let Some(pg) = self.page.get(slot) {
            pg.clear();
        }
    }

    /// A GPU fault of `slot` (kprobe context: no lock, no sleep, at most
    /// one scan of the page): the execution id to announce before the
    /// fault, if the page shows a kernel not announced yet.
    pub(crate) fn on_fault(&self, slot: usize) -> Option<u32> {
        let pg = self.page.get(slot)?;
        let start = pg.with(|page| self.scan(slot, page))??;
        if self.current.get(slot)?.load(Ordering::Relaxed) != 0 {
            self.faults[slot].fetch_add(1, Ordering::Relaxed);
        }
        start
    }

    /// Scans `slot`'s page (the fault path, or the worker with the page it
    /// owns): the id of a kernel that started and was not announced yet.
    /// Each change is announced once, whoever scans first.
    pub(crate) fn scan(&self, slot: usize, page: &Page<'_>) -> Option<Option<u32>> {
        let (r, cur) = (self.reader.get(slot)?, self.current.get(slot)?);
        let Some(id48) = r.scan(page) else {
            return Some(None);
        };
        let e = engine_id(id48);
        if cur.swap(u64::from(e) + 1, Ordering::Relaxed) == u64::from(e) + 1 {
            return Some(None);
        }
        self.ids[slot].fetch_add(1, Ordering::Relaxed);
        Some(Some(e))
    }

    /// (ids read, faults charged to an id) of `slot` since its page was set.
    pub(crate) fn counts(&self, slot: usize) -> (u64, u64) {
        match (self.ids.get(slot), self.faults.get(slot)) {
            (Some(i), Some(f)) => (i.load(Ordering::Relaxed), f.load(Ordering::Relaxed)),
            _ => (0, 0),
        }
    }
}

/// One poll of every published page by the worker (glue.c, between its
/// steps, inside rcu_read_lock, without the State mutex): kernels that
/// started since the last look are announced through the ring. True if
/// one was (the worker then takes a step to feed it to the engine).
#[no_mangle]
extern "C" fn prescient_rs_poll() -> bool {
    let mut any = false;
    for (slot, pg) in FEEDS.page.iter().enumerate() {
        let Some(Some(Some(exec_id))) = pg.with(|page| FEEDS.scan(slot, page)) else {
            continue;
        };
        let va_space = ATTACHED.va_space_in(slot);
        if va_space != 0 {
            RING.push(Record::KernelStart { va_space, exec_id }, slot);
            any = true;
        }
    }
    any
}
