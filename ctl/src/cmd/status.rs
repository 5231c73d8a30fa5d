//! `prescientctl status`: the daemon, the module, the parameters in force
//! and the attached processes.

use crate::cli::JsonFlag;
use crate::client::{fail, json, Client, Res, EXIT_REFUSED};
use crate::render::param_line;
use prescient_uapi::control::{Reply, Request, Status};
use std::path::Path;

pub fn run(socket: &Path, f: &JsonFlag) -> Res<()> {
    let Reply::Status(s) = Client::connect(socket)?.call(&Request::Status)? else {
        return Err(fail(EXIT_REFUSED, "unexpected reply to status"));
    };
    if f.json {
        return json(&s);
    }
    print(&s);
    Ok(())
}

/// Which backend is in force and what it runs on. Under the user-space
/// backend no module is named as loaded: prescient.ko plays no part there
/// (a daemon older than the `userspace` field still reports the driver in
/// `module`; only its driver version is used).
fn backend_line(s: &Status) -> String {
    if s.backend == "userspace" {
        let driver = s
            .userspace
            .as_ref()
            .map(|u| (&u.driver_version, u.enabled, u.max_processes))
            .or(s
                .module
                .as_ref()
                .map(|m| (&m.driver_version, m.enabled, m.max_processes)));
        return match driver {
            Some((v, on, max)) => format!(
                "backend: user-space (prescientd attaches to each process itself; prescient.ko is not used), nvidia-uvm {v}, prefetch {}, up to {max} processes",
                if on { "on" } else { "off" }
            ),
            None => "backend: user-space (prescient.ko is not used); nvidia_uvm is not loaded (the daemon waits for it)".into(),
        };
    }
    match &s.module {
        Some(m) => format!(
            "prescient.ko: ABI {}, bound to nvidia-uvm {}, prefetch {}, up to {} processes",
            m.abi_version,
            m.driver_version,
            if m.enabled { "on" } else { "off" },
            m.max_processes
        ),
        None => "prescient.ko: not loaded (the daemon waits for it)".into(),
    }
}

fn print(s: &Status) {
    println!(
        "prescientd {} ({} backend, up {:.0} s), config {}",
        s.daemon_version, s.backend, s.uptime_s, s.config_path
    );
    println!("{}", backend_line(s));
    match &s.gpu {
        Some(g) => println!(
            "GPU {}: {} {} ({} MiB, NVML)",
            g.index,
            g.model,
            g.uuid,
            g.memory_bytes >> 20
        ),
        None => println!("GPU: not detected (see gpu.index below)"),
    }
    println!("parameters: {}", param_line(&s.params));
    if let Some(mp) = &s.module_params {
        if *mp != s.params {
            println!(
                "  but the {} has: {} (changed outside prescientd)",
                if s.backend == "userspace" {
                    "backend"
                } else {
                    "module"
                },
                param_line(mp)
            );
        }
    }
    if !s.settings.is_empty() {
        println!("values in force:");
        let w = s.settings.iter().map(|x| x.key.len()).max().unwrap_or(0);
        for x in &s.settings {
            println!("  {:<w$}  {:<24} {}", x.key, x.value, x.source);
        }
    }
    if !s.gpu_budget.is_empty() {
        println!(
            "per-GPU budgets: {} (other GPUs: the parameters' budget)",
            s.gpu_budget
        );
    }
    println!("attached: {}", s.attached.len());
    if !s.attached.is_empty() {
        println!("{:>8}  {:<16} REASON", "PID", "COMMAND");
        for a in &s.attached {
            println!("{:>8}  {:<16} {}", a.pid, a.comm, a.reason);
        }
    }
    if !s.gpus.is_empty() {
        println!("their GPUs (one engine, ledger and budget each):");
        print!("{}", super::stats::gpu_lines(&s.gpus));
    }
}
