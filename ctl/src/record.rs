//! `prescientctl record PID --out FILE`: a running CUDA process's GPU faults
//! and migrations, as the simulator's native trace (docs/trace-format.md).
//!
//! Attaching and reading events go through `prescientd::attach` (the same
//! pidfd_getfd + UVM tools V2 tracker code as prescientd's user-space
//! backend); the trace is written with `prescient_sim::native` (the
//! simulator's own writer), so the reader and writer cannot drift apart.
//!
//! The event stream knows no kernels, so the trace is reconstructed
//! (docs/trace-format.md, "Recorded traces"):
//! * iterations are cut where the CPU takes data back from the GPU (a
//!   migration to the CPU with cause "coherence", i.e. a CPU fault) after
//!   GPU faults were seen; `auto` writes the last complete iteration when
//!   at least three were found, else the whole recording as one iteration;
//! * inside it, GPU faults become pseudo-kernels: a new one starts after a
//!   gap of `gap_us` between faults, after a CPU interlude, or when the
//!   current one holds `max_blocks` distinct 2 MB blocks; a pseudo-kernel's
//!   duration is the wall time its faults span (stalls included);
//! * a pseudo-kernel TOUCHes, per block in first-fault order, the 64 KiB
//!   granules that faulted (write if any fault was a write or atomic);
//! * blocks the CPU took back anywhere in the recording are host data: they
//!   get DEAD records after the last pseudo-kernel of the iteration that
//!   touches them, so the simulator re-reads them from the host every
//!   iteration, as the real program does.

use crate::cli::IterationArg;
use anyhow::{bail, Context, Result};
use prescient_sim::workload::{exec_id, Kernel, Range, Touch, Workload};
use prescientd::attach::{self, Event, Target, Tracker};
use prescientd::uvm;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const BLOCK_SHIFT: u32 = 21;
const GRANULE_SHIFT: u32 = 16;
const GRANULES: u32 = 1 << (BLOCK_SHIFT - GRANULE_SHIFT);
/// Most events kept in memory (24 B each): about 1.5 GB. Recording stops
/// there, and says so in the trace's name.
const MAX_EVENTS: usize = 64 << 20;

/// One recorded event, reduced to what the trace needs. `t` is the driver's
/// CPU timestamp in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    Fault {
        addr: u64,
        write: bool,
        t: u64,
    },
    /// The CPU faulted data of a GPU back (cause "coherence", to the CPU).
    CpuTookBack {
        addr: u64,
    },
}

