//! The counters of one process's loop (`Snapshot`): printed at the end by
//! `prescientd attach`, written to `--stats-json`, and published to the
//! service, which reads them for its statistics.

use super::mechanism::Mechanism;
use super::migrator::{Counters, SIZE_BUCKETS};
use super::mode::{FaultSource, PolicyMode};
use super::oracle::OracleStats;
use super::{backoff, gate};
use prescient_core::Stats;
use prescient_uapi::control::GpuLane;
use prescient_uvm::Tracker;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One process's counters at one moment.
#[derive(Serialize, Default, Clone)]
pub struct Snapshot {
    pub pid: i32,
    pub mode: Option<PolicyMode>,
    pub fault_source: Option<FaultSource>,
    pub driver_version: String,
    pub gpu_uuid: String,
    pub budget_bytes: Option<u64>,
    pub elapsed_s: f64,
    /// Wall-clock time of this snapshot (Unix seconds), to line samples up
    /// with a workload's own timestamps.
    pub unix_s: f64,
    pub events: u64,
    pub fault_events: u64,
    pub fault_blocks: u64,
    /// The engine runs in execution-id mode (execfeed.rs).
    pub exec_mode: bool,
    /// Execution ids read from the process's page.
    pub exec_ids_seen: u64,
    /// Faults handed to the engine while an id was known: with
    /// `fault_blocks`, how many faults carry an execution id.
    pub faults_with_exec_id: u64,
    /// Of the faults without an id: those before the page was found (with
    /// `--exec-ids off`: all), and those after it was found but before any
    /// id had been read from it.
    pub faults_no_page: u64,
    pub faults_before_first_id: u64,
    /// Fault events of HUB clients (non-replayable faults: the copy
    /// engines), and how many came while an id was known.
    pub hub_fault_events: u64,
    pub hub_fault_events_with_id: u64,
    /// Page values refused as torn.
    pub exec_ids_torn: u64,
    /// Launch footprints (`--footprints`, ahead/): the ring, the queue of
    /// launches ahead of the GPU, and what was prefetched from it.
    pub ahead: Option<super::AheadStats>,
    /// Blocks kept in host memory because the CPU and the GPU took them
    /// from each other every step (shared.rs).
    pub host_shared: super::SharedStats,
    pub migration_events: u64,
    /// The driver's thrashing detection: regions flagged, their bytes, and
    /// pages whose fault servicing it throttled (begun, ended). Throttled
    /// pages fault again and again without being served.
    pub driver_thrashing_events: u64,
    pub driver_thrashing_bytes: u64,
    pub driver_throttle_starts: u64,
    pub driver_throttle_ends: u64,
    pub other_events: u64,
    pub migrated_to_gpu_bytes: u64,
    pub migrated_to_cpu_bytes: u64,
    pub driver_evictions: u64,
    pub migrations_by_cause: [u64; 8],
    pub dropped_events: u64,
    /// Of `dropped_events`, migrations: residency moves the ledger missed.
    pub dropped_migration_events: u64,
    pub resident_bytes: u64,
    pub resident_blocks: u64,
    /// The most bytes the ledger counted resident, not counting blocks
    /// whose eviction was queued and had not completed (what it counted
    /// before evictions were followed to their end: runs up to 60).
    pub max_resident_bytes: u64,
    /// The most bytes on the GPU for the process as far as the ledger
    /// knows, at any point the loop looked (after each drain of events and
    /// after each turn's decisions): resident blocks, prefetches issued and
    /// evictions not completed, summed over its GPUs. Against
    /// `budget_bytes` (per GPU): what the budget really held. Our own
    /// admissions never take it past the budget; faults the driver serves
    /// between two turns can.
    pub budget_high_water_bytes: u64,
    /// Bytes whose eviction was queued or running and had not completed, now.
    pub leaving_bytes: u64,
    /// Evicted blocks the driver refused to move (they stayed, and counted).
    pub evict_refused_blocks: u64,
    pub prefetch_ops: u64,
    pub prefetch_bytes: u64,
    pub prefetch_errors: u64,
    /// Prefetched bytes / wall time with at least one prefetch ioctl in flight.
    pub prefetch_gbps: f64,
    pub evict_ops: u64,
    pub evict_bytes: u64,
    pub evict_errors: u64,
    /// Migrations of memory the process had freed by then (not errors).
    pub freed_jobs: u64,
    pub evict_gbps: f64,
    /// Bytes of user-requested (our UVM_MIGRATE) migrations to the GPU, and
    /// their throughput over the union of their GPU copy intervals
    /// (beginTimeStampGpu..endTimeStampGpu of the migration events).
    pub user_to_gpu_bytes: u64,
    pub user_to_gpu_copy_s: f64,
    pub user_to_gpu_gbps: f64,
    pub dropped_jobs: u64,
    /// Predicted blocks not prefetched because the ledger has them resident.
    pub prefetch_resident: u64,
    /// Prefetch rounds stopped under the budget because every resident block
    /// was predicted.
    pub prefetch_no_room: u64,
    /// Prefetch rounds stopped at a full budget because the thrash guard
    /// was on (it makes no room: core `engine/thrash.rs`).
    pub prefetch_guarded: u64,
    /// Prefetch rounds stopped because the room made for the next block was
    /// still leaving the GPU (its evictions had not completed).
    pub prefetch_wait_evictions: u64,
    /// Predicted blocks not prefetched because no GPU of the process's
    /// table faulted on them or last (route.rs): never a guessed GPU.
    pub prefetch_no_gpu: u64,
    /// GPU faults whose processor index no table read had (route.rs).
    pub faults_unknown_gpu: u64,
    /// Predictions of one GPU's engine not prefetched because another GPU
    /// faulted on the block last (route.rs, lanes.rs).
    pub prefetch_other_gpu: u64,
    /// One entry per GPU the process faulted from: its own engine, ledger
    /// and budget (lanes.rs).
    pub gpus: Vec<GpuLane>,
    /// The process's GPUs (nvidia-smi UUIDs, by processor index) at the
    /// last snapshot.
    pub gpu_uuids: Vec<String>,
    /// Bytes our prefetches moved, by destination GPU (nvidia-smi UUID).
    pub prefetch_bytes_by_gpu: std::collections::BTreeMap<String, u64>,
    pub engine_faults: u64,
    pub engine_prefetches: u64,
    pub engine_windows: u64,
    pub engine_refaults: u64,
    pub engine_victims: u64,
    pub engine_free_target: u32,
    /// Transparent mode's history: faults it predicted, faults it did not,
    /// and moves of its window elsewhere.
    pub engine_history_hits: u64,
    pub engine_history_misses: u64,
    pub engine_history_jumps: u64,
    /// Victim requests the engine could not fill.
    pub engine_victim_shortfall: u64,
    /// Pre-evicted blocks faulted again soon, and offered again soon
    /// (core `Stats::regrets`, `Stats::regret_offers`).
    pub engine_regrets: u64,
    pub engine_regret_offers: u64,
    /// Times an engine's thrash guard turned on (core `engine/thrash.rs`:
    /// most victims came straight back), and the GPUs whose guard is on
    /// now (no room is made for prefetches there, the reserve is 0).
    pub engine_thrash_guards: u64,
    pub engine_thrash_guarded_gpus: u32,
    /// The history window's depth now, in blocks.
    pub engine_window_blocks: u64,
    /// Blocks the engine has as resident, and blocks it could not track
    /// (its ledger was full: they would be invisible to pre-eviction).
    pub engine_resident_blocks: u32,
    pub engine_ledger_overflow: u64,
    /// Mark requests applied, and the blocks they covered.
    pub mark_requests: u64,
    pub marked_dead_blocks: u64,
    pub marked_alive_blocks: u64,
    /// Dead blocks discarded (UVM_DISCARD, no copy) instead of evicted, the
    /// ioctls that did it, failures (those blocks were evicted instead), and
    /// the backend thread's time in them.
    pub discarded_blocks: u64,
    pub discard_ops: u64,
    pub discard_errors: u64,
    pub discard_s: f64,
    /// Of `discarded_blocks`, those discarded where they were when their dead
    /// mark came (not on the GPU), rather than as victims.
    pub host_discarded_blocks: u64,
    /// Discarded blocks marked alive again, migrated back to the GPU (the
    /// driver copies nothing for discarded pages).
    pub refetched_blocks: u64,
    /// Of those, blocks an alive mark brought back to the GPU before its
    /// reply (alive.rs), counted on the GPU at the next turn.
    pub alive_populated_blocks: u64,
    /// Alive marks that passed the gate (all but `no_populate` ones; one
    /// refused afterwards, its queue full, counts too), and where their
    /// answers waited inside prescientd: for the gate (a discard run held
    /// it) and for their populates, seconds in all (alive.rs
    /// `AliveTimes`). The rest of the allocator's wait is the socket round
    /// trip and the runtime's side.
    pub alive_marks: u64,
    pub alive_gate_wait_s: f64,
    pub alive_populate_s: f64,
    /// Dead blocks left out of a discard because an alive mark for them
    /// was answered and not applied yet (alive.rs); victims among them
    /// were evicted instead.
    pub discards_held_alive: u64,
    /// Discarded blocks the GPU faulted on before they were marked alive
    /// or prefetched.
    pub discarded_faulted: u64,
    /// Self back-off counters (absent when disabled).
    pub backoff: Option<backoff::Stats>,
    /// Tracker gate counters (absent when not used). While the gate is
    /// closed no event is seen: the fault counts above then miss the faults
    /// of those periods.
    pub gate: Option<gate::Stats>,
    /// Where the time goes: fault-to-read and fault-to-served latencies,
    /// fault batches, copy overlap, churn (mechanism.rs).
    pub mechanism: Mechanism,
    /// The migration workers: jobs queued (most, mean at submission), ops
    /// in flight (mean while any is, most), wall seconds with copies both
    /// ways in flight, and jobs by size in blocks (1, 2, 3-4, 5-8, 9-16, 17+).
    pub queue_max: u64,
    pub queue_mean: f64,
    pub inflight_mean: f64,
    pub inflight_max: u64,
    pub both_ways_busy_s: f64,
    pub prefetch_job_sizes: [u64; SIZE_BUCKETS],
    pub evict_job_sizes: [u64; SIZE_BUCKETS],
    /// Jobs that joined one already queued (`--merge-queued`).
    pub merged_jobs: u64,
    /// `--mode oracle`'s counters.
    pub oracle: Option<OracleStats>,
    /// `--record-plan`: entries recorded, and faults outside every managed range.
    pub plan_recorded: u64,
    pub plan_unmapped: u64,
}

