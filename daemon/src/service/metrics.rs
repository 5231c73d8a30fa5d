//! The Prometheus exposition (`GET /metrics`).
//!
//! The module keeps its own counters; the daemon mirrors the latest reading
//! (taken every `poll_interval_ms`) instead of accumulating deltas, so a
//! scrape, `prescientctl stats --json` and the module agree exactly. When the
//! module is reloaded its counters restart at zero, which Prometheus's
//! `rate()` treats as a counter reset.
//!
//! Names follow the Prometheus conventions: `prescient_` prefix, `_total` on
//! counters, base units in the name (`_bytes`, `_blocks`). Per-process series
//! carry a `pid` label; at most `uapi::MAX_SPACES` processes are attached at
//! once, and series of detached processes are dropped, so cardinality stays
//! bounded.
//!
//! Every series is registered once (`Metrics::new`), from the tables below;
//! a scrape sets each from the latest reading and encodes the registry.
//!
//! Every series carries the labels dcgm-exporter puts on its own, spelt as
//! it spells them (`gpu`, `UUID`, `device`, `modelName`, `Hostname`), so a
//! PromQL join `on(UUID)` or `on(Hostname, gpu)` lines Prescient's fault
//! rate up with `DCGM_FI_PROF_PCIE_RX_BYTES` of the same GPU. Block counts
//! have a `*_bytes_total` twin (blocks are 2 MiB). The user-space backend's
//! own loop counters are exported per process as `prescient_userspace_*`.

use super::kube::Pod;
use crate::backend::LoopValues;
use crate::gpu::Device;
use crate::userspace::series;
use prescient_core::BLOCK_BYTES;
use prescient_uapi::control::{Counters, GpuLane, ProcessStats};
use prescient_uapi::control::{EngineParams, ModuleInfo, ProcessInfo, Stats};
use prometheus::Registry;
use prometheus::{Encoder, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
use std::collections::HashMap;

/// The labels on every series: this host and its GPU, as dcgm-exporter
/// names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub hostname: String,
    pub gpu: Option<Device>,
}

impl Identity {
    /// This host's name (uname's, as dcgm-exporter reports it; not from
    /// /proc/sys, which a unit with ProcSubset=pid hides) and the detected GPU.
    pub fn of_host(gpu: Option<&Device>) -> Identity {
        Identity {
            hostname: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            gpu: gpu.cloned(),
        }
    }

    /// The constant labels; without a GPU only `Hostname`.
    fn labels(&self) -> HashMap<String, String> {
        let mut l = HashMap::from([("Hostname".to_string(), self.hostname.clone())]);
        if let Some(g) = &self.gpu {
            l.insert("gpu".into(), g.index.to_string());
            l.insert("UUID".into(), g.uuid.clone());
            l.insert("device".into(), format!("nvidia{}", g.index));
            l.insert("modelName".into(), g.name.clone());
        }
        l.retain(|_, v| !v.is_empty());
        l
    }
}

/// What the daemon counts itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DaemonCounters {
    pub polls: u64,
    pub poll_errors: u64,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub attach_failures: u64,
    pub module_reconnects: u64,
}

/// Everything one scrape shows.
pub struct View<'a> {
    pub daemon_version: &'a str,
    /// The residency budget pre-eviction keeps to, if any (the config's,
    /// prescientctl set's, or the detected GPU size); None: none enforced.
    pub budget_in_force: Option<u64>,
    /// The user-space backend's per-process loop values, in the order of
    /// `userspace::series` (empty for the module backend).
    pub loops: &'a [LoopValues],
    /// The Kubernetes pod of attached processes that run in one.
    pub pods: &'a HashMap<i32, Pod>,
    pub up: bool,
    /// "module" or "userspace": prescient_info names a module ABI only
    /// under the module (the user-space backend reports its driver alone).
    pub backend: &'a str,
    pub module: Option<&'a ModuleInfo>,
    pub params: &'a EngineParams,
    pub stats: &'a Stats,
    pub attached: &'a [ProcessInfo],
    pub daemon: DaemonCounters,
    /// Each attached process's GPUs (the user-space backend's lanes).
    pub gpus: &'a [GpuLane],
}

/// A value of one scrape's view.
type Read<T> = fn(&T) -> u64;
/// A value read from the whole view.
type ReadView = for<'a, 'b> fn(&'a View<'b>) -> u64;

