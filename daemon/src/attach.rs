//! Attach and the tools tracker, now in prescient-uvm (kept for the daemon's old paths).
pub use prescient_uvm::{attach::*, claim::*, tracker::*};
