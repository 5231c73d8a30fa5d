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

use prescient_uapi::control::{Counters, ProcessStats};
use prescient_uapi::control::{EngineParams, ModuleInfo, ProcessInfo, Stats};
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

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
    pub up: bool,
    pub module: Option<&'a ModuleInfo>,
    pub params: &'a EngineParams,
    pub stats: &'a Stats,
    pub attached: &'a [ProcessInfo],
    pub daemon: DaemonCounters,
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
        "prescient_residency_budget_bytes",
        "GPU-resident bytes kept below by pre-eviction (0 = the GPU's size).",
        |v| v.params.residency_budget_bytes,
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
        "prescient_process_migrate_errors_total",
        "Refused migrations for one process.",
        |s| s.migrate_errors,
    ),
];

/// A gauge's value: Prometheus gauges are signed.
fn sat(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// Every series /metrics exports, registered once.
pub struct Metrics {
    registry: Registry,
    totals: Vec<(IntCounter, Read<Counters>)>,
    daemon: Vec<(IntCounter, Read<DaemonCounters>)>,
    gauges: Vec<(IntGauge, ReadView)>,
    per_process: Vec<(IntCounterVec, Read<ProcessStats>)>,
    resident: IntGaugeVec,
    process_info: IntGaugeVec,
    info: IntGaugeVec,
    reloads: IntCounterVec,
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
    /// Builds and registers every series.
    pub fn new() -> prometheus::Result<Metrics> {
        let r = Registry::new();
        let counter = |(n, h): (&str, &str)| register(&r, IntCounter::with_opts(Opts::new(n, h))?);
        let labelled =
            |n: &str, h: &str, l: &[&str]| register(&r, IntCounterVec::new(Opts::new(n, h), l)?);
        let gauge_vec =
            |n: &str, h: &str, l: &[&str]| register(&r, IntGaugeVec::new(Opts::new(n, h), l)?);
        let totals = TOTALS
            .iter()
            .map(|&(n, h, f)| Ok((counter((n, h))?, f)))
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
                "An attached process: its command name and why it is attached (always 1).",
                &["pid", "comm", "reason"],
            )?,
            info: gauge_vec(
                "prescient_info",
                "Versions: daemon, module ABI, bound nvidia-uvm driver; and the engine mode (always 1).",
                &["version", "abi_version", "driver_version", "mode"],
            )?,
            reloads: labelled(
                "prescient_daemon_config_reloads_total",
                "SIGHUP reloads of the config file, by result.",
                &["result"],
            )?,
            registry: r,
        })
    }

    /// Sets every series from `v` and renders the text exposition format.
    pub fn render(&self, v: &View) -> prometheus::Result<String> {
        for (c, read) in &self.totals {
            set_counter(c, read(&v.stats.totals));
        }
        for (c, read) in &self.daemon {
            set_counter(c, read(&v.daemon));
        }
        for (g, read) in &self.gauges {
            g.set(sat(read(v)));
        }
        self.info.reset();
        let (abi, drv) = match v.module {
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
        let mut out = Vec::new();
        prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
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
            self.process_info
                .with_label_values(&[&pid, comm, reason])
                .set(1);
        }
    }
}

/// A counter mirroring a reading taken elsewhere.
fn set_counter(c: &IntCounter, v: u64) {
    c.reset();
    c.inc_by(v);
}

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
                ..Default::default()
            },
            processes: vec![ProcessStats {
                pid: 42,
                faults: 1000,
                resident_bytes: 6 << 21,
                ..Default::default()
            }],
        };
        let params = EngineParams::from(&crate::config::EngineConfig::default());
        let attached = [ProcessInfo {
            pid: 42,
            comm: "python3".into(),
            reason: "pattern".into(),
        }];
        let text = Metrics::new()
            .unwrap()
            .render(&View {
                daemon_version: "0.1.0",
                up: true,
                module: None,
                params: &params,
                stats: &stats,
                attached: &attached,
                daemon: DaemonCounters::default(),
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
        let text = Metrics::new()
            .unwrap()
            .render(&View {
                daemon_version: "t",
                up: true,
                module: None,
                params: &params,
                stats: &stats,
                attached: &[],
                daemon: DaemonCounters::default(),
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
}
