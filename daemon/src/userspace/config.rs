//! What one per-process loop is told: its policy, where its faults come
//! from, its budget and knobs (`Config`), and the service's settings that
//! every process it attaches shares (`Settings`).

use super::marks;
use super::mode::{ExecIds, FaultSource, PolicyMode};
use super::oracle::OracleConfig;
use super::snapshot::Snapshot;
use super::{backoff, gate};
use prescient_core::{Mode, Params, BLOCK_SHIFT};
use prescient_units::GpuBudget;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything one process's loop (process.rs) runs with.
pub struct Config {
    pub fault_source: FaultSource,
    pub mode: PolicyMode,
    /// The residency budget of each GPU the process faults from
    /// (prescient-units' budget grammar); empty: none.
    pub budget: GpuBudget,
    /// nvidia-smi's index of each GPU UUID (from NVML), for budgets that
    /// name a GPU by its index; empty when NVML did not answer.
    pub gpu_indices: Vec<(String, u32)>,
    pub duration: Option<Duration>,
    pub stats_json: Option<PathBuf>,
    pub stats_interval: Duration,
    pub workers: usize,
    /// Of `workers`, how many take only prefetches (the rest take
    /// evictions first; jobqueue.rs); 0: all take both, prefetches first.
    pub prefetch_workers: usize,
    pub async_migrate: bool,
    pub max_coalesce_blocks: u64,
    /// Queued migrations continuing the last one queued (same direction
    /// and destination, adjacent blocks) join it up to this many blocks;
    /// 0: never (jobqueue.rs).
    pub merge_queued_blocks: u64,
    /// The prediction window's depth follows the rate of regretted victims
    /// (core engine.rs, `set_regret_window`); it matters only under a budget.
    pub regret_window: bool,
    /// The engine's prediction window in blocks, instead of the one
    /// `base_params` derives (1/8 of the budget or the GPU).
    pub window_blocks: Option<u32>,
    /// Under a residency budget, the engine's smallest reserve
    /// (`Params::free_min`) in percent of the budget: how many evictions
    /// may be on their way while prefetches still go in (core/src/pump.rs).
    /// 6 by default: against `Params`' 2.5% (the module's and the
    /// simulator's, whose evictions complete within the call) the four
    /// bench workloads ran 1.09-1.38x faster (H100 run 74), 12% between.
    pub reserve_pct: u32,
    /// 2 MB blocks of a GPU that `gpu_memory` does not name: the operator's
    /// one size (`--gpu-memory`, `userspace.gpu_memory`), else the first
    /// GPU's (NVML), else `gpu::FALLBACK_GPU_MEMORY`.
    pub gpu_blocks: u32,
    /// Each GPU's memory by UUID (NVML, `gpu::memory_by_uuid`): a GPU's
    /// engine, ledger and capacity are sized from its own memory.
    pub gpu_memory: Vec<(String, u64)>,
    /// Self back-off (None: always prefetch).
    pub backoff: Option<backoff::Params>,
    /// Tracker gate: events off during the process's CPU phases (None:
    /// always on). Used only when prefetching with GPU_FAULT and MIGRATION
    /// events and no residency budget (see gate.rs).
    pub gate: Option<gate::Params>,
    /// Table parameters set through the service (rows, assoc, succs,
    /// lookahead; transparent mode only), on top of `Params::for_gpu`.
    pub engine: Option<prescient_uapi::ParamsAbi>,
    /// Where the service reads this process's counters: replaced with a
    /// fresh snapshot every `stats_interval` and at the end.
    pub publish: Option<Arc<Mutex<Snapshot>>>,
    /// Dead and alive marks from the process (marks.rs); None: none come.
    pub marks: Option<marks::Receiver>,
    /// Discard dead victims with UVM_DISCARD (the driver has it: 580+);
    /// otherwise they are evicted like live ones.
    pub discard: bool,
    /// An alive mark brings its discarded blocks back to the GPU before
    /// its reply (alive.rs); off: the backend's refetch does, later.
    pub alive_populate: bool,
    /// Log every block decision and movement here (blocklog.rs).
    pub block_log: Option<PathBuf>,
    /// Execution ids from the process's runtime (execfeed.rs).
    pub exec_ids: ExecIds,
    /// `--mode oracle`: the plan it replays and its depth (oracle/).
    pub oracle: Option<OracleConfig>,
    /// `--record-plan FILE`: write the run's block sequence there at the end.
    pub record_plan: Option<PathBuf>,
    /// Launch footprints (on unless `--no-footprints` or
    /// `userspace.footprints = false`): prefetch the blocks of the launches
    /// the process's runtime queued ahead of the GPU (ahead/); needs
    /// execution ids.
    pub footprints: bool,
    /// The part of each GPU's limit the launches to come may take, in
    /// percent (1-100).
    pub footprint_window_pct: u32,
    /// Victims follow the whole queue of launches to come
    /// (ahead/issue.rs `order_upcoming`), not only the window: off by
    /// default (`--order-queue`, hidden; GPU runs 77-83 in
    /// BENCHMARKS-gpu.md: faster on the transformer and ResNet-50, slower
    /// on the encoder and dnn).
    pub order_queue: bool,
    /// The part of each GPU's limit, in percent, kept for running launches
    /// larger than it (ahead/issue.rs `window`); 0: they get the plain
    /// window (`--large-window-pct`, hidden).
    pub large_window_pct: u32,
    /// Victims among blocks no queued launch uses go from the one that
    /// left the queue last (ahead/issue.rs `order_cyclic`), with the
    /// whole queue ordered as `order_queue` does (`--cyclic-victims`,
    /// hidden).
    pub cyclic_victims: bool,
    /// Victims among blocks no queued launch uses go by their next use
    /// predicted from their uses a step ago, the farthest first
    /// (ahead/recur.rs, order.rs `order_next_use`), with the whole queue
    /// ordered as `order_queue` does: on unless `--no-next-use-victims`
    /// (hidden); `--cyclic-victims` takes its place.
    pub next_use_victims: bool,
    /// With the next-use order: running launches larger than the limit
    /// are ordered by where the GPU is in them (ahead/sweep.rs): on unless
    /// `--no-sweep-victims` (hidden).
    pub sweep_victims: bool,
    /// The sweep's window: the part of the limit the blocks ahead of the
    /// GPU may fill, in percent (`--sweep-window-pct`, hidden).
    pub sweep_window_pct: u32,
    /// Try allocations the CPU rewrites every step in host memory, mapped
    /// to the GPU, keeping those that shorten the step (shared.rs): on
    /// unless `--no-host-shared`.
    pub host_shared: bool,
}

