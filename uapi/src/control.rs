//! The control protocol between prescientctl and prescientd.
//!
//! Design: **the daemon owns /dev/prescient**. prescientctl never opens the
//! device; it sends one JSON request per line on the daemon's Unix socket and
//! reads one JSON response line. So the daemon always knows the parameters in
//! force (it re-applies them when the module is reloaded), and one CLI works
//! the same for every backend.
//!
//! Requests that change anything (`set-params`, `reset`, `attach`, `detach`)
//! need the peer to be uid 0 (checked with SO_PEERCRED); `status`, `stats`,
//! `get-params` and `version` need only access to the socket. `mark` (a
//! process's dead/alive ranges, marks.rs) is taken from any peer, for the
//! peer's own process only (its SO_PEERCRED pid).
//!
//! These are wire types, so they live beside the device ABI rather than in
//! the daemon: prescientctl speaks the protocol without linking prescientd.

use crate as uapi;
use serde::{Deserialize, Serialize};
use std::prelude::rust_2021::*;

/// Bump on an incompatible change of the messages below.
pub const PROTOCOL_VERSION: u32 = 1;

/// Engine mode, as in the config file and on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One global table learnt from faults alone (unmodified jobs).
    #[default]
    Transparent,
    /// One table per execution id (a runtime calls SET_EXEC_ID, DeepUM's design).
    ExecId,
}

/// The tunable parameters, as the module's GET/SET_PARAMS carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineParams {
    pub rows: u32,
    pub assoc: u32,
    pub succs: u32,
    pub lookahead: u32,
    pub inflight_limit: u32,
    pub pre_evict_watermark_pct: u32,
    pub residency_budget_bytes: u64,
    pub enabled: bool,
    pub mode: Mode,
}

impl Mode {
    /// The name as in the config file and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Transparent => "transparent",
            Mode::ExecId => "exec-id",
        }
    }
}

impl From<prescient_core::Mode> for Mode {
    fn from(m: prescient_core::Mode) -> Self {
        match m {
            prescient_core::Mode::Transparent => Mode::Transparent,
            prescient_core::Mode::ExecId => Mode::ExecId,
        }
    }
}

impl From<Mode> for prescient_core::Mode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Transparent => prescient_core::Mode::Transparent,
            Mode::ExecId => prescient_core::Mode::ExecId,
        }
    }
}

/// Migrations in flight the module starts with (`kmod/state.rs`).
pub const DEFAULT_INFLIGHT_LIMIT: u32 = 16;

impl Default for EngineParams {
    /// The module's own defaults: uapi's `kernel_default_params`, 16
    /// migrations in flight, the engine's watermark, no budget, enabled.
    fn default() -> Self {
        uapi::ParamsAbi::from_engine(
            &uapi::kernel_default_params(1),
            DEFAULT_INFLIGHT_LIMIT,
            prescient_core::DEFAULT_WATERMARK_PCT,
            0,
            true,
        )
        .into()
    }
}

/// The SET_PARAMS argument; the module validates it (so does [`EngineParams::check`]).
impl From<EngineParams> for uapi::ParamsAbi {
    fn from(p: EngineParams) -> Self {
        uapi::ParamsAbi {
            rows: p.rows,
            assoc: p.assoc,
            succs: p.succs,
            lookahead: p.lookahead,
            inflight_limit: p.inflight_limit,
            pre_evict_watermark_pct: p.pre_evict_watermark_pct,
            residency_budget_bytes: p.residency_budget_bytes,
            enabled: p.enabled as u32,
            mode: uapi::mode_to_abi(p.mode.into()),
            reserved1: 0,
        }
    }
}

/// A GET_PARAMS answer as shown to clients. It does not fail: the module
/// only answers values it accepted, and a value outside the ABI reads as
/// the default (`enabled` other than 0 is on, an unknown mode is
/// transparent), so status still shows what the module has.
impl From<uapi::ParamsAbi> for EngineParams {
    fn from(a: uapi::ParamsAbi) -> Self {
        EngineParams {
            rows: a.rows,
            assoc: a.assoc,
            succs: a.succs,
            lookahead: a.lookahead,
            inflight_limit: a.inflight_limit,
            pre_evict_watermark_pct: a.pre_evict_watermark_pct,
            residency_budget_bytes: a.residency_budget_bytes,
            enabled: a.enabled != 0,
            mode: uapi::mode_from_abi(a.mode).map_or(Mode::Transparent, Mode::from),
        }
    }
}

