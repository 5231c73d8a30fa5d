//! Attaching to a CUDA process from outside: pidfd_open + pidfd_getfd over
//! its /dev/nvidia-uvm fds, keeping the VA-space one; the tools event
//! tracker on /dev/nvidia-uvm-tools.

use crate::uvm;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh fd that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

fn pidfd_getfd(pidfd: RawFd, target_fd: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, target_fd, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh fd (a dup of the target's) that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// The driver version, refused when its ABI is unknown.
pub fn driver_version() -> Result<String> {
    let v = std::fs::read_to_string("/sys/module/nvidia_uvm/version")
        .context("reading /sys/module/nvidia_uvm/version (is nvidia_uvm loaded?)")?;
    let v = v.trim().to_string();
    if !uvm::abi_known(&v) {
        bail!(
            "nvidia_uvm {v}: unknown UVM ABI (prescientd knows 565..595 with the V2 event tracker); refusing to attach"
        );
    }
    Ok(v)
}

/// Where acting backends claim the processes they serve.
pub const CLAIM_DIR: &str = "/run/prescient/attach";

/// The exclusive right to act for one process (prefetch, pre-evict):
/// an flock on `<dir>/<pid>.lock`, held while the claim lives. Two daemons
/// migrating for one process would fight over its memory, so the second
/// one is refused and told who holds it. The kernel drops the lock when
/// the holder exits, however it exits; the file itself stays (a few bytes
/// in /run) so that no two holders can ever lock two different inodes.
/// Observers (`prescientctl record`) take no claim.
pub struct Claim {
    _file: File,
}

impl Claim {
    pub fn take(pid: i32) -> Result<Claim> {
        Claim::take_in(std::path::Path::new(CLAIM_DIR), pid)
    }

    pub fn take_in(dir: &std::path::Path, pid: i32) -> Result<Claim> {
        use std::io::{Read, Seek, Write};
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{pid}.lock"));
        let mut f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            // The usual cause: not root. Say what is needed, not just which
            // file failed (seen on the H200 with `setpriv --reuid 65534`).
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot take the claim {} for pid {pid}: acting for another process needs root \
                     (this claim directory, and pidfd_getfd with a ptrace right over the target); \
                     running as uid {}",
                    path.display(),
                    // SAFETY: geteuid has no preconditions and cannot fail.
                    unsafe { libc::geteuid() }
                )));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("opening {}", path.display())))
            }
        };
        // SAFETY: flock on an fd we own; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = f.read_to_string(&mut holder);
                bail!(
                    "pid {pid} is already served by another prescientd (pid {}, {}): one backend per process",
                    holder.trim(),
                    path.display()
                );
            }
            return Err(anyhow::Error::new(e).context(format!("locking {}", path.display())));
        }
        f.set_len(0)?;
        f.seek(std::io::SeekFrom::Start(0))?;
        writeln!(f, "{}", std::process::id())?;
        Ok(Claim { _file: f })
    }
}

/// A process we act for: its pidfd and its VA-space fd (dup'ed into us).
pub struct Target {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub va_fd: OwnedFd,
    /// The target's own fd number of the VA-space file.
    pub target_fd_no: i32,
}

