//! The job's own placement advice: the ranges it advised to stay in host
//! memory (`cuMemAdvise` SetPreferredLocation to the host, what
//! `cudaMemAdvise` calls), published for prescientd in the launch ring's
//! host-advice table (prescient_uapi::launchring::advice) so that it
//! leaves them where the job put them.
//!
//! Why: prescientd prefetches a launch's footprint with UVM_MIGRATE, which
//! moves pages whatever their preferred location, and the driver gives no
//! other process a range's advice. The runtime sees every call: it keeps
//! the set of host-preferred ranges (ascending, disjoint) and bumps a
//! generation on each change; the launch path publishes the set into the
//! ring when the generation moved (footprint/mod.rs), so a ring made
//! after the advice still gets it.
//!
//! A range leaves the set when the job unsets its preferred location,
//! prefers a GPU for it, or frees the allocation (alloc.rs).

// The wrapper's safety contract is the driver entry point's own.
#![allow(clippy::missing_safety_doc)]

use crate::driver::{CuDevicePtr, CuResult, MemLocation, CUDA_SUCCESS};
use prescient_uapi::launchring::Ring;
use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

pub static REAL_MEM_ADVISE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_MEM_ADVISE_V1: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// The version `cuMemAdvise`'s first ABI (a `CUdevice`) is resolved at.
pub const V1_VERSION: c_int = 8000;
/// `CU_DEVICE_CPU`: the host, in the first ABI.
pub const DEVICE_CPU: c_int = -1;

/// `CUmem_advise` (cuda.h): the advice values this file reads.
pub const ADVISE_SET_PREFERRED_LOCATION: c_int = 3;
pub const ADVISE_UNSET_PREFERRED_LOCATION: c_int = 4;
/// `CUmemLocationType` (cuda.h): the host, a host NUMA node, the calling
/// thread's host NUMA node.
pub const MEM_LOCATION_TYPE_HOST: c_int = 2;
pub const MEM_LOCATION_TYPE_HOST_NUMA: c_int = 3;
pub const MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: c_int = 4;
/// Ranges kept at most (a job advising more is counted, not followed).
pub const MAX_RANGES: usize = 4096;

/// `cuMemAdvise` at CUDA 13.0 (cuMemAdvise_v2, CUDA 12.2 on): the
/// location passed by value.
pub type MemAdviseV2 = unsafe extern "C" fn(CuDevicePtr, usize, c_int, MemLocation) -> CuResult;

/// The host-preferred ranges, ascending and disjoint, and advice left out
/// past [`MAX_RANGES`].
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct HostSet {
    ranges: Vec<Range<u64>>,
    pub left_out: u64,
}

impl HostSet {
    /// Adds `r`, merged with the ranges it touches.
    pub fn insert(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        let first = self.ranges.partition_point(|x| x.end < start);
        let mut last = first;
        while last < self.ranges.len() && self.ranges[last].start <= end {
            start = start.min(self.ranges[last].start);
            end = end.max(self.ranges[last].end);
            last += 1;
        }
        if first == last && self.ranges.len() >= MAX_RANGES {
            self.left_out += 1;
            return;
        }
        self.ranges.splice(first..last, std::iter::once(start..end));
    }

    /// Takes `r` out, splitting a range it cuts.
    pub fn remove(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for x in self.ranges.drain(..) {
            if x.end <= r.start || r.end <= x.start {
                out.push(x);
                continue;
            }
            if x.start < r.start {
                out.push(x.start..r.start);
            }
            if r.end < x.end {
                out.push(r.end..x.end);
            }
        }
        out.truncate(MAX_RANGES);
        self.ranges = out;
    }

    /// The ranges, as `(start, end)` pairs.
    pub fn pairs(&self) -> Vec<(u64, u64)> {
        self.ranges.iter().map(|r| (r.start, r.end)).collect()
    }
}