impl EngineParams {
    /// The module's own validation (the same uapi code decodes SET_PARAMS in
    /// the kernel), run here first so that errors name the key. Returns
    /// (key, message) on the first bad value.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let base = uapi::kernel_default_params(1);
        uapi::ParamsAbi::from(*self)
            .to_engine(&base)
            .map(|_| ())
            .map_err(|e| {
                let key = match e {
                    uapi::Error::Param(p) => match p.param {
                        prescient_core::Param::Rows => "rows",
                        prescient_core::Param::Assoc => "assoc",
                        prescient_core::Param::Succs => "succs",
                        prescient_core::Param::Lookahead => "lookahead",
                        _ => "mode",
                    },
                    uapi::Error::Field { field, .. } => match field {
                        uapi::Field::InflightLimit => "inflight_limit",
                        uapi::Field::PreEvictWatermarkPct => "pre_evict_watermark_pct",
                        uapi::Field::ResidencyBudgetBytes => "residency_budget",
                        uapi::Field::Enabled => "enabled",
                        _ => "mode",
                    },
                    _ => "mode",
                };
                let msg = match e {
                    uapi::Error::Field {
                        field: uapi::Field::ResidencyBudgetBytes,
                        value,
                    } => format!(
                        "{value} bytes: must be a multiple of 2 MiB and at most {} GiB",
                        (prescient_core::Params::MAX_RESIDENT_BLOCKS as u64
                            * prescient_core::BLOCK_BYTES)
                            >> 30
                    ),
                    uapi::Error::Field {
                        field: uapi::Field::InflightLimit,
                        value,
                    } => format!("{value} is out of range 1..={}", uapi::MAX_INFLIGHT),
                    uapi::Error::Field {
                        field: uapi::Field::PreEvictWatermarkPct,
                        value,
                    } => format!("{value} is out of range 1..=100"),
                    other => other.to_string(),
                };
                (key, msg)
            })
    }
}

/// Changes asked for by `prescientctl set`; absent fields stay as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ParamChanges {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rows: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub assoc: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub succs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lookahead: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inflight_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pre_evict_watermark_pct: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub residency_budget_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mode: Option<Mode>,
}

impl ParamChanges {
    pub fn apply(&self, p: &EngineParams) -> EngineParams {
        EngineParams {
            rows: self.rows.unwrap_or(p.rows),
            assoc: self.assoc.unwrap_or(p.assoc),
            succs: self.succs.unwrap_or(p.succs),
            lookahead: self.lookahead.unwrap_or(p.lookahead),
            inflight_limit: self.inflight_limit.unwrap_or(p.inflight_limit),
            pre_evict_watermark_pct: self
                .pre_evict_watermark_pct
                .unwrap_or(p.pre_evict_watermark_pct),
            residency_budget_bytes: self
                .residency_budget_bytes
                .unwrap_or(p.residency_budget_bytes),
            enabled: self.enabled.unwrap_or(p.enabled),
            mode: self.mode.unwrap_or(p.mode),
        }
    }
    pub fn is_empty(&self) -> bool {
        *self == ParamChanges::default()
    }
}

/// One request line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    Version,
    Status,
    Stats,
    GetParams,
    SetParams {
        changes: ParamChanges,
    },
    Reset,
    Attach {
        pid: i32,
    },
    Detach {
        pid: i32,
    },
    /// The sender's own ranges (`[addr, len]`, page-aligned) hold dead data
    /// (`dead`), or live data again. Any peer may send it, for its own
    /// process (SO_PEERCRED pid), once that process is attached: the
    /// user-space backend's marks.rs, prescient.ko's MARK_DEAD / MARK_ALIVE
    /// through prescientd (daemon/src/module/marks.rs).
    Mark {
        dead: bool,
        ranges: Vec<[u64; 2]>,
        /// Alive marks: the memory goes back to the driver (a freed
        /// segment, cuMemFree): alive, so that a later allocation there
        /// never starts out dead, but nothing is brought back to the GPU,
        /// where a populate would move blocks just before they are freed.
        /// The user-space backend forgets which of them it discarded;
        /// prescient.ko keeps its bounded record (MARK_NO_POPULATE).
        /// Absent: false (sent only when true).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_populate: bool,
    },
    /// A residency budget in prescient-units' budget grammar ("40G",
    /// "GPU-<uuid>=40G,1=20G", "30G,1=20G"): its each-GPU size is set as
    /// `set-params` sets `residency_budget_bytes`, its per-GPU sizes apply
    /// to processes attached from then on (user-space backend only).
    SetGpuBudget {
        budget: String,
    },
}