/// The events of `ev` that the trace uses, or None.
pub fn reduce(ev: &Event) -> Option<Ev> {
    match ev {
        Event::Fault(f) => Some(Ev::Fault {
            addr: f.address,
            // UvmEventMemoryAccessType: 1 read, 2 write, 3 atomic, 4 prefetch.
            write: matches!(f.access_type, 2 | 3),
            t: f.time_stamp,
        }),
        Event::Migration(m)
            if m.dst_index == uvm::CPU_INDEX
                && m.src_index != uvm::CPU_INDEX
                && m.migration_cause == uvm::CAUSE_COHERENCE =>
        {
            Some(Ev::CpuTookBack { addr: m.address })
        }
        _ => None,
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub iteration: IterationArg,
    pub gap_ns: u64,
    pub max_blocks: u32,
}

/// What `build` made of a recording.
#[derive(Debug, Serialize)]
pub struct Built {
    #[serde(skip)]
    pub workload: Workload,
    pub iterations_found: usize,
    /// The iteration written, or None for the whole recording.
    pub iteration_written: Option<usize>,
    pub kernels: usize,
    pub touched_blocks: usize,
    pub host_blocks: usize,
}

/// Start indices (into `events`) of the iterations.
pub fn iteration_starts(events: &[Ev]) -> Vec<usize> {
    let mut starts = vec![0];
    let mut faults_since = 0u64;
    for (i, e) in events.iter().enumerate() {
        match e {
            Ev::Fault { .. } => faults_since += 1,
            Ev::CpuTookBack { .. } if faults_since > 0 => {
                starts.push(i);
                faults_since = 0;
            }
            Ev::CpuTookBack { .. } => {}
        }
    }
    starts
}

/// The last complete iteration (not the final one, which may be cut off)
/// that faults on at least 1/8 as many distinct blocks as the largest: a
/// trailing run of tiny "iterations" (a program's result checks, each
/// reading one value back on the CPU) is skipped for the real work.
fn typical_last(events: &[Ev], starts: &[usize]) -> usize {
    let complete = starts.len() - 1;
    let sizes: Vec<usize> = (0..complete)
        .map(|i| {
            events[starts[i]..starts[i + 1]]
                .iter()
                .filter_map(|e| match e {
                    Ev::Fault { addr, .. } => Some(addr >> BLOCK_SHIFT),
                    Ev::CpuTookBack { .. } => None,
                })
                .collect::<HashSet<u64>>()
                .len()
        })
        .collect();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    (0..complete)
        .rev()
        .find(|&i| sizes[i] * 8 >= largest && sizes[i] > 0)
        .unwrap_or(complete - 1)
}

struct Seg {
    first_t: u64,
    last_t: u64,
    /// (block, faulted-granule mask, write) in first-fault order.
    blocks: Vec<(u64, u32, bool)>,
    index: HashMap<u64, usize>,
}

/// Turns a recording into one iteration of a native trace.
pub fn build(events: &[Ev], name: &str, shape: Shape) -> Result<Built> {
    let starts = iteration_starts(events);
    let found = starts.len();
    let (lo, hi, written) = match shape.iteration {
        IterationArg::Whole => (0, events.len(), None),
        IterationArg::Auto if found < 3 => (0, events.len(), None),
        IterationArg::Auto => {
            let i = typical_last(events, &starts);
            (starts[i], starts[i + 1], Some(i))
        }
        IterationArg::Index(i) if i < found => (
            starts[i],
            starts.get(i + 1).copied().unwrap_or(events.len()),
            Some(i),
        ),
        IterationArg::Index(i) => {
            bail!("iteration {i} asked for, but the recording has {found} (numbered from 0)")
        }
    };
    let host: HashSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            Ev::CpuTookBack { addr } => Some(addr >> BLOCK_SHIFT),
            Ev::Fault { .. } => None,
        })
        .collect();

    let mut segs: Vec<Seg> = Vec::new();
    let mut cut = true;
    for e in &events[lo..hi] {
        let (addr, write, t) = match *e {
            Ev::Fault { addr, write, t } => (addr, write, t),
            Ev::CpuTookBack { .. } => {
                cut = true;
                continue;
            }
        };
        let block = addr >> BLOCK_SHIFT;
        let granule = ((addr >> GRANULE_SHIFT) & (GRANULES as u64 - 1)) as u32;
        let new_seg = match segs.last() {
            None => true,
            Some(s) => {
                cut || t.saturating_sub(s.last_t) > shape.gap_ns
                    || (!s.index.contains_key(&block)
                        && s.blocks.len() >= shape.max_blocks as usize)
            }
        };
        cut = false;
        if new_seg {
            segs.push(Seg {
                first_t: t,
                last_t: t,
                blocks: Vec::new(),
                index: HashMap::new(),
            });
        }
        let Some(s) = segs.last_mut() else {
            continue;
        };
        s.last_t = s.last_t.max(t);
        match s.index.get(&block) {
            Some(&i) => {
                s.blocks[i].1 |= 1 << granule;
                s.blocks[i].2 |= write;
            }
            None => {
                s.index.insert(block, s.blocks.len());
                s.blocks.push((block, 1 << granule, write));
            }
        }
    }
    if segs.is_empty() {
        bail!("no GPU faults in the part of the recording to write: nothing to replay");
    }

    // Last pseudo-kernel touching each host block, and its ranges.
    let mut last_touch: HashMap<u64, usize> = HashMap::new();
    let mut host_ranges: HashMap<u64, BTreeSet<Range>> = HashMap::new();
    let mut kernels = Vec::with_capacity(segs.len());
    let mut touched = HashSet::new();
    for (i, s) in segs.iter().enumerate() {
        let mut touches = Vec::new();
        for &(block, mask, write) in &s.blocks {
            touched.insert(block);
            for r in granule_runs(block, mask) {
                touches.push(Touch { range: r, write });
                if host.contains(&block) {
                    host_ranges.entry(block).or_default().insert(r);
                }
            }
            if host.contains(&block) {
                last_touch.insert(block, i);
            }
        }
        let next_start = segs.get(i + 1).map(|n| n.first_t);
        let end = match next_start {
            Some(n) if n.saturating_sub(s.last_t) <= shape.gap_ns => n,
            _ => s.last_t,
        };
        let kname = format!("faults-{i}");
        kernels.push(Kernel {
            exec_id: exec_id(&kname, &touches),
            name: kname,
            duration_ns: end.saturating_sub(s.first_t).max(1000),
            touches,
            dead_after: Vec::new(),
        });
    }
    let mut dead: Vec<(usize, u64)> = last_touch.iter().map(|(&b, &k)| (k, b)).collect();
    dead.sort_unstable();
    for (k, b) in &dead {
        if let Some(rs) = host_ranges.get(b) {
            kernels[*k].dead_after.extend(rs.iter().copied());
        }
    }
    let mut workload = Workload {
        name: name.to_string(),
        kernels,
    };
    compact(&mut workload);
    Ok(Built {
        iterations_found: found,
        iteration_written: written,
        kernels: workload.kernels.len(),
        touched_blocks: touched.len(),
        host_blocks: dead.len(),
        workload,
    })
}

