//! The GPU fence of a free: a CUDA event recorded on the free's stream
//! when the allocator reports the free, queried later. An event completes
//! once all work queued on its stream before it has completed (cuda.h,
//! `cuEventRecord`), so a completed event means no kernel queued before the
//! free still reads or writes the freed memory.

use super::protocol::Fence;
use crate::driver::{self, CuResult, CuStream, CUDA_SUCCESS};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

type CuEvent = *mut c_void;
type CuContext = *mut c_void;
/// `CU_EVENT_DISABLE_TIMING`: the cheapest event.
const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: c_int = 2;
/// The CUDA version whose `cuCtxGetDevice` ABI is `(CUdevice *)`.
pub use driver::CTX_GET_DEVICE_VERSION;
/// Events kept for reuse at most (the rest are destroyed).
const POOL: usize = 1024;

/// The driver calls the fence makes (cuda.h, CUDA 13.0 ABI, except
/// `cuCtxGetDevice`'s, asked for at 2.0).
pub struct EventCalls {
    create: unsafe extern "C" fn(*mut CuEvent, c_uint) -> CuResult,
    record: unsafe extern "C" fn(CuEvent, CuStream) -> CuResult,
    query: unsafe extern "C" fn(CuEvent) -> CuResult,
    destroy: unsafe extern "C" fn(CuEvent) -> CuResult,
    exchange_capture_mode: unsafe extern "C" fn(*mut c_int) -> CuResult,
    ctx_get_device: unsafe extern "C" fn(*mut c_int) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
}

macro_rules! get {
    ($name:literal) => {
        get!($name, driver::API_VERSION)
    };
    ($name:literal, $version:expr) => {{
        let p = driver::resolve_at($name, $version, 0);
        if p.is_null() {
            return None;
        }
        // SAFETY: the driver's entry point for this name at $version,
        // whose ABI is the field's type.
        unsafe { driver::cast(p) }
    }};
}

impl EventCalls {
    fn resolve() -> Option<EventCalls> {
        Some(EventCalls {
            create: get!(c"cuEventCreate"),
            record: get!(c"cuEventRecord"),
            query: get!(c"cuEventQuery"),
            destroy: get!(c"cuEventDestroy"),
            exchange_capture_mode: get!(c"cuThreadExchangeStreamCaptureMode"),
            // At 2.0: at 13.0 the driver returns cuCtxGetDevice_v2, which
            // takes a context too; called with one argument it reads
            // whatever the register holds as the context (the likely cause
            // of the jobs that crashed in BENCHMARKS-gpu.md run 42;
            // tests/marks_e2e.rs fails with it).
            ctx_get_device: get!(c"cuCtxGetDevice", CTX_GET_DEVICE_VERSION),
            ctx_get_current: get!(c"cuCtxGetCurrent"),
            ctx_set_current: get!(c"cuCtxSetCurrent"),
        })
    }
}

static CALLS: OnceLock<Option<EventCalls>> = OnceLock::new();

/// The event calls, once a real cuGetProcAddress is known; None if the
/// driver lacks one.
pub fn calls() -> Option<&'static EventCalls> {
    driver::calls()?;
    CALLS.get_or_init(EventCalls::resolve).as_ref()
}

/// While alive, this thread's stream-capture mode is "relaxed": a query
/// or record of ours never invalidates another thread's graph capture in
/// the global mode (PyTorch guards its own event queries the same way).
pub struct Relaxed {
    prev: c_int,
    calls: &'static EventCalls,
}

impl Relaxed {
    pub fn new(calls: &'static EventCalls) -> Relaxed {
        let mut prev = CAPTURE_MODE_RELAXED;
        // SAFETY: exchanging this thread's mode through a local.
        unsafe { (calls.exchange_capture_mode)(&mut prev) };
        Relaxed { prev, calls }
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        // SAFETY: restoring the mode we exchanged.
        unsafe { (self.calls.exchange_capture_mode)(&mut self.prev) };
    }
}

/// Whether the calling thread's current context is device `device`: only
/// then is the legacy default stream (handle 0) the device's own.
pub fn current_device_is(calls: &EventCalls, device: c_int) -> bool {
    let mut d: c_int = -1;
    // SAFETY: a local out-parameter.
    let rc = unsafe { (calls.ctx_get_device)(&mut d) };
    rc == CUDA_SUCCESS && d == device
}