/// Counters of the module's totals: name, help, value.
const TOTALS: &[(&str, &str, Read<Counters>)] = &[
    (
        "prescient_faults_total",
        "GPU faults the module recorded (2 MB blocks).",
        |t| t.faults,
    ),
    (
        "prescient_prefetched_blocks_total",
        "2 MB blocks prefetched to the GPU.",
        |t| t.prefetched_blocks,
    ),
    (
        "prescient_prefetch_used_blocks_total",
        "Prefetched blocks used before they left the GPU.",
        |t| t.prefetches_used,
    ),
    (
        "prescient_late_prefetches_total",
        "Faults on a block whose prefetch was still in flight.",
        |t| t.late_prefetches,
    ),
    (
        "prescient_pre_evicted_blocks_total",
        "2 MB blocks pre-evicted to the CPU to stay under the residency budget.",
        |t| t.pre_evictions,
    ),
    (
        "prescient_discarded_blocks_total",
        "2 MB blocks discarded (marked dead).",
        |t| t.discards,
    ),
    (
        "prescient_populated_blocks_total",
        "Discarded 2 MB blocks an alive mark brought back to the GPU with no copy.",
        |t| t.populated_blocks,
    ),
    (
        "prescient_queue_dropped_faults_total",
        "Fault records dropped because the module's ring was full.",
        |t| t.queue_drops,
    ),
    (
        "prescient_migrate_errors_total",
        "Migrations nvidia-uvm refused.",
        |t| t.migrate_errors,
    ),
];

/// Byte twins of the block counters (2 MiB blocks): name, help, blocks.
const BYTES: &[(&str, &str, Read<Counters>)] = &[
    (
        "prescient_prefetched_bytes_total",
        "Bytes prefetched to the GPU.",
        |t| t.prefetched_blocks,
    ),
    (
        "prescient_prefetch_used_bytes_total",
        "Prefetched bytes used before they left the GPU.",
        |t| t.prefetches_used,
    ),
    (
        "prescient_pre_evicted_bytes_total",
        "Bytes pre-evicted to the CPU to stay under the residency budget.",
        |t| t.pre_evictions,
    ),
    (
        "prescient_discarded_bytes_total",
        "Bytes discarded (marked dead) instead of copied back.",
        |t| t.discards,
    ),
    (
        "prescient_populated_bytes_total",
        "Discarded bytes an alive mark brought back to the GPU with no copy.",
        |t| t.populated_blocks,
    ),
];

/// Counters of the daemon's own work.
const DAEMON: &[(&str, &str, Read<DaemonCounters>)] = &[
    (
        "prescient_daemon_polls_total",
        "Statistics polls of the module.",
        |d| d.polls,
    ),
    (
        "prescient_daemon_poll_errors_total",
        "Polls that failed (module missing or refusing).",
        |d| d.poll_errors,
    ),
    (
        "prescient_daemon_attach_failures_total",
        "Attach attempts the module refused.",
        |d| d.attach_failures,
    ),
    (
        "prescient_daemon_module_reconnects_total",
        "Times the module came back after being absent (parameters re-applied).",
        |d| d.module_reconnects,
    ),
];

/// Gauges: the backend's state, the module's totals that go up and down,
/// and the parameters in force.
const GAUGES: &[(&str, &str, ReadView)] = &[
    (
        "prescient_backend_up",
        "1 if /dev/prescient answered the last poll, 0 if the module is not loaded.",
        |v| v.up as u64,
    ),
    (
        "prescient_inflight_migrations",
        "Migrations in flight.",
        |v| v.stats.totals.inflight,
    ),
    (
        "prescient_table_bytes",
        "Memory held by the correlation tables.",
        |v| v.stats.totals.table_bytes,
    ),
    (
        "prescient_attached_processes",
        "Address spaces attached.",
        |v| v.stats.processes.len() as u64,
    ),
    ("prescient_table_rows", "Rows per correlation table.", |v| {
        v.params.rows.into()
    }),
    (
        "prescient_table_assoc",
        "Ways per row (associativity).",
        |v| v.params.assoc.into(),
    ),
    ("prescient_table_successors", "Successors per entry.", |v| {
        v.params.succs.into()
    }),
    (
        "prescient_lookahead_kernels",
        "Kernels predicted ahead.",
        |v| v.params.lookahead.into(),
    ),
    (
        "prescient_inflight_limit",
        "Most migrations in flight.",
        |v| v.params.inflight_limit.into(),
    ),
    (
        "prescient_pre_evict_watermark_percent",
        "Pre-evict above this share of the budget.",
        |v| v.params.pre_evict_watermark_pct.into(),
    ),
    (
        "prescient_prefetch_enabled",
        "1 if prefetching is on.",
        |v| v.params.enabled as u64,
    ),
];