impl Default for Config {
    /// `prescientd attach`'s defaults: prescient mode on GPU_FAULT events,
    /// no budget, the fallback GPU size (`gpu::FALLBACK_GPU_MEMORY`; the
    /// command resolves the real one), no back-off, gate, marks or discards.
    fn default() -> Config {
        Config {
            fault_source: FaultSource::Faults,
            mode: PolicyMode::Prescient,
            budget: GpuBudget::default(),
            gpu_indices: Vec::new(),
            duration: None,
            stats_json: None,
            stats_interval: Duration::from_millis(500),
            // 8 workers merging queued jobs up to 64 blocks: stream under
            // its budget 349 ms a step against 509 with 4 and no merging
            // (H100 run 57, medians of 2); FDTD-2D and dnn unchanged.
            workers: 8,
            prefetch_workers: 0,
            async_migrate: true,
            max_coalesce_blocks: 16,
            merge_queued_blocks: 64,
            regret_window: true,
            window_blocks: None,
            reserve_pct: 6,
            gpu_blocks: blocks_of(crate::gpu::FALLBACK_GPU_MEMORY),
            gpu_memory: Vec::new(),
            backoff: None,
            gate: None,
            engine: None,
            publish: None,
            marks: None,
            discard: false,
            alive_populate: true,
            block_log: None,
            exec_ids: ExecIds::Off,
            oracle: None,
            record_plan: None,
            // On: 1.3-1.9x over execution ids alone on every job measured
            // (BENCHMARKS-gpu.md runs 67-70), once the runtime sizes the
            // parameters of CUkernel launches (run 66).
            footprints: true,
            footprint_window_pct: 25,
            order_queue: false,
            large_window_pct: 0,
            cyclic_victims: false,
            // On: stream 1.39-1.63x faster at the oracle's bytes, the
            // bench transformer 1.17-1.20x, dnn 1.28x, the PyTorch jobs
            // as fast with 4-11% fewer bytes (GPU runs 108-111).
            next_use_victims: true,
            sweep_victims: true,
            sweep_window_pct: 25,
            // On: dnn 34.7 ms a step with its input tried and kept, 170.4
            // without; no trial started on the other jobs (GPU runs 96-97).
            host_shared: true,
        }
    }
}

impl Config {
    /// The resident-block watermark the engine's pump keeps (`Limit`): the
    /// service's engine parameters, else the engine's default. The shared
    /// host loop and the oracle make room under the same limit.
    pub fn watermark_pct(&self) -> u32 {
        self.engine
            .map_or(prescient_core::DEFAULT_WATERMARK_PCT, |e| {
                e.pre_evict_watermark_pct
            })
    }

