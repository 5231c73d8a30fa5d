//! prescientd's configuration file (TOML). Every key, its default and its
//! range are documented in packaging/prescientd.toml (prescientd.toml(5) is
//! generated from its comments and this parser's keys: config_doc.rs); this
//! file is the one place that checks them. Loading is all-or-nothing: a file with one bad key
//! is refused whole, with an error naming the key, and nothing is applied.

use prescient_core::BLOCK_BYTES;
use prescient_uapi::control::{EngineParams, Mode};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Size keys (`engine.residency_budget`, `userspace.gpu_memory`) take an
/// integer (bytes) or a string in prescient-units' grammar ("4G", "1.5G").
pub use prescient_units::{ByteSize, GpuBudget};

/// The metrics port: outside the ports GPU nodes commonly run (Prometheus
/// 9090-9094, node_exporter 9100, dcgm-exporter 9400, OpenTelemetry's
/// Prometheus exporter 9464, TensorBoard 6006, Jupyter 8888, torchrun's
/// 29500, the kubelet's 10248-10259).
pub const DEFAULT_METRICS_PORT: u16 = 9836;

/// Where the service looks when no `--config` is given.
pub const DEFAULT_PATH: &str = "/etc/prescient/prescientd.toml";

/// Which engine does the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// prescient.ko through /dev/prescient (the main path).
    Module,
    /// No module: prescientd itself attaches to each process (pidfd_getfd),
    /// reads the UVM tools event queue and issues UVM_MIGRATE (userspace.rs).
    Userspace,
}