/// Counters of one attached process, labelled by `pid`.
const PER_PROCESS: &[(&str, &str, Read<ProcessStats>)] = &[
    (
        "prescient_process_faults_total",
        "GPU faults of one process.",
        |s| s.faults,
    ),
    (
        "prescient_process_prefetched_blocks_total",
        "2 MB blocks prefetched for one process.",
        |s| s.prefetched_blocks,
    ),
    (
        "prescient_process_pre_evicted_blocks_total",
        "2 MB blocks pre-evicted for one process.",
        |s| s.pre_evictions,
    ),
    (
        "prescient_process_discarded_blocks_total",
        "2 MB blocks discarded for one process.",
        |s| s.discards,
    ),
    (
        "prescient_process_populated_blocks_total",
        "Discarded 2 MB blocks an alive mark brought back to the GPU for one process.",
        |s| s.populated_blocks,
    ),
    (
        "prescient_process_migrate_errors_total",
        "Refused migrations for one process.",
        |s| s.migrate_errors,
    ),
];

/// Counters of one process on one GPU, labelled by `pid` and the GPU.
const PER_GPU: &[(&str, &str, Read<GpuLane>)] = &[
    (
        "prescient_process_gpu_faults_total",
        "GPU faults of one process from one GPU (2 MB blocks).",
        |g| g.faults,
    ),
    (
        "prescient_process_gpu_prefetched_bytes_total",
        "Bytes prefetched to one GPU for one process.",
        |g| g.prefetched_bytes,
    ),
    (
        "prescient_process_gpu_pre_evicted_bytes_total",
        "Bytes pre-evicted from one GPU for one process (its budget there).",
        |g| g.pre_evicted_bytes,
    ),
];

/// The labels of a per-GPU series: the pid, and the GPU as dcgm-exporter
/// names it (`gpu` is nvidia-smi's index, empty when NVML did not name
/// this UUID).
const GPU_LABELS: &[&str] = &["pid", "gpu", "UUID", "device"];

/// The per-(process, GPU) series. They live in a registry of their own:
/// the main one puts the host's one detected GPU's `gpu`/`UUID` on every
/// series, which here would name the wrong GPU twice.
struct PerGpu {
    registry: Registry,
    counters: Vec<(IntCounterVec, Read<GpuLane>)>,
    resident: IntGaugeVec,
    budget: IntGaugeVec,
}

impl PerGpu {
    fn new(hostname: &str) -> prometheus::Result<PerGpu> {
        let labels = HashMap::from([("Hostname".to_string(), hostname.to_string())]);
        let labels = Some(labels).filter(|_| !hostname.is_empty());
        let r = Registry::new_custom(None, labels)?;
        let counters = PER_GPU
            .iter()
            .map(|&(n, h, f)| {
                Ok((
                    register(&r, IntCounterVec::new(Opts::new(n, h), GPU_LABELS)?)?,
                    f,
                ))
            })
            .collect::<prometheus::Result<_>>()?;
        let gauge = |n: &str, h: &str| register(&r, IntGaugeVec::new(Opts::new(n, h), GPU_LABELS)?);
        Ok(PerGpu {
            counters,
            resident: gauge(
                "prescient_process_gpu_resident_bytes",
                "GPU-resident managed memory of one process on one GPU, as that GPU's ledger sees it.",
            )?,
            budget: gauge(
                "prescient_process_gpu_budget_bytes",
                "The residency budget of one process on one GPU; absent when none is enforced.",
            )?,
            registry: r,
        })
    }

