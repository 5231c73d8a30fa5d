//! The ABI between `prescient.ko` and user space (`/dev/prescient`).
//!
//! Everything lives in `abi.rs`, which the kernel module includes by path, so
//! that both sides decode and validate requests with the same code. `abi.rs`
//! reaches the engine only through the `pcore` module below (the kernel
//! module defines its own `pcore` that points at the same engine source).
//!
//! With the `control` feature, [`control`] adds the control protocol between
//! prescientctl and prescientd (JSON lines; std and serde): also an
//! interface of the daemon's, kept here so that a client needs no daemon.
//! The crate stays `no_std` otherwise, as `abi.rs` is in the kernel.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "control")]
#[macro_use]
extern crate std;

#[cfg(feature = "control")]
pub mod control;

#[cfg(all(test, not(feature = "control")))]
extern crate std;

pub mod execpage;
/// The launch ring: launches and their footprints, runtime to prescientd.
pub mod launchring;

/// The engine items `abi.rs` needs.
pub(crate) mod pcore {
    pub use prescient_core::{Mode, ParamError, Params, BLOCK_BYTES};
}

#[path = "abi.rs"]
mod abi;
pub use abi::*;
