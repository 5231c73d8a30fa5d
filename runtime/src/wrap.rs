//! Which driver entry points the runtime wraps, and how a caller's lookup
//! gets the wrapper instead of the real function.
//!
//! A wrapper is keyed on the real function's address, not on the name the
//! caller asked for: at start the runtime asks the real `cuGetProcAddress`
//! for each wrapped entry point at [`driver::API_VERSION`] (per-thread
//! variants with the per-thread flag), whose ABI its wrappers follow. Any
//! later lookup (dlsym by exact name, `cuGetProcAddress` of any version
//! with any flags) that yields one of those addresses gets that wrapper;
//! any other address (another ABI version, an unknown or newer entry point)
//! goes back to the caller untouched.

// The wrappers' safety contract is the driver entry point's own: the
// caller passes what cuda.h requires, and the wrapper forwards it.
#![allow(clippy::missing_safety_doc)]

use crate::driver::{self, CuResult, GetProcAddressV1, GetProcAddressV2, PER_THREAD_FLAG};
use crate::{advice, alloc, launch};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// One wrapped entry point: the name, version and flags it is resolved
/// with, where its real address is kept, and the wrapper handed out for it.
pub struct Entry {
    pub name: &'static CStr,
    /// [`driver::API_VERSION`] but for an older ABI wrapped beside it.
    pub version: c_int,
    pub flags: u64,
    pub real: &'static AtomicPtr<c_void>,
    /// The wrapper's address (a function: addresses are not constants).
    pub wrapper: fn() -> *mut c_void,
}

macro_rules! entries {
    (@version) => { driver::API_VERSION };
    (@version $version:expr) => { $version };
    ($( $name:literal $(@ $version:expr)?, $flags:expr => $real:path, $wrapper:path; )*) => {
        /// Every wrapped entry point.
        pub static ENTRIES: &[Entry] = &[
            $( Entry {
                name: $name,
                version: entries!(@version $($version)?),
                flags: $flags,
                real: &$real,
                wrapper: || $wrapper as *mut c_void,
            }, )*
        ];
    };
}

entries! {
    c"cuMemAlloc", 0 => alloc::REAL_MEM_ALLOC, alloc::mem_alloc;
    c"cuMemAllocPitch", 0 => alloc::REAL_MEM_ALLOC_PITCH, alloc::mem_alloc_pitch;
    c"cuMemFree", 0 => alloc::REAL_MEM_FREE, alloc::mem_free;
    c"cuMemAllocManaged", 0 => alloc::REAL_MEM_ALLOC_MANAGED, alloc::mem_alloc_managed;
    c"cuMemGetInfo", 0 => alloc::REAL_MEM_GET_INFO, alloc::mem_get_info;
    c"cuMemAllocAsync", 0 => alloc::REAL_ALLOC_ASYNC, alloc::mem_alloc_async;
    c"cuMemAllocAsync", PER_THREAD_FLAG => alloc::REAL_ALLOC_ASYNC_PTSZ, alloc::mem_alloc_async_ptsz;
    c"cuMemAllocFromPoolAsync", 0 => alloc::REAL_POOL_ASYNC, alloc::mem_alloc_pool_async;
    c"cuMemAllocFromPoolAsync", PER_THREAD_FLAG => alloc::REAL_POOL_ASYNC_PTSZ, alloc::mem_alloc_pool_async_ptsz;
    c"cuMemCreate", 0 => alloc::REAL_MEM_CREATE, alloc::mem_create;
    c"cuMemAdvise", 0 => advice::REAL_MEM_ADVISE, advice::mem_advise;
    // cudart before 12.2 (and cudaMemAdvise's int-device form) calls the
    // 8.0 ABI.
    c"cuMemAdvise" @ advice::V1_VERSION, 0 => advice::REAL_MEM_ADVISE_V1, advice::mem_advise_v1;
    c"cuLaunchKernel", 0 => launch::REAL_LAUNCH, launch::launch_kernel;
    c"cuLaunchKernel", PER_THREAD_FLAG => launch::REAL_LAUNCH_PTSZ, launch::launch_kernel_ptsz;
    c"cuLaunchKernelEx", 0 => launch::REAL_LAUNCH_EX, launch::launch_kernel_ex;
    c"cuLaunchKernelEx", PER_THREAD_FLAG => launch::REAL_LAUNCH_EX_PTSZ, launch::launch_kernel_ex_ptsz;
    c"cuLaunchCooperativeKernel", 0 => launch::REAL_COOP, launch::launch_cooperative;
    c"cuLaunchCooperativeKernel", PER_THREAD_FLAG => launch::REAL_COOP_PTSZ, launch::launch_cooperative_ptsz;
}

static INIT: Once = Once::new();

/// True once the table is filled.
pub fn ready() -> bool {
    INIT.is_completed()
}

/// Fills the table from the real `cuGetProcAddress_v2` and/or v1 (null
/// where the driver lacks one); does nothing when neither is known.
pub fn init(gpa_v2: *mut c_void, gpa_v1: *mut c_void) {
    if gpa_v2.is_null() && gpa_v1.is_null() {
        return;
    }
    INIT.call_once(|| {
        driver::REAL_GPA_V2.store(gpa_v2, Ordering::Release);
        driver::REAL_GPA_V1.store(gpa_v1, Ordering::Release);
        for e in ENTRIES {
            let real = driver::resolve_at(e.name, e.version, e.flags);
            e.real.store(real, Ordering::Release);
        }
        crate::marker::install_fork_handler();
        crate::stats::announce();
    });
}

/// The wrapper for the real function at `p`, or `p` itself.
pub fn substitute(p: *mut c_void) -> *mut c_void {
    if p.is_null() || !ready() {
        return p;
    }
    if p == driver::REAL_GPA_V2.load(Ordering::Acquire) {
        return get_proc_address_v2 as *mut c_void;
    }
    if p == driver::REAL_GPA_V1.load(Ordering::Acquire) {
        return get_proc_address_v1 as *mut c_void;
    }
    for e in ENTRIES {
        if p == e.real.load(Ordering::Acquire) {
            crate::stats::bump(&crate::stats::WRAPPED_LOOKUPS);
            return (e.wrapper)();
        }
    }
    p
}

/// `cuGetProcAddress_v2` as the caller sees it: the real lookup, whose
/// result is then substituted.
pub unsafe extern "C" fn get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let real = driver::REAL_GPA_V2.load(Ordering::Acquire);
    // SAFETY: this wrapper is handed out only for the real v2 function,
    // stored before; the arguments are the caller's, forwarded.
    let rc = unsafe {
        let f: GetProcAddressV2 = std::mem::transmute(real);
        f(symbol, pfn, version, flags, status)
    };
    if rc == driver::CUDA_SUCCESS && !pfn.is_null() {
        // SAFETY: the driver wrote *pfn on success.
        unsafe { *pfn = substitute(*pfn) };
    }
    rc
}

/// `cuGetProcAddress` (v1) as the caller sees it.
pub unsafe extern "C" fn get_proc_address_v1(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    let real = driver::REAL_GPA_V1.load(Ordering::Acquire);
    // SAFETY: as in get_proc_address_v2, for the v1 ABI.
    let rc = unsafe {
        let f: GetProcAddressV1 = std::mem::transmute(real);
        f(symbol, pfn, version, flags)
    };
    if rc == driver::CUDA_SUCCESS && !pfn.is_null() {
        // SAFETY: the driver wrote *pfn on success.
        unsafe { *pfn = substitute(*pfn) };
    }
    rc
}
