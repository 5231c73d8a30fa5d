//! Unit tests' backend and service (reconcile.rs and requests.rs tests):
//! a backend that answers as prescient.ko's ioctls do, or as the user-space
//! backend's `Backend` impl does (same `Version` encoding, no module).

use super::metrics::{DaemonCounters, Metrics};
use super::state::{Attachment, Service, State};
use crate::backend::{Backend, DevError, MarkFrom};
use crate::config::Config;
use prescient_uapi as uapi;
use prescient_uapi::control::{EngineParams, Stats};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A backend that attaches whatever it is asked to and then, like
/// prescient.ko after an rmmod/insmod, reports no process attached.
/// `kind` "userspace" answers as the user-space backend does (its
/// `needs`, its device, the driver version it reads from nvidia-uvm).
#[derive(Default)]
pub(super) struct Forgetful {
    pub(super) attached: Mutex<Vec<i32>>,
    pub(super) userspace: bool,
    /// Version and stats fail as with the backend not loaded.
    pub(super) missing: bool,
}

/// nvidia-uvm 580.95.05, packed as uapi's `driver_version` is.
pub(super) const DRIVER_580: u64 = (580 << 32) | (95 << 16) | 5;

impl Forgetful {
    fn check(&self) -> Result<(), DevError> {
        if !self.missing {
            return Ok(());
        }
        Err(DevError::Missing {
            needs: self.needs(),
            err: std::io::Error::from_raw_os_error(libc::ENOENT),
        })
    }
}

impl Backend for Forgetful {
    fn kind(&self) -> &'static str {
        if self.userspace {
            "userspace"
        } else {
            "module"
        }
    }
    fn needs(&self) -> &'static str {
        if self.userspace {
            "nvidia_uvm"
        } else {
            "prescient.ko"
        }
    }
    fn title(&self) -> &'static str {
        if self.userspace {
            "the user-space backend"
        } else {
            "prescient.ko"
        }
    }
    fn path(&self) -> &std::path::Path {
        std::path::Path::new(if self.userspace {
            "/dev/nvidia-uvm"
        } else {
            "/dev/prescient"
        })
    }
    fn version(&self) -> Result<uapi::Version, DevError> {
        self.check()?;
        Ok(uapi::Version {
            abi_version: uapi::ABI_VERSION,
            flags: uapi::VERSION_FLAG_BOUND | uapi::VERSION_FLAG_ENABLED,
            max_spaces: uapi::MAX_SPACES as u32,
            driver_version: DRIVER_580,
            ..Default::default()
        })
    }
    fn params(&self) -> Result<uapi::ParamsAbi, DevError> {
        Ok(EngineParams::default().into())
    }
    fn set_params(&self, _: &uapi::ParamsAbi) -> Result<(), DevError> {
        Ok(())
    }
    fn stats(&self) -> Result<uapi::Stats, DevError> {
        self.check()?;
        Ok(uapi::Stats::default())
    }
    fn reset_tables(&self) -> Result<(), DevError> {
        Ok(())
    }
    fn attach_pid(&self, pid: i32) -> Result<u64, DevError> {
        self.attached.lock().unwrap().push(pid);
        Ok(1)
    }
    fn detach_pid(&self, _: i32) -> Result<(), DevError> {
        Ok(())
    }
    fn mark(&self, _: MarkFrom<'_>) -> Result<prescient_uapi::control::Applied, DevError> {
        self.check()?;
        Err(DevError::Declined {
            op: "MARK",
            errno: libc::EOPNOTSUPP,
            what: "no marks".into(),
        })
    }
}

/// A service on `dev`, up, with `attached`.
pub(super) fn service(dev: Arc<Forgetful>, attached: BTreeMap<i32, Attachment>) -> Service {
    let cfg = Config::default();
    Service {
        config_path: "/etc/prescient/prescientd.toml".into(),
        dev,
        started: std::time::Instant::now(),
        metrics: Metrics::new(&crate::service::Identity::default()).unwrap(),
        gpu: crate::gpu::Detected::None("a test".into()),
        st: std::sync::Mutex::new(State {
            patterns: Vec::new(),
            desired: (&cfg.engine).into(),
            up: true,
            seen: true,
            module: None,
            stats: Stats::default(),
            attached,
            attaching: Vec::new(),
            failed: HashMap::new(),
            daemon: DaemonCounters::default(),
            last_poll_error: None,
            shutting_down: false,
            cfg,
        }),
        stop: tokio::sync::watch::channel(None).0,
    }
}
