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

use crate::proto::{EngineParams, ModuleInfo, ProcessInfo, Stats};
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

fn counter(r: &Registry, name: &str, help: &str, v: u64) -> prometheus::Result<()> {
    let c = IntCounter::with_opts(Opts::new(name, help))?;
    c.inc_by(v);
    r.register(Box::new(c))
}

fn gauge(r: &Registry, name: &str, help: &str, v: i64) -> prometheus::Result<()> {
    let g = IntGauge::with_opts(Opts::new(name, help))?;
    g.set(v);
    r.register(Box::new(g))
}

fn sat(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// Renders the text exposition format.
pub fn render(v: &View) -> prometheus::Result<String> {
    let r = Registry::new();
    let t = &v.stats.totals;

    let info = IntGaugeVec::new(
        Opts::new(
            "prescient_info",
            "Versions: daemon, module ABI, bound nvidia-uvm driver; and the engine mode (always 1).",
        ),
        &["version", "abi_version", "driver_version", "mode"],
    )?;
    let (abi, drv) = match v.module {
        Some(m) => (m.abi_version.to_string(), m.driver_version.clone()),
        None => (String::new(), String::new()),
    };
    let mode = serde_json::to_value(v.params.mode)
        .ok()
        .and_then(|m| m.as_str().map(str::to_string))
        .unwrap_or_default();
    info.with_label_values(&[v.daemon_version, &abi, &drv, &mode])
        .set(1);
    r.register(Box::new(info))?;

    gauge(
        &r,
        "prescient_backend_up",
        "1 if /dev/prescient answered the last poll, 0 if the module is not loaded.",
        v.up as i64,
    )?;
    counter(
        &r,
        "prescient_faults_total",
        "GPU faults the module recorded (2 MB blocks).",
        t.faults,
    )?;
    counter(
        &r,
        "prescient_prefetched_blocks_total",
        "2 MB blocks prefetched to the GPU.",
        t.prefetched_blocks,
    )?;
    counter(
        &r,
        "prescient_prefetch_used_blocks_total",
        "Prefetched blocks used before they left the GPU.",
        t.prefetches_used,
    )?;
    counter(
        &r,
        "prescient_late_prefetches_total",
        "Faults on a block whose prefetch was still in flight.",
        t.late_prefetches,
    )?;
    counter(
        &r,
        "prescient_pre_evicted_blocks_total",
        "2 MB blocks pre-evicted to the CPU to stay under the residency budget.",
        t.pre_evictions,
    )?;
    counter(
        &r,
        "prescient_discarded_blocks_total",
        "2 MB blocks discarded (marked dead).",
        t.discards,
    )?;
    counter(
        &r,
        "prescient_queue_dropped_faults_total",
        "Fault records dropped because the module's ring was full.",
        t.queue_drops,
    )?;
    counter(
        &r,
        "prescient_migrate_errors_total",
        "Migrations nvidia-uvm refused.",
        t.migrate_errors,
    )?;
    gauge(
        &r,
        "prescient_inflight_migrations",
        "Migrations in flight.",
        sat(t.inflight),
    )?;
    gauge(
        &r,
        "prescient_table_bytes",
        "Memory held by the correlation tables.",
        sat(t.table_bytes),
    )?;
    gauge(
        &r,
        "prescient_attached_processes",
        "Address spaces attached.",
        v.stats.processes.len() as i64,
    )?;

    // The parameters in force.
    let p = v.params;
    gauge(
        &r,
        "prescient_table_rows",
        "Rows per correlation table.",
        p.rows as i64,
    )?;
    gauge(
        &r,
        "prescient_table_assoc",
        "Ways per row (associativity).",
        p.assoc as i64,
    )?;
    gauge(
        &r,
        "prescient_table_successors",
        "Successors per entry.",
        p.succs as i64,
    )?;
    gauge(
        &r,
        "prescient_lookahead_kernels",
        "Kernels predicted ahead.",
        p.lookahead as i64,
    )?;
    gauge(
        &r,
        "prescient_inflight_limit",
        "Most migrations in flight.",
        p.inflight_limit as i64,
    )?;
    gauge(
        &r,
        "prescient_pre_evict_watermark_percent",
        "Pre-evict above this share of the budget.",
        p.pre_evict_watermark_pct as i64,
    )?;
    gauge(
        &r,
        "prescient_residency_budget_bytes",
        "GPU-resident bytes kept below by pre-eviction (0 = the GPU's size).",
        sat(p.residency_budget_bytes),
    )?;
    gauge(
        &r,
        "prescient_prefetch_enabled",
        "1 if prefetching is on.",
        p.enabled as i64,
    )?;

    // Per process.
    let lbl = |n: &str, h: &str| IntCounterVec::new(Opts::new(n, h), &["pid"]);
    let faults = lbl(
        "prescient_process_faults_total",
        "GPU faults of one process.",
    )?;
    let pref = lbl(
        "prescient_process_prefetched_blocks_total",
        "2 MB blocks prefetched for one process.",
    )?;
    let pre_ev = lbl(
        "prescient_process_pre_evicted_blocks_total",
        "2 MB blocks pre-evicted for one process.",
    )?;
    let disc = lbl(
        "prescient_process_discarded_blocks_total",
        "2 MB blocks discarded for one process.",
    )?;
    let merr = lbl(
        "prescient_process_migrate_errors_total",
        "Refused migrations for one process.",
    )?;
    let resident = IntGaugeVec::new(
        Opts::new(
            "prescient_process_resident_bytes",
            "GPU-resident managed memory of one process, as the engine's ledger sees it.",
        ),
        &["pid"],
    )?;
    let pinfo = IntGaugeVec::new(
        Opts::new(
            "prescient_process_info",
            "An attached process: its command name and why it is attached (always 1).",
        ),
        &["pid", "comm", "reason"],
    )?;
    for s in &v.stats.processes {
        let pid = s.pid.to_string();
        let l = [pid.as_str()];
        faults.with_label_values(&l).inc_by(s.faults);
        pref.with_label_values(&l).inc_by(s.prefetched_blocks);
        pre_ev.with_label_values(&l).inc_by(s.pre_evictions);
        disc.with_label_values(&l).inc_by(s.discards);
        merr.with_label_values(&l).inc_by(s.migrate_errors);
        resident.with_label_values(&l).set(sat(s.resident_bytes));
        let (comm, reason) = v
            .attached
            .iter()
            .find(|a| a.pid == s.pid)
            .map(|a| (a.comm.as_str(), a.reason.as_str()))
            .unwrap_or(("", "other"));
        pinfo.with_label_values(&[&pid, comm, reason]).set(1);
    }
    for c in [faults, pref, pre_ev, disc, merr] {
        r.register(Box::new(c))?;
    }
    r.register(Box::new(resident))?;
    r.register(Box::new(pinfo))?;

    let d = v.daemon;
    counter(
        &r,
        "prescient_daemon_polls_total",
        "Statistics polls of the module.",
        d.polls,
    )?;
    counter(
        &r,
        "prescient_daemon_poll_errors_total",
        "Polls that failed (module missing or refusing).",
        d.poll_errors,
    )?;
    let reloads = IntCounterVec::new(
        Opts::new(
            "prescient_daemon_config_reloads_total",
            "SIGHUP reloads of the config file, by result.",
        ),
        &["result"],
    )?;
    reloads.with_label_values(&["ok"]).inc_by(d.reloads_ok);
    reloads
        .with_label_values(&["error"])
        .inc_by(d.reloads_failed);
    r.register(Box::new(reloads))?;
    counter(
        &r,
        "prescient_daemon_attach_failures_total",
        "Attach attempts the module refused.",
        d.attach_failures,
    )?;
    counter(
        &r,
        "prescient_daemon_module_reconnects_total",
        "Times the module came back after being absent (parameters re-applied).",
        d.module_reconnects,
    )?;

    let mut out = Vec::new();
    prometheus::TextEncoder::new().encode(&r.gather(), &mut out)?;
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Counters, ProcessStats};

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
        let params = crate::config::EngineConfig::default().params();
        let attached = [ProcessInfo {
            pid: 42,
            comm: "python3".into(),
            reason: "pattern".into(),
        }];
        let text = render(&View {
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
            serde_json::from_str(include_str!("../../packaging/grafana/prescient.json")).unwrap();
        let stats = Stats {
            processes: vec![crate::proto::ProcessStats {
                pid: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let params = crate::config::EngineConfig::default().params();
        let text = render(&View {
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