impl Request {
    /// Changes state: the peer must be uid 0.
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            Request::SetParams { .. }
                | Request::Reset
                | Request::Attach { .. }
                | Request::Detach { .. }
                | Request::SetGpuBudget { .. }
        )
    }
}

/// One response line: `{"ok": {...}}` or `{"error": {...}}`.
// One response exists per request and lives for one line's encoding: the
// status reply's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Response {
    Ok(Reply),
    Error(ErrorReply),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// Machine-readable class: "permission", "invalid", "not-found",
    /// "unavailable", "busy", "internal".
    pub kind: String,
    pub message: String,
}

// As `Response`: one reply per request, alive for one line's encoding; the
// status reply (with its per-GPU budget text) is the largest, and a box
// would cost more than its size.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    Version(VersionInfo),
    Status(Status),
    Stats(Stats),
    Params(EngineParams),
    ParamsChanged {
        old: EngineParams,
        new: EngineParams,
    },
    Done {
        message: String,
    },
    Marked(Applied),
}

/// What one mark did (the reply to `mark`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// Blocks the mark covered.
    pub blocks: u64,
    /// Of those, blocks the engine had as resident (they changed list).
    pub resident: u64,
    /// Alive marks: blocks we had discarded, now migrated back (no copy).
    /// Under prescient.ko `resident` and `refetched` are 0: the module
    /// counts its populates in its statistics (`populated_blocks`).
    pub refetched: u64,
    /// The backend does not act on marks (driver-like or observe mode).
    pub ignored: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionInfo {
    pub daemon: String,
    pub protocol: u32,
    /// prescient.ko's versions; None when the module is not loaded, and
    /// always None under the user-space backend (which uses no module).
    pub module: Option<ModuleInfo>,
    /// "module" or "userspace" (empty from daemons older than this field).
    #[serde(default)]
    pub backend: String,
    /// The user-space backend's driver, when it is the backend and
    /// nvidia_uvm is loaded.
    #[serde(default)]
    pub userspace: Option<UserspaceInfo>,
}

/// What the user-space backend runs on: no module, the NVIDIA driver's
/// nvidia-uvm ioctls (the counterpart of [`ModuleInfo`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserspaceInfo {
    /// The nvidia-uvm version it drives, "580.159.04"-style.
    pub driver_version: String,
    pub enabled: bool,
    pub max_processes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    pub abi_version: u32,
    /// The nvidia-uvm version the module is bound to, "580.159.4"-style.
    pub driver_version: String,
    pub bound: bool,
    pub enabled: bool,
    pub max_processes: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub daemon_version: String,
    pub backend: String,
    /// The backend answered the last poll: /dev/prescient (module), or
    /// nvidia_uvm (userspace).
    pub backend_up: bool,
    /// prescient.ko, when it is the backend and loaded; always None under
    /// the user-space backend.
    pub module: Option<ModuleInfo>,
    /// The user-space backend, when it is the backend and nvidia_uvm is
    /// loaded.
    #[serde(default)]
    pub userspace: Option<UserspaceInfo>,
    /// What the daemon applies (and re-applies after a module reload).
    pub params: EngineParams,
    /// What the backend has in force now (None when it is not loaded).
    pub module_params: Option<EngineParams>,
    pub config_path: String,
    pub uptime_s: f64,
    pub attached: Vec<ProcessInfo>,
    /// The GPU NVML reported at start (None: not detected; see `settings`).
    #[serde(default)]
    pub gpu: Option<GpuInfo>,
    /// Each value in force and where it came from (absent from daemons
    /// older than this field).
    #[serde(default)]
    pub settings: Vec<Setting>,
    /// The per-GPU budgets in force ("" none), in the budget grammar.
    #[serde(default)]
    pub gpu_budget: String,
    /// Each attached process's GPUs (user-space backend).
    #[serde(default)]
    pub gpus: Vec<GpuLane>,
}

/// One GPU as NVML names it (the labels dcgm-exporter uses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML's index (nvidia-smi's numbering; dcgm-exporter's `gpu`).
    pub index: u32,
    /// "GPU-..." (dcgm-exporter's `UUID`).
    pub uuid: String,
    /// The product name (dcgm-exporter's `modelName`).
    pub model: String,
    pub memory_bytes: u64,
}

/// A value in force and its source: "default", "config", "prescientctl
/// set", "detected (NVML)" or a sentence saying why none applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The config file's dotted key (`engine.rows`).
    pub key: String,
    pub value: String,
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: i32,
    pub comm: String,
    /// Why it is attached: "config", "pattern", "all", "ctl", or "other"
    /// (attached by someone else, e.g. a DeepUM-style runtime).
    pub reason: String,
}

