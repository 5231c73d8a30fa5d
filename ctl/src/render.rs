//! How values are shown in prescientctl's tables.

use prescient_uapi::control::{Counters, EngineParams};

/// A byte count in binary units, one decimal ("4.0 GiB").
pub fn bytes(v: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < U.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v} B")
    } else {
        format!("{x:.1} {}", U[i])
    }
}

/// (label, value) rows of the parameters, for `status` and `set`.
pub fn param_rows(p: &EngineParams) -> Vec<(&'static str, String)> {
    vec![
        ("rows", p.rows.to_string()),
        ("assoc", p.assoc.to_string()),
        ("succs", p.succs.to_string()),
        ("lookahead", p.lookahead.to_string()),
        ("inflight", p.inflight_limit.to_string()),
        ("watermark", format!("{}%", p.pre_evict_watermark_pct)),
        (
            "budget",
            if p.residency_budget_bytes == 0 {
                "GPU size".into()
            } else {
                bytes(p.residency_budget_bytes)
            },
        ),
        ("prefetch", if p.enabled { "on" } else { "off" }.into()),
        ("mode", p.mode.name().into()),
    ]
}

/// The parameters on one line, "rows 512, assoc 2, ...".
pub fn param_line(p: &EngineParams) -> String {
    let line: Vec<String> = param_rows(p)
        .into_iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    line.join(", ")
}

/// (label, value) rows of the counters, for `stats`.
pub fn counter_rows(c: &Counters) -> Vec<(&'static str, u64)> {
    vec![
        ("faults", c.faults),
        ("prefetched blocks", c.prefetched_blocks),
        ("prefetches used", c.prefetches_used),
        ("late prefetches", c.late_prefetches),
        ("pre-evicted blocks", c.pre_evictions),
        ("discarded blocks", c.discards),
        ("populated blocks", c.populated_blocks),
        ("queue drops", c.queue_drops),
        ("migrate errors", c.migrate_errors),
        ("in flight", c.inflight),
        ("table bytes", c.table_bytes),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_formatting() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4 << 30), "4.0 GiB");
    }
}