    /// Does a pass read the whole list of upcoming blocks and the running
    /// launches' (the next-use order, the default; `--order-queue`,
    /// `--cyclic-victims`, `--large-window-pct`)? Else a turn reads only
    /// its window's part.
    pub fn reads_whole_queue(&self) -> bool {
        self.orders_queue() || self.large_window_pct > 0
    }

    /// Are running launches larger than the limit ordered by where the
    /// GPU is in them (with the next-use order; `--large-window-pct`
    /// keeps its own window for them)?
    pub fn sweep_victims(&self) -> bool {
        self.sweep_victims
            && self.next_use_victims
            && !self.cyclic_victims
            && self.large_window_pct == 0
    }

    /// Does a pass order the whole queue for victims?
    pub fn orders_queue(&self) -> bool {
        self.order_queue || self.cyclic_victims || self.next_use_victims
    }

    /// The budget of `gpu`: its own by UUID or nvidia-smi index, else the
    /// each-GPU one; None for no budget.
    pub fn budget_of(&self, gpu: &prescient_uvm::Gpu) -> Option<u64> {
        let uuid = gpu.to_string();
        let index = (self.gpu_indices.iter())
            .find(|(u, _)| u.eq_ignore_ascii_case(&uuid))
            .map(|(_, i)| *i);
        self.budget.of(&uuid, index).filter(|&b| b > 0)
    }

    /// The engine parameters of a GPU of `gpu_blocks` under `budget`
    /// (`engine_params`).
    pub fn engine_for(
        &self,
        budget: Option<u64>,
        gpu_blocks: u32,
        exec_mode: bool,
    ) -> anyhow::Result<Params> {
        engine_params(self, budget, gpu_blocks, exec_mode)
    }

    /// The 2 MB blocks of `gpu`'s memory: its own (`gpu_memory`), else
    /// `gpu_blocks`.
    pub fn gpu_blocks_of(&self, gpu: &prescient_uvm::Gpu) -> u32 {
        let uuid = gpu.to_string();
        (self.gpu_memory.iter())
            .find(|(u, _)| u.eq_ignore_ascii_case(&uuid))
            .map_or(self.gpu_blocks, |(_, b)| blocks_of(*b))
    }

    /// The loop the service's user-space backend starts for one process:
    /// the service's `settings` and parameters `p` (its each-GPU budget,
    /// and prefetching on or off), the per-GPU budgets `gpus` on top,
    /// publishing into `publish`, marks from `marks`.
    pub fn for_service(
        settings: &Settings,
        p: prescient_uapi::ParamsAbi,
        gpus: &GpuBudgets,
        publish: Arc<Mutex<Snapshot>>,
        marks: marks::Receiver,
        discard: bool,
    ) -> Config {
        Config {
            mode: if p.enabled == 1 {
                PolicyMode::Prescient
            } else {
                PolicyMode::Observe
            },
            budget: GpuBudget {
                each: (p.residency_budget_bytes > 0).then_some(p.residency_budget_bytes),
                gpus: gpus.budget.gpus.clone(),
            },
            gpu_indices: gpus.indices.clone(),
            stats_interval: settings.stats_interval,
            workers: settings.workers.max(1),
            regret_window: settings.regret_window,
            footprints: settings.footprints,
            host_shared: settings.host_shared,
            gpu_blocks: blocks_of(settings.gpu_memory_bytes),
            gpu_memory: settings.gpu_memory.clone(),
            backoff: Some(backoff::Params::default()),
            gate: settings.gate.then(gate::Params::default),
            engine: Some(p),
            publish: Some(publish),
            marks: Some(marks),
            discard,
            exec_ids: ExecIds::Auto,
            ..Config::default()
        }
    }
}

/// Per-GPU budgets the service applies on top of its each-GPU budget (the
/// ABI's `residency_budget_bytes`), and nvidia-smi's index of each GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuBudgets {
    /// Only `gpus` is used: the each-GPU size is the parameters'.
    pub budget: GpuBudget,
    pub indices: Vec<(String, u32)>,
}

