//! The bundled G10 traces: they parse, convert losslessly to the native
//! format, and replay to the ratios measured when this test was written
//! (BENCHMARKS.md), so that a change to the engine or the model that moves
//! them fails here.

use prescient_core::Params;
use prescient_sim::g10::Layout;
use prescient_sim::model::CostModel;
use prescient_sim::plan::Plan;
use prescient_sim::policy::prescient::DEFAULT_WATERMARK_PCT;
use prescient_sim::report::{run, PolicyKind};
use prescient_sim::{load, native, Format};
use std::path::PathBuf;

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(format!("{name}.kernels.txt.gz"))
}

const TRACES: [(&str, usize); 5] = [
    ("BERT_256", 1369),
    ("VIT_1280", 1489),
    ("Inceptionv3_1536", 929),
    ("ResNet152_1280", 1299),
    ("SENet154_1024", 2319),
];

#[test]
fn bundled_traces_parse_with_published_kernel_counts() {
    for (name, kernels) in TRACES {
        let w = load(&trace(name), Format::Auto, Layout::G10).unwrap();
        assert_eq!(w.kernels.len(), kernels, "{name}");
        assert!(w.kernels.iter().all(|k| !k.touches.is_empty()), "{name}");
    }
}

#[test]
fn ideal_time_matches_g10_published_ideal() {
    // G10's "ideal" column, in cycles at 1.2 GHz.
    let published = [
        ("BERT_256", 8742558777u64),
        ("VIT_1280", 4459141336),
        ("Inceptionv3_1536", 71633241480),
        ("ResNet152_1280", 135107260924),
        ("SENet154_1024", 159444570406),
    ];
    for (name, cycles) in published {
        let w = load(&trace(name), Format::G10, Layout::G10).unwrap();
        let ideal = Plan::new(&w).unwrap().ideal_s();
        let want = cycles as f64 / 1.2e9;
        assert!(
            (ideal / want - 1.0).abs() < 0.01,
            "{name}: {ideal} s vs G10's {want} s"
        );
    }
}

#[test]
fn native_round_trip_of_a_real_trace() {
    let w = load(&trace("BERT_256"), Format::G10, Layout::Caching).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for file in ["bert.trace", "bert.trace.gz"] {
        let path = dir.path().join(file);
        native::write_file(&path, &w).unwrap();
        let back = load(&path, Format::Auto, Layout::G10).unwrap();
        assert_eq!(back.kernels, w.kernels);
    }
}

/// Steady-state ratio to ideal of (driver, prescient, oracle), measured with
/// G10's parameters and 3 iterations (BENCHMARKS.md). A regression of more
/// than 3% fails; so does an unexplained improvement of more than 3% (update
/// the numbers, and BENCHMARKS.md, on purpose).
const MEASURED: [(&str, f64, f64, f64); 5] = include!("measured_ratios.in");

#[test]
fn replay_ratios_stay_where_measured() {
    for (name, driver, prescient, oracle) in MEASURED {
        let w = load(&trace(name), Format::G10, Layout::G10).unwrap();
        let plan = Plan::new(&w).unwrap();
        let m = CostModel::g10();
        let params = Params::for_gpu(m.gpu_blocks() as u32);
        let r = run(
            &plan,
            m,
            3,
            &[
                PolicyKind::Driver,
                PolicyKind::Prescient,
                PolicyKind::Oracle,
            ],
            params,
            DEFAULT_WATERMARK_PCT,
        )
        .unwrap();
        for (p, want) in r.policies.iter().zip([driver, prescient, oracle]) {
            let got = p.steady_ratio();
            assert!(
                (got / want - 1.0).abs() < 0.03,
                "{name} {}: steady ratio {got:.4}, measured {want:.4}",
                p.name
            );
        }
        // Prescient must keep its lead over the driver and stay behind the oracle.
        let [d, pr, o] = [0, 1, 2].map(|i| r.policies[i].steady_ratio());
        assert!(
            pr < d && o <= pr * 1.001,
            "{name}: driver {d}, prescient {pr}, oracle {o}"
        );
    }
}