/// What to do when /dev/prescient is missing (not loaded yet, or unloaded
/// under a running daemon).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnMissingModule {
    /// Keep serving metrics (`prescient_backend_up 0`) and check again every
    /// poll; re-apply parameters and attachments once the module is back.
    Wait,
    /// Exit with status 69 (EX_UNAVAILABLE): for supervisors that order units.
    Exit,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub backend: BackendKind,
    /// The module's device node.
    pub device: PathBuf,
    pub on_missing_module: OnMissingModule,
    /// How often statistics are read from the module (milliseconds).
    pub poll_interval_ms: u64,
    pub control: ControlConfig,
    pub metrics: MetricsConfig,
    pub engine: EngineConfig,
    pub attach: AttachConfig,
    /// Which GPU, and how its facts are detected.
    pub gpu: GpuConfig,
    /// Only read with `backend = "userspace"`.
    pub userspace: UserspaceConfig,
    /// The dotted keys the file sets itself (the rest are defaults), for
    /// `prescientctl status`'s "where each value came from".
    #[serde(skip)]
    pub explicit: ExplicitKeys,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuConfig {
    /// NVML's index of the GPU whose memory, UUID and model the daemon
    /// reads (nvidia-smi's numbering).
    pub index: u32,
    /// The NVML library, opened at start (dlopen's search, or a path).
    pub nvml_library: String,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            index: 0,
            nvml_library: crate::gpu::NVML_LIBRARY.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserspaceConfig {
    /// GPU memory that sizes the engine's ledger and window when
    /// `engine.residency_budget` is 0 (it limits nothing); 0 = detected
    /// through NVML, else `gpu::FALLBACK_GPU_MEMORY`.
    pub gpu_memory: ByteSize,
    /// Threads issuing UVM_MIGRATE, per attached process.
    pub workers: u32,
    /// Entries of each process's tools event queue (power of two).
    pub queue_entries: u32,
    /// Turn the tools events off while a process's CPU is the one faulting
    /// (the tracker gate, daemon/src/gate.rs). Not used under a budget.
    pub gate: bool,
    /// Under a residency budget, the prediction window's depth follows the
    /// rate at which pre-evicted blocks are needed again soon
    /// (`Engine::set_regret_window`).
    pub regret_window: bool,
    /// Prefetch the blocks of the launches a process's runtime published
    /// ahead of the GPU (launch footprints; needs execution ids).
    pub footprints: bool,
    /// Try allocations the CPU rewrites every step in host memory, kept
    /// only where the step gets shorter (needs execution ids).
    pub host_shared: bool,
}

impl Default for UserspaceConfig {
    fn default() -> Self {
        UserspaceConfig {
            gpu_memory: ByteSize(0),
            workers: 8,
            queue_entries: 1 << 18,
            gate: true,
            regret_window: true,
            footprints: true,
            host_shared: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// prescientctl's Unix socket.
    pub socket: PathBuf,
    /// Permission bits of the socket (connecting needs write permission).
    /// Changing anything (set, reset, attach, detach) also needs uid 0.
    pub socket_mode: u32,
    /// The socket's group: its members may connect (with `socket_mode`
    /// 0o660), so jobs can send their marks without a world-open socket.
    /// A group that does not exist leaves the socket root's (and says so).
    pub socket_group: String,
    /// Connections at once from users other than root.
    pub max_connections: u32,
    /// Connections at once from one user (root included).
    pub max_connections_per_uid: u32,
    /// A connection with no complete request (or an unread reply) for this
    /// long is closed; one holding its process's dead marks may stay quiet
    /// (closing it would revoke them), a reply it leaves unread still ends it.
    pub idle_timeout_ms: u64,
}

impl ControlConfig {
    /// Who may connect to the socket (the group resolved now).
    pub fn access(&self) -> crate::socket::Access {
        let gid = crate::socket::group_id(&self.socket_group);
        if gid.is_none() && !self.socket_group.is_empty() {
            tracing::warn!(
                "control.socket_group = {:?}: no such group; the socket stays in root's group (create the group, e.g. with the sysusers file, to let its members connect)",
                self.socket_group
            );
        }
        if self.socket_mode & 0o002 != 0 {
            tracing::warn!(
                "control.socket_mode = {:#o}: any local user may connect (and send marks for their own processes); prefer 0o660 with control.socket_group",
                self.socket_mode
            );
        }
        crate::socket::Access {
            mode: self.socket_mode,
            uid: None,
            gid,
        }
    }

    /// The caps on the socket's clients.
    pub fn limits(&self) -> crate::socket::Limits {
        crate::socket::Limits {
            max_connections: self.max_connections as usize,
            max_per_uid: self.max_connections_per_uid as usize,
            idle: std::time::Duration::from_millis(self.idle_timeout_ms),
            quiet_allowed: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub enabled: bool,
    /// Address of the Prometheus endpoint (`/metrics`).
    pub listen: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    pub rows: u32,
    pub assoc: u32,
    pub succs: u32,
    pub lookahead: u32,
    pub inflight_limit: u32,
    pub pre_evict_watermark_pct: u32,
    /// Bytes (integer) or a string such as "4G" or "1.5G" (binary units,
    /// prescient-units' grammar): the budget of each GPU; 0 = the GPU's
    /// size. With backend = "userspace" also per GPU, in the budget
    /// grammar: "GPU-<uuid>=40G,1=20G" or "30G,1=20G" (prescient-units
    /// budget.rs).
    pub residency_budget: GpuBudget,
    pub enabled: bool,
    pub mode: Mode,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttachConfig {
    /// Processes to attach at start (each must exist then).
    pub pids: Vec<i32>,
    /// Regular expressions matched against the command line (arguments
    /// joined by spaces) of every process that has /dev/nvidia-uvm open.
    pub cmdline_patterns: Vec<String>,
    /// Attach every process that opens /dev/nvidia-uvm.
    pub all_uvm_processes: bool,
    /// How often /proc is scanned for new processes (milliseconds).
    pub scan_interval_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: BackendKind::Module,
            device: PathBuf::from("/dev/prescient"),
            on_missing_module: OnMissingModule::Wait,
            poll_interval_ms: 1000,
            control: ControlConfig::default(),
            metrics: MetricsConfig::default(),
            engine: EngineConfig::default(),
            attach: AttachConfig::default(),
            gpu: GpuConfig::default(),
            userspace: UserspaceConfig::default(),
            explicit: Default::default(),
        }
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            socket: PathBuf::from("/run/prescient/control.sock"),
            socket_mode: 0o660,
            socket_group: "prescient".into(),
            max_connections: 64,
            max_connections_per_uid: 16,
            idle_timeout_ms: 60_000,
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: format!("127.0.0.1:{DEFAULT_METRICS_PORT}"),
        }
    }
}

impl Default for EngineConfig {
    /// The module's own defaults (control's `EngineParams::default`).
    fn default() -> Self {
        EngineParams::default().into()
    }
}

impl Default for AttachConfig {
    fn default() -> Self {
        AttachConfig {
            pids: Vec::new(),
            cmdline_patterns: Vec::new(),
            all_uvm_processes: false,
            scan_interval_ms: 1000,
        }
    }
}

/// A configuration error: where, which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `section.key`, or empty when the file itself is the problem.
    pub key: String,
    pub message: String,
    /// The line of the key (1-based), when the text shows it.
    pub line: Option<usize>,
    /// The file, when the text came from one.
    pub file: Option<String>,
}

/// `file:line: key: message` (the form compilers and linters print, which
/// editors jump to); without a file, `key: message (line N)`.
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
            if let Some(l) = self.line {
                write!(f, "{l}:")?;
            }
            f.write_str(" ")?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)?;
        match (self.line, &self.file) {
            (Some(l), None) => write!(f, " (line {l})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
        line: None,
        file: None,
    }
}

/// The parameters as prescientctl and the module see them. The two structs
/// stay apart because the file's key (`residency_budget`, a size in
/// prescient-units' grammar) is not the wire's (`residency_budget_bytes`,
/// an integer); the other fields map one to one.
impl From<&EngineConfig> for EngineParams {
    fn from(c: &EngineConfig) -> Self {
        EngineParams {
            rows: c.rows,
            assoc: c.assoc,
            succs: c.succs,
            lookahead: c.lookahead,
            inflight_limit: c.inflight_limit,
            pre_evict_watermark_pct: c.pre_evict_watermark_pct,
            residency_budget_bytes: c.residency_budget.each_bytes(),
            enabled: c.enabled,
            mode: c.mode,
        }
    }
}

/// The config file's view of wire parameters (e.g. the defaults).
impl From<EngineParams> for EngineConfig {
    fn from(p: EngineParams) -> Self {
        EngineConfig {
            rows: p.rows,
            assoc: p.assoc,
            succs: p.succs,
            lookahead: p.lookahead,
            inflight_limit: p.inflight_limit,
            pre_evict_watermark_pct: p.pre_evict_watermark_pct,
            residency_budget: GpuBudget::of_bytes(p.residency_budget_bytes),
            enabled: p.enabled,
            mode: p.mode,
        }
    }
}

impl Config {
    /// Reads and checks a file. The error names the file, and the key and
    /// its line when one key is at fault.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
        Config::parse(&text).map_err(|mut e| {
            e.file = Some(path.display().to_string());
            e
        })
    }

    /// Parses and checks TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut c: Config = toml::from_str(text).map_err(|e| {
            // toml's message names the key (unknown field, wrong type) and
            // the line; keep it on one line.
            let msg = e.message().trim().replace('\n', " ");
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let key = toml_key_at(text, e.span().map(|s| s.start));
            ConfigError {
                line,
                ..err(&key, msg)
            }
        })?;
        c.validate().map_err(|mut e| {
            e.line = key_line(text, &e.key);
            e
        })?;
        c.explicit = ExplicitKeys(explicit_keys(text));
        Ok(c)
    }

    /// Range checks of every key (the engine's own checks included).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.device.is_absolute() {
            return Err(err("device", "must be an absolute path"));
        }
        self.userspace.validate()?;
        self.check_gpu_budgets()?;
        if self.backend == BackendKind::Userspace && self.engine.mode != Mode::Transparent {
            return Err(err(
                "engine.mode",
                "backend = \"userspace\" runs transparent mode only (an unmodified process reports no execution ids)",
            ));
        }
        if !(100..=60_000).contains(&self.poll_interval_ms) {
            return Err(err(
                "poll_interval_ms",
                format!("{} is out of range 100..=60000", self.poll_interval_ms),
            ));
        }
        if !self.control.socket.is_absolute() {
            return Err(err("control.socket", "must be an absolute path"));
        }
        if self.control.socket_mode > 0o777 {
            return Err(err(
                "control.socket_mode",
                format!(
                    "{:#o} is not a permission mode (0o000..=0o777)",
                    self.control.socket_mode
                ),
            ));
        }
        let c = &self.control;
        if c.max_connections == 0 || c.max_connections_per_uid == 0 {
            return Err(err(
                "control.max_connections",
                "max_connections and max_connections_per_uid must be at least 1",
            ));
        }
        if !(100..=3_600_000).contains(&c.idle_timeout_ms) {
            return Err(err(
                "control.idle_timeout_ms",
                format!("{} is out of range 100..=3600000", c.idle_timeout_ms),
            ));
        }
        if self.metrics.enabled {
            self.metrics_addr()?;
        }
        EngineParams::from(&self.engine)
            .check()
            .map_err(|(k, m)| err(&format!("engine.{k}"), m))?;
        self.attach.validate()
    }

    /// The metrics address; ":PORT" (as exporters accept) is every
    /// interface.
    pub fn metrics_addr(&self) -> Result<SocketAddr, ConfigError> {
        let l = &self.metrics.listen;
        let full = match l.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => l.clone(),
        };
        full.parse().map_err(|_| {
            err(
                "metrics.listen",
                format!(
                    "{l:?} is not an address:port (e.g. \"127.0.0.1:{DEFAULT_METRICS_PORT}\" or \":{DEFAULT_METRICS_PORT}\")"
                ),
            )
        })
    }
}

