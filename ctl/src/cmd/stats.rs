//! `prescientctl stats [--watch DURATION]`: the counters, once or repeated with
//! per-second rates. A daemon whose backend is not loaded answers with one
//! line saying why and what to do, and the exit status is 0, as for
//! `prescientctl status` in the same state (69: no daemon, 77: no access).

use crate::client::{fail, json, Client, Res, EXIT_REFUSED};
use crate::render::{bytes, counter_rows};
use prescient_uapi::control::{GpuLane, Reply, Request, Stats};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

pub fn run(socket: &Path, as_json: bool, watch: Option<Duration>) -> Res<()> {
    let mut c = Client::connect(socket)?;
    let mut prev: Option<Stats> = None;
    loop {
        let Reply::Stats(s) = c.call(&Request::Stats)? else {
            return Err(fail(EXIT_REFUSED, "unexpected reply to stats"));
        };
        if as_json {
            if watch.is_some() {
                // One object per line, for pipes.
                println!(
                    "{}",
                    serde_json::to_string(&s).map_err(|e| fail(1, e.to_string()))?
                );
            } else {
                json(&s)?;
            }
        } else {
            if watch.is_some() {
                println!("--- at {:.1} s", s.at_s);
            }
            print(&s, prev.as_ref());
        }
        let _ = std::io::stdout().flush();
        match watch {
            Some(every) => std::thread::sleep(every),
            None => return Ok(()),
        }
        prev = Some(s);
    }
}

/// Counters the user-space backend cannot know (the driver reports faults,
/// not accesses to resident memory): left out of its table, not shown as 0.
const NOT_KNOWN_IN_USERSPACE: [&str; 2] = ["prefetches used", "late prefetches"];

fn print(s: &Stats, prev: Option<&Stats>) {
    // The backend is not loaded: one line, why and what to do, as the
    // daemon words it (older daemons answered that case with an error).
    if let Some(why) = &s.unavailable {
        println!("{why}");
        return;
    }
    let userspace = s.backend == "userspace";
    if userspace {
        println!("user-space backend (no prescient.ko); prefetches used and late prefetches are not known to it");
    }
    let dt = prev.map(|p| s.at_s - p.at_s).filter(|d| *d > 0.0);
    let cur = counter_rows(&s.totals);
    let old = prev.map(|p| counter_rows(&p.totals));
    for (i, (name, v)) in cur.iter().enumerate() {
        if userspace && NOT_KNOWN_IN_USERSPACE.contains(name) {
            continue;
        }
        match (dt, &old) {
            (Some(dt), Some(o)) if !matches!(*name, "in flight" | "table bytes") => {
                let rate = v.saturating_sub(o[i].1) as f64 / dt;
                println!("{name:<20} {v:>14} {rate:>12.1}/s");
            }
            _ => println!("{name:<20} {v:>14}"),
        }
    }
    if !s.processes.is_empty() {
        println!();
        println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8}",
            "PID", "FAULTS", "PREFETCHED", "RESIDENT", "PRE-EVICTED", "DISCARDED", "ERRORS"
        );
        for p in &s.processes {
            println!(
                "{:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8}",
                p.pid,
                p.faults,
                p.prefetched_blocks,
                bytes(p.resident_bytes),
                p.pre_evictions,
                p.discards,
                p.migrate_errors
            );
        }
    }
    if !s.gpus.is_empty() {
        println!();
        print!("{}", gpu_lines(&s.gpus));
    }
}

/// One line per (process, GPU): its budget, residency and traffic there.
pub fn gpu_lines(gpus: &[GpuLane]) -> String {
    let mut out = format!(
        "{:>8} {:>4} {:<40} {:>10} {:>10} {:>10} {:>12} {:>12}\n",
        "PID", "GPU", "UUID", "BUDGET", "RESIDENT", "FAULTS", "PREFETCHED", "PRE-EVICTED"
    );
    for g in gpus {
        out += &format!(
            "{:>8} {:>4} {:<40} {:>10} {:>10} {:>10} {:>12} {:>12}\n",
            g.pid,
            g.index.map_or("-".into(), |i| i.to_string()),
            g.uuid,
            g.budget_bytes.map_or("none".into(), bytes),
            bytes(g.resident_bytes),
            g.faults,
            bytes(g.prefetched_bytes),
            bytes(g.pre_evicted_bytes)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_process_and_gpu() {
        let g = |pid, index: Option<u32>, uuid: &str, budget| GpuLane {
            pid,
            uuid: uuid.into(),
            index,
            budget_bytes: budget,
            faults: 12,
            prefetched_bytes: 3 << 30,
            resident_bytes: 1 << 30,
            ..Default::default()
        };
        let text = gpu_lines(&[
            g(41, Some(0), "GPU-aaaa", Some(4 << 30)),
            g(42, Some(1), "GPU-bbbb", Some(4 << 30)),
            g(43, None, "GPU-cccc", None),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].contains("BUDGET") && lines[0].contains("UUID"));
        assert!(
            lines[2].contains("42") && lines[2].contains("GPU-bbbb") && lines[2].contains(" 1 ")
        );
        assert!(
            lines[3].contains(" - ") && lines[3].contains("none"),
            "{}",
            lines[3]
        );
    }
}
