//! prescientd's service side, as a library: the config file, the control
//! protocol (shared with prescientctl), the /dev/prescient client, the
//! Prometheus exposition and the service loop. The user-space backend
//! (attach.rs, backend.rs, uvm.rs) is part of the binary.

pub mod config;
pub mod device;
pub mod metrics;
pub mod proto;
pub mod service;
