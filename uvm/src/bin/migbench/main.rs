//! migbench: the migration mechanism's ceiling, measured from outside a
//! live CUDA process the way prescientd's workers migrate
//! (daemon/src/userspace/migrator.rs): pidfd_getfd of the process's
//! VA-space fd, then UVM_MIGRATE with UVM_MIGRATE_FLAG_ASYNC (no
//! semaphore) from a pool of threads sharing one job list.
//!
//! The target holds managed memory and stays idle (`umbench hold MB SECS`
//! prints its base). For each job size and thread count, three phases:
//! everything to the GPU (`h2d`), everything back to the CPU (`d2h`), and
//! half each way at once (`both`, the jobs alternating). Each phase ends
//! with a synchronous migrate of its regions (sweep.rs: a fence), so its
//! GB/s counts the copies, and its per-call latencies are the driver's
//! CPU-side work per call, which is what bounds the daemon's workers.
//!
//! Usage: migbench --pid PID --base ADDR --bytes N [--sizes-mb 2,8,32]
//!        [--threads 1,2,4,8,16] [--reps 2] [--sync]
//! One JSON object per phase on stdout.

mod sweep;

use anyhow::{bail, Context, Result};
use prescient_uvm::{ioctl as uvm, Target};
use std::os::fd::AsRawFd;
use sweep::{fence, interleave, run, split, Calls, Job, Outcome};

/// The command line.
#[derive(Debug, PartialEq)]
struct Args {
    pid: i32,
    base: u64,
    bytes: u64,
    sizes_mb: Vec<u64>,
    threads: Vec<usize>,
    reps: u32,
    sync: bool,
}

fn parse_u64(s: &str) -> Result<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).with_context(|| format!("{s}: not a hex number")),
        None => s.parse().with_context(|| format!("{s}: not a number")),
    }
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>> {
    s.split(',')
        .map(|x| x.parse().map_err(|_| anyhow::anyhow!("{x}: not a number")))
        .collect()
}

fn parse(argv: &[String]) -> Result<Args> {
    let mut a = Args {
        pid: 0,
        base: 0,
        bytes: 0,
        sizes_mb: vec![2, 8, 32],
        threads: vec![1, 2, 4, 8, 16],
        reps: 2,
        sync: false,
    };
    let mut it = argv.iter();
    while let Some(k) = it.next() {
        if k == "--sync" {
            a.sync = true;
            continue;
        }
        let v = it.next().with_context(|| format!("{k} needs a value"))?;
        match k.as_str() {
            "--pid" => a.pid = v.parse().context("--pid")?,
            "--base" => a.base = parse_u64(v).context("--base")?,
            "--bytes" => a.bytes = parse_u64(v).context("--bytes")?,
            "--sizes-mb" => a.sizes_mb = parse_list(v).context("--sizes-mb")?,
            "--threads" => a.threads = parse_list(v).context("--threads")?,
            "--reps" => a.reps = v.parse().context("--reps")?,
            _ => bail!("unknown argument {k}"),
        }
    }
    let block = 2u64 << 20;
    if a.pid <= 0
        || !a.base.is_multiple_of(block)
        || a.bytes < 2 * block
        || !a.bytes.is_multiple_of(2 * block)
    {
        bail!("--pid, a 2 MB-aligned --base and --bytes (a multiple of 4 MB) are required");
    }
    Ok(a)
}

fn calls_json(c: &Calls) -> String {
    format!(
        "{{\"n\":{},\"errors\":{},\"p50_us\":{},\"p90_us\":{},\"max_us\":{},\"mean_us\":{:.1}}}",
        c.us.len(),
        c.errors,
        c.quantile(0.5),
        c.quantile(0.9),
        c.quantile(1.0),
        c.mean()
    )
}

/// One phase's JSON line. `idle_ms`: the same fence again once nothing is
/// left to copy (what the fence itself costs).
fn line(head: &str, bytes: u64, o: &Outcome, idle_ms: f64) -> String {
    let total_ms = o.total.as_secs_f64() * 1e3;
    format!(
        "{{{head},\"bytes\":{bytes},\"issue_ms\":{:.3},\"total_ms\":{total_ms:.3},\"fence_idle_ms\":{idle_ms:.3},\"gbps\":{:.2},\"h2d\":{},\"d2h\":{}}}",
        o.issue.as_secs_f64() * 1e3,
        bytes as f64 / (total_ms * 1e6),
        calls_json(&o.calls[0]),
        calls_json(&o.calls[1])
    )
}

/// One phase: its set-up (synchronous migrates that put the data where
/// the phase starts), its jobs, and its fence.
struct Phase {
    dir: &'static str,
    setup: Vec<Job>,
    jobs: Vec<Job>,
    fences: Vec<Job>,
}

