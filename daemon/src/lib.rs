//! prescientd's service side, as a library: the config file, the control
//! protocol (shared with prescientctl), the /dev/prescient client, the
//! Prometheus exposition and the service loop; and the user-space attach
//! layer (`uvm`: the NVIDIA UVM ioctl ABI, `attach`: pidfd_getfd + the V2
//! tools event tracker), shared by the backend loop (backend.rs: `prescientd --pid`,
//! and the service's `backend = "userspace"` through userspace.rs) and
//! `prescientctl record`, so both read events through one
//! implementation.

pub mod attach;
pub mod backend;
pub mod backoff;
pub mod blocklog;
pub mod config;
pub mod device;
pub mod gate;
pub mod marks;
pub mod metrics;
pub mod proto;
pub mod service;
pub mod userspace;
pub mod uvm;
