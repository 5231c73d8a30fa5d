//! prescientd as a library: the config file (`config`), the backends the
//! service drives (`backend`: the trait; `module`: prescient.ko's
//! /dev/prescient; `userspace`: the per-process loops of `prescientd attach`
//! and `backend = "userspace"`), the line-protocol socket server (`socket`)
//! and the service with its Prometheus exposition (`service`).
//!
//! The control protocol is prescient-uapi's `control` module, shared with
//! prescientctl; the NVIDIA UVM side (ioctl ABI, pidfd_getfd attach, the V2
//! tools event tracker and the loop that reads it) is the prescient-uvm
//! crate, shared with `prescientctl record`, so both read events through
//! one implementation.

pub mod backend;
pub mod config;
pub mod config_doc;
pub mod gpu;
pub mod module;
pub mod pidfd;
pub mod safe_path;
pub mod sd_notify;
pub mod service;
pub mod socket;
pub mod userspace;