impl Config {
    /// Per-GPU budgets: user-space backend only, whole 2 MB blocks.
    fn check_gpu_budgets(&self) -> Result<(), ConfigError> {
        let b = &self.engine.residency_budget;
        if !b.gpus.is_empty() && self.backend != BackendKind::Userspace {
            return Err(err(
                "engine.residency_budget",
                "per-GPU sizes need backend = \"userspace\": prescient.ko keeps one budget per process (give one size for every GPU)",
            ));
        }
        match b.gpus.iter().find(|(_, s)| !budget_ok(*s)) {
            Some((k, s)) => Err(err(
                "engine.residency_budget",
                format!("GPU {k}'s {s} bytes are not whole 2 MiB blocks"),
            )),
            None => Ok(()),
        }
    }
}

impl UserspaceConfig {
    /// Range checks of `[userspace]`.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.gpu_memory.0 != 0 && !(1u64 << 30..=1u64 << 44).contains(&self.gpu_memory.0) {
            return Err(err(
                "userspace.gpu_memory",
                format!(
                    "{} is out of range 1GiB..=16TiB (or 0: detected)",
                    self.gpu_memory
                ),
            ));
        }
        if !(1..=64).contains(&self.workers) {
            return Err(err(
                "userspace.workers",
                format!("{} is out of range 1..=64", self.workers),
            ));
        }
        if !self.queue_entries.is_power_of_two()
            || !(1 << 10..=1 << 20).contains(&self.queue_entries)
        {
            return Err(err(
                "userspace.queue_entries",
                format!(
                    "{} must be a power of two in 1024..=1048576",
                    self.queue_entries
                ),
            ));
        }
        Ok(())
    }
}

