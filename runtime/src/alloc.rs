//! Allocation wrappers: device allocations become managed, and
//! `cuMemGetInfo` reports the residency budget when one is set, so that
//! frameworks size their caches and workspaces to it.
//!
//! Managed memory is allocated with `CU_MEM_ATTACH_GLOBAL` and no advice:
//! never `SetAccessedBy`, which would replace GPU faults (what Prescient
//! learns from) by remote reads. Stream-ordered pool allocations and VMM
//! mappings (`cuMemCreate`) cannot be made managed here: they pass through
//! and the runtime says so once (the launcher sets PyTorch's allocator so
//! that it uses neither).

// The wrappers' safety contract is the driver entry point's own: the
// caller passes what cuda.h requires, and the wrapper forwards it.
#![allow(clippy::missing_safety_doc)]

use crate::driver::{
    self, CuDevicePtr, CuResult, CuStream, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS,
};
use crate::stats;
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

pub static REAL_MEM_ALLOC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_MEM_ALLOC_PITCH: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_MEM_FREE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_MEM_ALLOC_MANAGED: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_MEM_GET_INFO: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_ALLOC_ASYNC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_ALLOC_ASYNC_PTSZ: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_POOL_ASYNC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_POOL_ASYNC_PTSZ: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_MEM_CREATE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The pitch rows are padded to: the texture pitch alignment of every GPU
/// since Fermi is at most 512 bytes, and any pitch at least the width
/// meets `cuMemAllocPitch`'s contract.
pub const PITCH_ALIGN: usize = 512;

/// Live managed allocations made here: address to size (for the budget's
/// free bytes).
static LIVE: Mutex<Option<HashMap<CuDevicePtr, u64>>> = Mutex::new(None);