/// Bytes per nanosecond (= GB/s) over `busy_ns`, 0 when nothing was timed.
fn gbps(bytes: u64, busy_ns: u64) -> f64 {
    if busy_ns > 0 {
        bytes as f64 / busy_ns as f64
    } else {
        0.0
    }
}

/// What the loop's engines and ledgers hold, summed over its GPUs
/// (lanes.rs fills it), and one entry per GPU.
pub(super) struct EngineView {
    pub(super) stats: Stats,
    pub(super) free_target: u32,
    /// Lanes whose thrash guard is on.
    pub(super) guarded_lanes: u32,
    pub(super) window_blocks: u64,
    pub(super) engine_resident_blocks: u32,
    pub(super) resident_bytes: u64,
    pub(super) resident_blocks: u64,
    pub(super) gpus: Vec<GpuLane>,
}

/// Refreshes `s` from the loop's engines (`v`), workers and tracker.
pub(super) fn fill(s: &mut Snapshot, v: EngineView, c: &Counters, t: &Tracker, start: Instant) {
    s.elapsed_s = start.elapsed().as_secs_f64();
    s.unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    s.dropped_events = t.dropped();
    s.dropped_migration_events = t.dropped_migrations();
    s.resident_bytes = v.resident_bytes;
    s.resident_blocks = v.resident_blocks;
    s.gpus = v.gpus;
    s.prefetch_ops = c.prefetch_ops.load(Relaxed);
    s.prefetch_bytes = c.prefetch_bytes.load(Relaxed);
    s.prefetch_errors = c.prefetch_errors.load(Relaxed);
    if let Ok(v) = c.prefetch_bytes_by_gpu.lock() {
        s.prefetch_bytes_by_gpu = (v.iter())
            .map(|(u, b)| (prescient_uvm::ioctl::uuid_string(u), *b))
            .collect();
    }
    s.prefetch_gbps = gbps(s.prefetch_bytes, c.prefetch_busy_ns.load(Relaxed));
    s.evict_ops = c.evict_ops.load(Relaxed);
    s.evict_bytes = c.evict_bytes.load(Relaxed);
    s.evict_errors = c.evict_errors.load(Relaxed);
    s.freed_jobs = c.freed_jobs.load(Relaxed);
    s.evict_gbps = gbps(s.evict_bytes, c.evict_busy_ns.load(Relaxed));
    s.dropped_jobs = c.dropped_jobs.load(Relaxed);
    fill_workers(s, c);
    let st = v.stats;
    s.engine_faults = st.faults;
    s.engine_prefetches = st.prefetches;
    s.engine_windows = st.windows;
    s.engine_refaults = st.refaults;
    s.engine_victims = st.victims_evict + st.victims_discard;
    s.engine_free_target = v.free_target;
    s.engine_history_hits = st.history_hits;
    s.engine_history_misses = st.history_misses;
    s.engine_history_jumps = st.history_jumps;
    s.engine_victim_shortfall = st.victim_shortfall;
    s.engine_regrets = st.regrets;
    s.engine_regret_offers = st.regret_offers;
    s.engine_thrash_guards = st.thrash_guards;
    s.engine_thrash_guarded_gpus = v.guarded_lanes;
    s.engine_window_blocks = v.window_blocks;
    s.engine_resident_blocks = v.engine_resident_blocks;
    s.engine_ledger_overflow = st.ledger_overflow;
}

