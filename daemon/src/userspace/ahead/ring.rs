//! The process's launch ring: found among its file descriptors by the
//! memfd's name and opened through /proc/PID/fd (the access check of
//! pidfd_getfd, as execfeed.rs does for the page), mapped, and checked
//! (format, size, writer).

use prescient_uapi::launchring::{Ring, MEMFD_NAME, RING_BYTES, RING_WORDS};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;

/// A mapping of a valid ring written by the process.
pub(super) struct Mapped {
    addr: usize,
}

impl Mapped {
    /// Maps the ring of `pid`, if there is a valid one.
    pub(super) fn find(pid: i32) -> Option<Mapped> {
        let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        let prefix = format!("/memfd:{MEMFD_NAME}");
        dir.flatten().find_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            if !link.to_string_lossy().starts_with(&prefix) {
                return None;
            }
            let f = (std::fs::OpenOptions::new().read(true).write(true))
                .open(e.path())
                .ok()?;
            Self::map(&f, pid)
        })
    }

    fn map(f: &std::fs::File, pid: i32) -> Option<Mapped> {
        if f.metadata().ok()?.len() < RING_BYTES as u64 {
            return None;
        }
        // SAFETY: mapping RING_BYTES of a regular memfd we hold, shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RING_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let m = Mapped { addr: p as usize };
        let r = m.ring();
        // A forked child holds its parent's ring too: only the writer's.
        (r.is_valid() && r.writer_pid() == pid as u64).then_some(m)
    }

    /// The ring's words.
    pub(super) fn ring(&self) -> Ring<'_> {
        // SAFETY: addr is a live shared mapping of RING_BYTES (page-aligned),
        // unmapped only on drop; AtomicU64 has u64's layout.
        let words =
            unsafe { std::slice::from_raw_parts(self.addr as *const AtomicU64, RING_WORDS) };
        Ring::new(words).expect("the mapping is RING_WORDS words")
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, RING_BYTES) };
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Tests that make a ring in this process take turns (a reader finds
    /// any ring of the process by name).
    pub(in crate::userspace) static ONE_RING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A memfd ring made as the runtime makes it, and its words (mapped
    /// for the test's life).
    pub(in crate::userspace) fn runtime_ring() -> (std::fs::File, &'static [AtomicU64]) {
        let name = std::ffi::CString::new(MEMFD_NAME).unwrap();
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd is ours.
        let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(RING_BYTES as u64).unwrap();
        // SAFETY: mapping our own memfd (never unmapped: 'static).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RING_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping just made, RING_BYTES long, kept.
        let w = unsafe { std::slice::from_raw_parts(p as *const AtomicU64, RING_WORDS) };
        (f, w)
    }

    /// A ring made as the runtime makes it (a memfd by that name), in
    /// this process: found, and refused when another pid wrote it.
    #[test]
    fn the_ring_is_found_by_name_and_checked() {
        let _one = ONE_RING.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id() as i32;
        let (f, w) = runtime_ring();
        assert!(Mapped::find(me).is_none(), "not initialised");
        let m = Mapped::map(&f, me);
        assert!(m.is_none());
        // Initialised through a mapping of our own, as the runtime does.
        Ring::new(w).unwrap().init(me as u32 + 1);
        assert!(Mapped::find(me).is_none(), "another writer");
        Ring::new(w).unwrap().init(me as u32);
        let m = Mapped::find(me).expect("found");
        m.ring().want(true);
        assert!(Ring::new(w).unwrap().wanted(), "one memory");
    }
}