impl Target {
    /// Attaches to `pid`. Errors say which step failed; a permission
    /// problem keeps its `std::io::Error` (kind `PermissionDenied`) in the
    /// chain, so callers can map it to an exit status.
    pub fn attach(pid: i32) -> Result<Target> {
        let pidfd = pidfd_open(pid).map_err(|e| {
            let what = if e.raw_os_error() == Some(libc::ESRCH) {
                "no such process"
            } else {
                "pidfd_open failed"
            };
            anyhow::Error::new(e).context(format!("pid {pid}: {what}"))
        })?;
        let dir = format!("/proc/{pid}/fd");
        let mut candidates = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                "permission denied: attaching needs root (or ptrace rights over the target)"
            } else {
                "cannot list the target's fds"
            };
            anyhow::Error::new(e).context(format!("reading {dir}: {hint}"))
        })?;
        for e in entries {
            let e = e?;
            let Ok(link) = std::fs::read_link(e.path()) else {
                continue;
            };
            if link.as_os_str() == "/dev/nvidia-uvm" {
                if let Ok(n) = e.file_name().to_string_lossy().parse::<i32>() {
                    candidates.push(n);
                }
            }
        }
        candidates.sort_unstable();
        if candidates.is_empty() {
            bail!("pid {pid} has no /dev/nvidia-uvm fd open: not a CUDA process (yet?)");
        }
        let mut last_err = None;
        for n in &candidates {
            let fd = match pidfd_getfd(pidfd.as_raw_fd(), *n) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "pidfd_getfd({pid}, fd {n}): permission denied: attaching needs root (or ptrace rights over the target: same user and kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE)"
                    )));
                }
                Err(e) => {
                    last_err = Some(anyhow!(
                        "pidfd_getfd({pid}, {n}): {e} (need root or ptrace rights)"
                    ));
                    continue;
                }
            };
            match uvm::pageable_mem_access(fd.as_raw_fd()) {
                Ok(_) => {
                    return Ok(Target {
                        pid,
                        pidfd,
                        va_fd: fd,
                        target_fd_no: *n,
                    })
                }
                Err(e) => last_err = Some(anyhow!("fd {n}: UVM_PAGEABLE_MEM_ACCESS: {e}")),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("no VA-space fd"))).with_context(|| {
            format!("pid {pid}: none of the /dev/nvidia-uvm fds {candidates:?} is a VA-space fd")
        })
    }

    /// Whether the target still runs.
    pub fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        !(r > 0 && p.revents & libc::POLLIN != 0)
    }

    /// The first GPU in the target's processor table: (index, uuid).
    pub fn gpu(&self) -> Result<(u16, [u8; 16])> {
        let t = uvm::processor_uuid_table(self.va_fd.as_raw_fd())
            .context("UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2")?;
        for (i, u) in t.iter().enumerate().skip(1) {
            if u.iter().any(|&b| b != 0) {
                return Ok((i as u16, *u));
            }
        }
        bail!("pid {}: no GPU registered in its VA space yet", self.pid)
    }
}

struct Mapping {
    ptr: NonNull<libc::c_void>,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Result<Mapping> {
        // SAFETY: anonymous private mapping, no address hint.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap {len} bytes: {}", std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p).ok_or_else(|| anyhow!("mmap returned null"))?,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range and nothing references it any more.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// One event read from the ring.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    Fault(uvm::GpuFaultV2),
    Migration(uvm::MigrationV2),
    Other,
}

/// A V2 tools event tracker over the target's VA space.
pub struct Tracker {
    // Field order matters: the tools fd is closed (tracker torn down by the
    // driver) before the buffers it pinned are unmapped.
    tools: File,
    entries: u32,
    /// The events enabled at creation (and by [`Tracker::enable`]).
    flags: u64,
    queue: Mapping,
    control: Mapping,
}

// SAFETY: the mappings are owned exclusively by the Tracker; only the thread
// that owns it reads them.
unsafe impl Send for Tracker {}

impl Tracker {
    pub fn new(target: &Target, entries: u32, flags: u64) -> Result<Tracker> {
        if !entries.is_power_of_two() {
            bail!("queue entries must be a power of two, got {entries}");
        }
        let tools = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/nvidia-uvm-tools")
            .context("opening /dev/nvidia-uvm-tools")?;
        let page = 4096usize;
        let qlen = (entries as usize * uvm::ENTRY_V2_BYTES).div_ceil(page) * page;
        let queue = Mapping::new(qlen)?;
        let control = Mapping::new(page)?;
        let mut p = uvm::InitEventTrackerParams {
            queue_buffer: queue.ptr.as_ptr() as u64,
            queue_buffer_size: entries as u64,
            control_buffer: control.ptr.as_ptr() as u64,
            processor: [0; 16],
            all_processors: 1,
            uvm_fd: target.va_fd.as_raw_fd() as u32,
            rm_status: 0,
        };
        // SAFETY: both buffers are page-aligned mappings of the right sizes,
        // owned by the returned Tracker, whose fd is closed before they are unmapped.
        unsafe { uvm::init_event_tracker_v2(tools.as_raw_fd(), &mut p) }
            .context("UVM_TOOLS_INIT_EVENT_TRACKER_V2")?;
        uvm::enable_events(tools.as_raw_fd(), flags)
            .context("UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS")?;
        Ok(Tracker {
            tools,
            entries,
            flags,
            queue,
            control,
        })
    }

