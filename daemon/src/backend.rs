//! The backend the service drives (the config key `backend`, the metric
//! `prescient_backend_up`): prescient.ko through its device node
//! (module.rs), or the user-space backend (userspace/) answering the same
//! calls. The service holds one `Arc<dyn Backend>` and never asks which.

pub use crate::userspace::marks::MarkFrom;
use prescient_uapi as uapi;
use prescient_uapi::control::Applied;
use std::io;
use std::path::Path;

/// One backend: the module's ioctl vocabulary, whoever answers it.
pub trait Backend: Send + Sync {
    /// "module" or "userspace", as prescientctl status shows it.
    fn kind(&self) -> &'static str;
    /// What must be loaded for this backend to work.
    fn needs(&self) -> &'static str;
    /// How the service's log lines name it ("prescient.ko", "the user-space backend").
    fn title(&self) -> &'static str;
    /// The device node (the module's, or nvidia-uvm's for the user-space backend).
    fn path(&self) -> &Path;
    fn version(&self) -> Result<uapi::Version, DevError>;
    fn params(&self) -> Result<uapi::ParamsAbi, DevError>;
    fn set_params(&self, p: &uapi::ParamsAbi) -> Result<(), DevError>;
    fn stats(&self) -> Result<uapi::Stats, DevError>;
    fn reset_tables(&self) -> Result<(), DevError>;
    /// Attaches a process by pid; returns the backend's handle.
    fn attach_pid(&self, pid: i32) -> Result<u64, DevError>;
    fn detach_pid(&self, pid: i32) -> Result<(), DevError>;
    /// A process's own dead/alive mark (`m.peer` must be the process, by
    /// pidfd, and own it: marks.rs `check_peer`).
    fn mark(&self, m: MarkFrom<'_>) -> Result<Applied, DevError>;
    /// Gives the attached spaces whose GPU is not yet known (a process
    /// attached before it registered its GPU) their prefetch destination,
    /// and (prescient.ko) the execution-id page of spaces that have none
    /// yet.
    /// Called after a poll, outside the service lock: it opens the targets'
    /// fds. The user-space backend learns its GPU in its own loop.
    fn assign_gpus(&self, _stats: &uapi::Stats) {}
    /// The user-space backend's per-process loop values, for /metrics (the
    /// module keeps no such counters: none).
    fn loop_values(&self) -> Vec<LoopValues> {
        Vec::new()
    }
    /// Each attached process's GPUs: its engine, ledger and budget per GPU
    /// (the module keeps one per process: none).
    fn gpu_lanes(&self) -> Vec<prescient_uapi::control::GpuLane> {
        Vec::new()
    }
    /// Per-GPU residency budgets (the budget grammar's `GPU=SIZE` items)
    /// for processes attached from now on; `indices` maps UUIDs to
    /// nvidia-smi indices. The module has one budget per process: refused.
    fn set_gpu_budgets(
        &self,
        _budget: &prescient_units::GpuBudget,
        _indices: &[(String, u32)],
    ) -> Result<(), DevError> {
        Err(DevError::Declined {
            op: "SET_GPU_BUDGET",
            errno: libc::EOPNOTSUPP,
            what: "per-GPU budgets need backend = \"userspace\": prescient.ko keeps one budget per process (give one size for every GPU)".into(),
        })
    }
}

/// One process's loop counters and gauges, in the order of the user-space
/// backend's series tables (userspace/series.rs names them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopValues {
    pub pid: i32,
    pub counters: Vec<u64>,
    pub gauges: Vec<f64>,
}

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

/// A refusal as the module would answer: its errno, and our sentence.
#[cold]
pub(crate) fn refused(op: &'static str, errno: i32, what: String) -> DevError {
    DevError::Declined { op, errno, what }
}

impl DevError {
    /// An I/O error of the module's device, as an operator reads it.
    pub(crate) fn from_io(op: &'static str, e: io::Error) -> DevError {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => DevError::Missing {
                needs: "prescient.ko",
                err: e,
            },
            Some(libc::EACCES | libc::EPERM) => DevError::Permission(e),
            _ => DevError::Refused { op, err: e },
        }
    }
    /// The errno the backend answered (or would have).
    pub fn errno(&self) -> Option<i32> {
        match self {
            DevError::Missing { err: e, .. }
            | DevError::Permission(e)
            | DevError::Refused { err: e, .. } => e.raw_os_error(),
            DevError::Declined { errno, .. } => Some(*errno),
        }
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