/// The workers' queue, concurrency and job sizes.
fn fill_workers(s: &mut Snapshot, c: &Counters) {
    let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    s.queue_max = c.queue_max.load(Relaxed);
    s.queue_mean = ratio(c.queue_sum.load(Relaxed), c.queue_samples.load(Relaxed));
    s.inflight_mean = ratio(c.inflight_ns.load(Relaxed), c.any_busy_ns.load(Relaxed));
    s.inflight_max = c.inflight_max.load(Relaxed);
    s.both_ways_busy_s = c.both_busy_ns.load(Relaxed) as f64 / 1e9;
    s.merged_jobs = c.merged_jobs.load(Relaxed);
    for k in 0..SIZE_BUCKETS {
        s.prefetch_job_sizes[k] = c.sizes[0][k].load(Relaxed);
        s.evict_job_sizes[k] = c.sizes[1][k].load(Relaxed);
    }
}

/// Publishes `s` to the service (`publish`) and writes it to `stats_json`
/// (through a temporary file, so a reader never sees half of it).
pub(super) fn write_stats(
    publish: Option<&Arc<Mutex<Snapshot>>>,
    stats_json: Option<&PathBuf>,
    s: &Snapshot,
) {
    if let Some(p) = publish {
        if let Ok(mut g) = p.lock() {
            *g = s.clone();
        }
    }
    let Some(path) = stats_json else { return };
    let tmp = path.with_extension("tmp");
    match serde_json::to_vec_pretty(s) {
        Ok(v) => {
            // The temporary file is opened without following a symlink, and
            // rename replaces a link at `path` rather than writing through it.
            use std::io::Write;
            let written = crate::safe_path::create_output(&tmp, "--stats-json")
                .and_then(|mut f| Ok(f.write_all(&v)?))
                .and_then(|_| Ok(std::fs::rename(&tmp, path)?));
            if written.is_err() {
                tracing::warn!(path = %path.display(), "cannot write stats");
            }
        }
        Err(e) => tracing::warn!("stats: {e}"),
    }
}