/// What one advice call does to the set: true when `location` is the host.
pub fn apply(set: &mut HostSet, addr: u64, bytes: u64, advice: c_int, location: MemLocation) {
    let r = addr..addr.saturating_add(bytes);
    let host = matches!(
        location.kind,
        MEM_LOCATION_TYPE_HOST | MEM_LOCATION_TYPE_HOST_NUMA | MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
    );
    match advice {
        ADVISE_SET_PREFERRED_LOCATION if host => set.insert(r),
        ADVISE_SET_PREFERRED_LOCATION | ADVISE_UNSET_PREFERRED_LOCATION => set.remove(r),
        _ => {}
    }
}

static SET: Mutex<HostSet> = Mutex::new(HostSet {
    ranges: Vec::new(),
    left_out: 0,
});
/// Bumped at each change of [`SET`]; the generation last published.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static PUBLISHED: AtomicU64 = AtomicU64::new(0);

/// Changes the set under its lock and bumps the generation.
fn change(f: impl FnOnce(&mut HostSet)) {
    let mut s = SET.lock().unwrap_or_else(|e| e.into_inner());
    let before = s.clone();
    f(&mut s);
    if *s != before {
        GENERATION.fetch_add(1, Ordering::Release);
    }
}

/// `cuMemAdvise` as the job sees it: the real call, then, on success, the
/// set follows a preferred location that changed.
pub unsafe extern "C" fn mem_advise(
    dptr: CuDevicePtr,
    count: usize,
    advice: c_int,
    location: MemLocation,
) -> CuResult {
    let p = REAL_MEM_ADVISE.load(Ordering::Acquire);
    // SAFETY: wrap.rs hands this wrapper out only for the real
    // cuMemAdvise resolved at API_VERSION, whose ABI is MemAdviseV2.
    let rc = unsafe {
        let f: MemAdviseV2 = std::mem::transmute_copy::<*mut c_void, MemAdviseV2>(&p);
        f(dptr, count, advice, location)
    };
    if rc == CUDA_SUCCESS {
        change(|s| apply(s, dptr, count as u64, advice, location));
    }
    rc
}

/// `cuMemAdvise`'s first ABI (CUDA 8.0 to 12.1: a `CUdevice`,
/// [`DEVICE_CPU`] for the host), as the job sees it.
pub unsafe extern "C" fn mem_advise_v1(
    dptr: CuDevicePtr,
    count: usize,
    advice: c_int,
    device: c_int,
) -> CuResult {
    let p = REAL_MEM_ADVISE_V1.load(Ordering::Acquire);
    type MemAdviseV1 = unsafe extern "C" fn(CuDevicePtr, usize, c_int, c_int) -> CuResult;
    // SAFETY: wrap.rs hands this wrapper out only for the real
    // cuMemAdvise resolved at V1_VERSION, whose ABI is MemAdviseV1.
    let rc = unsafe {
        let f: MemAdviseV1 = std::mem::transmute_copy::<*mut c_void, MemAdviseV1>(&p);
        f(dptr, count, advice, device)
    };
    if rc == CUDA_SUCCESS {
        change(|s| apply(s, dptr, count as u64, advice, location_of(device)));
    }
    rc
}

/// The location a first-ABI device number names.
pub fn location_of(device: c_int) -> MemLocation {
    if device == DEVICE_CPU {
        MemLocation {
            kind: MEM_LOCATION_TYPE_HOST,
            id: 0,
        }
    } else {
        MemLocation {
            kind: crate::driver::MEM_LOCATION_TYPE_DEVICE,
            id: device,
        }
    }
}

/// The job freed `[addr, addr + bytes)`: its advice went with it.
pub fn freed(addr: u64, bytes: u64) {
    change(|s| s.remove(addr..addr.saturating_add(bytes)));
}

/// Publishes the set into `ring` if it changed since the last time (one
/// load when it did not; never waits for the lock: a launch that finds it
/// taken leaves the publication to the next).
pub fn publish(ring: &Ring<'_>) {
    let g = GENERATION.load(Ordering::Acquire);
    if g == PUBLISHED.load(Ordering::Relaxed) {
        return;
    }
    let Ok(s) = SET.try_lock() else {
        return;
    };
    let g = GENERATION.load(Ordering::Acquire);
    ring.publish_host_advice(&s.pairs(), s.left_out);
    PUBLISHED.store(g, Ordering::Relaxed);
}

