//! One grammar for byte sizes and one for durations, for every binary and config file.
//!
//! prescientd's flags and config file, prescientctl and the simulator read
//! sizes and durations through this crate, so that "1.5G", "1536M", "2GiB"
//! and "1T" mean the same everywhere (see [`size`]) and a duration is
//! written the way systemd writes one (see [`duration`]). Each grammar
//! comes with a clap value parser (the types' `FromStr`), `Display` that
//! reads back to the same value, and, for sizes, a serde helper that takes
//! an integer or a string.
//!
//! Bandwidths (the simulator's `--h2d 15.754GB/s`) are rates in decimal
//! units, not memory sizes, and keep their own grammar in the simulator.

pub mod budget;
pub mod duration;
pub mod size;

pub use budget::{parse_budget, BudgetError, GpuBudget, GpuKey, BUDGET_FORMS};
pub use duration::{parse_duration, parse_seconds, DurationError, HumanDuration, DURATION_FORMS};
pub use size::{parse_size, ByteSize, SizeError, SIZE_FORMS};