/// Loads a real entry point as the function type `F`.
///
/// # Safety
/// `slot` must hold an entry point whose ABI is `F` (wrap.rs stores each
/// slot's address from the driver at the version these types follow).
unsafe fn real<F: Copy>(slot: &AtomicPtr<c_void>) -> F {
    let p = slot.load(Ordering::Acquire);
    debug_assert!(!p.is_null());
    // SAFETY: the caller's promise; F is a function pointer type.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

/// Allocates `bytes` of managed memory into `*dptr`, recording it.
fn managed(dptr: *mut CuDevicePtr, bytes: usize) -> CuResult {
    let Some(calls) = driver::calls() else {
        return driver::CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: cuMemAllocManaged with the caller's out-pointer.
    let rc = unsafe { (calls.mem_alloc_managed)(dptr, bytes, driver::CU_MEM_ATTACH_GLOBAL) };
    if rc == CUDA_SUCCESS {
        // SAFETY: the driver wrote *dptr on success.
        let addr = unsafe { *dptr };
        record(addr, bytes, false);
        if crate::config::get().place_fresh {
            place(calls, addr, bytes);
        }
    }
    rc
}

/// Records a live managed allocation: its size (the budget's free bytes,
/// `cuMemFree`), marks, launch footprints and the execution-id page.
fn record(addr: CuDevicePtr, bytes: usize, own: bool) {
    stats::bump(&stats::MANAGED_ALLOCS);
    stats::MANAGED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(addr, bytes as u64);
    // A fresh range may reuse addresses of one freed earlier: none of
    // it may be dead at the daemon (marks/mod.rs).
    crate::marks::allocated(addr, bytes as u64);
    crate::footprint::extents::managed_allocated(addr, bytes as u64, own);
    crate::marker::setup_early();
}

/// `cuMemAllocManaged` called by the job itself (a program written for
/// managed memory, or PyTorch with a managed pluggable allocator): the
/// caller's flags, and the driver's placement, as they are; recorded like
/// the runtime's own, so launch footprints and the budget's free bytes see
/// it (GPU run 64: FDTD-2D's and train.py's footprints were empty without).
pub unsafe extern "C" fn mem_alloc_managed(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    // SAFETY: the slot holds cuMemAllocManaged.
    let f: unsafe extern "C" fn(*mut CuDevicePtr, usize, c_uint) -> CuResult =
        unsafe { real(&REAL_MEM_ALLOC_MANAGED) };
    // SAFETY: forwarding the caller's arguments.
    let rc = unsafe { f(dptr, bytes, flags) };
    if rc == CUDA_SUCCESS && !dptr.is_null() {
        // SAFETY: the driver wrote *dptr on success.
        record(unsafe { *dptr }, bytes, true);
    }
    rc
}

/// Prefetches a fresh allocation to the current context's GPU, on the
/// legacy default stream (ordered before the work that will first touch
/// it there): where cuMemAlloc would have put it. Without it, managed
/// memory is populated by a GPU fault per first-touched page (run 35:
/// ResNet-50's second step took 454-626 ms on managed memory against 57-62
/// ms on device memory). A hint only: a failure changes nothing but speed.
/// Never `SetAccessedBy` or a preferred location: faults stay faults.
///
/// Not while a stream capture would see it: PyTorch allocates inside
/// graph captures (private pools), and work on the legacy stream while a
/// blocking stream captures invalidates the capture. The query of the
/// legacy stream fails or says "capturing" then; the thread's mode is
/// relaxed around query and prefetch (as fence.rs does for its events).
fn place(calls: &driver::Calls, addr: CuDevicePtr, bytes: usize) {
    let (Some(prefetch), Some(get_device)) = (calls.mem_prefetch, calls.ctx_get_device) else {
        return;
    };
    let Some(ev) = crate::marks::fence::calls() else {
        return;
    };
    let _relaxed = crate::marks::fence::Relaxed::new(ev);
    let mut capturing = 0;
    // SAFETY: cuStreamIsCapturing on the legacy stream, local out-param.
    let rc = unsafe { (calls.stream_is_capturing)(std::ptr::null_mut(), &mut capturing) };
    if rc != CUDA_SUCCESS || capturing != 0 {
        return;
    }
    let mut device = 0;
    // SAFETY: cuCtxGetDevice at its one-parameter ABI, local out-param.
    if unsafe { get_device(&mut device) } != CUDA_SUCCESS {
        return;
    }
    let to = driver::MemLocation {
        kind: driver::MEM_LOCATION_TYPE_DEVICE,
        id: device,
    };
    // SAFETY: cuMemPrefetchAsync_v2 on the range just allocated; flags 0
    // (required); stream 0: the legacy default stream.
    let rc = unsafe { prefetch(addr, bytes, to, 0, std::ptr::null_mut()) };
    if rc == CUDA_SUCCESS {
        stats::bump(&stats::PLACED);
        stats::PLACED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// `cuMemAlloc_v2`: managed instead of device memory.
pub unsafe extern "C" fn mem_alloc(dptr: *mut CuDevicePtr, bytes: usize) -> CuResult {
    managed(dptr, bytes)
}

/// The pitch `cuMemAllocPitch_v2` gives for a row of `width` bytes of
/// `element` byte elements, or None for arguments the driver refuses.
pub fn pitch_for(width: usize, height: usize, element: c_uint) -> Option<usize> {
    if width == 0 || height == 0 || !matches!(element, 4 | 8 | 16) {
        return None;
    }
    width.checked_next_multiple_of(PITCH_ALIGN)
}

/// `cuMemAllocPitch_v2`: managed rows padded to [`PITCH_ALIGN`].
pub unsafe extern "C" fn mem_alloc_pitch(
    dptr: *mut CuDevicePtr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> CuResult {
    let Some(p) = pitch_for(width, height, element) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let Some(bytes) = p.checked_mul(height) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let rc = managed(dptr, bytes);
    if rc == CUDA_SUCCESS && !pitch.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *pitch = p };
    }
    rc
}

/// `cuMemFree_v2`: forgets a managed allocation's size, then frees.
pub unsafe extern "C" fn mem_free(dptr: CuDevicePtr) -> CuResult {
    let size = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&dptr).copied());
    if let Some(n) = size {
        // Back to the driver only once none of it is dead at the daemon.
        crate::marks::before_free(dptr, n);
        crate::footprint::extents::managed_freed(dptr, n);
        crate::advice::freed(dptr, n);
    }
    // SAFETY: the slot holds cuMemFree_v2.
    let f: unsafe extern "C" fn(CuDevicePtr) -> CuResult = unsafe { real(&REAL_MEM_FREE) };
    // SAFETY: forwarding the caller's argument.
    let rc = unsafe { f(dptr) };
    if rc == CUDA_SUCCESS {
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = live.as_mut().and_then(|m| m.remove(&dptr)) {
            stats::MANAGED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
    rc
}

/// What `cuMemGetInfo` reports under a budget: the total is the budget
/// (never above the GPU's), the free bytes what the live managed bytes
/// leave of it (never above the GPU's free bytes).
pub fn budget_info(budget: u64, live: u64, real_free: u64, real_total: u64) -> (u64, u64) {
    let total = budget.min(real_total);
    (total.saturating_sub(live).min(real_free), total)
}

/// `cuMemGetInfo_v2`: the budget of the current context's device as its
/// size, when one is set.
pub unsafe extern "C" fn mem_get_info(free: *mut usize, total: *mut usize) -> CuResult {
    // SAFETY: the slot holds cuMemGetInfo_v2.
    let f: unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult =
        unsafe { real(&REAL_MEM_GET_INFO) };
    let (mut rf, mut rt) = (0usize, 0usize);
    // SAFETY: local out-parameters.
    let rc = unsafe { f(&mut rf, &mut rt) };
    if rc != CUDA_SUCCESS {
        return rc;
    }
    let cfg = crate::config::get();
    // Per-GPU budgets: the one of the device this answer is about (only
    // then is the device asked: two driver calls).
    let budget = if cfg.gpu_budgets.is_empty() {
        cfg.budget
    } else {
        cfg.budget_of(crate::device::current_uuid())
    };
    let (f_out, t_out) = match budget {
        Some(b) => {
            let live = stats::MANAGED_BYTES.load(Ordering::Relaxed);
            let (f, t) = budget_info(b, live, rf as u64, rt as u64);
            (f as usize, t as usize)
        }
        None => (rf, rt),
    };
    // SAFETY: the caller's out-parameters, written only where not null.
    unsafe {
        if !free.is_null() {
            *free = f_out;
        }
        if !total.is_null() {
            *total = t_out;
        }
    }
    rc
}

/// Says once that stream-ordered or VMM allocations stay device memory.
#[cold]
fn warn_once(flag: &AtomicBool, what: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        eprintln!(
            "prescient-runtime: {what} allocations stay device memory (not managed, not under the budget); \
for PyTorch, PYTORCH_ALLOC_CONF=backend:native,expandable_segments:False avoids them"
        );
    }
}

static WARNED_ASYNC: AtomicBool = AtomicBool::new(false);
static WARNED_VMM: AtomicBool = AtomicBool::new(false);

type AllocAsync = unsafe extern "C" fn(*mut CuDevicePtr, usize, CuStream) -> CuResult;
type PoolAsync = unsafe extern "C" fn(*mut CuDevicePtr, usize, *mut c_void, CuStream) -> CuResult;

/// `cuMemAllocAsync`: passed through, said once.
pub unsafe extern "C" fn mem_alloc_async(d: *mut CuDevicePtr, n: usize, s: CuStream) -> CuResult {
    warn_once(&WARNED_ASYNC, "stream-ordered (cudaMallocAsync)");
    // SAFETY: the slot holds cuMemAllocAsync; arguments forwarded.
    unsafe { real::<AllocAsync>(&REAL_ALLOC_ASYNC)(d, n, s) }
}

/// `cuMemAllocAsync_ptsz`: passed through, said once.
pub unsafe extern "C" fn mem_alloc_async_ptsz(
    d: *mut CuDevicePtr,
    n: usize,
    s: CuStream,
) -> CuResult {
    warn_once(&WARNED_ASYNC, "stream-ordered (cudaMallocAsync)");
    // SAFETY: the slot holds cuMemAllocAsync_ptsz; arguments forwarded.
    unsafe { real::<AllocAsync>(&REAL_ALLOC_ASYNC_PTSZ)(d, n, s) }
}

/// `cuMemAllocFromPoolAsync`: passed through, said once.
pub unsafe extern "C" fn mem_alloc_pool_async(
    d: *mut CuDevicePtr,
    n: usize,
    p: *mut c_void,
    s: CuStream,
) -> CuResult {
    warn_once(&WARNED_ASYNC, "stream-ordered (cudaMallocAsync)");
    // SAFETY: the slot holds cuMemAllocFromPoolAsync; arguments forwarded.
    unsafe { real::<PoolAsync>(&REAL_POOL_ASYNC)(d, n, p, s) }
}

/// `cuMemAllocFromPoolAsync_ptsz`: passed through, said once.
pub unsafe extern "C" fn mem_alloc_pool_async_ptsz(
    d: *mut CuDevicePtr,
    n: usize,
    p: *mut c_void,
    s: CuStream,
) -> CuResult {
    warn_once(&WARNED_ASYNC, "stream-ordered (cudaMallocAsync)");
    // SAFETY: the slot holds cuMemAllocFromPoolAsync_ptsz; arguments forwarded.
    unsafe { real::<PoolAsync>(&REAL_POOL_ASYNC_PTSZ)(d, n, p, s) }
}

/// `cuMemCreate`: passed through, said once.
pub unsafe extern "C" fn mem_create(
    h: *mut u64,
    n: usize,
    prop: *const c_void,
    flags: u64,
) -> CuResult {
    warn_once(&WARNED_VMM, "VMM (cuMemCreate, expandable segments)");
    type Create = unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> CuResult;
    // SAFETY: the slot holds cuMemCreate; arguments forwarded.
    unsafe { real::<Create>(&REAL_MEM_CREATE)(h, n, prop, flags) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitch_follows_the_drivers_contract() {
        assert_eq!(pitch_for(1, 1, 4), Some(512));
        assert_eq!(pitch_for(512, 3, 8), Some(512));
        assert_eq!(pitch_for(513, 3, 16), Some(1024));
        assert_eq!(pitch_for(100, 1, 3), None);
        assert_eq!(pitch_for(0, 1, 4), None);
        assert_eq!(pitch_for(usize::MAX, 1, 4), None);
    }

    #[test]
    fn the_budget_caps_total_and_free() {
        // 80 GB card, 40 GB budget, 10 GB live: 30 free of 40.
        assert_eq!(budget_info(40, 10, 79, 80), (30, 40));
        // Over the budget: nothing free (allocation still works: managed).
        assert_eq!(budget_info(40, 50, 79, 80), (0, 40));
        // A budget above the card is the card.
        assert_eq!(budget_info(100, 0, 79, 80), (79, 80));
    }
}
