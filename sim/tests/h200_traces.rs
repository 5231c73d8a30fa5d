//! The traces recorded on the H200 with `prescientctl record`
//! (traces/h200/, provenance in traces/README.md): they parse, have the
//! shape the recording printed, and replay through the driver and Prescient
//! policies with the H200's link speeds (bench/gpu/results/h200-run4/bw.jsonl)
//! in transparent mode, as prescientd runs. BENCHMARKS-gpu.md ("Recorded
//! traces replayed") compares these replays with what prescientd measured.

use prescient_core::Params;
use prescient_sim::model::CostModel;
use prescient_sim::plan::Plan;
use prescient_sim::policy::prescient::DEFAULT_WATERMARK_PCT;
use prescient_sim::report::{run, PolicyKind, RunReport};
use prescient_sim::{load, Format};
use std::path::PathBuf;

fn replay(name: &str, gpu_bytes: u64, iterations: usize) -> (Plan, RunReport) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces/h200")
        .join(format!("umbench-{name}.trace.gz"));
    let w = load(&path, Format::Auto, prescient_sim::g10::Layout::G10).unwrap();
    assert!(
        w.name.starts_with("prescientctl record of pid"),
        "{}",
        w.name
    );
    assert!(w.name.contains("0 dropped"), "{}", w.name);
    let plan = Plan::new(&w).unwrap();
    let m = CostModel {
        gpu_bytes,
        h2d_bps: 55.40e9,
        d2h_bps: 55.24e9,
        ..CostModel::g10()
    };
    let params = Params {
        mode: prescient_core::Mode::Transparent,
        ..Params::for_gpu(m.gpu_blocks() as u32)
    };
    let r = run(
        &plan,
        m,
        iterations,
        &[PolicyKind::Driver, PolicyKind::Prescient],
        params,
        DEFAULT_WATERMARK_PCT,
    )
    .unwrap();
    (plan, r)
}

fn total(r: &RunReport, i: usize) -> u64 {
    r.policies[i].faults.iter().sum()
}

#[test]
fn dnn_trace_replays_the_cpu_rewritten_input_every_iteration() {
    // The recorded steady iteration: the GPU reads the 1 GiB input (512
    // blocks) that the CPU rewrote, and writes the result word's block.
    let (plan, r) = replay("dnn", 140 << 30, 12);
    assert_eq!(plan.footprint_blocks, 513);
    assert_eq!(plan.host_inputs.len(), 512);
    let driver = &r.policies[0].faults;
    assert!(driver[1..].iter().all(|&f| f == driver[1] && f > 2000));
    // Prescient learns the order in iteration 1 and prefetches it after:
    // -88.6% with the block-table predictor (e852b74), -38% with the
    // history-buffer predictor (6efdfb5). At least 10% fewer faults.
    let (d, p) = (total(&r, 0), total(&r, 1));
    assert!(p * 10 < d * 9, "driver {d} faults, prescient {p}");
}

#[test]
fn stream_trace_under_half_its_footprint() {
    // 8 GiB streamed through a 4 GiB GPU, as under prescientd's --budget 4G.
    let (plan, r) = replay("stream", 4 << 30, 10);
    assert!(plan.footprint_blocks >= 4096);
    let (d, p) = (total(&r, 0), total(&r, 1));
    assert!(d > 10 * 54_000, "driver {d}");
    assert!(p * 2 < d, "driver {d} faults, prescient {p}");
}

#[test]
fn random_trace_parses_and_prescient_never_adds_faults() {
    let (plan, r) = replay("random", 140 << 30, 10);
    assert!(plan.footprint_blocks > 400);
    assert!(total(&r, 1) <= total(&r, 0));
}
