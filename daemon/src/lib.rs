//! prescientd as a library: the config file, the control protocol (shared
//! with prescientctl), the backends the service drives (`backend`: the
//! trait; `module`: prescient.ko's /dev/prescient; `userspace`: the
//! per-process loops of `prescientd --pid` and `backend = "userspace"`),
//! the line-protocol socket server, and the service with its Prometheus
//! exposition; and the user-space attach layer (`uvm`: the NVIDIA UVM ioctl
//! ABI, `attach`: pidfd_getfd + the V2 tools event tracker), shared with
//! `prescientctl record`, so both read events through one implementation.

pub mod attach;
pub mod backend;
pub mod config;
pub mod module;
pub mod proto;
pub mod service;
pub mod socket;
pub mod userspace;
pub mod uvm;
