//! Execution ids from a process's runtime (prescient-runtime, preloaded by
//! `prescientctl run`): the process's execution-id page
//! (prescient_uapi::execpage), found among its file descriptors by the
//! memfd's name, opened through /proc/PID/fd (the same access check as
//! pidfd_getfd: the daemon may ptrace-read the process), mapped, and read
//! every turn of the process's loop.
//!
//! While the feed is mapped it asks the runtime for ids (the page's control
//! word) as long as the process faults (see [`ids_wanted`]); dropping it
//! stops asking, so a detached job pays nothing for ids.
//!
//! Attribution: a fault is charged to the id the page shows when the loop
//! drains the fault. A faulting kernel is stalled until its fault is
//! served, so on its stream the next kernel's id cannot have been written
//! yet; with several streams the id last seen changing is taken.

use prescient_uapi::execpage::{Page, Reader, MEMFD_NAME, PAGE_BYTES, PAGE_WORDS};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;

/// The engine's 32-bit execution id for a page's 48-bit id (folded; never
/// the engine's "no id").
pub fn engine_id(id48: u64) -> prescient_core::ExecId {
    // The fold prescient.ko uses too (uapi's execpage).
    const _: () = assert!(prescient_core::NO_EXEC == u32::MAX);
    prescient_uapi::execpage::engine_id(id48)
}

/// The execution-id memfd of process `pid`, if its runtime made one: found
/// among its descriptors by the memfd's name and opened through
/// /proc/PID/fd (the access check of pidfd_getfd: the caller may
/// ptrace-read the process). Only a candidate: the format and the writer
/// are checked by whoever maps it (here [`Feed`], or prescient.ko, to
/// which prescientd hands the descriptor with SET_EXEC_PAGE).
pub fn open_page(pid: i32) -> Option<std::fs::File> {
    candidates(pid).next()
}

/// Every descriptor of `pid` that names the memfd, opened read-write.
fn candidates(pid: i32) -> impl Iterator<Item = std::fs::File> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok();
    let prefix = format!("/memfd:{MEMFD_NAME}");
    dir.into_iter().flatten().flatten().filter_map(move |e| {
        let link = std::fs::read_link(e.path()).ok()?;
        if !link.to_string_lossy().starts_with(&prefix) {
            return None;
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(e.path())
            .ok()
    })
}

/// How long the process may go without a GPU fault before the feed stops
/// asking for ids: each id costs the job a ~2.1 us bubble on its stream
/// between two kernels (BENCHMARKS-gpu.md run 50: +5.7% on ResNet-50's
/// step with no fault to attribute), and a process that does not fault
/// needs no prediction. Long against a training step under pressure (the
/// jobs of run 51 faulted every turn), short against a job's life.
pub const IDS_QUIET: std::time::Duration = std::time::Duration::from_secs(5);

/// Should the feed ask for ids, `since_fault` after the process's last
/// GPU fault (None: none yet) and `since_attach` after the attach? Yes at
/// first (the job's first faults come with its first kernels), then while
/// faults have come within [`IDS_QUIET`].
pub fn ids_wanted(
    since_fault: Option<std::time::Duration>,
    since_attach: std::time::Duration,
) -> bool {
    since_attach < IDS_QUIET || since_fault.is_some_and(|d| d < IDS_QUIET)
}

/// A mapped page and what the loop has read from it.
pub struct Feed {
    addr: usize,
    reader: Reader,
    current: Option<u64>,
    /// The page's control word asks for ids.
    wanted: bool,
    /// Ids read (changes of a slot).
    pub ids_seen: u64,
}

impl Feed {
    /// Maps the page of process `pid`, if its runtime has made one.
    pub fn find(pid: i32) -> Option<Feed> {
        candidates(pid).find_map(|f| Self::map(&f, pid))
    }

