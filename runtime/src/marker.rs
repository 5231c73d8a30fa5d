//! Stream-ordered execution-id markers: the process's page (a memfd the
//! daemon finds by name), registered with the driver once, and one
//! `cuStreamWriteValue64` per launch into the launch stream's slot.
//!
//! The write is enqueued on the launch's own stream just before the kernel,
//! so the GPU stores the id when the stream reaches that kernel. Under
//! stream capture the write is captured as a memop node with the same
//! value, so a replayed graph marks its kernels too. The page is never
//! registered during a capture (registration is not a capturable call):
//! a launch captured before the first uncaptured one goes unmarked.

use crate::driver::{self, CuStream, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_SUCCESS};
use crate::page::{page, HOST};
use crate::stats;
use prescient_uapi::execpage::{self, PAGE_BYTES};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

/// The page's state: unmapped, ready, or failed for good.
const UNSET: u8 = 0;
const READY: u8 = 1;
const FAILED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNSET);
/// Device address of the registered page.
static DEVICE: AtomicU64 = AtomicU64::new(0);
static SETUP: Mutex<()> = Mutex::new(());

/// Creates and maps a fresh page; its header names this process.
#[cold]
fn map_page() -> Option<u64> {
    let name = std::ffi::CString::new(execpage::MEMFD_NAME).ok()?;
    // SAFETY: memfd_create with a NUL-terminated name. Not CLOEXEC-free:
    // children make their own page.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is ours; sizing then mapping one page shared.
    let p = unsafe {
        if libc::ftruncate(fd, PAGE_BYTES as libc::off_t) != 0 {
            libc::close(fd);
            return None;
        }
        libc::mmap(
            std::ptr::null_mut(),
            PAGE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    // The fd stays open: the daemon takes its copy of it from our fd table.
    if p == libc::MAP_FAILED {
        return None;
    }
    HOST.store(p as u64, Ordering::Release);
    page()?.init(std::process::id());
    // The launch ring with the page: a reader that finds one finds both.
    crate::footprint::ring::create();
    Some(p as u64)
}

/// Maps and registers the page (first uncaptured launch); false if the
/// page cannot be used now (capturing) or ever (FAILED).
#[cold]
fn setup(calls: &driver::Calls, capturing: bool) -> bool {
    let _g = SETUP.lock().unwrap_or_else(|e| e.into_inner());
    match STATE.load(Ordering::Acquire) {
        READY => return true,
        FAILED => return false,
        _ if capturing => return false,
        _ => {}
    }
    let ok = (|| {
        let host = map_page()? as *mut c_void;
        let mut dev = 0u64;
        // SAFETY: registering our own page-aligned mapping, then asking its
        // device address.
        let rc = unsafe { (calls.host_register)(host, PAGE_BYTES, driver::HOST_REGISTER_FLAGS) };
        if rc != CUDA_SUCCESS && rc != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED {
            return None;
        }
        // SAFETY: as above.
        let rc = unsafe { (calls.host_device_pointer)(&mut dev, host, 0) };
        (rc == CUDA_SUCCESS).then(|| DEVICE.store(dev, Ordering::Release))
    })();
    let state = if ok.is_some() { READY } else { FAILED };
    if state == FAILED {
        eprintln!("prescient-runtime: the execution-id page could not be set up: no execution ids");
    }
    STATE.store(state, Ordering::Release);
    state == READY
}

/// Makes the page at the process's first managed allocation (a context is
/// current there), so that it exists well before the job's first kernel
/// and a reader attached at CUDA's start finds it before the first fault:
/// faults before the page is found carry no id (made at the first launch,
/// it was found up to 100 ms later: 2.0-2.6% of the LM's faults carried no
/// id in BENCHMARKS-gpu.md run 46, 0.16% in run 51 with the page made
/// here). Only when ids may be written.
pub fn setup_early() {
    if STATE.load(Ordering::Acquire) != UNSET || !crate::config::get().marks {
        return;
    }
    if let Some(calls) = driver::calls() {
        // Not capturing: no stream can be in capture before the process's
        // first allocation has returned (capture needs work to capture).
        setup(calls, false);
    }
}

/// The slot key of a stream: the per-thread default stream is one stream
/// per thread, the legacy default stream one per process.
pub fn stream_key(stream: CuStream, per_thread: bool, tid: u64) -> u64 {
    match stream as usize {
        0 if per_thread => (tid << 2) | 2,
        driver::STREAM_PER_THREAD => (tid << 2) | 2,
        0 | driver::STREAM_LEGACY => 1,
        s => s as u64,
    }
}

pub(crate) fn tid() -> u64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() as u64 }
}

