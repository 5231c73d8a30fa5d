//! /dev/prescient, the module's ioctl surface, from user space.
//!
//! The device is opened for each operation and closed again: an open file
//! pins prescient.ko (its fops owner), and an operator must be able to
//! `rmmod prescient` under a running daemon. The daemon notices the module's
//! absence on its next poll and waits for it (see service.rs).

use prescient_uapi as uapi;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::userspace::Userspace;

/// Why a device operation failed, in the terms an operator acts on.
#[derive(Debug)]
pub enum DevError {
    /// No device node, or the module is going away (ENOENT, ENODEV, ENXIO);
    /// for the user-space backend, nvidia_uvm is not loaded.
    Missing {
        /// What is not loaded: "prescient.ko", or "nvidia_uvm" for the
        /// user-space backend.
        needs: &'static str,
        err: io::Error,
    },
    /// EACCES / EPERM: wrong permissions on the node, or not CAP_SYS_ADMIN.
    Permission(io::Error),
    /// The module refused the request (EINVAL, ESRCH, EEXIST, ENOSPC ...).
    Refused { op: &'static str, err: io::Error },
    /// The user-space backend refused it: the errno the module would have
    /// returned, and the backend's own sentence.
    Declined {
        op: &'static str,
        errno: i32,
        what: String,
    },
}

impl std::fmt::Display for DevError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DevError::Missing { needs, err } => write!(f, "{needs} is not loaded ({err})"),
            DevError::Permission(e) => write!(
                f,
                "permission denied ({e}): prescientd needs root (CAP_SYS_ADMIN) and read/write access to the device node"
            ),
            DevError::Refused { op, err } => write!(f, "{op}: {err}"),
            DevError::Declined { op, what, .. } => write!(f, "{op}: {what}"),
        }
    }
}

impl std::error::Error for DevError {}

impl DevError {
    fn from_io(op: &'static str, e: io::Error) -> DevError {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => DevError::Missing {
                needs: "prescient.ko",
                err: e,
            },
            Some(libc::EACCES | libc::EPERM) => DevError::Permission(e),
            _ => DevError::Refused { op, err: e },
        }
    }
    pub fn errno(&self) -> Option<i32> {
        match self {
            DevError::Missing { err: e, .. }
            | DevError::Permission(e)
            | DevError::Refused { err: e, .. } => e.raw_os_error(),
            DevError::Declined { errno, .. } => Some(*errno),
        }
    }
}

/// The backend the service drives: prescient.ko through its device node,
/// or the user-space backend (userspace.rs) answering the same calls.
#[derive(Clone)]
pub struct Device {
    path: PathBuf,
    userspace: Option<Arc<Userspace>>,
}

impl Device {
    pub fn new(path: &Path) -> Device {
        Device {
            path: path.to_path_buf(),
            userspace: None,
        }
    }

    pub fn userspace(u: Userspace) -> Device {
        Device {
            path: PathBuf::from("/dev/nvidia-uvm"),
            userspace: Some(Arc::new(u)),
        }
    }

