//! /dev/prescient, the module's ioctl surface, from user space.
//!
//! The device is opened for each operation and closed again: an open file
//! pins prescient.ko (its fops owner), and an operator must be able to
//! `rmmod prescient` under a running daemon. The daemon notices the module's
//! absence on its next poll and waits for it (see service/).

mod marks;

use crate::backend::{Backend, DevError};
use prescient_uapi as uapi;
use prescient_uapi::control::Applied;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// prescient.ko, through its device node.
#[derive(Clone)]
pub struct Module {
    path: PathBuf,
}

impl Module {
    pub fn new(path: &Path) -> Module {
        Module {
            path: path.to_path_buf(),
        }
    }

    fn open(&self) -> Result<File, DevError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| DevError::from_io("open", e))
    }

    /// Tells the module the fallback GPU of `handle`: the first GPU in the
    /// process's own processor table, as the driver lists it (never a
    /// fixed or guessed UUID: a wrong one makes every prefetch fail).
    ///
    /// prescient.ko sends each block to the GPU that faulted on it, named
    /// by the driver on the fault path (kmod/gpus.rs); this destination
    /// serves only blocks of faults the module could not attribute to a
    /// GPU, which on a one-GPU process is the same GPU.
    fn give_gpu(&self, pid: i32, handle: u64) -> anyhow::Result<()> {
        let table = prescient_uvm::attach::Target::attach(pid)?.processor_table()?;
        let Some(gpu) = table.first() else {
            anyhow::bail!("pid {pid}: no GPU registered in its VA space yet");
        };
        let mut b = uapi::GpuAbi::new(handle, gpu.uuid).to_bytes();
        self.ioctl("SET_GPU", uapi::PRESCIENT_IOC_SET_GPU, &mut b)?;
        tracing::info!(pid, gpu = %gpu, "prefetch destination set");
        if table.gpus().len() > 1 {
            multi_gpu_note(pid, &table);
        }
        Ok(())
    }

    /// Registers the execution-id page of process `pid` (the memfd its
    /// runtime writes, found as the user-space backend finds it) for the
    /// module's space `handle`: prescient.ko pins the page, reads it at
    /// each of the space's faults and runs that space's engine in
    /// execution-id mode. The module gets this process's descriptor of
    /// the memfd and keeps only the page. Ok(false) if the process has no
    /// page (not under `prescientctl run`, or its runtime has not made one
    /// yet: retried at each poll).
    fn give_exec_page(&self, pid: i32, handle: u64) -> Result<bool, DevError> {
        let Some(page) = crate::userspace::execfeed::open_page(pid) else {
            return Ok(false);
        };
        let mut b = uapi::ExecPageAbi {
            handle,
            fd: page.as_raw_fd() as u32,
            flags: 0,
        }
        .to_bytes();
        self.ioctl("SET_EXEC_PAGE", uapi::PRESCIENT_IOC_SET_EXEC_PAGE, &mut b)?;
        tracing::info!(
            pid,
            "execution-id page registered: prescient.ko attributes this process's faults to its kernels"
        );
        Ok(true)
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
}