/// Gaps between used blocks longer than this many blocks are shortened to it.
const MAX_GAP_BLOCKS: u64 = 16;

/// Renumbers the 2 MB blocks a workload uses from 0, keeping their order,
/// adjacency and every offset inside a block, and shortening gaps over
/// `MAX_GAP_BLOCKS` blocks: a process's managed memory sits near 0x7f..
/// (128 TiB), beyond the simulator's dense block arrays (16 TiB).
pub fn compact(w: &mut Workload) {
    let mut used = BTreeSet::new();
    let ranges = w.kernels.iter().flat_map(|k| {
        k.touches
            .iter()
            .map(|t| t.range)
            .chain(k.dead_after.iter().copied())
    });
    for r in ranges {
        let (first, last) = (r.addr >> BLOCK_SHIFT, (r.end() - 1) >> BLOCK_SHIFT);
        used.extend(first..=last);
    }
    let mut map = HashMap::with_capacity(used.len());
    let mut next = 0u64;
    let mut prev: Option<u64> = None;
    for b in used {
        if let Some(p) = prev {
            next += (b - p).min(MAX_GAP_BLOCKS);
        }
        map.insert(b, next);
        prev = Some(b);
    }
    let remap = |r: &mut Range| {
        let b = r.addr >> BLOCK_SHIFT;
        let off = r.addr & ((1 << BLOCK_SHIFT) - 1);
        if let Some(nb) = map.get(&b) {
            r.addr = (nb << BLOCK_SHIFT) + off;
        }
    };
    for k in &mut w.kernels {
        for t in &mut k.touches {
            remap(&mut t.range);
        }
        for d in &mut k.dead_after {
            remap(d);
        }
        // The execution id hashes the ranges: recompute it on the new ones.
        k.exec_id = exec_id(&k.name, &k.touches);
    }
}

/// The faulted granules of `block` as ranges (contiguous granules merged).
fn granule_runs(block: u64, mask: u32) -> Vec<Range> {
    let base = block << BLOCK_SHIFT;
    let mut out = Vec::new();
    let mut g = 0;
    while g < GRANULES {
        if mask & (1 << g) == 0 {
            g += 1;
            continue;
        }
        let start = g;
        while g < GRANULES && mask & (1 << g) != 0 {
            g += 1;
        }
        out.push(Range {
            addr: base + ((start as u64) << GRANULE_SHIFT),
            len: ((g - start) as u64) << GRANULE_SHIFT,
        });
    }
    out
}

