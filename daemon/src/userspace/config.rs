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
    pub gpu_blocks: u32,
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
    /// Log every block decision and movement here (blocklog.rs).
    pub block_log: Option<PathBuf>,
    /// Execution ids from the process's runtime (execfeed.rs).
    pub exec_ids: ExecIds,
    /// `--mode oracle`: the plan it replays and its depth (oracle/).
    pub oracle: Option<OracleConfig>,
    /// `--record-plan FILE`: write the run's block sequence there at the end.
    pub record_plan: Option<PathBuf>,
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
            workers: 4,
            async_migrate: true,
            max_coalesce_blocks: 16,
            merge_queued_blocks: 0,
            regret_window: true,
            window_blocks: None,
            gpu_blocks: blocks_of(crate::gpu::FALLBACK_GPU_MEMORY),
            backoff: None,
            gate: None,
            engine: None,
            publish: None,
            marks: None,
            discard: false,
            block_log: None,
            exec_ids: ExecIds::Off,
            oracle: None,
            record_plan: None,
        }
    }
}

impl Config {
    /// The budget of `gpu`: its own by UUID or nvidia-smi index, else the
    /// each-GPU one; None for no budget.
    pub fn budget_of(&self, gpu: &prescient_uvm::Gpu) -> Option<u64> {
        let uuid = gpu.to_string();
        let index = (self.gpu_indices.iter())
            .find(|(u, _)| u.eq_ignore_ascii_case(&uuid))
            .map(|(_, i)| *i);
        self.budget.of(&uuid, index).filter(|&b| b > 0)
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
            gpu_blocks: blocks_of(settings.gpu_memory_bytes),
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
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// GPU memory that sizes the engine when no residency budget is set.
    pub gpu_memory_bytes: u64,
    /// Threads issuing UVM_MIGRATE per process.
    pub workers: usize,
    /// Tools event queue entries per process (power of two).
    pub queue_entries: u32,
    /// The tracker gate (gate.rs); used for processes with no residency budget.
    pub gate: bool,
    /// The regret-driven window depth (`Config::regret_window`).
    pub regret_window: bool,
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

/// The engine's parameters for one GPU of an attached process under
/// `budget`: `base_params`, the window override, then the service's table
/// settings; all validated.
///
/// `exec_mode`: execution-id mode (the process's runtime supplies ids),
/// whatever the parameters say.
pub(crate) fn engine_params(
    cfg: &Config,
    budget: Option<u64>,
    exec_mode: bool,
) -> anyhow::Result<Params> {
    let mut base = base_params(budget, cfg.gpu_blocks);
    if let Some(w) = cfg.window_blocks {
        base.window_blocks = w;
    }
    let params = match &cfg.engine {
        Some(abi) => abi
            .to_engine(&base)
            .map_err(|e| anyhow::anyhow!("engine parameters: {e}"))?,
        None => base,
    };
    let params = Params {
        mode: if exec_mode { Mode::ExecId } else { params.mode },
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
        let p = engine_params(&config(None), Some(1024 * BLOCK_BYTES), false).unwrap();
        assert_eq!((p.history_window(), p.max_resident_blocks), (128, 4096));
        let p = engine_params(&config(Some(32)), Some(1024 * BLOCK_BYTES), false).unwrap();
        assert_eq!(p.history_window(), 32);
        // Without a budget: an eighth of the GPU, which also caps a larger one.
        let p = engine_params(&config(None), None, false).unwrap();
        assert_eq!(p.history_window(), 512);
        let p = engine_params(&config(Some(100_000)), None, false).unwrap();
        assert_eq!(p.history_window(), 512);
    }

    #[test]
    fn execution_ids_switch_the_engine_to_execution_id_mode() {
        let (c, b) = (config(None), Some(1024 * BLOCK_BYTES));
        assert_eq!(engine_params(&c, b, false).unwrap().mode, Mode::Transparent);
        let p = engine_params(&c, b, true).unwrap();
        assert_eq!(p.mode, Mode::ExecId);
        assert!(p.validate().is_ok());
    }
}
