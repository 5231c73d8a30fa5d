//! One module per prescientctl command, each a `run` taking its arguments.

pub mod attach;
pub mod compact_trace;
pub mod docs;
pub mod record;
pub mod reset;
pub mod run;
pub mod set;
pub mod stats;
pub mod status;
pub mod version;
