//! Launch wrappers: each kernel launch gets its execution id written in
//! stream order (marker.rs) just before the real launch, which then goes
//! ahead with the caller's arguments untouched.

// The wrappers' safety contract is the driver entry point's own: the
// caller passes what cuda.h requires, and the wrapper forwards it.
#![allow(clippy::missing_safety_doc)]

use crate::config::IdArgs;
use crate::driver::{CuFunction, CuResult, CuStream, LaunchConfig};
use crate::exec_id::{Hasher, Shape};
use crate::{marker, stats};
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Instant;

pub static REAL_LAUNCH: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_LAUNCH_PTSZ: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_LAUNCH_EX: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_LAUNCH_EX_PTSZ: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_COOP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static REAL_COOP_PTSZ: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Argument bytes hashed per launch at most: bounds the hashing cost of
/// kernels that take large structs by value (PyTorch's foreach kernels).
pub const MAX_ARG_BYTES: usize = 1024;

type Launch = unsafe extern "C" fn(
    CuFunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CuStream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type LaunchEx = unsafe extern "C" fn(
    *const LaunchConfig,
    CuFunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type Coop = unsafe extern "C" fn(
    CuFunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CuStream,
    *mut *mut c_void,
) -> CuResult;

/// Hashes the argument bytes of a launch (up to [`MAX_ARG_BYTES`]), in
/// [`IdArgs::All`] mode.
///
/// # Safety
/// `params` and `extra` are the launch's own, valid as the driver requires.
unsafe fn hash_args(
    h: &mut Hasher,
    f: CuFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) {
    let mut budget = MAX_ARG_BYTES;
    if !params.is_null() {
        crate::params::with_param_sizes(f, |sizes| {
            for (i, &size) in sizes.unwrap_or_default().iter().enumerate() {
                let n = (size as usize).min(budget);
                // SAFETY: the driver reads params[i] as `size` bytes: so can we.
                let bytes = unsafe { std::slice::from_raw_parts(*params.add(i) as *const u8, n) };
                h.bytes(bytes);
                budget -= n;
                if budget == 0 {
                    break;
                }
            }
        });
    } else if !extra.is_null() {
        // SAFETY: `extra` is an _END-terminated key/value array (cuda.h).
        let (buf, len) = unsafe { crate::params::extra_buffer(extra) };
        if !buf.is_null() {
            // SAFETY: the driver reads `len` bytes at `buf`: so can we.
            h.bytes(unsafe { std::slice::from_raw_parts(buf, len.min(budget)) });
        }
    }
}

/// Counts a launch and, with ids on, writes its id ahead of it.
///
/// # Safety
/// The arguments are the launch's own.
unsafe fn before(
    shape: Shape,
    stream: CuStream,
    per_thread: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) {
    stats::bump(&stats::LAUNCHES);
    let config = crate::config::get();
    if !config.marks || !marker::wanted() {
        return;
    }
    // The wrapper's own CPU time, measured only when it is printed.
    let t0 = config.log.then(Instant::now);
    let function = shape.function as CuFunction;
    let ring = crate::footprint::asked();
    // The pointer words, scanned once for the id and the footprint.
    let ptrs = if ring.is_some() || config.id_args == IdArgs::Pointers {
        // SAFETY: the caller's promise.
        unsafe { crate::footprint::pointer_words(function, params, extra) }
    } else {
        crate::footprint::PointerWords::default()
    };
    let mut h = Hasher::default();
    h.shape(&shape);
    match config.id_args {
        IdArgs::None => {}
        IdArgs::Pointers => ptrs.words.iter().for_each(|&w| h.word(w)),
        // SAFETY: the caller's promise.
        IdArgs::All => unsafe { hash_args(&mut h, function, params, extra) },
    }
    let id = h.finish();
    if config.id_log.is_some() {
        stats::log_id(id);
    }
    let t1 = t0.map(|_| Instant::now());
    // Before the id's write is enqueued: the daemon finds a launch in the
    // ring before the page can name it.
    let key = marker::stream_key(stream, per_thread, marker::tid());
    if let Some(ring) = &ring {
        crate::footprint::publish(ring, id, key, &ptrs);
    }
    // SAFETY: the launch's own stream.
    unsafe { marker::mark(stream, per_thread, id) };
    if let (Some(t0), Some(t1)) = (t0, t1) {
        stats::add_ns(&stats::HASH_NS, t1 - t0);
        stats::add_ns(&stats::MARK_NS, t1.elapsed());
    }
}

fn load<F: Copy>(slot: &AtomicPtr<c_void>) -> F {
    let p = slot.load(Ordering::Acquire);
    // SAFETY: wrap.rs stored the driver's entry point of type F in `slot`
    // before handing out the wrapper that calls this.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

macro_rules! launch_wrapper {
    ($name:ident, $real:ident, $per_thread:expr) => {
        /// `cuLaunchKernel` (or its per-thread variant): marked, then launched.
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            f: CuFunction,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            smem: c_uint,
            stream: CuStream,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CuResult {
            let shape = Shape {
                function: f as u64,
                grid: [gx, gy, gz],
                block: [bx, by, bz],
                shared_mem: smem,
            };
            // SAFETY: the launch's own arguments.
            unsafe { before(shape, stream, $per_thread, params, extra) };
            // SAFETY: the real entry point with the caller's arguments.
            unsafe {
                load::<Launch>(&$real)(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra)
            }
        }
    };
}

launch_wrapper!(launch_kernel, REAL_LAUNCH, false);
launch_wrapper!(launch_kernel_ptsz, REAL_LAUNCH_PTSZ, true);

macro_rules! coop_wrapper {
    ($name:ident, $real:ident, $per_thread:expr) => {
        /// `cuLaunchCooperativeKernel` (or its per-thread variant).
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            f: CuFunction,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            smem: c_uint,
            stream: CuStream,
            params: *mut *mut c_void,
        ) -> CuResult {
            let shape = Shape {
                function: f as u64,
                grid: [gx, gy, gz],
                block: [bx, by, bz],
                shared_mem: smem,
            };
            // SAFETY: the launch's own arguments.
            unsafe { before(shape, stream, $per_thread, params, std::ptr::null_mut()) };
            // SAFETY: the real entry point with the caller's arguments.
            unsafe { load::<Coop>(&$real)(f, gx, gy, gz, bx, by, bz, smem, stream, params) }
        }
    };
}

coop_wrapper!(launch_cooperative, REAL_COOP, false);
coop_wrapper!(launch_cooperative_ptsz, REAL_COOP_PTSZ, true);

macro_rules! ex_wrapper {
    ($name:ident, $real:ident, $per_thread:expr) => {
        /// `cuLaunchKernelEx` (or its per-thread variant).
        pub unsafe extern "C" fn $name(
            config: *const LaunchConfig,
            f: CuFunction,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CuResult {
            if !config.is_null() {
                // SAFETY: the driver reads *config: so can we.
                let c = unsafe { &*config };
                let shape = Shape {
                    function: f as u64,
                    grid: c.grid,
                    block: c.block,
                    shared_mem: c.shared_mem_bytes,
                };
                // SAFETY: the launch's own arguments.
                unsafe { before(shape, c.stream, $per_thread, params, extra) };
            }
            // SAFETY: the real entry point with the caller's arguments.
            unsafe { load::<LaunchEx>(&$real)(config, f, params, extra) }
        }
    };
}

ex_wrapper!(launch_kernel_ex, REAL_LAUNCH_EX, false);
ex_wrapper!(launch_kernel_ex_ptsz, REAL_LAUNCH_EX_PTSZ, true);
