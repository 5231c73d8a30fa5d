//! Copy and memset wrappers: each gets an execution id written in stream
//! order just before it, as a kernel launch does (launch.rs).
//!
//! Why: the copy engines fault on managed memory too (UVM services their
//! non-replayable faults, and reports them as GPU faults). A job's first
//! faults are its copies into fresh managed memory (`model.cuda()` copies
//! every weight before any kernel runs), and every step copies its input
//! batch: without a marker those faults carried no id (before the first
//! kernel) or the id of whatever kernel ran last on the stream. The id is
//! the operation, the device address it writes (or reads, for copies to
//! the host) and its size: the caching allocator hands the same block out
//! again each step, so a step's copies keep their ids.
//!
//! The arguments pass through untouched; pointers of either side are
//! 64-bit integers in the ABI, so one signature serves every memcpy.

// The wrappers' safety contract is the driver entry point's own: the
// caller passes what cuda.h requires, and the wrapper forwards it.
#![allow(clippy::missing_safety_doc)]

use crate::driver::{CuResult, CuStream};
use crate::exec_id::Hasher;
use crate::{marker, stats};
use std::ffi::{c_uchar, c_uint, c_ushort, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// What a copy's id is made of (its first word, so that a copy and a
/// memset of the same range differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Op {
    HtoD = 0xC0_0001,
    DtoH = 0xC0_0002,
    DtoD = 0xC0_0003,
    Any = 0xC0_0004,
    Set8 = 0xC0_0011,
    Set16 = 0xC0_0012,
    Set32 = 0xC0_0014,
}

/// The id of a copy or memset of `bytes` at device address `addr`.
pub fn copy_id(op: Op, addr: u64, bytes: usize) -> u64 {
    let mut h = Hasher::default();
    h.word(op as u64);
    h.word(addr);
    h.word(bytes as u64);
    h.finish()
}

/// Writes the id of a copy on `stream` ahead of it, with ids on.
///
/// # Safety
/// `stream` is the copy's own stream (null for the synchronous calls:
/// the legacy default stream, or the thread's with `per_thread`).
unsafe fn before(op: Op, addr: u64, bytes: usize, stream: CuStream, per_thread: bool) {
    if !crate::config::get().marks || !marker::wanted() {
        return;
    }
    // SAFETY: the caller's promise.
    if unsafe { marker::mark(stream, per_thread, copy_id(op, addr, bytes)) } {
        stats::bump(&stats::COPIES_MARKED);
    }
}

