//! bench/gpu/umbench.cu's `dnn` and `stream` workloads rebuilt as traces,
//! from the source: same buffers, same kernels, same grid (2048 blocks of
//! 256 threads in a grid-stride loop), so the same bytes in the same order.
//!
//! Progress through a kernel's thread blocks: an H100 holds 1056 of those
//! blocks at once (132 SMs, 8 blocks of 256 threads each), so a grid of 2048
//! runs in two waves, and a grid-stride loop makes each wave sweep the whole
//! buffer, touching its share of every 2 MB block (runs 22-24 in
//! BENCHMARKS-gpu.md). Each wave's step over one 2 MB chunk of output is one
//! "kernel" of the trace: the simulator's unit of faulting and computing.

use crate::plan::Plan;
use crate::workload::{exec_id, Kernel, Range, Touch, Workload};
use prescient_core::{Block, BLOCK_BYTES, BLOCK_SHIFT};

/// Threads of one launch (`<<<2048, 256>>>`).
const GRID_THREADS: u64 = 2048 * 256;
/// Threads resident at once on an H100: one wave.
const WAVE_THREADS: u64 = 1056 * 256;
/// HBM bytes per second a resident kernel streams at (H100 SXM, about 2/3
/// of its 3.35 TB/s peak): only the all-resident compute time, which is
/// small next to the transfers here.
const HBM_BPS: f64 = 2.0e12;
/// Bytes per element (`uint32_t`).
const ELEM: u64 = 4;
/// Allocations are 2 MB aligned (cudaMallocManaged's granularity).
fn aligned(len: u64) -> u64 {
    len.div_ceil(BLOCK_BYTES) * BLOCK_BYTES
}

/// One operand of a kernel: its base address, elements read or written per
/// output element, and whether the kernel writes it.
#[derive(Clone, Copy)]
struct Operand {
    base: u64,
    per_out: u64,
    write: bool,
}

/// The trace kernels of one launch over `n_out` output elements: two waves,
/// each a sweep of steps of one grid's worth of output elements.
fn launch(name: &str, n_out: u64, operands: &[Operand], out: &mut Vec<Kernel>) {
    let steps = n_out.div_ceil(GRID_THREADS);
    for (w, (t0, t1)) in [(0, WAVE_THREADS), (WAVE_THREADS, GRID_THREADS)]
        .into_iter()
        .enumerate()
    {
        for k in 0..steps {
            let lo = (k * GRID_THREADS + t0).min(n_out);
            let hi = (k * GRID_THREADS + t1).min(n_out);
            if lo == hi {
                continue;
            }
            let touches: Vec<Touch> = operands
                .iter()
                .map(|o| Touch {
                    range: Range {
                        addr: o.base + lo * o.per_out * ELEM,
                        len: (hi - lo) * o.per_out * ELEM,
                    },
                    write: o.write,
                })
                .collect();
            let bytes: u64 = touches.iter().map(|t| t.range.len).sum();
            let kname = format!("{name}.w{w}");
            out.push(Kernel {
                exec_id: exec_id(&kname, &touches),
                name: kname,
                duration_ns: (bytes as f64 / HBM_BPS * 1e9) as u64,
                touches,
                dead_after: Vec::new(),
            });
        }
    }
}

/// `umbench dnn ITERS IN_MB LAYERS LAYER_MB`'s iteration: layer_k from the
/// input (which the CPU rewrites before each iteration) to buffer 0, then
/// buffer l-1 to buffer l. Returns the plan with the input as host input.
pub fn dnn(in_mb: u64, layers: u64, layer_mb: u64) -> anyhow::Result<Plan> {
    let (in_len, l_len) = (in_mb << 20, layer_mb << 20);
    let buf = |l: u64| aligned(in_len) + l * aligned(l_len);
    let n_out = l_len / ELEM;
    let mut kernels = Vec::new();
    let ratio = in_len / l_len;
    let first = [
        Operand {
            base: 0,
            per_out: ratio,
            write: false,
        },
        Operand {
            base: buf(0),
            per_out: 1,
            write: true,
        },
    ];
    launch("layer_k.1", n_out, &first, &mut kernels);
    for l in 1..layers {
        let ops = [
            Operand {
                base: buf(l - 1),
                per_out: 1,
                write: false,
            },
            Operand {
                base: buf(l),
                per_out: 1,
                write: true,
            },
        ];
        launch(&format!("layer_k.{}", l + 1), n_out, &ops, &mut kernels);
    }
    let w = Workload {
        name: format!("umbench dnn {in_mb} {layers} {layer_mb} (from umbench.cu)"),
        kernels,
    };
    let mut plan = Plan::new(&w)?;
    plan.host_inputs = (0..in_len.div_ceil(BLOCK_BYTES))
        .map(|b| b as Block)
        .collect();
    Ok(plan)
}

/// `umbench stream ITERS NBUF BUF_MB`'s iteration: stream_k from buffer i-1
/// into buffer i for i = 1..NBUF, then from the last buffer into buffer 0.
/// The CPU initialised every buffer: all start on the host.
pub fn stream(nbuf: u64, buf_mb: u64) -> anyhow::Result<Plan> {
    let len = buf_mb << 20;
    let base = |i: u64| i * aligned(len);
    let n = len / ELEM;
    let mut kernels = Vec::new();
    for i in (1..nbuf).chain([0]) {
        let prev = if i == 0 { nbuf - 1 } else { i - 1 };
        let ops = [
            Operand {
                base: base(prev),
                per_out: 1,
                write: false,
            },
            Operand {
                base: base(i),
                per_out: 1,
                write: true,
            },
        ];
        launch("stream_k", n, &ops, &mut kernels);
    }
    let w = Workload {
        name: format!("umbench stream {nbuf} {buf_mb} (from umbench.cu)"),
        kernels,
    };
    let mut plan = Plan::new(&w)?;
    plan.host_initial = (0..(nbuf * aligned(len)) >> BLOCK_SHIFT)
        .map(|b| b as Block)
        .collect();
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnn_touches_each_layer_in_two_sweeps() {
        let p = dnn(1024, 4, 256).unwrap();
        // 512 input blocks and 4 x 128 layer blocks.
        assert_eq!(p.footprint_blocks, 1024);
        assert_eq!(p.host_inputs.len(), 512);
        // Two waves of 128 steps per layer.
        assert_eq!(p.kernels.len(), 4 * 2 * 128);
        let out0 = 512;
        let sweeps = p
            .kernels
            .iter()
            .filter(|k| k.touches.iter().any(|t| t.block == out0 && t.write))
            .count();
        assert_eq!(sweeps, 2, "the first output block is written by both waves");
        // Layer 1's first step reads 4 input blocks' first halves (wave 1).
        assert_eq!(p.kernels[0].touches.len(), 1 + 3);
    }

    #[test]
    fn stream_sweeps_every_buffer_twice_per_iteration() {
        let p = stream(32, 256).unwrap();
        assert_eq!(p.footprint_blocks, 4096);
        assert_eq!(p.kernels.len(), 32 * 2 * 128);
        assert_eq!(p.host_initial.len(), 4096);
    }
}