/// Counters since the module was loaded (the module's own numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Counters {
    pub faults: u64,
    pub prefetched_blocks: u64,
    pub prefetches_used: u64,
    pub late_prefetches: u64,
    pub pre_evictions: u64,
    pub discards: u64,
    pub queue_drops: u64,
    pub migrate_errors: u64,
    pub inflight: u64,
    pub table_bytes: u64,
    /// Discarded blocks an alive mark brought back to the GPU with no copy
    /// (absent from daemons older than this field).
    #[serde(default)]
    pub populated_blocks: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProcessStats {
    pub pid: i32,
    pub faults: u64,
    pub prefetched_blocks: u64,
    pub resident_bytes: u64,
    pub pre_evictions: u64,
    pub discards: u64,
    pub migrate_errors: u64,
    /// As [`Counters::populated_blocks`], for this process.
    #[serde(default)]
    pub populated_blocks: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Stats {
    /// Seconds since the daemon started, when these were read.
    pub at_s: f64,
    pub backend_up: bool,
    pub totals: Counters,
    pub processes: Vec<ProcessStats>,
    /// "module" or "userspace" (empty from daemons older than this field).
    #[serde(default)]
    pub backend: String,
    /// Why there are no counters (the backend is not loaded) and what to
    /// do, one line; None when the counters are the backend's.
    #[serde(default)]
    pub unavailable: Option<String>,
    /// Each attached process's GPUs, one entry per (process, GPU) it
    /// faulted from (the user-space backend; absent from the module's and
    /// from daemons older than this field).
    #[serde(default)]
    pub gpus: Vec<GpuLane>,
}

/// One GPU of one process: its own engine, ledger and budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GpuLane {
    pub pid: i32,
    /// The UUID as nvidia-smi prints it ("GPU-...").
    pub uuid: String,
    /// nvidia-smi's index, when NVML named this UUID.
    pub index: Option<u32>,
    /// The residency budget of this GPU for this process (None: none).
    pub budget_bytes: Option<u64>,
    /// GPU faults from this GPU (2 MB blocks).
    pub faults: u64,
    pub prefetched_bytes: u64,
    pub pre_evicted_bytes: u64,
    pub resident_bytes: u64,
    pub max_resident_bytes: u64,
    /// Predictions of this GPU's engine left alone because another GPU
    /// faulted on the block last.
    pub prefetch_other_gpu: u64,
}

impl Stats {
    pub fn from_abi(s: &uapi::Stats, at_s: f64) -> Stats {
        let h = &s.head;
        Stats {
            at_s,
            backend_up: true,
            gpus: Vec::new(),
            totals: Counters {
                faults: h.faults_seen,
                prefetched_blocks: h.blocks_prefetched,
                prefetches_used: h.prefetches_used,
                late_prefetches: h.late_prefetches,
                pre_evictions: h.pre_evictions,
                discards: h.discards,
                queue_drops: h.queue_drops,
                migrate_errors: h.migrate_errors,
                inflight: h.inflight,
                table_bytes: h.table_bytes,
                populated_blocks: h.populated,
            },
            processes: s
                .spaces
                .iter()
                .take((h.n_spaces as usize).min(uapi::MAX_SPACES))
                .filter(|e| e.handle != 0)
                .map(|e| ProcessStats {
                    pid: e.pid.min(i32::MAX as u64) as i32,
                    faults: e.faults,
                    prefetched_blocks: e.prefetched,
                    resident_bytes: e
                        .resident_blocks
                        .saturating_mul(prescient_core::BLOCK_BYTES),
                    pre_evictions: e.pre_evictions,
                    discards: e.discards,
                    migrate_errors: e.migrate_errors,
                    populated_blocks: e.populated,
                })
                .collect(),
            backend: String::new(),
            unavailable: None,
        }
    }
}