impl Backend for Module {
    fn kind(&self) -> &'static str {
        "module"
    }

    fn needs(&self) -> &'static str {
        "prescient.ko"
    }

    fn title(&self) -> &'static str {
        "prescient.ko"
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn version(&self) -> Result<uapi::Version, DevError> {
        let mut b = [0u8; uapi::Version::SIZE];
        self.ioctl("GET_VERSION", uapi::PRESCIENT_IOC_GET_VERSION, &mut b)?;
        uapi::Version::from_bytes(&b).map_err(|e| bad_reply("GET_VERSION", e))
    }

    fn params(&self) -> Result<uapi::ParamsAbi, DevError> {
        let mut b = [0u8; uapi::ParamsAbi::SIZE];
        self.ioctl("GET_PARAMS", uapi::PRESCIENT_IOC_GET_PARAMS, &mut b)?;
        uapi::ParamsAbi::from_bytes(&b).map_err(|e| bad_reply("GET_PARAMS", e))
    }

    fn set_params(&self, p: &uapi::ParamsAbi) -> Result<(), DevError> {
        let mut b = p.to_bytes();
        self.ioctl("SET_PARAMS", uapi::PRESCIENT_IOC_SET_PARAMS, &mut b)
    }

    fn stats(&self) -> Result<uapi::Stats, DevError> {
        let mut b = vec![0u8; uapi::Stats::SIZE];
        self.ioctl("GET_STATS", uapi::PRESCIENT_IOC_GET_STATS, &mut b)?;
        uapi::Stats::from_bytes(&b).map_err(|e| bad_reply("GET_STATS", e))
    }

    fn reset_tables(&self) -> Result<(), DevError> {
        self.ioctl("RESET_TABLES", uapi::PRESCIENT_IOC_RESET_TABLES, &mut [])
    }

    /// Attaches a process by pid; returns the module's handle.
    fn attach_pid(&self, pid: i32) -> Result<u64, DevError> {
        let mut b = uapi::Target {
            kind: uapi::TARGET_PID,
            id: pid as u32,
            handle: 0,
        }
        .to_bytes();
        self.ioctl("ATTACH", uapi::PRESCIENT_IOC_ATTACH, &mut b)?;
        let handle = uapi::Target::from_bytes(&b)
            .map_err(|e| bad_reply("ATTACH", e))?
            .handle;
        if let Err(e) = self.give_gpu(pid, handle) {
            tracing::warn!(
                pid,
                "no prefetches until its GPU is known (retried at every poll; the module parameter gpu_uuid= names one for every space): {e:#}"
            );
        }
        if let Err(e) = self.give_exec_page(pid, handle) {
            tracing::warn!(
                pid,
                "execution-id page not registered (transparent mode for now; retried at every poll): {e}"
            );
        }
        Ok(handle)
    }

    /// Gives each attached space the module does not yet know a GPU for
    /// (SpaceStats::gpu = GPU_UNKNOWN: a process that had not registered its
    /// GPU when it was attached) the GPU the driver now lists for it.
    /// Also registers the execution-id page of each space that has none
    /// yet (a runtime that made its page after the attach).
    fn assign_gpus(&self, stats: &uapi::Stats) {
        let spaces = stats.spaces.iter().take(stats.head.n_spaces as usize);
        for sp in spaces.filter(|sp| sp.handle != 0) {
            if sp.gpu == uapi::GPU_UNKNOWN {
                if let Err(e) = self.give_gpu(sp.pid as i32, sp.handle) {
                    tracing::debug!(pid = sp.pid, "GPU still unknown: {e:#}");
                }
            }
            if sp.exec_page == uapi::EXEC_PAGE_NONE {
                if let Err(e) = self.give_exec_page(sp.pid as i32, sp.handle) {
                    tracing::debug!(pid = sp.pid, "execution-id page not registered: {e}");
                }
            }
        }
    }

    /// A process's own marks, applied to its space with MARK_DEAD /
    /// MARK_ALIVE (marks.rs says why that is safe).
    fn mark(&self, m: crate::backend::MarkFrom<'_>) -> Result<Applied, DevError> {
        marks::apply(self, m)
    }

    fn detach_pid(&self, pid: i32) -> Result<(), DevError> {
        let mut b = uapi::Target {
            kind: uapi::TARGET_PID,
            id: pid as u32,
            handle: 0,
        }
        .to_bytes();
        self.ioctl("DETACH", uapi::PRESCIENT_IOC_DETACH, &mut b)
    }
}

#[cold]
fn bad_reply(op: &'static str, e: uapi::Error) -> DevError {
    DevError::Refused {
        op,
        err: io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {e}")),
    }
}

/// Says which GPUs a multi-GPU process has, and how the module routes.
#[cold]
fn multi_gpu_note(pid: i32, table: &prescient_uvm::ProcessorTable) {
    let all: Vec<String> = table.gpus().iter().map(|g| g.to_string()).collect();
    tracing::info!(
        pid,
        gpus = all.join(","),
        "the process uses {} GPUs: prescient.ko sends each block to the GPU that faulted on it; the first is only the destination of faults it cannot attribute",
        all.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_node_is_missing_not_an_error_of_ours() {
        let d = Module::new(Path::new("/nonexistent/prescient"));
        assert!(matches!(d.version(), Err(DevError::Missing { .. })));
        assert!(matches!(d.stats(), Err(DevError::Missing { .. })));
    }

    #[test]
    fn a_node_that_is_not_prescient_is_refused_not_misread() {
        // /dev/null takes no ioctls: ENOTTY, reported as a refusal.
        let d = Module::new(Path::new("/dev/null"));
        match d.version() {
            Err(DevError::Refused { op, err }) => {
                assert_eq!(op, "GET_VERSION");
                assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
            }
            other => panic!("{other:?}"),
        }
    }
}