impl AttachConfig {
    /// Range checks of `[attach]`.
    fn validate(&self) -> Result<(), ConfigError> {
        for (i, p) in self.pids.iter().enumerate() {
            if *p <= 0 {
                return Err(err(
                    &format!("attach.pids[{i}]"),
                    format!("{p} is not a process id"),
                ));
            }
        }
        for (i, p) in self.cmdline_patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(p) {
                let first = e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                return Err(err(
                    &format!("attach.cmdline_patterns[{i}]"),
                    format!("{p:?} is not a regular expression: {first}"),
                ));
            }
        }
        if !(100..=60_000).contains(&self.scan_interval_ms) {
            return Err(err(
                "attach.scan_interval_ms",
                format!("{} is out of range 100..=60000", self.scan_interval_ms),
            ));
        }
        Ok(())
    }
}

/// Best effort: the dotted key whose line holds byte `at` (for messages).
fn toml_key_at(text: &str, at: Option<usize>) -> String {
    let Some(at) = at else { return String::new() };
    let mut section = String::new();
    let mut key = String::new();
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            section = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        }
        if pos + line.len() > at {
            if let Some((k, _)) = t.split_once('=') {
                key = k.trim().to_string();
            }
            break;
        }
        pos += line.len();
    }
    match (section.is_empty(), key.is_empty()) {
        (_, true) => section,
        (true, false) => key,
        (false, false) => format!("{section}.{key}"),
    }
}

/// The line (1-based) that sets dotted `key` (`engine.rows`,
/// `attach.cmdline_patterns[0]`), when the text has one.
fn key_line(text: &str, key: &str) -> Option<usize> {
    let key = key.split('[').next()?;
    let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
    let mut cur = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            cur = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        } else if let Some((k, _)) = t.split_once('=') {
            if cur == section && k.trim() == name {
                return Some(i + 1);
            }
        }
    }
    None
}