/// Is the stream capturing? (A failed query counts as capturing: the
/// safe answer, since registration is then skipped.)
fn capturing(calls: &driver::Calls, stream: CuStream, per_thread: bool) -> bool {
    let mut status = 0;
    let f = if per_thread {
        calls.stream_is_capturing_ptsz
    } else {
        calls.stream_is_capturing
    };
    // SAFETY: cuStreamIsCapturing on the caller's stream, local out-param.
    let rc = unsafe { f(stream, &mut status) };
    rc != CUDA_SUCCESS || status != 0
}

/// Should this launch be marked? Not in auto mode while no reader asks
/// for ids (once the page exists: the first launch makes it).
pub fn wanted() -> bool {
    if !crate::config::get().marks_on_request || STATE.load(Ordering::Acquire) != READY {
        return true;
    }
    page().is_some_and(|p| p.ids_wanted())
}

/// Enqueues the write of `id` into `stream`'s slot before a launch; true
/// if it was enqueued.
///
/// # Safety
/// `stream` is the launch's stream (a handle the driver accepts).
pub unsafe fn mark(stream: CuStream, per_thread: bool, id: u64) -> bool {
    let Some(calls) = driver::calls() else {
        return false;
    };
    if STATE.load(Ordering::Acquire) != READY && !setup(calls, capturing(calls, stream, per_thread))
    {
        stats::bump(&stats::UNMARKED);
        return false;
    }
    let Some(page) = page() else {
        return false;
    };
    if crate::config::get().marks_on_request && !page.ids_wanted() {
        return false; // the launch that made the page, in auto mode
    }
    let slot = page.claim(stream_key(stream, per_thread, tid())).slot();
    let addr = DEVICE.load(Ordering::Acquire) + execpage::value_offset(slot) as u64;
    let f = if per_thread {
        calls.write_value64_ptsz
    } else {
        calls.write_value64
    };
    // SAFETY: a 64-bit write into our registered page, on the launch's
    // stream; flags 0, the default write. It costs about 2.1 us of GPU
    // time between two kernels, whatever its width or target, and the v2
    // memops refuse NO_MEMORY_BARRIER (BENCHMARKS-gpu.md run 50).
    let rc = unsafe { f(stream, addr, execpage::encode(id), 0) };
    if rc == CUDA_SUCCESS {
        page.count_launch();
        stats::bump(&stats::MARKED);
    } else {
        stats::bump(&stats::UNMARKED);
    }
    rc == CUDA_SUCCESS
}

/// In a forked child: the parent's page and registration are not ours.
extern "C" fn after_fork_in_child() {
    HOST.store(0, Ordering::Release);
    DEVICE.store(0, Ordering::Release);
    STATE.store(UNSET, Ordering::Release);
    crate::footprint::ring::forget();
    crate::advice::forget_published();
    crate::marks::after_fork_in_child();
}

/// Arranges for a forked child to make its own page.
pub fn install_fork_handler() {
    // SAFETY: registering a plain extern "C" function for the child.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_streams_get_their_own_keys() {
        let s = 0x7f00_dead_b000usize as CuStream;
        assert_eq!(stream_key(s, false, 5), 0x7f00_dead_b000);
        assert_eq!(stream_key(s, true, 5), 0x7f00_dead_b000);
        assert_eq!(stream_key(std::ptr::null_mut(), false, 5), 1);
        assert_eq!(stream_key(1 as CuStream, true, 5), 1);
        assert_eq!(stream_key(std::ptr::null_mut(), true, 5), 22);
        assert_eq!(stream_key(2 as CuStream, false, 6), 26);
        assert_ne!(
            stream_key(std::ptr::null_mut(), true, 5),
            stream_key(std::ptr::null_mut(), true, 6)
        );
    }
}
