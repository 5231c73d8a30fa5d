//! The process's launch ring (prescient_uapi::launchring): a memfd the
//! daemon finds by name, as it finds the execution-id page, made and
//! mapped with the page (marker.rs) so that a reader that finds one finds
//! both.

use prescient_uapi::launchring::{Ring, MEMFD_NAME, RING_BYTES, RING_WORDS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Host address of the mapping (0: none).
static HOST: AtomicU64 = AtomicU64::new(0);

/// The ring, once mapped.
pub fn ring() -> Option<Ring<'static>> {
    let host = HOST.load(Ordering::Acquire);
    if host == 0 {
        return None;
    }
    // SAFETY: HOST is a live MAP_SHARED mapping of RING_BYTES, page-aligned,
    // never unmapped; AtomicU64 has u64's layout.
    let words = unsafe { std::slice::from_raw_parts(host as *const AtomicU64, RING_WORDS) };
    Ring::new(words)
}

/// Creates and maps the ring (once per process; the caller holds the
/// page's setup lock). A failure leaves the job without footprints.
#[cold]
pub fn create() {
    if HOST.load(Ordering::Acquire) != 0 || !crate::config::get().footprints {
        return;
    }
    let Ok(name) = std::ffi::CString::new(MEMFD_NAME) else {
        return;
    };
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return;
    }
    // SAFETY: fd is ours; sizing then mapping it shared. The fd stays
    // open: the daemon takes its copy of it from our fd table.
    let p = unsafe {
        if libc::ftruncate(fd, RING_BYTES as libc::off_t) != 0 {
            libc::close(fd);
            return;
        }
        libc::mmap(
            std::ptr::null_mut(),
            RING_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        // SAFETY: our own fd, not mapped.
        unsafe { libc::close(fd) };
        return;
    }
    HOST.store(p as u64, Ordering::Release);
    if let Some(r) = ring() {
        r.init(std::process::id());
    }
}

/// In a forked child: the parent's ring is not ours (a child makes its
/// own with its page).
pub fn forget() {
    HOST.store(0, Ordering::Release);
}