/// What the service's config says about the user-space backend.
#[derive(Clone, Debug)]
pub struct Settings {
    /// GPU memory that sizes the engine of a GPU `gpu_memory` does not name
    /// (`Config::gpu_blocks`).
    pub gpu_memory_bytes: u64,
    /// Each GPU's memory by UUID (`Config::gpu_memory`).
    pub gpu_memory: Vec<(String, u64)>,
    /// Threads issuing UVM_MIGRATE per process.
    pub workers: usize,
    /// Tools event queue entries per process (power of two).
    pub queue_entries: u32,
    /// The tracker gate (gate.rs); used for processes with no residency budget.
    pub gate: bool,
    /// The regret-driven window depth (`Config::regret_window`).
    pub regret_window: bool,
    /// Launch footprints (`Config::footprints`).
    pub footprints: bool,
    /// Host-memory trials (`Config::host_shared`).
    pub host_shared: bool,
    /// How often a process's counters are published to the service.
    pub stats_interval: Duration,
}

/// 2 MB blocks in `bytes`, at least 8 (the engine's smallest ledger).
pub(crate) fn blocks_of(bytes: u64) -> u32 {
    (bytes >> BLOCK_SHIFT).clamp(8, u32::MAX as u64) as u32
}

/// The engine's parameters before the service's table settings: transparent
/// mode, sized by the residency budget (`Params::for_budget`: a ledger for
/// the whole GPU) or by the GPU when there is none.
pub(crate) fn base_params(budget: Option<u64>, gpu_blocks: u32) -> Params {
    Params {
        mode: Mode::Transparent,
        ..match budget {
            Some(b) => {
                Params::for_budget((b >> BLOCK_SHIFT).min(u32::MAX as u64) as u32, gpu_blocks)
            }
            None => Params::for_gpu(gpu_blocks),
        }
    }
}

/// The table keys (rows, assoc, succs, lookahead) of the user-space
/// backend's engine when the service's config leaves them at prescient.ko's
/// defaults (`EngineParams::default`: 512 rows, 4 kernels ahead, sized for
/// kernel memory): `prescientd attach`'s, the ones `base_params` gives
/// (DeepUM's 2048 x 2-way table with 4 successors, 16 kernels ahead; every
/// user-space result of BENCHMARKS-gpu.md ran with them). So the service's
/// user-space backend and `prescientd attach` run one set of defaults
/// (H100 run 46: the service path, on the module's, took 837 ms a step
/// where attach took 537-643). A value other than the module's default is
/// the operator's and applies as given. Returns the keys replaced.
pub fn own_table_defaults(p: &mut prescient_uapi::control::EngineParams) -> Vec<&'static str> {
    let module = prescient_uapi::control::EngineParams::default();
    let ours = base_params(None, blocks_of(crate::gpu::FALLBACK_GPU_MEMORY));
    let mut replaced = Vec::new();
    for (key, v, m, o) in [
        ("engine.rows", &mut p.rows, module.rows, ours.rows),
        ("engine.assoc", &mut p.assoc, module.assoc, ours.assoc),
        ("engine.succs", &mut p.succs, module.succs, ours.succs),
        (
            "engine.lookahead",
            &mut p.lookahead,
            module.lookahead,
            ours.lookahead,
        ),
    ] {
        if *v == m && m != o {
            *v = o;
            replaced.push(key);
        }
    }
    replaced
}

