//! The user-space loop's counters as /metrics series (`prescient_userspace_*`,
//! one per process, labelled by pid): the tables name them, and
//! [`values`] reads one process's snapshot in table order for the service.

use super::Snapshot;
use crate::backend::LoopValues;

/// A count of one snapshot.
pub type ReadU64 = fn(&Snapshot) -> u64;
/// A float value of one snapshot (seconds, depths).
pub type ReadF64 = fn(&Snapshot) -> f64;

/// The user-space backend's loop counters, per process: name, help, value.
pub const COUNTERS: &[(&str, &str, ReadU64)] = &[
    (
        "prescient_userspace_events_total",
        "UVM tools events read.",
        |s| s.events,
    ),
    (
        "prescient_userspace_dropped_events_total",
        "UVM tools events the driver dropped (queue full).",
        |s| s.dropped_events,
    ),
    (
        "prescient_userspace_dropped_migration_events_total",
        "Of the dropped events, migrations: residency moves the budget's ledger missed.",
        |s| s.dropped_migration_events,
    ),
    (
        "prescient_userspace_migrated_to_gpu_bytes_total",
        "Bytes the driver migrated to the GPU (faults and prefetches).",
        |s| s.migrated_to_gpu_bytes,
    ),
    (
        "prescient_userspace_migrated_to_cpu_bytes_total",
        "Bytes the driver migrated to the CPU (evictions, pre-evictions, CPU faults).",
        |s| s.migrated_to_cpu_bytes,
    ),
    (
        "prescient_userspace_driver_evictions_total",
        "Evictions the driver made itself (memory full).",
        |s| s.driver_evictions,
    ),
    (
        "prescient_userspace_prefetch_errors_total",
        "UVM_MIGRATE prefetches refused.",
        |s| s.prefetch_errors,
    ),
    (
        "prescient_userspace_evict_errors_total",
        "UVM_MIGRATE pre-evictions refused.",
        |s| s.evict_errors,
    ),
    (
        "prescient_userspace_freed_migrations_total",
        "UVM_MIGRATE jobs whose memory the process had freed (or exited) while they were queued; not errors.",
        |s| s.freed_jobs,
    ),
    (
        "prescient_userspace_predicted_faults_total",
        "Faults the engine's history had predicted (the prefetch hit count).",
        |s| s.engine_history_hits,
    ),
    (
        "prescient_userspace_unpredicted_faults_total",
        "Faults the engine's history had not predicted.",
        |s| s.engine_history_misses,
    ),
    (
        "prescient_userspace_driver_thrashing_total",
        "Regions the driver's thrashing detection flagged (UVM tools ThrashingDetected).",
        |s| s.driver_thrashing_events,
    ),
    (
        "prescient_userspace_driver_throttles_total",
        "Pages whose fault servicing the driver throttled for thrashing (ThrottlingStart): their faults repeat unserved meanwhile.",
        |s| s.driver_throttle_starts,
    ),
    (
        "prescient_userspace_regrets_total",
        "Pre-evicted blocks faulted on again soon.",
        |s| s.engine_regrets,
    ),
    (
        "prescient_userspace_discarded_blocks_total",
        "Dead blocks discarded (UVM_DISCARD) instead of evicted.",
        |s| s.discarded_blocks,
    ),
    (
        "prescient_userspace_discard_errors_total",
        "UVM_DISCARD failures (those blocks were evicted).",
        |s| s.discard_errors,
    ),
    (
        "prescient_userspace_ledger_overflow_total",
        "Blocks the engine's ledger could not track.",
        |s| s.engine_ledger_overflow,
    ),
    (
        "prescient_userspace_gate_closes_total",
        "Times the tracker gate turned the events off while the CPU faulted.",
        |s| s.gate.as_ref().map_or(0, |g| g.closes),
    ),
    (
        "prescient_userspace_backoffs_total",
        "Times self back-off stopped prefetching (predictions too inaccurate).",
        |s| s.backoff.as_ref().map_or(0, |b| b.backoffs),
    ),
    (
        "prescient_userspace_backoff_suppressed_total",
        "Predictions not prefetched while backed off.",
        |s| s.backoff.as_ref().map_or(0, |b| b.suppressed),
    ),
    (
        "prescient_userspace_thrash_guards_total",
        "Times an engine's thrash guard turned on (most pre-evicted blocks were faulted straight back).",
        |s| s.engine_thrash_guards,
    ),
    (
        "prescient_userspace_host_shared_trials_total",
        "Allocations tried in host memory (the CPU and the GPU share them).",
        |s| s.host_shared.trials,
    ),
    (
        "prescient_userspace_host_shared_kept_total",
        "Host-memory trials kept (the step got shorter).",
        |s| s.host_shared.kept,
    ),
    (
        "prescient_userspace_host_shared_undone_total",
        "Host-memory trials undone (the step did not get shorter).",
        |s| s.host_shared.undone,
    ),
    (
        "prescient_userspace_fault_batches_total",
        "Fault batches the driver serviced (changes of the events' batch id).",
        |s| s.mechanism.fault_batches,
    ),
    (
        "prescient_userspace_prefetch_faulted_total",
        "Prefetched blocks the GPU faulted on before they were evicted (late prefetches).",
        |s| s.mechanism.prefetch_faulted,
    ),
    (
        "prescient_userspace_churn_total",
        "Prefetched blocks evicted with no fault on them, then faulted on (evicted before their use).",
        |s| s.mechanism.churn,
    ),
];

