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
/// [`IdArgs::All`] mode; `sizes`: its function's parameter sizes, read only
/// when `params` is not null.
///
/// # Safety
/// `params` (with `sizes`) and `extra` are the launch's own, valid as the
/// driver requires.
unsafe fn hash_args(
    h: &mut Hasher,
    sizes: Option<&[u32]>,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) {
    let mut budget = MAX_ARG_BYTES;
    if !params.is_null() {
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
    } else if !extra.is_null() {
        // SAFETY: `extra` is an _END-terminated key/value array (cuda.h).
        let (buf, len) = unsafe { crate::params::extra_buffer(extra) };
        if !buf.is_null() {
            // SAFETY: the driver reads `len` bytes at `buf`: so can we.
            h.bytes(unsafe { std::slice::from_raw_parts(buf, len.min(budget)) });
        }
    }
}

/// A launch's pointer words when `scan` (else none) and, when `all`
/// ([`IdArgs::All`]), its argument bytes hashed into `h`, with one lookup
/// of `f`'s parameter sizes for both (the lookup is on every launch's
/// path). No lookup when neither needs the sizes: no scan, and an `all`
/// launch that passes its arguments in `extra`, whose buffer has its size.
///
/// # Safety
/// `params` and `extra` are the launch's own, valid as the driver requires.
unsafe fn read_args(
    h: &mut Hasher,
    f: CuFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    scan: bool,
    all: bool,
) -> crate::footprint::PointerWords {
    let read = |h: &mut Hasher, sizes: Option<&[u32]>| {
        if all {
            // SAFETY: the caller's promise.
            unsafe { hash_args(h, sizes, params, extra) };
        }
        if scan {
            // SAFETY: the caller's promise.
            unsafe { crate::footprint::pointer_words(sizes, params, extra) }
        } else {
            crate::footprint::PointerWords::default()
        }
    };
    if scan || (all && !params.is_null()) {
        crate::params::with_param_sizes(f, |sizes| read(h, sizes))
    } else {
        read(h, None)
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
    let mut h = Hasher::default();
    h.shape(&shape);
    // The pointer words, scanned once for the id and the footprint.
    let scan = ring.is_some() || config.id_args == IdArgs::Pointers;
    let all = config.id_args == IdArgs::All;
    // SAFETY: the caller's promise.
    let ptrs = unsafe { read_args(&mut h, function, params, extra, scan, all) };
    if config.id_args == IdArgs::Pointers {
        ptrs.words.iter().for_each(|&w| h.word(w));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec_id::{id_of, Shape};
    use crate::params::{seed, LOOKUPS};

    /// `vectorized_elementwise_kernel<4, F, at::detail::Array<char*, 3>>(int
    /// N, F f, Array data)` (as scan.rs's test): parameters of 4, 1 (an
    /// empty functor) and 24 bytes, the tensors' addresses in the last.
    const SIZES: [u32; 3] = [4, 1, 24];
    const DATA: [u64; 3] = [0x7f00_0000_0000, 0x7f00_0020_0000, 0x7f00_0040_0000];

    /// Runs `read_args` on that launch (its arguments in `params`, or in an
    /// `extra` buffer) and returns the id, the pointer words and the
    /// lookups of the sizes it made.
    fn launch(f: CuFunction, in_extra: bool, scan: bool, all: bool) -> (u64, Vec<u64>, u32) {
        let n: i32 = 1 << 20;
        let functor: u8 = 0;
        let mut params: [*mut c_void; 3] = [
            &n as *const i32 as *mut c_void,
            &functor as *const u8 as *mut c_void,
            DATA.as_ptr() as *mut c_void,
        ];
        let size = std::mem::size_of_val(&DATA);
        let mut extra: [*mut c_void; 5] = [
            crate::driver::LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            DATA.as_ptr() as *mut c_void,
            crate::driver::LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            &size as *const usize as *mut c_void,
            crate::driver::LAUNCH_PARAM_END as *mut c_void,
        ];
        let (p, e) = if in_extra {
            (std::ptr::null_mut(), extra.as_mut_ptr())
        } else {
            (params.as_mut_ptr(), std::ptr::null_mut())
        };
        let mut h = Hasher::default();
        h.shape(&shape(f));
        let before = LOOKUPS.with(|c| c.get());
        // SAFETY: the arguments above, sized as the kernel's.
        let ptrs = unsafe { read_args(&mut h, f, p, e, scan, all) };
        (h.finish(), ptrs.words, LOOKUPS.with(|c| c.get()) - before)
    }

    fn shape(f: CuFunction) -> Shape {
        Shape {
            function: f as u64,
            grid: [4096, 1, 1],
            block: [128, 1, 1],
            shared_mem: 0,
        }
    }

    /// PRESCIENT_ID_ARGS=all with footprints on: the id over all argument
    /// bytes and the footprint's pointer words come from one lookup of the
    /// sizes, as the default (pointers) mode's do; the other modes look up
    /// as often as before (none where nothing needs the sizes).
    #[test]
    fn a_launch_looks_its_parameter_sizes_up_once_at_most() {
        let f = 0x5a17 as CuFunction;
        seed(f, &SIZES);
        crate::footprint::extents::managed_allocated(DATA[0], 8 << 20, false);
        let n = (1i32 << 20).to_ne_bytes();
        let data: Vec<u8> = DATA.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let (id, words, lookups) = launch(f, false, true, true);
        assert_eq!(lookups, 1);
        assert_eq!(id, id_of(&shape(f), [&n[..], &[0u8][..], &data[..]]));
        assert_eq!(words, DATA);
        // The extra buffer: one argument of its size, its words scanned.
        let (id, words, lookups) = launch(f, true, true, true);
        assert_eq!(lookups, 1);
        assert_eq!(id, id_of(&shape(f), [&data[..]]));
        assert_eq!(words, DATA);
        // (scan, all, in_extra) -> lookups.
        for (scan, all, in_extra, want) in [
            (true, false, false, 1),
            (true, false, true, 1),
            (false, true, false, 1),
            (false, true, true, 0),
            (false, false, false, 0),
        ] {
            let (_, words, lookups) = launch(f, in_extra, scan, all);
            assert_eq!(lookups, want, "scan {scan} all {all} extra {in_extra}");
            assert_eq!(words.is_empty(), !scan);
        }
    }
}