/// In a forked child: its own ring gets the set again.
pub fn forget_published() {
    PUBLISHED.store(u64::MAX, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: MemLocation = MemLocation {
        kind: MEM_LOCATION_TYPE_HOST,
        id: 0,
    };
    const GPU0: MemLocation = MemLocation {
        kind: crate::driver::MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };

    /// Host advice is kept merged; a GPU preference or an unset cuts it;
    /// read-mostly and accessed-by change nothing; a free takes it away.
    #[test]
    fn the_set_follows_the_preferred_location() {
        let mut s = HostSet::default();
        apply(&mut s, 1000, 1000, ADVISE_SET_PREFERRED_LOCATION, HOST);
        apply(&mut s, 5000, 1000, ADVISE_SET_PREFERRED_LOCATION, HOST);
        apply(&mut s, 2000, 500, ADVISE_SET_PREFERRED_LOCATION, HOST);
        assert_eq!(s.pairs(), [(1000, 2500), (5000, 6000)]);
        apply(&mut s, 1200, 100, ADVISE_SET_PREFERRED_LOCATION, GPU0);
        assert_eq!(s.pairs(), [(1000, 1200), (1300, 2500), (5000, 6000)]);
        apply(&mut s, 0, 1250, ADVISE_UNSET_PREFERRED_LOCATION, HOST);
        assert_eq!(s.pairs(), [(1300, 2500), (5000, 6000)]);
        for other in [1, 2, 5, 6] {
            apply(&mut s, 0, 10_000, other, HOST);
        }
        assert_eq!(s.pairs(), [(1300, 2500), (5000, 6000)]);
        apply(&mut s, 4000, 2000, ADVISE_SET_PREFERRED_LOCATION, HOST);
        assert_eq!(s.pairs(), [(1300, 2500), (4000, 6000)]);
        s.remove(1300..2500);
        assert_eq!(s.pairs(), [(4000, 6000)]);
        let numa = MemLocation {
            kind: MEM_LOCATION_TYPE_HOST_NUMA,
            id: 1,
        };
        apply(
            &mut s,
            u64::MAX - 10,
            100,
            ADVISE_SET_PREFERRED_LOCATION,
            numa,
        );
        assert_eq!(s.pairs(), [(4000, 6000), (u64::MAX - 10, u64::MAX)]);
        apply(&mut s, 9, 0, ADVISE_SET_PREFERRED_LOCATION, HOST);
        assert_eq!(s.pairs().len(), 2, "an empty range changes nothing");
    }

    /// Past MAX_RANGES disjoint ranges, new ones are counted, not kept;
    /// one that merges into a kept range is still taken.
    #[test]
    fn the_set_is_bounded() {
        let mut s = HostSet::default();
        for i in 0..MAX_RANGES as u64 + 3 {
            s.insert(i * 10..i * 10 + 5);
        }
        assert_eq!((s.pairs().len(), s.left_out), (MAX_RANGES, 3));
        s.insert(3..12);
        assert_eq!(s.pairs()[0], (0, 15));
        assert_eq!(s.left_out, 3);
    }

    use proptest::prelude::*;

    proptest! {
        /// Any sequence of advice over a small space leaves the set equal
        /// to a byte map of the same advice: ascending, disjoint, never
        /// touching, nothing empty.
        #[test]
        fn the_set_matches_a_byte_map(
            ops in proptest::collection::vec((any::<bool>(), 0u64..200, 0u64..60), 1..40),
        ) {
            let mut s = HostSet::default();
            let mut map = [false; 260];
            for (host, start, len) in ops {
                let loc = if host { HOST } else { GPU0 };
                apply(&mut s, start, len, ADVISE_SET_PREFERRED_LOCATION, loc);
                for b in &mut map[start as usize..(start + len) as usize] {
                    *b = host;
                }
            }
            let mut want = Vec::new();
            for (i, &b) in map.iter().enumerate() {
                match (b, want.last_mut()) {
                    (true, Some((_, end))) if *end == i as u64 => *end += 1,
                    (true, _) => want.push((i as u64, i as u64 + 1)),
                    _ => {}
                }
            }
            prop_assert_eq!(s.pairs(), want);
        }
    }
}
