//! Attaching to a CUDA process from outside: pidfd_open + pidfd_getfd over
//! its /dev/nvidia-uvm fds, keeping the VA-space one.

use crate::ioctl as uvm;
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

/// A GPU of the target's VA space, as tools events and UVM_MIGRATE name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Its processor index in tools events (the CPU is [`uvm::CPU_INDEX`]).
    pub index: u16,
    /// Its UUID, the destination UVM_MIGRATE takes.
    pub uuid: [u8; 16],
}

impl std::fmt::Display for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&uvm::uuid_string(&self.uuid))
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

    /// The first GPU in the target's processor table.
    pub fn first_gpu(&self) -> Result<Gpu> {
        let t = uvm::processor_uuid_table(self.va_fd.as_raw_fd())
            .context("UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2")?;
        for (i, u) in t.iter().enumerate().skip(1) {
            if u.iter().any(|&b| b != 0) {
                return Ok(Gpu {
                    index: i as u16,
                    uuid: *u,
                });
            }
        }
        bail!("pid {}: no GPU registered in its VA space yet", self.pid)
    }
}
