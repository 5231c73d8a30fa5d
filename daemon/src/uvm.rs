//! The UVM ioctl ABI, now in prescient-uvm (kept for the daemon's old paths).
pub use prescient_uvm::ioctl::*;