/// The dotted keys of `t` (`engine.rows`), tables flattened, in the
/// table's order: what a file sets, and what the parser accepts.
pub(crate) fn dotted_keys(t: &toml::Table) -> Vec<String> {
    fn walk(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            let p = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => walk(t, &p, out),
                _ => out.push(p),
            }
        }
    }
    let mut out = Vec::new();
    walk(t, "", &mut out);
    out
}

/// The dotted keys `text` sets (tables flattened), for provenance.
fn explicit_keys(text: &str) -> std::collections::BTreeSet<String> {
    match text.parse::<toml::Table>() {
        Ok(t) => dotted_keys(&t).into_iter().collect(),
        Err(_) => Default::default(),
    }
}

/// The keys a file set itself. Two configs with the same values are equal
/// whichever keys were spelt out, so this never makes them differ.
#[derive(Clone, Debug, Default)]
pub struct ExplicitKeys(pub std::collections::BTreeSet<String>);

impl PartialEq for ExplicitKeys {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ExplicitKeys {
    /// The file sets `key` itself.
    pub fn has(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}

/// The budget must be whole 2 MB blocks (the unit the engine works in).
pub fn budget_ok(bytes: u64) -> bool {
    bytes.is_multiple_of(BLOCK_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_files_defaults_pass_the_modules_check() {
        let good = EngineParams::from(&EngineConfig::default());
        assert_eq!(good.check(), Ok(()));
    }

    #[test]
    fn empty_file_is_all_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_sample_config_is_valid_and_lists_the_defaults() {
        let sample = include_str!("../../packaging/prescientd.toml");
        let c = Config::parse(sample).unwrap();
        // The sample spells out every default: parsing it gives the defaults.
        assert_eq!(c, Config::default());
        // ... and every key of the defaults appears in it.
        let v = toml::Value::try_from(Config::default()).unwrap();
        fn keys(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, v) in t {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if v.is_table() {
                        keys(v, &p, out);
                    } else {
                        out.push(p);
                    }
                }
            }
        }
        let mut all = Vec::new();
        keys(&v, "", &mut all);
        let sample_v: toml::Value = toml::from_str(sample).unwrap();
        let mut have = Vec::new();
        keys(&sample_v, "", &mut have);
        for k in all {
            assert!(have.contains(&k), "sample config does not document {k}");
        }
    }