fn load<F: Copy>(slot: &AtomicPtr<c_void>) -> F {
    let p = slot.load(Ordering::Acquire);
    // SAFETY: wrap.rs stored the driver's entry point of type F in `slot`
    // before handing out the wrapper that calls this.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

type Sync3 = unsafe extern "C" fn(u64, u64, usize) -> CuResult;
type Async4 = unsafe extern "C" fn(u64, u64, usize, CuStream) -> CuResult;

/// Declares the real-address slot and the wrapper of one memcpy entry
/// point; `$dev` picks the device-side address (0: destination, 1: source).
macro_rules! memcpy {
    (sync $name:ident, $real:ident, $op:expr, $dev:expr, $pt:expr) => {
        pub static $real: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        /// A synchronous memcpy (legacy or per-thread default stream).
        pub unsafe extern "C" fn $name(dst: u64, src: u64, n: usize) -> CuResult {
            let addr = [dst, src][$dev];
            // SAFETY: the synchronous calls run on the default stream.
            unsafe { before($op, addr, n, std::ptr::null_mut(), $pt) };
            // SAFETY: the real entry point with the caller's arguments.
            unsafe { load::<Sync3>(&$real)(dst, src, n) }
        }
    };
    (async $name:ident, $real:ident, $op:expr, $dev:expr, $pt:expr) => {
        pub static $real: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        /// An asynchronous memcpy on the caller's stream.
        pub unsafe extern "C" fn $name(dst: u64, src: u64, n: usize, s: CuStream) -> CuResult {
            let addr = [dst, src][$dev];
            // SAFETY: the copy's own stream.
            unsafe { before($op, addr, n, s, $pt) };
            // SAFETY: the real entry point with the caller's arguments.
            unsafe { load::<Async4>(&$real)(dst, src, n, s) }
        }
    };
}

memcpy!(sync htod, REAL_HTOD, Op::HtoD, 0, false);
memcpy!(sync htod_pt, REAL_HTOD_PT, Op::HtoD, 0, true);
memcpy!(sync dtoh, REAL_DTOH, Op::DtoH, 1, false);
memcpy!(sync dtoh_pt, REAL_DTOH_PT, Op::DtoH, 1, true);
memcpy!(sync dtod, REAL_DTOD, Op::DtoD, 0, false);
memcpy!(sync dtod_pt, REAL_DTOD_PT, Op::DtoD, 0, true);
memcpy!(sync any, REAL_ANY, Op::Any, 0, false);
memcpy!(sync any_pt, REAL_ANY_PT, Op::Any, 0, true);
memcpy!(async htod_async, REAL_HTOD_ASYNC, Op::HtoD, 0, false);
memcpy!(async htod_async_pt, REAL_HTOD_ASYNC_PT, Op::HtoD, 0, true);
memcpy!(async dtoh_async, REAL_DTOH_ASYNC, Op::DtoH, 1, false);
memcpy!(async dtoh_async_pt, REAL_DTOH_ASYNC_PT, Op::DtoH, 1, true);
memcpy!(async dtod_async, REAL_DTOD_ASYNC, Op::DtoD, 0, false);
memcpy!(async dtod_async_pt, REAL_DTOD_ASYNC_PT, Op::DtoD, 0, true);
memcpy!(async any_async, REAL_ANY_ASYNC, Op::Any, 0, false);
memcpy!(async any_async_pt, REAL_ANY_ASYNC_PT, Op::Any, 0, true);

/// Declares the slot and wrapper of one memset entry point; the value
/// keeps its C type (unsigned char / short / int), forwarded as given.
macro_rules! memset {
    (sync $name:ident, $real:ident, $op:expr, $t:ty, $pt:expr) => {
        pub static $real: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        /// A synchronous memset (legacy or per-thread default stream).
        pub unsafe extern "C" fn $name(dst: u64, v: $t, n: usize) -> CuResult {
            // SAFETY: the synchronous calls run on the default stream.
            unsafe { before($op, dst, n, std::ptr::null_mut(), $pt) };
            // SAFETY: the real entry point with the caller's arguments.
            unsafe { load::<unsafe extern "C" fn(u64, $t, usize) -> CuResult>(&$real)(dst, v, n) }
        }
    };
    (async $name:ident, $real:ident, $op:expr, $t:ty, $pt:expr) => {
        pub static $real: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        /// An asynchronous memset on the caller's stream.
        pub unsafe extern "C" fn $name(dst: u64, v: $t, n: usize, s: CuStream) -> CuResult {
            // SAFETY: the memset's own stream.
            unsafe { before($op, dst, n, s, $pt) };
            type F = unsafe extern "C" fn(u64, $t, usize, CuStream) -> CuResult;
            // SAFETY: the real entry point with the caller's arguments.
            unsafe { load::<F>(&$real)(dst, v, n, s) }
        }
    };
}

memset!(sync set8, REAL_SET8, Op::Set8, c_uchar, false);
memset!(sync set8_pt, REAL_SET8_PT, Op::Set8, c_uchar, true);
memset!(sync set16, REAL_SET16, Op::Set16, c_ushort, false);
memset!(sync set16_pt, REAL_SET16_PT, Op::Set16, c_ushort, true);
memset!(sync set32, REAL_SET32, Op::Set32, c_uint, false);
memset!(sync set32_pt, REAL_SET32_PT, Op::Set32, c_uint, true);
memset!(async set8_async, REAL_SET8_ASYNC, Op::Set8, c_uchar, false);
memset!(async set8_async_pt, REAL_SET8_ASYNC_PT, Op::Set8, c_uchar, true);
memset!(async set16_async, REAL_SET16_ASYNC, Op::Set16, c_ushort, false);
memset!(async set16_async_pt, REAL_SET16_ASYNC_PT, Op::Set16, c_ushort, true);
memset!(async set32_async, REAL_SET32_ASYNC, Op::Set32, c_uint, false);
memset!(async set32_async_pt, REAL_SET32_ASYNC_PT, Op::Set32, c_uint, true);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copys_id_is_its_operation_address_and_size() {
        let a = copy_id(Op::HtoD, 0x7f00_0000_0000, 4096);
        assert_eq!(a, copy_id(Op::HtoD, 0x7f00_0000_0000, 4096));
        assert_ne!(a, copy_id(Op::DtoD, 0x7f00_0000_0000, 4096));
        assert_ne!(a, copy_id(Op::HtoD, 0x7f00_0000_1000, 4096));
        assert_ne!(a, copy_id(Op::HtoD, 0x7f00_0000_0000, 4097));
        assert_ne!(
            copy_id(Op::Set8, 0x1000, 64),
            copy_id(Op::Set32, 0x1000, 64)
        );
    }
}
