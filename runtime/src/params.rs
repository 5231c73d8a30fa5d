//! A launch's parameters as the execution id (launch.rs) and launch
//! footprints (footprint/) read them: sizes from `cuFuncGetParamInfo`,
//! cached per function and thread, or the `extra` buffer.
//!
//! A function whose sizes the driver does not give (its first
//! `cuFuncGetParamInfo` and `cuKernelGetParamInfo` both fail with anything
//! but the "past the last parameter" answer) is counted, with the first
//! such code, in the exit line: its ids hash no argument bytes and its
//! footprints are empty.

use crate::driver::{self, CuFunction, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// Parameters asked of `cuFuncGetParamInfo` per function at most.
const MAX_PARAMS: usize = 256;

/// Functions (per thread) whose parameter sizes the driver refused.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);
/// The first refusal's CUresult (0: none yet).
pub static FIRST_REFUSAL: AtomicU64 = AtomicU64::new(0);
/// Functions (per thread) that `cuFuncGetParamInfo` refused and
/// `cuKernelGetParamInfo` answered.
pub static KERNEL_ANSWERED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Parameter sizes per function (None: unknown). Per thread, so that a
    /// launch takes no lock and copies nothing to find them (the lookup is
    /// on every launch's path).
    static PARAM_SIZES: RefCell<HashMap<usize, Option<Box<[u32]>>>> = RefCell::new(HashMap::new());
}

/// The sizes of `f`'s parameters, asked of the driver once per function
/// and thread: of `cuFuncGetParamInfo`, or, where it refuses the handle,
/// of `cuKernelGetParamInfo` (CUDA 12's runtime launches `CUkernel`s).
fn ask_param_sizes(f: CuFunction) -> Option<Box<[u32]>> {
    let calls = driver::calls()?;
    let rc = match calls.func_param_info.map(|info| sizes_from(info, f)) {
        Some(Ok(v)) => return Some(v),
        Some(Err(rc)) => rc,
        None => return None,
    };
    match calls.kernel_param_info.map(|info| sizes_from(info, f)) {
        Some(Ok(v)) => {
            KERNEL_ANSWERED.fetch_add(1, Ordering::Relaxed);
            Some(v)
        }
        _ => {
            refused(rc);
            None
        }
    }
}

/// Asks `info` for every parameter's size; Err(rc) when the driver
/// refuses the first question (the handle) with anything but the "past
/// the last parameter" answer.
fn sizes_from(info: driver::ParamInfo, f: CuFunction) -> Result<Box<[u32]>, i32> {
    let mut v = Vec::new();
    for i in 0..MAX_PARAMS {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: a parameter-info call on the caller's launch handle; it
        // fails (INVALID_VALUE) past the last parameter, so at once for a
        // function with none, and with another code for a handle it does
        // not take.
        let rc = unsafe { info(f, i, &mut off, &mut size) };
        if rc != CUDA_SUCCESS {
            if i == 0 && rc != CUDA_ERROR_INVALID_VALUE {
                return Err(rc);
            }
            break;
        }
        v.push(size as u32);
    }
    Ok(v.into_boxed_slice())
}

/// Counts a function whose sizes the driver refused with `rc`.
#[cold]
fn refused(rc: i32) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    let _ =
        FIRST_REFUSAL.compare_exchange(0, rc as u32 as u64, Ordering::Relaxed, Ordering::Relaxed);
}

#[cfg(test)]
thread_local! {
    /// Lookups on this thread: a launch's tests count them (one per launch).
    pub(crate) static LOOKUPS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Sets `f`'s sizes as if the driver had given them (tests have no driver).
#[cfg(test)]
pub(crate) fn seed(f: CuFunction, sizes: &[u32]) {
    PARAM_SIZES.with(|cache| cache.borrow_mut().insert(f as usize, Some(sizes.into())));
}

/// Calls `g` with `f`'s parameter sizes (None: unknown).
pub(crate) fn with_param_sizes<R>(f: CuFunction, g: impl FnOnce(Option<&[u32]>) -> R) -> R {
    #[cfg(test)]
    LOOKUPS.with(|n| n.set(n.get() + 1));
    PARAM_SIZES.with(|cache| {
        let mut cache = cache.borrow_mut();
        let sizes = cache
            .entry(f as usize)
            .or_insert_with(|| ask_param_sizes(f));
        g(sizes.as_deref())
    })
}

/// The `CU_LAUNCH_PARAM_BUFFER_POINTER` buffer of `extra` and its size.
///
/// # Safety
/// `extra` is an _END-terminated key/value array (cuda.h).
pub unsafe fn extra_buffer(extra: *mut *mut c_void) -> (*const u8, usize) {
    let (mut buf, mut len) = (std::ptr::null::<u8>(), 0usize);
    let mut i = 0;
    // SAFETY: the caller's promise; at most 32 pairs are read.
    unsafe {
        while *extra.add(i) as usize != driver::LAUNCH_PARAM_END && i < 64 {
            match *extra.add(i) as usize {
                driver::LAUNCH_PARAM_BUFFER_POINTER => buf = *extra.add(i + 1) as *const u8,
                driver::LAUNCH_PARAM_BUFFER_SIZE => len = *(*extra.add(i + 1) as *const usize),
                _ => {}
            }
            i += 2;
        }
    }
    (buf, len)
}