    /// Each key set wrong in turn: refused, and the message names the key.
    #[test]
    fn each_bad_key_is_named() {
        let cases: &[(&str, &str)] = &[
            ("backend = \"gpu\"", "backend"),
            ("device = \"dev/prescient\"", "device"),
            ("on_missing_module = \"later\"", "on_missing_module"),
            ("poll_interval_ms = 5", "poll_interval_ms"),
            ("poll_interval_ms = \"1s\"", "poll_interval_ms"),
            ("[control]\nsocket = \"x.sock\"", "control.socket"),
            ("[control]\nsocket_mode = 0o1777", "control.socket_mode"),
            ("[metrics]\nenabled = 1", "metrics.enabled"),
            ("[metrics]\nlisten = \"localhost\"", "metrics.listen"),
            ("[engine]\nrows = 100", "engine.rows"),
            ("[engine]\nrows = 0", "engine.rows"),
            ("[engine]\nassoc = 0", "engine.assoc"),
            ("[engine]\nsuccs = 0", "engine.succs"),
            ("[engine]\nlookahead = 0", "engine.lookahead"),
            ("[engine]\ninflight_limit = 0", "engine.inflight_limit"),
            ("[engine]\ninflight_limit = 5000", "engine.inflight_limit"),
            (
                "[engine]\npre_evict_watermark_pct = 101",
                "engine.pre_evict_watermark_pct",
            ),
            (
                "[engine]\nresidency_budget = \"3M\"",
                "engine.residency_budget",
            ),
            (
                "[engine]\nresidency_budget = \"4X\"",
                "engine.residency_budget",
            ),
            ("[engine]\nresidency_budget = -1", "engine.residency_budget"),
            ("[engine]\nenabled = \"yes\"", "engine.enabled"),
            ("[engine]\nmode = \"deepum\"", "engine.mode"),
            ("[attach]\npids = [0]", "attach.pids[0]"),
            ("[attach]\npids = \"1\"", "attach.pids"),
            (
                "[attach]\ncmdline_patterns = [\"(\"]",
                "attach.cmdline_patterns[0]",
            ),
            (
                "[attach]\nall_uvm_processes = 2",
                "attach.all_uvm_processes",
            ),
            ("[attach]\nscan_interval_ms = 0", "attach.scan_interval_ms"),
        ];
        for (text, key) in cases {
            let e = Config::parse(text).expect_err(text);
            assert_eq!(&e.key, key, "{text}: {e}");
            assert!(e.to_string().starts_with(key), "{e}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = Config::parse("[engine]\nassociativity = 4").unwrap_err();
        assert!(e.to_string().contains("associativity"), "{e}");
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = Config::parse("[enigne]\nrows = 4").unwrap_err();
        assert!(e.to_string().contains("enigne"), "{e}");
    }

    #[test]
    fn a_good_file() {
        let c = Config::parse(
            "poll_interval_ms = 200\n[engine]\nassoc = 4\nresidency_budget = \"4G\"\nmode = \"exec-id\"\n[attach]\ncmdline_patterns = [\"python.*train\"]\n",
        )
        .unwrap();
        assert_eq!(c.engine.assoc, 4);
        assert_eq!(c.engine.residency_budget.each_bytes(), 4 << 30);
        assert_eq!(c.engine.mode, Mode::ExecId);
    }

    /// `engine.residency_budget` takes the budget grammar: per-GPU sizes
    /// with the user-space backend only, whole 2 MiB blocks, the key named
    /// in every refusal.
    #[test]
    fn per_gpu_budgets_in_the_file() {
        let c = Config::parse(
            "backend = \"userspace\"\n[engine]\nresidency_budget = \"30G,1=20G,GPU-ab12=8G\"",
        )
        .unwrap();
        let b = &c.engine.residency_budget;
        assert_eq!(b.each_bytes(), 30 << 30);
        assert_eq!(b.of("GPU-ab12", Some(1)), Some(8 << 30));
        assert_eq!(b.of("GPU-cd34", Some(1)), Some(20 << 30));
        assert_eq!(
            EngineParams::from(&c.engine).residency_budget_bytes,
            30 << 30
        );
        for (text, says) in [
            (
                "[engine]\nresidency_budget = \"1=20G\"",
                "need backend = \"userspace\"",
            ),
            (
                "backend = \"userspace\"\n[engine]\nresidency_budget = \"1=3M\"",
                "not whole 2 MiB blocks",
            ),
            (
                "backend = \"userspace\"\n[engine]\nresidency_budget = \"1=2G,1=4G\"",
                "named twice",
            ),
        ] {
            let e = Config::parse(text).expect_err(text);
            assert_eq!(e.key, "engine.residency_budget", "{text}: {e}");
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    /// Size keys take the shared grammar; a refusal names the key and the forms.
    #[test]
    fn sizes_use_the_shared_grammar() {
        let budget = |v: &str| Config::parse(&format!("[engine]\nresidency_budget = {v}"));
        assert_eq!(
            budget("\"4G\"")
                .unwrap()
                .engine
                .residency_budget
                .each_bytes(),
            4 << 30
        );
        assert_eq!(
            budget("\"512MiB\"")
                .unwrap()
                .engine
                .residency_budget
                .each_bytes(),
            512 << 20
        );
        assert_eq!(
            budget("\"1.5G\"")
                .unwrap()
                .engine
                .residency_budget
                .each_bytes(),
            1536 << 20
        );
        assert_eq!(
            budget("\"1536M\"")
                .unwrap()
                .engine
                .residency_budget
                .each_bytes(),
            1536 << 20
        );
        assert_eq!(
            budget("4294967296")
                .unwrap()
                .engine
                .residency_budget
                .each_bytes(),
            4 << 30
        );
        for bad in ["\"x\"", "-1", "\"1.5\"", "\"99999999999T\"", "1.5"] {
            let e = budget(bad).expect_err(bad);
            assert_eq!(e.key, "engine.residency_budget", "{bad}: {e}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        let e = budget("\"4X\"").unwrap_err().to_string();
        assert!(
            e.contains("use bytes, or a number with K, M, G or T"),
            "{e}"
        );
        let c = Config::parse("[userspace]\ngpu_memory = \"140G\"").unwrap();
        assert_eq!(c.userspace.gpu_memory.0, 140 << 30);
        let e = Config::parse("[userspace]\ngpu_memory = \"140Q\"").unwrap_err();
        assert_eq!(e.key, "userspace.gpu_memory", "{e}");
    }
}