    /// Sets the series of the lanes attached now (others are dropped).
    fn set(&self, gpus: &[GpuLane]) {
        for (c, _) in &self.counters {
            c.reset();
        }
        self.resident.reset();
        self.budget.reset();
        for g in gpus {
            let (pid, index) = (
                g.pid.to_string(),
                g.index.map(|i| i.to_string()).unwrap_or_default(),
            );
            let device = g.index.map(|i| format!("nvidia{i}")).unwrap_or_default();
            let l = [
                pid.as_str(),
                index.as_str(),
                g.uuid.as_str(),
                device.as_str(),
            ];
            for (c, read) in &self.counters {
                c.with_label_values(&l).inc_by(read(g));
            }
            self.resident
                .with_label_values(&l)
                .set(sat(g.resident_bytes));
            if let Some(b) = g.budget_bytes {
                self.budget.with_label_values(&l).set(sat(b));
            }
        }
    }
}

/// A gauge's value: Prometheus gauges are signed.
fn sat(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// Every series /metrics exports, registered once.
pub struct Metrics {
    registry: Registry,
    totals: Vec<(IntCounter, Read<Counters>)>,
    bytes: Vec<(IntCounter, Read<Counters>)>,
    us_counters: Vec<IntCounterVec>,
    us_gauges: Vec<GaugeVec>,
    budget: IntGaugeVec,
    daemon: Vec<(IntCounter, Read<DaemonCounters>)>,
    gauges: Vec<(IntGauge, ReadView)>,
    per_process: Vec<(IntCounterVec, Read<ProcessStats>)>,
    resident: IntGaugeVec,
    process_info: IntGaugeVec,
    info: IntGaugeVec,
    reloads: IntCounterVec,
    per_gpu: PerGpu,
}

/// Registers a copy of `m` in `r` and returns `m`.
fn register<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    m: M,
) -> prometheus::Result<M> {
    r.register(Box::new(m.clone()))?;
    Ok(m)
}

impl Metrics {
    /// Builds and registers every series, labelled with `id`.
    pub fn new(id: &Identity) -> prometheus::Result<Metrics> {
        let r = Registry::new_custom(None, Some(id.labels()))?;
        let counter = |(n, h): (&str, &str)| register(&r, IntCounter::with_opts(Opts::new(n, h))?);
        let labelled =
            |n: &str, h: &str, l: &[&str]| register(&r, IntCounterVec::new(Opts::new(n, h), l)?);
        let gauge_vec =
            |n: &str, h: &str, l: &[&str]| register(&r, IntGaugeVec::new(Opts::new(n, h), l)?);
        let totals = TOTALS
            .iter()
            .map(|&(n, h, f)| Ok((counter((n, h))?, f)))
            .collect::<prometheus::Result<_>>()?;
        let bytes = BYTES
            .iter()
            .map(|&(n, h, f)| Ok((counter((n, h))?, f)))
            .collect::<prometheus::Result<_>>()?;
        let us_counters = series::COUNTERS
            .iter()
            .map(|&(n, h, _)| labelled(n, h, &["pid"]))
            .collect::<prometheus::Result<_>>()?;
        let us_gauges = series::GAUGES
            .iter()
            .map(|&(n, h, _)| register(&r, GaugeVec::new(Opts::new(n, h), &["pid"])?))
            .collect::<prometheus::Result<_>>()?;
        let daemon = DAEMON
            .iter()
            .map(|&(n, h, f)| Ok((counter((n, h))?, f)))
            .collect::<prometheus::Result<_>>()?;
        let gauges = GAUGES
            .iter()
            .map(|&(n, h, f)| Ok((register(&r, IntGauge::with_opts(Opts::new(n, h))?)?, f)))
            .collect::<prometheus::Result<_>>()?;
        let per_process = PER_PROCESS
            .iter()
            .map(|&(n, h, f)| Ok((labelled(n, h, &["pid"])?, f)))
            .collect::<prometheus::Result<_>>()?;
        Ok(Metrics {
            totals,
            bytes,
            us_counters,
            us_gauges,
            budget: gauge_vec(
                "prescient_residency_budget_bytes",
                "GPU-resident bytes pre-eviction keeps below (the config's, prescientctl set's, or the detected GPU size); absent when none is enforced.",
                &[],
            )?,
            daemon,
            gauges,
            per_process,
            resident: gauge_vec(
                "prescient_process_resident_bytes",
                "GPU-resident managed memory of one process, as the engine's ledger sees it.",
                &["pid"],
            )?,
            process_info: gauge_vec(
                "prescient_process_info",
                "An attached process: its command name, why it is attached, and its Kubernetes pod (always 1).",
                &["pid", "comm", "reason", "pod", "namespace", "container"],
            )?,
            info: gauge_vec(
                "prescient_info",
                "Versions: daemon, module ABI (empty under the user-space backend), the nvidia-uvm driver the backend drives; and the engine mode (always 1).",
                &["version", "abi_version", "driver_version", "mode"],
            )?,
            reloads: labelled(
                "prescient_daemon_config_reloads_total",
                "SIGHUP reloads of the config file, by result.",
                &["result"],
            )?,
            per_gpu: PerGpu::new(&id.hostname)?,
            registry: r,
        })
    }

