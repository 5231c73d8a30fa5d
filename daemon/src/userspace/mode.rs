//! The per-process loop's two choices, as flags and the stats JSON name
//! them: which policy it runs, and which events stand for faults.

use prescient_uvm::ioctl as uvm;
use serde::Serialize;

/// Which policy a process's loop runs (policy.rs implements each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyMode {
    /// Engine-driven prefetch and pre-eviction under the budget.
    Prescient,
    /// No prefetch; evict the oldest-resident block when over the budget.
    DriverLike,
    /// Count events only; issue nothing.
    Observe,
    /// Replay a recorded plan (`--plan`): each block prefetched just ahead
    /// of its recorded use, Belady eviction under the budget (oracle/), on
    /// the process's one GPU (a second GPU is refused).
    Oracle,
}

impl PolicyMode {
    /// The engine learns from faults and marks, and dead victims may be
    /// discarded: only the prescient policy acts on predictions.
    pub fn learns(self) -> bool {
        self == PolicyMode::Prescient
    }

    /// Migrations to the GPU with cause "user" are ours (prefetches).
    pub fn prefetches(self) -> bool {
        matches!(self, PolicyMode::Prescient | PolicyMode::Oracle)
    }

    /// Migrations to the CPU with cause "user" are ours (evictions).
    pub fn evicts(self) -> bool {
        self != PolicyMode::Observe
    }
}

/// Where the engine's faults come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultSource {
    /// GPU_FAULT events (exact, but the driver's per-fault tools cost is high).
    Faults,
    /// MIGRATION events only: a fault-driven migration to the GPU (cause
    /// coherence or driver prefetch) stands for a fault on its block.
    Migrations,
    /// GPU_FAULT events only, no MIGRATION events: the ledger then knows only
    /// our own commands, so no budget can be enforced.
    FaultsOnly,
}

impl FaultSource {
    /// The tools events a tracker enables for this source, the driver's
    /// thrashing and throttling events always among them (rare, and what
    /// explains faults the driver leaves unserved).
    pub fn events(self) -> u64 {
        uvm::EVENTS_DRIVER_POLICY
            | match self {
                FaultSource::Faults => (1 << uvm::EVENT_GPU_FAULT) | (1 << uvm::EVENT_MIGRATION),
                FaultSource::Migrations => 1 << uvm::EVENT_MIGRATION,
                FaultSource::FaultsOnly => 1 << uvm::EVENT_GPU_FAULT,
            }
    }
}

/// Whether the engine learns per kernel from the execution ids a process's
/// runtime writes (execfeed.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecIds {
    /// Transparent mode: ids are not read.
    Off,
    /// Execution-id mode if the process has an execution-id page when the
    /// loop starts (`prescientctl run` attaches once it has), transparent
    /// mode otherwise.
    Auto,
    /// Execution-id mode; the page is looked for until it appears.
    On,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_source_also_hears_the_driver_s_thrashing_events() {
        for s in [
            FaultSource::Faults,
            FaultSource::Migrations,
            FaultSource::FaultsOnly,
        ] {
            let e = s.events();
            assert_eq!(
                e & uvm::EVENTS_DRIVER_POLICY,
                uvm::EVENTS_DRIVER_POLICY,
                "{s:?}"
            );
            let faults = e & (1 << uvm::EVENT_GPU_FAULT) != 0;
            let migrations = e & (1 << uvm::EVENT_MIGRATION) != 0;
            assert_eq!(faults, s != FaultSource::Migrations, "{s:?}");
            assert_eq!(migrations, s != FaultSource::FaultsOnly, "{s:?}");
        }
    }
}
