//! A recorded event stream made into one iteration of a native trace
//! (docs/trace-format.md, "Recorded traces"); `prescientctl record` does
//! the live capture and hands the events here.
//!
//! The event stream knows no kernels, so the trace is reconstructed:
//! * iterations are cut where the CPU takes data back from the GPU (a
//!   migration to the CPU with cause "coherence", i.e. a CPU fault) after
//!   GPU faults were seen; `auto` writes the last complete iteration when
//!   at least three were found, else the whole recording as one iteration;
//! * inside it, GPU faults become pseudo-kernels: a new one starts after a
//!   gap of `gap_ns` between faults, after a CPU interlude, or when the
//!   current one holds `max_blocks` distinct 2 MB blocks; a pseudo-kernel's
//!   duration is the wall time its faults span (stalls included);
//! * a pseudo-kernel TOUCHes, per block in first-fault order, the 64 KiB
//!   granules that faulted (write if any fault was a write or atomic);
//! * blocks the CPU took back anywhere in the recording are host data: they
//!   get DEAD records after the last pseudo-kernel of the iteration that
//!   touches them, so the simulator re-reads them from the host every
//!   iteration, as the real program does.

use crate::workload::{exec_id, Kernel, Range, Touch, Workload};
use anyhow::{bail, Result};
use prescient_core::BLOCK_SHIFT;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};

const GRANULE_SHIFT: u32 = 16;
const GRANULES: u32 = 1 << (BLOCK_SHIFT - GRANULE_SHIFT);

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

/// Which iteration of a recording to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Iteration {
    /// The last complete typical one when three or more were found, else
    /// the whole recording.
    Auto,
    /// The whole recording as one iteration.
    Whole,
    /// This one, numbered from 0.
    Index(usize),
}

/// How a recording is cut into an iteration and pseudo-kernels.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub iteration: Iteration,
    /// A gap between GPU faults longer than this starts a new pseudo-kernel.
    pub gap_ns: u64,
    /// Most distinct 2 MB blocks in one pseudo-kernel.
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

/// The event range `[lo, hi)` to write and the iteration it is (None: the
/// whole recording), given the iteration starts.
fn pick(
    events: &[Ev],
    starts: &[usize],
    which: Iteration,
) -> Result<(usize, usize, Option<usize>)> {
    let found = starts.len();
    Ok(match which {
        Iteration::Whole => (0, events.len(), None),
        Iteration::Auto if found < 3 => (0, events.len(), None),
        Iteration::Auto => {
            let i = typical_last(events, starts);
            (starts[i], starts[i + 1], Some(i))
        }
        Iteration::Index(i) if i < found => (
            starts[i],
            starts.get(i + 1).copied().unwrap_or(events.len()),
            Some(i),
        ),
        Iteration::Index(i) => {
            bail!("iteration {i} asked for, but the recording has {found} (numbered from 0)")
        }
    })
}

/// One pseudo-kernel: a run of GPU faults.
struct Seg {
    first_t: u64,
    last_t: u64,
    /// (block, faulted-granule mask, write) in first-fault order.
    blocks: Vec<(u64, u32, bool)>,
    index: HashMap<u64, usize>,
}

impl Seg {
    fn new(t: u64) -> Seg {
        Seg {
            first_t: t,
            last_t: t,
            blocks: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Adds one fault on `granule` of `block`.
    fn add(&mut self, block: u64, granule: u32, write: bool, t: u64) {
        self.last_t = self.last_t.max(t);
        match self.index.get(&block) {
            Some(&i) => {
                self.blocks[i].1 |= 1 << granule;
                self.blocks[i].2 |= write;
            }
            None => {
                self.index.insert(block, self.blocks.len());
                self.blocks.push((block, 1 << granule, write));
            }
        }
    }
}

/// Cuts the GPU faults of `events` into pseudo-kernels.
fn segments(events: &[Ev], shape: Shape) -> Vec<Seg> {
    let mut segs: Vec<Seg> = Vec::new();
    let mut cut = true;
    for e in events {
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
            segs.push(Seg::new(t));
        }
        if let Some(s) = segs.last_mut() {
            s.add(block, granule, write, t);
        }
    }
    segs
}

/// The kernels of `segs`: host blocks (`host`) die after the last kernel
/// that touches them. Returns the kernels, the blocks touched and the
/// number of host blocks given DEAD records.
fn kernels(segs: &[Seg], host: &HashSet<u64>, gap_ns: u64) -> (Vec<Kernel>, usize, usize) {
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
            Some(n) if n.saturating_sub(s.last_t) <= gap_ns => n,
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
    (kernels, touched.len(), dead.len())
}

/// Turns a recording into one iteration of a native trace.
pub fn build(events: &[Ev], name: &str, shape: Shape) -> Result<Built> {
    let starts = iteration_starts(events);
    let (lo, hi, written) = pick(events, &starts, shape.iteration)?;
    let host: HashSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            Ev::CpuTookBack { addr } => Some(addr >> BLOCK_SHIFT),
            Ev::Fault { .. } => None,
        })
        .collect();
    let segs = segments(&events[lo..hi], shape);
    if segs.is_empty() {
        bail!("no GPU faults in the part of the recording to write: nothing to replay");
    }
    let (kernels, touched_blocks, host_blocks) = kernels(&segs, &host, shape.gap_ns);
    let mut workload = Workload {
        name: name.to_string(),
        kernels,
    };
    compact(&mut workload);
    Ok(Built {
        iterations_found: starts.len(),
        iteration_written: written,
        kernels: workload.kernels.len(),
        touched_blocks,
        host_blocks,
        workload,
    })
}

/// Gaps between used blocks longer than this many blocks are shortened to it.
pub const MAX_GAP_BLOCKS: u64 = 16;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native;
    use crate::plan::Plan;

    const MB2: u64 = 2 << 20;
    const SHAPE: Shape = Shape {
        iteration: Iteration::Auto,
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
            iteration: Iteration::Whole,
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
        assert_eq!(pick(Iteration::Auto).unwrap().iteration_written, Some(1));
        assert_eq!(pick(Iteration::Whole).unwrap().iteration_written, None);
        assert_eq!(pick(Iteration::Whole).unwrap().kernels, 6);
        assert_eq!(
            pick(Iteration::Index(2)).unwrap().iteration_written,
            Some(2)
        );
        let e = pick(Iteration::Index(3)).unwrap_err().to_string();
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
    fn compaction_keeps_order_adjacency_and_offsets() {
        let hi = 0x7f1c_0000_0000u64 >> BLOCK_SHIFT;
        let ev = vec![
            f(hi + 1, 3 << 16, false, 0),
            f(hi, 0, false, 10),
            f(hi + 1000, 0, true, 20),
            f(hi + 1001, 31 << 16, true, 30),
        ];
        let shape = Shape {
            iteration: Iteration::Whole,
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
}