/// h2d, d2h and both over `[base, base + bytes)` in jobs of `size` bytes;
/// "both" moves the lower half to the GPU and the upper half to the CPU.
fn phases(base: u64, bytes: u64, size: u64) -> [Phase; 3] {
    let region = |base: u64, len: u64, to_gpu: bool| Job { base, len, to_gpu };
    let half = bytes / 2;
    let (lo, hi) = (base, base + half);
    let one_way = |dir: &'static str, to_gpu: bool| Phase {
        dir,
        setup: vec![region(base, bytes, !to_gpu)],
        jobs: split(base, bytes, size, to_gpu),
        fences: vec![region(base, bytes, to_gpu)],
    };
    [
        one_way("h2d", true),
        one_way("d2h", false),
        Phase {
            dir: "both",
            setup: vec![region(lo, half, false), region(hi, half, true)],
            jobs: interleave(split(lo, half, size, true), split(hi, half, size, false)),
            fences: vec![region(lo, half, true), region(hi, half, false)],
        },
    ]
}

/// The three phases of one (size, threads) point.
fn point(fd: i32, gpu: [u8; 16], a: &Args, rep: u32, size_mb: u64, threads: usize) {
    let flags = if a.sync { 0 } else { uvm::MIGRATE_FLAG_ASYNC };
    for p in phases(a.base, a.bytes, size_mb << 20) {
        fence(fd, gpu, &p.setup);
        let o = run(fd, gpu, &p.jobs, threads, flags, &p.fences);
        let t = std::time::Instant::now();
        fence(fd, gpu, &p.fences);
        let idle = t.elapsed().as_secs_f64() * 1e3;
        let head = format!(
            "\"rep\":{rep},\"dir\":\"{}\",\"size_mb\":{size_mb},\"threads\":{threads},\"async\":{}",
            p.dir, !a.sync
        );
        println!("{}", line(&head, a.bytes, &o, idle));
    }
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let a = parse(&argv)?;
    let t = Target::attach(a.pid)?;
    let gpu = t.first_gpu()?;
    let fd = t.va_fd.as_raw_fd();
    eprintln!(
        "migbench: pid {} GPU {gpu}, {} bytes at {:#x}",
        a.pid, a.bytes, a.base
    );
    for rep in 1..=a.reps {
        for &s in &a.sizes_mb {
            for &n in &a.threads {
                point(fd, gpu.uuid, &a, rep, s, n);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_lists_and_hex_and_refuses_what_cannot_be_split() {
        let a = parse(&argv(
            "--pid 7 --base 0x7f0000000000 --bytes 8388608 --threads 1,4 --sync",
        ))
        .unwrap();
        assert_eq!(a.base, 0x7f00_0000_0000);
        assert_eq!(a.threads, [1, 4]);
        assert_eq!(a.sizes_mb, [2, 8, 32]);
        assert!(a.sync);
        // Not 2 MB-aligned, too short, or no pid: refused before attaching.
        assert!(parse(&argv("--pid 7 --base 0x1000 --bytes 8388608")).is_err());
        assert!(parse(&argv("--pid 7 --base 0 --bytes 2097152")).is_err());
        assert!(parse(&argv("--base 0 --bytes 8388608")).is_err());
        assert!(parse(&argv("--pid 7 --base 0 --bytes 8388608 --reps")).is_err());
    }

    #[test]
    fn each_phase_starts_where_its_fence_does_not_end() {
        let mb = 1 << 20;
        for p in phases(0, 8 * mb, 2 * mb) {
            let moved: u64 = p.jobs.iter().map(|j| j.len).sum();
            assert_eq!(moved, 8 * mb, "{}", p.dir);
            for (s, f) in p.setup.iter().zip(&p.fences) {
                assert_eq!((s.base, s.len), (f.base, f.len));
                assert_ne!(s.to_gpu, f.to_gpu, "{}", p.dir);
                // Every job goes where its region's fence goes.
                let inside = p
                    .jobs
                    .iter()
                    .filter(|j| j.base >= f.base && j.base < f.base + f.len);
                assert!(inside.clone().count() > 0 && inside.clone().all(|j| j.to_gpu == f.to_gpu));
            }
        }
    }

    #[test]
    fn a_line_reports_gbps_over_the_whole_phase() {
        let o = Outcome {
            issue: std::time::Duration::from_millis(10),
            total: std::time::Duration::from_millis(40),
            calls: [
                Calls {
                    us: vec![100, 300],
                    errors: 0,
                },
                Calls::default(),
            ],
        };
        let l = line("\"dir\":\"h2d\"", 2_000_000_000, &o, 1.0);
        assert!(l.contains("\"gbps\":50.00"), "{l}");
        assert!(l.contains("\"h2d\":{\"n\":2,\"errors\":0,\"p50_us\":100,\"p90_us\":300"));
        assert!(l.contains("\"d2h\":{\"n\":0"));
    }
}