    /// Sets every series from `v` and renders the text exposition format.
    pub fn render(&self, v: &View) -> prometheus::Result<String> {
        for (c, read) in &self.totals {
            set_counter(c, read(&v.stats.totals));
        }
        for (c, read) in &self.bytes {
            set_counter(c, read(&v.stats.totals).saturating_mul(BLOCK_BYTES));
        }
        for (c, read) in &self.daemon {
            set_counter(c, read(&v.daemon));
        }
        self.budget.reset();
        if let Some(b) = v.budget_in_force {
            self.budget.with_label_values(&[] as &[&str]).set(sat(b));
        }
        self.set_userspace(v);
        for (g, read) in &self.gauges {
            g.set(sat(read(v)));
        }
        self.info.reset();
        let (abi, drv) = match v.module {
            Some(m) if v.backend == "userspace" => (String::new(), m.driver_version.clone()),
            Some(m) => (m.abi_version.to_string(), m.driver_version.clone()),
            None => (String::new(), String::new()),
        };
        let mode = serde_json::to_value(v.params.mode)
            .ok()
            .and_then(|m| m.as_str().map(str::to_string))
            .unwrap_or_default();
        self.info
            .with_label_values(&[v.daemon_version, &abi, &drv, &mode])
            .set(1);
        self.reloads.reset();
        self.reloads
            .with_label_values(&["ok"])
            .inc_by(v.daemon.reloads_ok);
        self.reloads
            .with_label_values(&["error"])
            .inc_by(v.daemon.reloads_failed);
        self.set_processes(v);
        self.per_gpu.set(v.gpus);
        let mut families = self.registry.gather();
        families.extend(self.per_gpu.registry.gather());
        let mut out = Vec::new();
        prometheus::TextEncoder::new().encode(&families, &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }

    /// The per-process series: only the processes attached now.
    fn set_processes(&self, v: &View) {
        for (c, _) in &self.per_process {
            c.reset();
        }
        self.resident.reset();
        self.process_info.reset();
        for s in &v.stats.processes {
            let pid = s.pid.to_string();
            let l = [pid.as_str()];
            for (c, read) in &self.per_process {
                c.with_label_values(&l).inc_by(read(s));
            }
            self.resident
                .with_label_values(&l)
                .set(sat(s.resident_bytes));
            let (comm, reason) = v
                .attached
                .iter()
                .find(|a| a.pid == s.pid)
                .map(|a| (a.comm.as_str(), a.reason.as_str()))
                .unwrap_or(("", "other"));
            let pod = v.pods.get(&s.pid).cloned().unwrap_or_default();
            self.process_info
                .with_label_values(&[&pid, comm, reason, &pod.pod, &pod.namespace, &pod.container])
                .set(1);
        }
    }

    /// The user-space backend's per-process loop series.
    fn set_userspace(&self, v: &View) {
        for c in &self.us_counters {
            c.reset();
        }
        for g in &self.us_gauges {
            g.reset();
        }
        for lv in v.loops {
            let pid = lv.pid.to_string();
            let l = [pid.as_str()];
            for (c, x) in self.us_counters.iter().zip(&lv.counters) {
                c.with_label_values(&l).inc_by(*x);
            }
            for (g, x) in self.us_gauges.iter().zip(&lv.gauges) {
                g.with_label_values(&l).set(*x);
            }
        }
    }
}

/// A counter mirroring a reading taken elsewhere.
fn set_counter(c: &IntCounter, v: u64) {
    c.reset();
    c.inc_by(v);
}

#[cfg(test)]
mod testview {
    use super::*;
    use std::sync::LazyLock;