    /// Maps one candidate; None unless it is a valid page written by `pid`
    /// (a forked child also holds its parent's).
    fn map(f: &std::fs::File, pid: i32) -> Option<Feed> {
        if f.metadata().ok()?.len() < PAGE_BYTES as u64 {
            return None;
        }
        // SAFETY: mapping one page of a regular memfd we hold, shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let feed = Feed {
            addr: p as usize,
            reader: Reader::default(),
            current: None,
            wanted: true,
            ids_seen: 0,
        };
        let page = feed.page();
        if !page.is_valid() || page.writer_pid() != pid as u64 {
            return None; // dropping the feed unmaps
        }
        page.want_ids(true);
        Some(feed)
    }

    fn page(&self) -> Page<'_> {
        // SAFETY: addr is a live shared mapping of PAGE_BYTES (page-aligned),
        // unmapped only on drop; AtomicU64 has u64's layout.
        let words =
            unsafe { std::slice::from_raw_parts(self.addr as *const AtomicU64, PAGE_WORDS) };
        Page::new(words).expect("a page is PAGE_WORDS words")
    }

    /// Reads the page: calls `f` with the stream key that owns each slot
    /// whose id changed since the last poll (the key the runtime's launch
    /// ring names its launches' streams by) and the id; returns how many
    /// changed.
    pub fn poll_streams(&mut self, mut f: impl FnMut(u64, u64)) -> usize {
        let words = self.addr;
        let mut last = None;
        // SAFETY: as in page(); a separate borrow so that the reader can be
        // borrowed mutably beside it.
        let slice = unsafe { std::slice::from_raw_parts(words as *const AtomicU64, PAGE_WORDS) };
        let page = Page::new(slice).expect("a page is PAGE_WORDS words");
        let n = self.reader.scan(&page, |slot, id| {
            last = Some(id);
            f(page.slot(slot).0, id)
        });
        if last.is_some() {
            self.current = last;
        }
        self.ids_seen += n as u64;
        n
    }

    /// Asks for ids, or stops asking (the control word is written only on
    /// a change). Stopping forgets the current id: once asked again, the
    /// slots show stale ids until the runtime's next writes run, and a
    /// fault then is counted as one without an id, not charged to a
    /// kernel that ran before the pause.
    pub fn want(&mut self, on: bool) {
        if on == self.wanted {
            return;
        }
        self.wanted = on;
        self.page().want_ids(on);
        if !on {
            self.current = None;
        }
    }

    /// The id last seen changing: the kernel a fault drained now is charged to.
    pub fn current(&self) -> Option<u64> {
        self.current
    }

    /// Values refused as torn.
    pub fn torn(&self) -> u64 {
        self.reader.torn
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.page().want_ids(false);
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, PAGE_BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_uapi::execpage::{self, encode};

    /// A page made as the runtime makes it, in this process.
    fn runtime_page() -> (std::fs::File, usize) {
        let name = std::ffi::CString::new(MEMFD_NAME).unwrap();
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd is ours.
        let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(PAGE_BYTES as u64).unwrap();
        // SAFETY: mapping our own memfd.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        (f, p as usize)
    }

    fn words(addr: usize) -> &'static [AtomicU64] {
        // SAFETY: a live mapping of PAGE_BYTES for the test's duration.
        unsafe { std::slice::from_raw_parts(addr as *const AtomicU64, PAGE_WORDS) }
    }

    #[test]
    fn engine_ids_fold_and_avoid_no_exec() {
        assert_eq!(engine_id(5), 5);
        assert_ne!(engine_id(1 << 40), engine_id(1 << 41));
        assert_ne!(engine_id(0xFFFF_FFFF), prescient_core::NO_EXEC);
    }

    #[test]
    fn the_feed_finds_the_page_asks_for_ids_and_reads_them() {
        let me = std::process::id() as i32;
        // A page another process wrote (a parent's, inherited) is not taken.
        {
            let (_f, addr) = runtime_page();
            Page::new(words(addr)).unwrap().init(me as u32 + 1);
            assert!(Feed::find(me).is_none());
        }
        let (_f, addr) = runtime_page();
        // Not initialised: not taken.
        assert!(Feed::find(me).is_none());
        let page = Page::new(words(addr)).unwrap();
        page.init(me as u32);
        let mut feed = Feed::find(me).expect("page found");
        assert!(page.ids_wanted());
        let s = page.claim(0x5000).slot();
        page.write_slot(s, 77);
        let mut got = vec![];
        assert_eq!(feed.poll_streams(|_, id| got.push(id)), 1);
        assert_eq!(got, vec![77]);
        assert_eq!(feed.current(), Some(77));
        assert_eq!(feed.poll_streams(|_, _| panic!("no change")), 0);
        // A torn value is not taken for an id.
        words(addr)[execpage::owner_word(s) + 1]
            .store(encode(78) ^ (1 << 50), std::sync::atomic::Ordering::Relaxed);
        assert_eq!(feed.poll_streams(|_, _| panic!("torn")), 0);
        assert_eq!(feed.current(), Some(77));
        assert_eq!(feed.torn(), 1);
        // No faults for a while: the feed stops asking and forgets the
        // id; asked again, it waits for a new one.
        feed.want(false);
        assert!(!page.ids_wanted());
        assert_eq!(feed.current(), None);
        feed.want(true);
        assert!(page.ids_wanted());
        assert_eq!(feed.poll_streams(|_, _| panic!("no change")), 0);
        page.write_slot(s, 79);
        assert_eq!(feed.poll_streams(|_, _| {}), 1);
        assert_eq!(feed.current(), Some(79));
        drop(feed);
        assert!(!page.ids_wanted(), "a dropped feed stops asking");
    }

    #[test]
    fn ids_are_wanted_at_first_then_while_faults_come() {
        let s = std::time::Duration::from_secs;
        assert!(ids_wanted(None, s(0)));
        assert!(ids_wanted(None, IDS_QUIET - s(1)));
        assert!(!ids_wanted(None, IDS_QUIET));
        assert!(ids_wanted(Some(s(1)), s(100)));
        assert!(!ids_wanted(Some(IDS_QUIET), s(100)));
    }
}