thread_local! {
    /// On the marks flusher's thread: the context it made current (its
    /// own; the job's threads' contexts are never changed).
    static FLUSHER_CONTEXT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Marks the calling thread as the marks flusher: [`CudaFence::passed`]
/// makes each event's context current there before it asks the driver.
pub fn become_flusher() {
    FLUSHER_CONTEXT.with(|c| c.set(Some(0)));
}

/// An event recorded on a free's stream, and the context it belongs to.
pub struct Point {
    event: usize,
    context: usize,
}

/// Events on the frees' streams.
pub struct CudaFence {
    calls: &'static EventCalls,
    pool: Vec<Point>,
}

impl CudaFence {
    pub fn new(calls: &'static EventCalls) -> CudaFence {
        CudaFence {
            calls,
            pool: Vec::new(),
        }
    }

    /// An event of the current context `context`: a pooled one of it, or
    /// a new one.
    fn event(&mut self, context: usize) -> Option<Point> {
        if let Some(i) = self.pool.iter().rposition(|p| p.context == context) {
            return Some(self.pool.swap_remove(i));
        }
        let mut e: CuEvent = std::ptr::null_mut();
        // SAFETY: creating an event in the current context into a local.
        let rc = unsafe { (self.calls.create)(&mut e, EVENT_DISABLE_TIMING) };
        (rc == CUDA_SUCCESS).then_some(Point {
            event: e as usize,
            context,
        })
    }

    /// The calling thread's current context; None without one.
    fn current(&self) -> Option<usize> {
        let mut c: CuContext = std::ptr::null_mut();
        // SAFETY: a local out-parameter.
        let rc = unsafe { (self.calls.ctx_get_current)(&mut c) };
        (rc == CUDA_SUCCESS && !c.is_null()).then_some(c as usize)
    }

    /// On the flusher's thread, makes `context` current (the driver's
    /// event calls act in the calling thread's current context; that
    /// thread starts with none). Elsewhere nothing: the job's threads keep
    /// theirs, and the allocator calls from the thread that recorded.
    fn enter(&self, context: usize) -> bool {
        FLUSHER_CONTEXT.with(|cur| match cur.get() {
            None => true,
            Some(c) if c == context => true,
            Some(_) => {
                // SAFETY: `context` was current on the thread that recorded
                // the event, and the job holds it while it allocates.
                let ok =
                    unsafe { (self.calls.ctx_set_current)(context as CuContext) } == CUDA_SUCCESS;
                cur.set(ok.then_some(context).or(Some(0)));
                ok
            }
        })
    }
}

impl Fence for CudaFence {
    type Token = Point;

    fn record(&mut self, stream: u64) -> Option<Point> {
        let calls = driver::calls()?;
        let s = stream as usize as CuStream;
        let mut status = 0;
        // SAFETY: cuStreamIsCapturing on the allocator's stream handle.
        let rc = unsafe { (calls.stream_is_capturing)(s, &mut status) };
        if rc != CUDA_SUCCESS || status != 0 {
            // Under capture an event record would be captured, not done:
            // no fence, so no mark.
            return None;
        }
        // No current context: no event to record, so no mark (the safe side).
        let p = self.event(self.current()?)?;
        // SAFETY: recording our event on the allocator's stream.
        let rc = unsafe { (self.calls.record)(p.event as CuEvent, s) };
        if rc != CUDA_SUCCESS {
            self.release(p);
            return None;
        }
        Some(p)
    }

    fn passed(&mut self, t: &Point) -> bool {
        // SAFETY: querying our own event in its context; NOT_READY and
        // errors are "no".
        self.enter(t.context) && unsafe { (self.calls.query)(t.event as CuEvent) == CUDA_SUCCESS }
    }

    fn release(&mut self, t: Point) {
        if self.pool.len() < POOL {
            self.pool.push(t);
        } else if self.enter(t.context) {
            // SAFETY: destroying our own event, no longer referenced, in
            // its context.
            unsafe { (self.calls.destroy)(t.event as CuEvent) };
        }
    }
}