    static NO_PODS: LazyLock<HashMap<i32, Pod>> = LazyLock::new(HashMap::new);

    /// The view of an up daemon under the module with nothing else to say:
    /// each test sets the fields it is about with `..test_view(..)`.
    pub(super) fn test_view<'a>(params: &'a EngineParams, stats: &'a Stats) -> View<'a> {
        View {
            daemon_version: "t",
            budget_in_force: None,
            loops: &[],
            pods: &NO_PODS,
            up: true,
            backend: "module",
            module: None,
            params,
            stats,
            attached: &[],
            daemon: DaemonCounters::default(),
            gpus: &[],
        }
    }
}
#[cfg(test)]
use testview::test_view;

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_uapi::control::{Counters, ProcessStats};

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn exposition_mirrors_the_module_counters() {
        let stats = Stats {
            at_s: 1.0,
            backend_up: true,
            totals: Counters {
                faults: 1234,
                prefetched_blocks: 99,
                table_bytes: 4096,
                populated_blocks: 17,
                ..Default::default()
            },
            processes: vec![ProcessStats {
                pid: 42,
                faults: 1000,
                resident_bytes: 6 << 21,
                populated_blocks: 7,
                ..Default::default()
            }],
            gpus: Vec::new(),
            ..Default::default()
        };
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let attached = [ProcessInfo {
            pid: 42,
            comm: "python3".into(),
            reason: "pattern".into(),
        }];
        let text = Metrics::new(&Identity::default())
            .unwrap()
            .render(&View {
                daemon_version: "0.1.0",
                attached: &attached,
                ..test_view(&params, &stats)
            })
            .unwrap();
        assert_eq!(value(&text, "prescient_faults_total"), Some(1234.0));
        assert_eq!(
            value(&text, "prescient_prefetched_blocks_total"),
            Some(99.0)
        );
        assert_eq!(value(&text, "prescient_table_assoc"), Some(2.0));
        assert_eq!(
            value(&text, "prescient_process_faults_total{pid=\"42\"}"),
            Some(1000.0)
        );
        assert_eq!(value(&text, "prescient_populated_blocks_total"), Some(17.0));
        assert_eq!(
            value(&text, "prescient_populated_bytes_total"),
            Some((17u64 << 21) as f64)
        );
        assert_eq!(
            value(
                &text,
                "prescient_process_populated_blocks_total{pid=\"42\"}"
            ),
            Some(7.0)
        );
        assert_eq!(
            value(&text, "prescient_process_resident_bytes{pid=\"42\"}"),
            Some((6u64 << 21) as f64)
        );
        assert!(text.contains("# TYPE prescient_faults_total counter"));
        assert!(text.contains("# TYPE prescient_table_bytes gauge"));
        assert!(text.contains("comm=\"python3\""));
        // Every series is prefixed; every counter ends in _total.
        for l in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let mut w = l.split(' ').skip(2);
            let (name, ty) = (w.next().unwrap(), w.next().unwrap());
            assert!(name.starts_with("prescient_"), "{l}");
            assert_eq!(ty == "counter", name.ends_with("_total"), "{l}");
        }
    }
}

#[cfg(test)]
mod labels {
    use super::*;

