//! Prescient's side of the NVIDIA UVM driver, shared by prescientd and
//! `prescientctl record` so that both read events through one implementation.
//!
//! - [`ioctl`]: the UVM ioctl ABI (`#[repr(C)]` layouts and wrappers);
//! - [`attach`]: pidfd_open + pidfd_getfd over a process's /dev/nvidia-uvm
//!   fds, keeping the VA-space one ([`Target`]) and its GPU ([`Gpu`]);
//! - [`processors`]: which GPU each processor index of an event names;
//! - [`claim`]: the exclusive right to act for one process;
//! - [`tracker`]: the V2 tools event tracker and its ring;
//! - [`session`]: attach-with-retry plus a tracker ([`Session::open`]) and
//!   the loop that reads it ([`Session::pump`]).

pub mod attach;
pub mod claim;
pub mod ioctl;
pub mod processors;
pub mod session;
pub mod tracker;

pub use attach::{driver_version, Gpu, Target};
pub use claim::Claim;
pub use processors::ProcessorTable;
pub use session::{is_permission, Ended, Pace, Session, Turn, DRAIN_BATCH};
pub use tracker::{Event, Tracker};
