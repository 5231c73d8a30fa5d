//! Attaching to a CUDA process from outside: pidfd_open + pidfd_getfd over
//! its /dev/nvidia-uvm fds, keeping the VA-space one.

use crate::ioctl as uvm;
pub use crate::processors::Gpu;
use crate::processors::ProcessorTable;
use anyhow::{anyhow, bail, Context, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

/// The device number of nvidia-uvm's character device, from the kernel's
/// own tables rather than from a path: /proc/devices (the NVIDIA driver
/// registers "nvidia-uvm" as a char major, minor 0), else the misc class in
/// sysfs (a misc device, as the VM tests' stand-in is), else prescientd's
/// own /dev/nvidia-uvm if it is a character device.
pub fn uvm_rdev() -> Option<libc::dev_t> {
    if let Ok(d) = std::fs::read_to_string("/proc/devices") {
        let chars = d.split("Block devices:").next().unwrap_or("");
        for l in chars.lines() {
            let mut it = l.split_whitespace();
            if let (Some(major), Some("nvidia-uvm")) = (it.next(), it.next()) {
                if let Ok(m) = major.parse::<u32>() {
                    return Some(libc::makedev(m, 0));
                }
            }
        }
    }
    if let Ok(s) = std::fs::read_to_string("/sys/class/misc/nvidia-uvm/dev") {
        if let Some((a, b)) = s.trim().split_once(':') {
            if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                return Some(libc::makedev(a, b));
            }
        }
    }
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata("/dev/nvidia-uvm").ok()?;
    m.file_type()
        .is_char_device()
        .then_some(m.rdev() as libc::dev_t)
}

/// Refuses an fd taken from a target unless it is nvidia-uvm's character
/// device (`want`): a /proc link text proves nothing (in its own mount
/// namespace a user can put a FUSE file or a FIFO at "/dev/nvidia-uvm",
/// and an ioctl on it could hang the daemon).
pub fn check_uvm_fd(fd: RawFd, want: Option<libc::dev_t>) -> Result<()> {
    // SAFETY: an all-zero stat is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a stat buffer of the right size.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(anyhow::Error::new(std::io::Error::last_os_error()).context("fstat"));
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFCHR => "a character device",
        libc::S_IFREG => "a regular file",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFDIR => "a directory",
        _ => "not a device",
    };
    let Some(want) = want else {
        bail!("nvidia-uvm's device number is unknown (no \"nvidia-uvm\" in /proc/devices or /sys/class/misc): no fd can be checked");
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != want {
        bail!(
            "it is not nvidia-uvm's character device ({kind}, device {}:{}; nvidia-uvm is {}:{}): refused before any ioctl",
            libc::major(st.st_rdev),
            libc::minor(st.st_rdev),
            libc::major(want),
            libc::minor(want)
        );
    }
    Ok(())
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
        let want = uvm_rdev();
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
            if let Err(e) = check_uvm_fd(fd.as_raw_fd(), want) {
                last_err =
                    Some(e.context(format!("fd {n} (\"/dev/nvidia-uvm\" by its /proc link)")));
                continue;
            }
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

    /// The target's processor table, read from the driver now: a process
    /// registers GPUs as CUDA initialises them, and a GPU can leave (a
    /// reset, a MIG reconfiguration), so callers read it again when an
    /// event names an index they do not know.
    pub fn processor_table(&self) -> Result<ProcessorTable> {
        read_processor_table(self.va_fd.as_raw_fd())
    }

    /// The first GPU in the target's processor table (the lowest index).
    pub fn first_gpu(&self) -> Result<Gpu> {
        match self.processor_table()?.first() {
            Some(g) => Ok(g),
            None => bail!("pid {}: no GPU registered in its VA space yet", self.pid),
        }
    }
}

/// Reads the processor table of the VA space open on `va_fd`.
pub fn read_processor_table(va_fd: RawFd) -> Result<ProcessorTable> {
    let raw = uvm::processor_uuid_table(va_fd).context("UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2")?;
    Ok(ProcessorTable::from_raw(&raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn an_fd_that_is_not_the_uvm_device_is_refused_before_any_ioctl() {
        // Review finding 10: the /proc link text was the only check.
        let f = tempfile_in_tmp();
        let want = Some(libc::makedev(10, 200));
        let e = format!("{:#}", check_uvm_fd(f.as_raw_fd(), want).unwrap_err());
        assert!(
            e.contains("not nvidia-uvm's character device") && e.contains("regular file"),
            "{e}"
        );
        // A character device that is not nvidia-uvm's (/dev/null, 1:3).
        let null = std::fs::File::open("/dev/null").unwrap();
        let e = format!("{:#}", check_uvm_fd(null.as_raw_fd(), want).unwrap_err());
        assert!(e.contains("1:3"), "{e}");
        // The right device number passes.
        assert!(check_uvm_fd(null.as_raw_fd(), Some(libc::makedev(1, 3))).is_ok());
        assert!(check_uvm_fd(null.as_raw_fd(), None).is_err());
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let p = std::env::temp_dir().join(format!("prescient-uvm-fd-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }
}