    /// Every series carries dcgm-exporter's GPU labels; bytes twin blocks;
    /// the budget is absent rather than 0 when none is enforced; the
    /// user-space loop's counters and pods are exported per process.
    #[test]
    fn series_join_with_dcgm_and_carry_bytes_budget_and_backend_counters() {
        let id = Identity {
            hostname: "node-7".into(),
            gpu: Some(Device {
                index: 1,
                uuid: "GPU-abc".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_bytes: 80 << 30,
            }),
        };
        let stats = Stats {
            totals: Counters {
                prefetched_blocks: 3,
                ..Default::default()
            },
            processes: vec![ProcessStats {
                pid: 9,
                ..Default::default()
            }],
            ..Default::default()
        };
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let snap = crate::userspace::Snapshot {
            pid: 9,
            engine_history_hits: 40,
            engine_window_blocks: 64,
            ..Default::default()
        };
        let pods = HashMap::from([(
            9,
            Pod {
                pod: "train-0".into(),
                namespace: "ml".into(),
                container: "0123456789ab".into(),
            },
        )]);
        let m = Metrics::new(&id).unwrap();
        let render = |budget| {
            m.render(&View {
                budget_in_force: budget,
                loops: &[series::values(&snap)],
                pods: &pods,
                ..test_view(&params, &stats)
            })
            .unwrap()
        };
        let text = render(None);
        let gpu = [
            r#"Hostname="node-7""#,
            r#"UUID="GPU-abc""#,
            r#"device="nvidia1""#,
            r#"gpu="1""#,
            r#"modelName="NVIDIA H100 80GB HBM3""#,
        ];
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(gpu.iter().all(|g| l.contains(g)), "{l}");
        }
        let has = |t: &str, prefix: &str, v: &str| {
            t.lines()
                .any(|l| l.starts_with(prefix) && l.ends_with(&format!(" {v}")))
        };
        assert!(
            has(&text, "prescient_prefetched_bytes_total{", "6291456"),
            "{text}"
        );
        assert!(
            !text.contains("prescient_residency_budget_bytes{"),
            "{text}"
        );
        assert!(has(
            &render(Some(8 << 30)),
            "prescient_residency_budget_bytes{",
            "8589934592"
        ));
        assert!(
            text.lines().any(
                |l| l.starts_with("prescient_userspace_predicted_faults_total{")
                    && l.contains(r#"pid="9""#)
                    && l.ends_with(" 40")
            ),
            "{text}"
        );
        assert!(has(&text, "prescient_userspace_window_blocks{", "64"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("prescient_process_info{")
                    && l.contains(r#"namespace="ml""#)
                    && l.contains(r#"pod="train-0""#)
                    && l.contains(r#"container="0123456789ab""#)),
            "{text}"
        );
    }
}

#[cfg(test)]
mod dashboard {
    use super::*;

    /// The committed Grafana dashboard only queries series that /metrics has.
    #[test]
    fn grafana_dashboard_names_only_exported_metrics() {
        let dash: serde_json::Value =
            serde_json::from_str(include_str!("../../../packaging/grafana/prescient.json"))
                .unwrap();
        let stats = Stats {
            processes: vec![prescient_uapi::control::ProcessStats {
                pid: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let text = Metrics::new(&Identity::default())
            .unwrap()
            .render(&View {
                budget_in_force: Some(8 << 30),
                loops: &[series::values(&crate::userspace::Snapshot::default())],
                ..test_view(&params, &stats)
            })
            .unwrap();
        let re = regex::Regex::new(r"prescient_[a-z_]+").unwrap();
        let mut n = 0;
        for p in dash["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap();
                for m in re.find_iter(expr) {
                    n += 1;
                    assert!(
                        text.contains(&format!("# TYPE {} ", m.as_str())),
                        "panel {:?} queries {}, which /metrics does not export",
                        p["title"],
                        m.as_str()
                    );
                }
            }
        }
        assert!(n > 15, "only {n} metric references found");
    }

    /// The dashboard provisions as a file (no `__inputs`, the data source
    /// is a variable), and every Prescient legend names its instance.
    #[test]
    fn grafana_dashboard_provisions_as_a_file_and_names_instances() {
        let text = include_str!("../../../packaging/grafana/prescient.json");
        let dash: serde_json::Value = serde_json::from_str(text).unwrap();
        assert!(dash.get("__inputs").is_none());
        assert!(!text.contains("DS_PROMETHEUS"));
        let vars = dash["templating"]["list"].as_array().unwrap();
        assert!(vars
            .iter()
            .any(|v| v["type"] == "datasource" && v["name"] == "datasource"));
        for p in dash["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().unwrap() {
                if t["expr"].as_str().unwrap().contains("prescient_") {
                    assert_eq!(t["datasource"]["uid"], "${datasource}", "{p}");
                    let legend = t["legendFormat"].as_str().unwrap();
                    assert!(legend.contains("{{instance}}"), "{}: {legend}", p["title"]);
                }
            }
        }
    }

    /// The alert rules only name series /metrics exports.
    #[test]
    fn alert_rules_name_only_exported_metrics() {
        let rules = include_str!("../../../packaging/prometheus/prescient.rules.yml");
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let stats = Stats {
            processes: vec![ProcessStats::default()],
            ..Default::default()
        };
        let text = Metrics::new(&Identity::default())
            .unwrap()
            .render(&View {
                budget_in_force: Some(1),
                ..test_view(&params, &stats)
            })
            .unwrap();
        let re = regex::Regex::new(r"prescient_[a-z_]+").unwrap();
        let mut n = 0;
        for m in re.find_iter(rules) {
            n += 1;
            assert!(
                text.contains(&format!("# TYPE {} ", m.as_str())),
                "{}",
                m.as_str()
            );
        }
        assert!(n >= 5, "{n}");
    }

    /// prescient_info names a module ABI only under the module: the
    /// user-space backend's synthesised version (ABI 2) is no module.
    #[test]
    fn info_names_a_module_abi_only_under_the_module() {
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let m = ModuleInfo {
            abi_version: 2,
            driver_version: "580.95.05".into(),
            bound: true,
            enabled: true,
            max_processes: 8,
        };
        for (backend, abi) in [
            ("module", "abi_version=\"2\""),
            ("userspace", "abi_version=\"\""),
        ] {
            let text = Metrics::new(&Identity::default())
                .unwrap()
                .render(&View {
                    backend,
                    module: Some(&m),
                    ..test_view(&params, &Stats::default())
                })
                .unwrap();
            let info = text
                .lines()
                .find(|l| l.starts_with("prescient_info{"))
                .unwrap();
            assert!(
                info.contains(abi) && info.contains("driver_version=\"580.95.05\""),
                "{backend}: {info}"
            );
        }
    }
}

#[cfg(test)]
mod per_gpu {
    use super::*;

    /// Two processes, one on each GPU, and one process over both: one
    /// series per (pid, GPU), each naming its own GPU once (not the host's
    /// detected one), its budget absent where none is enforced.
    #[test]
    fn each_process_and_gpu_has_its_own_series_labelled_with_that_gpu() {
        let id = Identity {
            hostname: "node-7".into(),
            gpu: Some(Device {
                index: 0,
                uuid: "GPU-aaa".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_bytes: 80 << 30,
            }),
        };
        let lane = |pid, index, uuid: &str, budget| GpuLane {
            pid,
            uuid: uuid.into(),
            index: Some(index),
            budget_bytes: budget,
            faults: 10 + u64::from(index),
            prefetched_bytes: 4 << 20,
            pre_evicted_bytes: 2 << 20,
            resident_bytes: 6 << 20,
            ..Default::default()
        };
        let gpus = [
            lane(41, 0, "GPU-aaa", Some(8 << 30)),
            lane(42, 1, "GPU-bbb", Some(8 << 30)),
            lane(43, 0, "GPU-aaa", None),
            lane(43, 1, "GPU-bbb", Some(4 << 30)),
        ];
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let text = Metrics::new(&id)
            .unwrap()
            .render(&View {
                backend: "userspace",
                gpus: &gpus,
                ..test_view(&params, &Stats::default())
            })
            .unwrap();
        let series = |name: &str| -> Vec<&str> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .collect()
        };
        let faults = series("prescient_process_gpu_faults_total");
        assert_eq!(faults.len(), 4, "{text}");
        let of = |pid: &str, uuid: &str| {
            faults
                .iter()
                .find(|l| {
                    l.contains(&format!("pid=\"{pid}\"")) && l.contains(&format!("UUID=\"{uuid}\""))
                })
                .copied()
        };
        let l = of("42", "GPU-bbb").unwrap();
        assert!(
            l.contains(r#"gpu="1""#)
                && l.contains(r#"device="nvidia1""#)
                && l.contains(r#"Hostname="node-7""#),
            "{l}"
        );
        assert!(l.ends_with(" 11"), "{l}");
        assert_eq!(l.matches("UUID=").count(), 1, "one GPU named once: {l}");
        assert!(of("43", "GPU-aaa").is_some() && of("43", "GPU-bbb").is_some());
        assert_eq!(series("prescient_process_gpu_budget_bytes").len(), 3);
        assert_eq!(series("prescient_process_gpu_resident_bytes").len(), 4);
        assert!(series("prescient_process_gpu_prefetched_bytes_total")
            .iter()
            .all(|l| l.ends_with(&format!(" {}", 4 << 20))));
        // The host's series keep the detected GPU's labels.
        assert!(text
            .lines()
            .any(|l| l.starts_with("prescient_backend_up{") && l.contains(r#"UUID="GPU-aaa""#)));
    }
}