/// The engine's parameters for one GPU of `gpu_blocks` of an attached
/// process under `budget`: `base_params`, the window override, then the
/// service's table settings; all validated.
///
/// `exec_mode`: execution-id mode (the process's runtime supplies ids),
/// whatever the parameters say.
pub(crate) fn engine_params(
    cfg: &Config,
    budget: Option<u64>,
    gpu_blocks: u32,
    exec_mode: bool,
) -> anyhow::Result<Params> {
    let mut base = base_params(budget, gpu_blocks);
    if let Some(w) = cfg.window_blocks {
        base.window_blocks = w;
    }
    if let Some(b) = budget {
        let reserve = (b >> BLOCK_SHIFT) * u64::from(cfg.reserve_pct) / 100;
        base.free_min = (reserve as u32).min(base.free_max);
    }
    let params = match &cfg.engine {
        Some(abi) => abi
            .to_engine(&base)
            .map_err(|e| anyhow::anyhow!("engine parameters: {e}"))?,
        None => base,
    };
    // The service's parameters carry transparent mode's table pool (one
    // block table, 8 ids: the module's, for a mode without ids); a process
    // whose runtime supplies execution ids needs a table per id. The pool
    // is always `base`'s, the one `prescientd attach` runs with, whatever
    // the mode (transparent mode allocates no block table: params.rs
    // `tables`). Before this the service ran execution-id mode on one table.
    let params = Params {
        mode: if exec_mode { Mode::ExecId } else { params.mode },
        max_tables: base.max_tables,
        exec_ids: base.exec_ids,
        exec_records: base.exec_records,
        ..params
    };
    params
        .validate()
        .map_err(|e| anyhow::anyhow!("engine parameters: {e}"))?;
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_core::BLOCK_BYTES;

    fn config(window_blocks: Option<u32>) -> Config {
        Config {
            window_blocks,
            gpu_blocks: 4096,
            ..Config::default()
        }
    }

    #[test]
    fn the_window_is_an_eighth_of_the_budget_unless_given() {
        let p = engine_params(&config(None), Some(1024 * BLOCK_BYTES), 4096, false).unwrap();
        assert_eq!((p.history_window(), p.max_resident_blocks), (128, 4096));
        let p = engine_params(&config(Some(32)), Some(1024 * BLOCK_BYTES), 4096, false).unwrap();
        assert_eq!(p.history_window(), 32);
        // Without a budget: an eighth of the GPU, which also caps a larger one.
        let p = engine_params(&config(None), None, 4096, false).unwrap();
        assert_eq!(p.history_window(), 512);
        let p = engine_params(&config(Some(100_000)), None, 4096, false).unwrap();
        assert_eq!(p.history_window(), 512);
    }

    /// Under a budget the reserve is 6% of it (evictions complete late
    /// here: H100 run 74), or what --reserve-pct says; without one it is
    /// the engine's own 2.5% of the GPU.
    #[test]
    fn the_reserve_is_a_part_of_the_budget() {
        let budget = Some(1000 * BLOCK_BYTES);
        let p = engine_params(&config(None), budget, 4096, false).unwrap();
        assert_eq!(p.free_min, 60);
        let cfg = Config {
            reserve_pct: 12,
            ..config(None)
        };
        assert_eq!(
            engine_params(&cfg, budget, 4096, false).unwrap().free_min,
            120
        );
        let p = engine_params(&config(None), None, 4096, false).unwrap();
        assert_eq!(p.free_min, 4096 / 40);
    }

    /// The finding behind the service path's slowness (H100 run 46) and
    /// the pipeline that predicted almost nothing (H200 run 43, through the
    /// service): the service's parameters carry transparent mode's table
    /// pool, and execution-id mode on one block table clears it at every
    /// kernel change (core's `table_for`), so a loop of kernels predicts
    /// nothing ahead. With attach's pool, as now, it predicts the next
    /// kernels' blocks.
    #[test]
    fn execution_id_mode_gets_a_table_per_kernel_in_the_service_too() {
        use prescient_core::{Engine, Prefetch};
        use prescient_uapi::control::EngineParams;
        let abi: prescient_uapi::ParamsAbi = EngineParams::default().into();
        let cfg = Config {
            engine: Some(abi),
            ..config(None)
        };
        let budget = Some(1024 * BLOCK_BYTES);
        let now = engine_params(&cfg, budget, 4096, true).unwrap();
        let before = Params {
            mode: Mode::ExecId,
            ..abi.to_engine(&base_params(budget, 4096)).unwrap()
        };
        assert_eq!(before.max_tables, 1);
        assert_eq!(now.max_tables, Params::for_gpu(4096).max_tables);
        // Eight kernels of four blocks each, ten times over: the prefetches
        // of the last round, after the first faulting block of each kernel.
        let predicted = |p: Params| {
            let mut e = Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
            let mut out = [Prefetch { block: 0, ahead: 0 }; 64];
            let mut n = 0;
            for round in 0..10 {
                for k in 0..8u64 {
                    e.kernel_start(k as u32 + 1);
                    for b in 0..4 {
                        e.fault(1000 + 4 * k + b);
                        let got = e.prefetches(&mut out);
                        if round == 9 {
                            n += got;
                        }
                        for x in &out[..got] {
                            e.migrated_in(x.block);
                        }
                    }
                    for b in 0..4 {
                        e.evicted(1000 + 4 * k + b);
                    }
                }
            }
            n
        };
        let (old, new) = (predicted(before), predicted(now));
        assert!(
            new >= 8 * 3 && old < new / 4,
            "one table {old}, attach's pool {new}"
        );
    }

    #[test]
    fn execution_ids_switch_the_engine_to_execution_id_mode() {
        let (c, b) = (config(None), Some(1024 * BLOCK_BYTES));
        assert_eq!(
            engine_params(&c, b, 4096, false).unwrap().mode,
            Mode::Transparent
        );
        let p = engine_params(&c, b, 4096, true).unwrap();
        assert_eq!(p.mode, Mode::ExecId);
        assert!(p.validate().is_ok());
    }
}