/// "580.159.04" style, from uapi's packed form.
pub fn driver_version_string(v: u64) -> String {
    format!("{}.{}.{:02}", v >> 32, (v >> 16) & 0xffff, v & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_unknown_ones_fail() {
        for r in [
            Request::Status,
            Request::SetParams {
                changes: ParamChanges {
                    assoc: Some(4),
                    ..Default::default()
                },
            },
            Request::Attach { pid: 7 },
            Request::Mark {
                dead: true,
                ranges: vec![[0x7f00_0000_0000, 0x40_0000]],
                no_populate: false,
            },
            Request::Mark {
                dead: false,
                ranges: vec![[0x7f00_0000_0000, 0x40_0000]],
                no_populate: true,
            },
        ] {
            let s = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        }
        assert_eq!(
            serde_json::to_string(&Request::Attach { pid: 7 }).unwrap(),
            r#"{"cmd":"attach","pid":7}"#
        );
        assert_eq!(
            serde_json::from_str::<Request>(
                r#"{"cmd":"mark","dead":false,"ranges":[[4096,8192]]}"#
            )
            .unwrap(),
            Request::Mark {
                dead: false,
                ranges: vec![[4096, 8192]],
                no_populate: false,
            }
        );
        // Sent only when set, so a plain mark's line is as before.
        let plain = Request::Mark {
            dead: true,
            ranges: vec![[4096, 8192]],
            no_populate: false,
        };
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"cmd":"mark","dead":true,"ranges":[[4096,8192]]}"#
        );
        assert_eq!(
            serde_json::from_str::<Request>(
                r#"{"cmd":"mark","dead":false,"ranges":[[4096,8192]],"no_populate":true}"#
            )
            .unwrap(),
            Request::Mark {
                dead: false,
                ranges: vec![[4096, 8192]],
                no_populate: true,
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"format-disk"}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"attach","pid":"x"}"#).is_err());
    }

    /// The module's defaults, which are also prescientd's (config.rs
    /// `EngineConfig::default`; the daemon's config.rs tests those pass
    /// [`EngineParams::check`] too).
    const DEFAULTS: EngineParams = EngineParams {
        rows: 512,
        assoc: 2,
        succs: 4,
        lookahead: 4,
        inflight_limit: 16,
        pre_evict_watermark_pct: 100,
        residency_budget_bytes: 0,
        enabled: true,
        mode: Mode::Transparent,
    };

    #[test]
    fn params_check_names_the_key() {
        let good = DEFAULTS;
        assert_eq!(good.check(), Ok(()));
        let cases: [(ParamChanges, &str); 7] = [
            (
                ParamChanges {
                    rows: Some(3),
                    ..Default::default()
                },
                "rows",
            ),
            (
                ParamChanges {
                    assoc: Some(0),
                    ..Default::default()
                },
                "assoc",
            ),
            (
                ParamChanges {
                    assoc: Some(1024),
                    ..Default::default()
                },
                "assoc",
            ),
            (
                ParamChanges {
                    succs: Some(99),
                    ..Default::default()
                },
                "succs",
            ),
            (
                ParamChanges {
                    lookahead: Some(0),
                    ..Default::default()
                },
                "lookahead",
            ),
            (
                ParamChanges {
                    inflight_limit: Some(0),
                    ..Default::default()
                },
                "inflight_limit",
            ),
            (
                ParamChanges {
                    residency_budget_bytes: Some(4096),
                    ..Default::default()
                },
                "residency_budget",
            ),
        ];
        for (c, key) in cases {
            let (k, m) = c.apply(&good).check().unwrap_err();
            assert_eq!(k, key, "{m}");
        }
    }

    #[test]
    fn the_default_is_the_modules() {
        assert_eq!(EngineParams::default(), DEFAULTS);
        assert_eq!(
            DEFAULTS.pre_evict_watermark_pct,
            prescient_core::DEFAULT_WATERMARK_PCT
        );
    }

    #[test]
    fn params_convert_to_the_abi_and_back() {
        for mode in [Mode::Transparent, Mode::ExecId] {
            let p = EngineParams {
                mode,
                enabled: false,
                residency_budget_bytes: 4 << 30,
                ..DEFAULTS
            };
            let a = uapi::ParamsAbi::from(p);
            assert_eq!(a.enabled, 0);
            assert_eq!(a.residency_budget_bytes, 4 << 30);
            assert_eq!(a.reserved1, 0);
            assert_eq!(EngineParams::from(a), p);
            assert_eq!(Mode::from(prescient_core::Mode::from(mode)), mode);
        }
        assert_eq!(uapi::ParamsAbi::from(DEFAULTS).mode, uapi::MODE_TRANSPARENT);
        let odd = uapi::ParamsAbi {
            enabled: 7,
            mode: 9,
            ..uapi::ParamsAbi::from(DEFAULTS)
        };
        let read = EngineParams::from(odd);
        assert!(read.enabled);
        assert_eq!(read.mode, Mode::Transparent);
        assert_eq!(Mode::ExecId.name(), "exec-id");
        assert_eq!(
            serde_json::to_string(&Mode::ExecId).unwrap(),
            format!("\"{}\"", Mode::ExecId.name())
        );
    }

    #[test]
    fn driver_version_format() {
        assert_eq!(
            driver_version_string((580 << 32) | (159 << 16) | 4),
            "580.159.04"
        );
    }
}
