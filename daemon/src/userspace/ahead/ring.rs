//! The process's launch ring: found among its file descriptors by the
//! memfd's name and opened through /proc/PID/fd (the access check of
//! pidfd_getfd, as execfeed.rs does for the page), mapped, and checked
//! (format, size, writer); a ring of another format is named
//! (`Foreign`), not passed over.

use prescient_uapi::launchring::{
    format_of, Ring, FORMAT, MEMFD_NAME, RING_BYTES, RING_WORDS, W_PID,
};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;

/// A mapping of a valid ring written by the process.
pub(super) struct Mapped {
    addr: usize,
}

/// A ring the process wrote in a format this prescientd does not read: a
/// runtime of another release (the job started before an upgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::userspace) struct Foreign {
    /// Its format version, and its size in bytes.
    pub(in crate::userspace) format: u8,
    pub(in crate::userspace) bytes: u64,
}

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the job's launch ring has format {} ({} bytes); this prescientd reads format {} \
             ({RING_BYTES} bytes): its runtime is of another release, so this job runs \
             without launch footprints; start it again with this release's `prescientctl run`",
            self.format, self.bytes, FORMAT
        )
    }
}

impl Mapped {
    /// Maps the ring of `pid`, if there is a valid one; `Err` if the
    /// process wrote one of another format.
    pub(super) fn find(pid: i32) -> Result<Option<Mapped>, Foreign> {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return Ok(None);
        };
        let prefix = format!("/memfd:{MEMFD_NAME}");
        let mut foreign = None;
        for e in dir.flatten() {
            let Ok(link) = std::fs::read_link(e.path()) else {
                continue;
            };
            if !link.to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let opened = (std::fs::OpenOptions::new().read(true).write(true)).open(e.path());
            let Ok(f) = opened else { continue };
            if let Some(m) = Self::map(&f, pid) {
                return Ok(Some(m));
            }
            foreign = foreign.or_else(|| Self::foreign(&f, pid));
        }
        foreign.map_or(Ok(None), Err)
    }

    /// The format of a ring `pid` wrote that this build does not read, read
    /// from its header words (the same place in every format so far).
    fn foreign(f: &std::fs::File, pid: i32) -> Option<Foreign> {
        let word = |i: usize| {
            let mut b = [0u8; 8];
            f.read_exact_at(&mut b, 8 * i as u64).ok()?;
            Some(u64::from_ne_bytes(b))
        };
        let format = format_of(word(0)?)?;
        let bytes = f.metadata().ok()?.len();
        let ours = format == FORMAT && bytes >= RING_BYTES as u64;
        (!ours && word(W_PID)? == pid as u64).then_some(Foreign { format, bytes })
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
        let f = named_memfd(RING_BYTES as u64);
        // SAFETY: mapping our own memfd (never unmapped: 'static).
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
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping just made, RING_BYTES long, kept.
        let w = unsafe { std::slice::from_raw_parts(p as *const AtomicU64, RING_WORDS) };
        (f, w)
    }

    /// A memfd by the ring's name, `len` bytes long, in this process.
    fn named_memfd(len: u64) -> std::fs::File {
        let name = std::ffi::CString::new(MEMFD_NAME).unwrap();
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd is ours.
        let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(len).unwrap();
        f
    }

    /// A ring as the runtime of format 2 (32-word records, before GPU run
    /// 174) made it, in this process: named, refused with what it is, and
    /// found by no one when another pid wrote it or no writer initialised
    /// it yet.
    #[test]
    fn a_ring_of_another_format_is_named_not_missed() {
        let _one = ONE_RING.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let old_bytes = (24 + 4096 * 32 + prescient_uapi::launchring::ADVICE_WORDS) as u64 * 8;
        let f = named_memfd(old_bytes);
        let header = |pid: u32, magic: u64| {
            for (i, w) in [magic, 4096, 32, u64::from(pid)].into_iter().enumerate() {
                f.write_all_at(&w.to_ne_bytes(), 8 * i as u64).unwrap();
            }
        };
        assert_eq!(Mapped::find(me as i32).err(), None, "not initialised");
        let format2 = prescient_uapi::launchring::MAGIC_NAME | 2;
        header(me + 1, format2);
        assert!(
            matches!(Mapped::find(me as i32), Ok(None)),
            "another writer"
        );
        header(me, format2);
        let foreign = Mapped::find(me as i32).err().expect("named");
        assert_eq!(
            foreign,
            Foreign {
                format: 2,
                bytes: old_bytes
            }
        );
        let said = foreign.to_string();
        assert!(
            said.contains("format 2") && said.contains("reads format 3"),
            "{said}"
        );
        assert!(said.contains("prescientctl run"), "{said}");
    }

    /// A ring made as the runtime makes it (a memfd by that name), in
    /// this process: found, and refused when another pid wrote it.
    #[test]
    fn the_ring_is_found_by_name_and_checked() {
        let _one = ONE_RING.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id() as i32;
        let (f, w) = runtime_ring();
        assert!(matches!(Mapped::find(me), Ok(None)), "not initialised");
        let m = Mapped::map(&f, me);
        assert!(m.is_none());
        // Initialised through a mapping of our own, as the runtime does.
        Ring::new(w).unwrap().init(me as u32 + 1);
        assert!(matches!(Mapped::find(me), Ok(None)), "another writer");
        Ring::new(w).unwrap().init(me as u32);
        let m = Mapped::find(me).unwrap().expect("found");
        m.ring().want(true);
        assert!(Ring::new(w).unwrap().wanted(), "one memory");
    }
}