    fn ctl(&self) -> *mut uvm::ControlData {
        self.control.ptr.as_ptr().cast()
    }

    /// Turns every event of this tracker off: while no tools event is
    /// enabled on the VA space, the driver's CPU fault path skips its tools
    /// flush (see gate.rs).
    pub fn disable(&self) -> Result<(), uvm::IoctlError> {
        uvm::disable_events(self.tools.as_raw_fd(), self.flags)
    }

    /// Turns the tracker's events back on.
    pub fn enable(&self) -> Result<(), uvm::IoctlError> {
        uvm::enable_events(self.tools.as_raw_fd(), self.flags)
    }

    pub fn flush(&self) {
        let _ = uvm::flush_events(self.tools.as_raw_fd());
    }

    /// Dropped-event counters (all types summed).
    pub fn dropped(&self) -> u64 {
        let c = self.ctl();
        let mut sum = 0;
        for i in 0..uvm::EVENT_NUM_TYPES_ALL {
            // SAFETY: `c` points into our live control mapping; the driver
            // updates the counters concurrently, hence volatile reads.
            sum += unsafe { std::ptr::addr_of!((*c).dropped[i]).read_volatile() };
        }
        sum
    }

    /// Reads every available event, up to `max`.
    pub fn drain(&self, max: usize, mut f: impl FnMut(Event)) -> usize {
        let c = self.ctl();
        let mask = self.entries - 1;
        // SAFETY: `c` points into our live control mapping; the counters
        // are shared with the driver, hence volatile.
        let mut get = unsafe { std::ptr::addr_of!((*c).get_behind).read_volatile() } & mask;
        // SAFETY: as above.
        let put = unsafe { std::ptr::addr_of!((*c).put_behind).read_volatile() } & mask;
        fence(Ordering::Acquire);
        let mut n = 0;
        while get != put && n < max {
            let off = get as usize * uvm::ENTRY_V2_BYTES;
            // SAFETY: `off + 72` lies inside the queue mapping (get < entries).
            let base = unsafe { self.queue.ptr.as_ptr().cast::<u8>().add(off) };
            // SAFETY: as above; the byte is inside the mapping.
            let ty = unsafe { base.read_volatile() };
            let ev = match ty {
                uvm::EVENT_GPU_FAULT => {
                    // SAFETY: a whole 72-byte entry inside the mapping; read unaligned.
                    let f = unsafe { base.cast::<uvm::GpuFaultV2>().read_unaligned() };
                    Event::Fault(f)
                }
                uvm::EVENT_MIGRATION => {
                    // SAFETY: as above.
                    let m = unsafe { base.cast::<uvm::MigrationV2>().read_unaligned() };
                    Event::Migration(m)
                }
                _ => Event::Other,
            };
            f(ev);
            get = (get + 1) & mask;
            n += 1;
        }
        fence(Ordering::Release);
        // SAFETY: as above; we are the only consumer.
        unsafe {
            std::ptr::addr_of_mut!((*c).get_ahead).write_volatile(get);
            std::ptr::addr_of_mut!((*c).get_behind).write_volatile(get);
        }
        n
    }
}

#[cfg(test)]
mod claim_tests {
    use super::Claim;

    #[test]
    fn a_second_claim_on_one_process_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().unwrap();
        let first = Claim::take_in(dir.path(), 4242).unwrap();
        let e = Claim::take_in(dir.path(), 4242).err().unwrap().to_string();
        assert!(e.contains("already served by another prescientd"), "{e}");
        assert!(e.contains(&std::process::id().to_string()), "{e}");
        // Another process is free; the first claim's end frees its process.
        let _other = Claim::take_in(dir.path(), 4243).unwrap();
        drop(first);
        let _again = Claim::take_in(dir.path(), 4242).unwrap();
    }
}