    /// The device node (the module's, or nvidia-uvm's for the user-space backend).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What must be loaded for this backend to work.
    pub fn needs(&self) -> &'static str {
        if self.userspace.is_some() {
            "nvidia_uvm"
        } else {
            "prescient.ko"
        }
    }

    /// "module" or "userspace", as prescientctl status shows it.
    pub fn kind(&self) -> &'static str {
        if self.userspace.is_some() {
            "userspace"
        } else {
            "module"
        }
    }

    fn open(&self) -> Result<File, DevError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| DevError::from_io("open", e))
    }

    /// One ioctl on a fresh open of the device; `buf` must be exactly the
    /// command's size (uapi encodes it in the number).
    fn ioctl(&self, op: &'static str, cmd: u32, buf: &mut [u8]) -> Result<(), DevError> {
        debug_assert_eq!(uapi::ioc_size(cmd), buf.len());
        if uapi::ioc_size(cmd) != buf.len() {
            return Err(DevError::Refused {
                op,
                err: io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let f = self.open()?;
        // SAFETY: `buf` is valid for reads and writes of `ioc_size(cmd)` bytes
        // (checked above), which is all the kernel touches for this number;
        // for a zero-size command the pointer is not used.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), cmd as libc::c_ulong, buf.as_mut_ptr()) };
        if r < 0 {
            return Err(DevError::from_io(op, io::Error::last_os_error()));
        }
        Ok(())
    }

    pub fn version(&self) -> Result<uapi::Version, DevError> {
        if let Some(u) = &self.userspace {
            return u.version();
        }
        let mut b = [0u8; uapi::Version::SIZE];
        self.ioctl("GET_VERSION", uapi::PRESCIENT_IOC_GET_VERSION, &mut b)?;
        uapi::Version::from_bytes(&b).map_err(|e| bad_reply("GET_VERSION", e))
    }

    pub fn params(&self) -> Result<uapi::ParamsAbi, DevError> {
        if let Some(u) = &self.userspace {
            return u.params();
        }
        let mut b = [0u8; uapi::ParamsAbi::SIZE];
        self.ioctl("GET_PARAMS", uapi::PRESCIENT_IOC_GET_PARAMS, &mut b)?;
        uapi::ParamsAbi::from_bytes(&b).map_err(|e| bad_reply("GET_PARAMS", e))
    }

    pub fn set_params(&self, p: &uapi::ParamsAbi) -> Result<(), DevError> {
        if let Some(u) = &self.userspace {
            return u.set_params(p);
        }
        let mut b = p.to_bytes();
        self.ioctl("SET_PARAMS", uapi::PRESCIENT_IOC_SET_PARAMS, &mut b)
    }

    pub fn stats(&self) -> Result<uapi::Stats, DevError> {
        if let Some(u) = &self.userspace {
            return u.stats();
        }
        let mut b = vec![0u8; uapi::Stats::SIZE];
        self.ioctl("GET_STATS", uapi::PRESCIENT_IOC_GET_STATS, &mut b)?;
        uapi::Stats::from_bytes(&b).map_err(|e| bad_reply("GET_STATS", e))
    }

    pub fn reset_tables(&self) -> Result<(), DevError> {
        if let Some(u) = &self.userspace {
            return u.reset_tables();
        }
        self.ioctl("RESET_TABLES", uapi::PRESCIENT_IOC_RESET_TABLES, &mut [])
    }

    /// Attaches a process by pid; returns the module's handle.
    pub fn attach_pid(&self, pid: i32) -> Result<u64, DevError> {
        if let Some(u) = &self.userspace {
            return u.attach_pid(pid);
        }
        let mut b = uapi::Target {
            kind: uapi::TARGET_PID,
            id: pid as u32,
            handle: 0,
        }
        .to_bytes();
        self.ioctl("ATTACH", uapi::PRESCIENT_IOC_ATTACH, &mut b)?;
        Ok(uapi::Target::from_bytes(&b)
            .map_err(|e| bad_reply("ATTACH", e))?
            .handle)
    }

    /// A process's dead/alive mark, for the user-space backend. With the
    /// module, a process marks its ranges itself (PRESCIENT_IOC_MARK_DEAD /
    /// _ALIVE on /dev/prescient, checked against its own pid there).
    pub fn mark(
        &self,
        pid: i32,
        dead: bool,
        blocks: Vec<std::ops::Range<u64>>,
    ) -> Result<crate::marks::Applied, DevError> {
        match &self.userspace {
            Some(u) => u.mark(pid, dead, blocks),
            None => Err(DevError::Declined {
                op: "MARK",
                errno: libc::EOPNOTSUPP,
                what: "with prescient.ko a process marks its ranges itself, with PRESCIENT_IOC_MARK_DEAD / PRESCIENT_IOC_MARK_ALIVE on /dev/prescient".into(),
            }),
        }
    }

    pub fn detach_pid(&self, pid: i32) -> Result<(), DevError> {
        if let Some(u) = &self.userspace {
            return u.detach_pid(pid);
        }
        let mut b = uapi::Target {
            kind: uapi::TARGET_PID,
            id: pid as u32,
            handle: 0,
        }
        .to_bytes();
        self.ioctl("DETACH", uapi::PRESCIENT_IOC_DETACH, &mut b)
    }
}

fn bad_reply(op: &'static str, e: uapi::Error) -> DevError {
    DevError::Refused {
        op,
        err: io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {e}")),
    }
}

/// A human reading of the errno the module returns for ATTACH.
pub fn attach_error_text(pid: i32, e: &DevError) -> String {
    match e.errno() {
        Some(libc::ESRCH) => format!("pid {pid}: no such process"),
        Some(libc::ENOENT) | Some(libc::EBADF) => {
            format!("pid {pid} has no initialised /dev/nvidia-uvm file (not a CUDA process yet?)")
        }
        Some(libc::EEXIST) => format!("pid {pid} is already attached"),
        Some(libc::ENOSPC) => format!(
            "pid {pid}: every slot is in use (prescient.ko attaches at most {} processes)",
            uapi::MAX_SPACES
        ),
        _ => format!("pid {pid}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_node_is_missing_not_an_error_of_ours() {
        let d = Device::new(Path::new("/nonexistent/prescient"));
        assert!(matches!(d.version(), Err(DevError::Missing { .. })));
        assert!(matches!(d.stats(), Err(DevError::Missing { .. })));
    }

    #[test]
    fn a_node_that_is_not_prescient_is_refused_not_misread() {
        // /dev/null takes no ioctls: ENOTTY, reported as a refusal.
        let d = Device::new(Path::new("/dev/null"));
        match d.version() {
            Err(DevError::Refused { op, err }) => {
                assert_eq!(op, "GET_VERSION");
                assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
            }
            other => panic!("{other:?}"),
        }
    }
}