/// Why recording stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stop {
    TargetExited,
    Duration,
    Signal,
    EventLimit,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub out: String,
    pub pid: i32,
    pub command: String,
    pub driver_version: String,
    pub stopped_by: Stop,
    pub elapsed_s: f64,
    pub events: u64,
    pub fault_events: u64,
    /// Changes of faulted 2 MB block in the stream (prescientd's "fault blocks").
    pub fault_blocks: u64,
    pub migration_events: u64,
    pub cpu_took_back_events: u64,
    pub dropped_events: u64,
    #[serde(flatten)]
    pub built: Built,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // sigaction is given a zeroed, then filled, struct of the right type.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

pub struct Request<'a> {
    pub pid: i32,
    pub out: &'a Path,
    pub duration: Option<Duration>,
    pub shape: Shape,
    pub queue_entries: u32,
    pub attach_wait: Duration,
    pub ready_file: Option<&'a Path>,
}

fn attach_with_wait(pid: i32, wait: Duration) -> Result<(Target, (u16, [u8; 16]))> {
    let deadline = Instant::now() + wait;
    loop {
        let r = Target::attach(pid).and_then(|t| {
            let g = t.gpu()?;
            Ok((t, g))
        });
        match r {
            Ok(x) => return Ok(x),
            Err(e) if Instant::now() < deadline && !is_permission(&e) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error comes from a refused permission (exit status 77).
pub fn is_permission(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    })
}

/// Records until the target exits, the duration passes or a signal comes,
/// then writes the trace (always a complete, valid file).
pub fn record(req: &Request) -> Result<Summary> {
    let (target, _gpu) = attach_with_wait(req.pid, req.attach_wait)?;
    let version = attach::driver_version()?;
    let command = std::fs::read_to_string(format!("/proc/{}/cmdline", req.pid))
        .map(|c| c.replace('\0', " ").trim().to_string())
        .unwrap_or_default();
    let tracker = Tracker::new(
        &target,
        req.queue_entries,
        (1 << uvm::EVENT_GPU_FAULT) | (1 << uvm::EVENT_MIGRATION),
    )
    .context("creating the tools event tracker")?;
    catch_signals();
    if let Some(f) = req.ready_file {
        std::fs::write(f, b"recording\n").with_context(|| format!("writing {}", f.display()))?;
    }
    let start = Instant::now();
    let mut events: Vec<Ev> = Vec::new();
    let (mut n_events, mut n_faults, mut n_blocks, mut n_mig, mut n_back) = (0u64, 0, 0, 0, 0);
    let mut last_block = u64::MAX;
    let mut alive_check = Instant::now();
    let mut take = |ev: Event, events: &mut Vec<Ev>| {
        n_events += 1;
        match ev {
            Event::Fault(f) => {
                n_faults += 1;
                if f.address >> BLOCK_SHIFT != last_block {
                    last_block = f.address >> BLOCK_SHIFT;
                    n_blocks += 1;
                }
            }
            Event::Migration(_) => n_mig += 1,
            Event::Other => {}
        }
        if let Some(e) = reduce(&ev) {
            if matches!(e, Ev::CpuTookBack { .. }) {
                n_back += 1;
            }
            if events.len() < MAX_EVENTS {
                events.push(e);
            }
        }
    };
    let stop = loop {
        if STOP.load(Ordering::Relaxed) {
            break Stop::Signal;
        }
        if req.duration.is_some_and(|d| start.elapsed() >= d) {
            break Stop::Duration;
        }
        if events.len() >= MAX_EVENTS {
            break Stop::EventLimit;
        }
        if alive_check.elapsed() > Duration::from_millis(50) {
            alive_check = Instant::now();
            if !target.alive() {
                break Stop::TargetExited;
            }
        }
        let n = tracker.drain(1 << 16, |ev| take(ev, &mut events));
        if n == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    tracker.flush();
    tracker.drain(usize::MAX, |ev| take(ev, &mut events));
    let dropped = tracker.dropped();
    let elapsed = start.elapsed().as_secs_f64();
    // Let the target's VA space go as soon as possible.
    drop(tracker);
    drop(target);

    let how = match stop {
        Stop::TargetExited => "until the target exited",
        Stop::Duration => "for the requested duration",
        Stop::Signal => "until stopped by a signal",
        Stop::EventLimit => "until the in-memory event limit (the trace is cut short)",
    };
    let shown = if command.len() > 512 {
        &command[..command.floor_char_boundary(512)]
    } else {
        &command
    };
    let name = format!(
        "prescientctl record of pid {} ({shown}): recorded {elapsed:.1} s {how}; {n_events} events ({n_faults} GPU faults, {n_mig} migrations, {dropped} dropped); nvidia_uvm {version}; addresses compacted",
        req.pid
    );
    let mut built = build(&events, &name, req.shape).with_context(|| {
        format!(
            "pid {}: recorded {elapsed:.1} s {how}, {n_faults} GPU faults; no trace written",
            req.pid
        )
    })?;
    let which = match built.iteration_written {
        Some(i) => format!("; iteration {i} of {} found", built.iterations_found),
        None => format!(
            "; whole recording as one iteration ({} found)",
            built.iterations_found
        ),
    };
    built.workload.name.push_str(&which);
    write_atomically(req.out, &built.workload)?;
    Ok(Summary {
        out: req.out.display().to_string(),
        pid: req.pid,
        command,
        driver_version: version,
        stopped_by: stop,
        elapsed_s: elapsed,
        events: n_events,
        fault_events: n_faults,
        fault_blocks: n_blocks,
        migration_events: n_mig,
        cpu_took_back_events: n_back,
        dropped_events: dropped,
        built,
    })
}

/// Writes next to `out` and renames, so `out` is never a partial file.
fn write_atomically(out: &Path, w: &Workload) -> Result<()> {
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(".partial");
    // Keep the ".gz" decision of the final name.
    let tmp = if out.extension().is_some_and(|e| e == "gz") {
        let mut t = out.as_os_str().to_owned();
        t.push(".partial.gz");
        std::path::PathBuf::from(t)
    } else {
        std::path::PathBuf::from(tmp)
    };
    prescient_sim::native::write_file(&tmp, w)?;
    std::fs::rename(&tmp, out)
        .with_context(|| format!("renaming {} to {}", tmp.display(), out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_sim::native;
    use prescient_sim::plan::Plan;

    const MB2: u64 = 2 << 20;
    const SHAPE: Shape = Shape {
        iteration: IterationArg::Auto,
        gap_ns: 200_000,
        max_blocks: 32,
    };

    fn f(block: u64, off: u64, write: bool, t: u64) -> Ev {
        Ev::Fault {
            addr: block * MB2 + off,
            write,
            t,
        }
    }

    /// A DNN-like loop: the CPU rewrites blocks 0..4 (input), the GPU reads
    /// them and writes 10..12, `iters` times.
    fn dnn(iters: u64) -> Vec<Ev> {
        let mut v = Vec::new();
        let mut t = 0;
        for it in 0..iters {
            if it > 0 {
                for b in 0..4 {
                    v.push(Ev::CpuTookBack { addr: b * MB2 });
                }
                t += 300_000_000;
            }
            for b in 0..4 {
                for g in 0..32 {
                    t += 100;
                    v.push(f(b, g << 16, false, t));
                }
            }
            t += 1_000_000; // next layer
            for b in 10..12 {
                t += 100;
                v.push(f(b, 0, true, t));
                v.push(f(b, 5 << 16, true, t));
            }
        }
        v
    }

    fn round_trip(w: &Workload) -> Workload {
        let mut bytes = Vec::new();
        native::write(&mut bytes, w).unwrap();
        native::read(&bytes[..], "recorded").unwrap()
    }

    #[test]
    fn a_recording_round_trips_through_the_simulators_reader() {
        let b = build(&dnn(5), "dnn", SHAPE).unwrap();
        assert_eq!(round_trip(&b.workload), b.workload);
        assert_eq!(b.iterations_found, 5);
        assert_eq!(b.iteration_written, Some(3));
    }

    #[test]
    fn iterations_are_cut_at_cpu_take_backs_after_gpu_faults() {
        let ev = dnn(4);
        let s = iteration_starts(&ev);
        assert_eq!(s.len(), 4);
        // Each cut is the first take-back of a CPU phase.
        for &i in &s[1..] {
            assert!(matches!(ev[i], Ev::CpuTookBack { .. }));
            assert!(matches!(ev[i - 1], Ev::Fault { .. }));
        }
    }

    #[test]
    fn pseudo_kernels_touches_and_dead_ranges() {
        let w = build(&dnn(5), "dnn", SHAPE).unwrap().workload;
        // Input read (one gap-free run of 4 blocks), then the layer after a
        // 1 ms gap.
        assert_eq!(w.kernels.len(), 2);
        let k0 = &w.kernels[0];
        assert_eq!(k0.touches.len(), 4);
        assert!(k0
            .touches
            .iter()
            .all(|t| !t.write && t.range.len == MB2 && t.range.addr % MB2 == 0));
        // Host data dies after its last reader.
        assert_eq!(k0.dead_after.len(), 4);
        let k1 = &w.kernels[1];
        // Granules 0 and 5 of each output block: two ranges each, writes.
        assert_eq!(k1.touches.len(), 4);
        assert!(k1.touches.iter().all(|t| t.write && t.range.len == 1 << 16));
        // Blocks 0..4 and 10 keep their numbers (gaps up to 16 blocks stay).
        assert_eq!(k1.touches[1].range.addr, 10 * MB2 + (5 << 16));
        assert!(k1.dead_after.is_empty());
        assert!(k0.duration_ns >= 3_100 && k0.duration_ns < 1_000_000);
        // The simulator sees the input as host data provided every iteration.
        let p = Plan::new(&w).unwrap();
        let mut hi = p.host_inputs.clone();
        hi.sort_unstable();
        assert_eq!(hi, vec![0, 1, 2, 3]);
    }

    #[test]
    fn the_block_cap_and_cpu_interludes_split_pseudo_kernels() {
        let mut v: Vec<Ev> = (0..10).map(|b| f(b, 0, false, b * 10)).collect();
        v.insert(5, Ev::CpuTookBack { addr: 99 * MB2 });
        let shape = Shape {
            iteration: IterationArg::Whole,
            max_blocks: 3,
            ..SHAPE
        };
        let w = build(&v, "x", shape).unwrap().workload;
        let sizes: Vec<usize> = w.kernels.iter().map(|k| k.touches.len()).collect();
        assert_eq!(sizes, vec![3, 2, 3, 2]);
    }

    #[test]
    fn iteration_choice() {
        let ev = dnn(3);
        let pick = |it| {
            build(
                &ev,
                "x",
                Shape {
                    iteration: it,
                    ..SHAPE
                },
            )
        };
        assert_eq!(pick(IterationArg::Auto).unwrap().iteration_written, Some(1));
        assert_eq!(pick(IterationArg::Whole).unwrap().iteration_written, None);
        assert_eq!(pick(IterationArg::Whole).unwrap().kernels, 6);
        assert_eq!(
            pick(IterationArg::Index(2)).unwrap().iteration_written,
            Some(2)
        );
        let e = pick(IterationArg::Index(3)).unwrap_err().to_string();
        assert!(e.contains("has 3"), "{e}");
        // Fewer than three iterations: everything.
        let b = build(&dnn(2), "x", SHAPE).unwrap();
        assert_eq!(b.iteration_written, None);
    }

    #[test]
    fn auto_skips_a_tail_of_tiny_iterations() {
        // Stream-like: one big pass over 64 blocks, then a result check
        // that reads one value back on the CPU per buffer (tiny iterations).
        let mut ev: Vec<Ev> = (0..64).map(|b| f(b, 0, true, b * 100)).collect();
        for k in 0..6 {
            ev.push(Ev::CpuTookBack { addr: 99 * MB2 });
            ev.push(f(100 + k, 0, false, 10_000_000 + k * 1000));
        }
        let b = build(&ev, "x", SHAPE).unwrap();
        assert_eq!(b.iterations_found, 7);
        assert_eq!(b.iteration_written, Some(0));
        assert_eq!(b.touched_blocks, 64);
        // A steady loop still gives its last complete iteration.
        assert_eq!(
            build(&dnn(6), "x", SHAPE).unwrap().iteration_written,
            Some(4)
        );
    }

    #[test]
    fn no_faults_is_an_error_not_an_empty_trace() {
        let e = build(&[Ev::CpuTookBack { addr: 0 }], "x", SHAPE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no GPU faults"), "{e}");
    }

    #[test]
    fn written_files_are_valid_and_gz_aware() {
        let dir = tempfile::tempdir().unwrap();
        let w = build(&dnn(4), "dnn", SHAPE).unwrap().workload;
        for name in ["t.trace", "t.trace.gz"] {
            let p = dir.path().join(name);
            write_atomically(&p, &w).unwrap();
            assert_eq!(native::read_file(&p).unwrap(), w);
            assert!(!dir.path().join(format!("{name}.partial")).exists());
        }
    }

    #[test]
    fn compaction_keeps_order_adjacency_and_offsets() {
        let hi = 0x7f1c_0000_0000u64 >> BLOCK_SHIFT;
        let ev = vec![
            f(hi + 1, 3 << 16, false, 0),
            f(hi, 0, false, 10),
            f(hi + 1000, 0, true, 20),
            f(hi + 1001, 31 << 16, true, 30),
        ];
        let shape = Shape {
            iteration: IterationArg::Whole,
            ..SHAPE
        };
        let w = build(&ev, "x", shape).unwrap().workload;
        let addrs: Vec<u64> = w.kernels[0].touches.iter().map(|t| t.range.addr).collect();
        assert_eq!(
            addrs,
            vec![
                MB2 + (3 << 16),
                0,
                (1 + MAX_GAP_BLOCKS) * MB2,
                (2 + MAX_GAP_BLOCKS) * MB2 + (31 << 16)
            ]
        );
        assert!(Plan::new(&w).is_ok());
        // Idempotent on an already compact trace.
        let mut again = w.clone();
        compact(&mut again);
        assert_eq!(again, w);
    }

    #[test]
    fn reduce_keeps_faults_and_cpu_take_backs_only() {
        let mut fault = uvm::GpuFaultV2 {
            event_type: uvm::EVENT_GPU_FAULT,
            address: 0x1234_5000,
            time_stamp: 77,
            access_type: 3,
            ..Default::default()
        };
        assert_eq!(
            reduce(&Event::Fault(fault)),
            Some(Ev::Fault {
                addr: 0x1234_5000,
                write: true,
                t: 77
            })
        );
        fault.access_type = 1;
        assert!(matches!(
            reduce(&Event::Fault(fault)),
            Some(Ev::Fault { write: false, .. })
        ));
        let mut m = uvm::MigrationV2 {
            event_type: uvm::EVENT_MIGRATION,
            migration_cause: uvm::CAUSE_COHERENCE,
            src_index: 1,
            dst_index: uvm::CPU_INDEX,
            address: MB2,
            ..Default::default()
        };
        assert_eq!(
            reduce(&Event::Migration(m)),
            Some(Ev::CpuTookBack { addr: MB2 })
        );
        m.migration_cause = uvm::CAUSE_EVICTION;
        assert_eq!(reduce(&Event::Migration(m)), None);
        m.migration_cause = uvm::CAUSE_COHERENCE;
        (m.src_index, m.dst_index) = (uvm::CPU_INDEX, 1);
        assert_eq!(reduce(&Event::Migration(m)), None);
        assert_eq!(reduce(&Event::Other), None);
    }
}