/// The user-space backend's gauges, per process (floats: seconds too).
pub const GAUGES: &[(&str, &str, ReadF64)] = &[
    (
        "prescient_userspace_window_blocks",
        "Depth of the engine's prediction window, in 2 MiB blocks.",
        |s| s.engine_window_blocks as f64,
    ),
    (
        "prescient_userspace_thrash_guarded_gpus",
        "GPUs whose thrash guard is on now: no room is made for prefetches there.",
        |s| f64::from(s.engine_thrash_guarded_gpus),
    ),
    (
        "prescient_userspace_gate_closed_seconds",
        "Seconds the tracker gate has kept the events off.",
        |s| s.gate.as_ref().map_or(0.0, |g| g.closed_s),
    ),
    (
        "prescient_userspace_backoff_off_seconds",
        "Seconds self back-off has kept prefetching off.",
        |s| s.backoff.as_ref().map_or(0.0, |b| b.off_s),
    ),
    (
        "prescient_userspace_fault_read_p50_seconds",
        "Median time from a fault's servicing by the driver to our read of its event (bucket edge).",
        |s| s.mechanism.fault_read.quantile_us(0.5) / 1e6,
    ),
    (
        "prescient_userspace_fault_served_p50_seconds",
        "Median GPU time from a fault to the end of the migration that served it, ours or the driver's (bucket edge).",
        |s| served(s).quantile_us(0.5) / 1e6,
    ),
    (
        "prescient_userspace_copy_both_ways_seconds",
        "GPU seconds with copies to the GPU and to the CPU in flight at once.",
        |s| s.mechanism.both_busy_s,
    ),
    (
        "prescient_userspace_migrate_queue_max",
        "Most migration jobs ever queued for the workers.",
        |s| s.queue_max as f64,
    ),
    (
        "prescient_userspace_migrate_inflight_mean",
        "Mean UVM_MIGRATE calls in flight while any is.",
        |s| s.inflight_mean,
    ),
];

/// Faults served by us and by the driver, in one histogram.
fn served(s: &Snapshot) -> crate::userspace::Hist {
    let (a, b) = (
        &s.mechanism.fault_served_by_us,
        &s.mechanism.fault_served_by_driver,
    );
    let mut h = a.clone();
    h.count += b.count;
    h.sum_us += b.sum_us;
    if h.buckets.len() < b.buckets.len() {
        h.buckets.resize(b.buckets.len(), 0);
    }
    for (x, y) in h.buckets.iter_mut().zip(&b.buckets) {
        *x += y;
    }
    h
}

/// One process's values, in the order of [`COUNTERS`] and [`GAUGES`].
pub fn values(s: &Snapshot) -> LoopValues {
    LoopValues {
        pid: s.pid,
        counters: COUNTERS.iter().map(|(_, _, f)| f(s)).collect(),
        gauges: GAUGES.iter().map(|(_, _, f)| f(s)).collect(),
    }
}
