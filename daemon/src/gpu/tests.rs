//! Detection against a fake libnvidia-ml built from tests/fake_nvml (which
//! follows NVML's documented API), one .so per scenario.

use super::*;
use std::path::PathBuf;
use std::process::Command;

/// Builds the fake NVML with `defines`; returns its path.
fn fake(name: &str, defines: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join(format!("libnvidia-ml-{name}.so.1"));
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_nvml/fake_nvml.c");
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(src)
        .args(defines)
        .status()
        .expect("a C compiler (cc) for the fake NVML");
    assert!(st.success());
    (dir, so)
}

fn probe(so: &std::path::Path, index: u32) -> Detected {
    Detected::probe(so.to_str().unwrap(), index)
}

#[test]
fn detects_memory_uuid_and_model_of_the_configured_gpu() {
    let (_d, so) = fake("two", &["-DFAKE_GPUS=2"]);
    let Detected::Gpu(g) = probe(&so, 1) else {
        panic!("no GPU detected");
    };
    assert_eq!(g.index, 1);
    assert_eq!(g.uuid, "GPU-fa4e0000-0000-0000-0000-000000000001");
    assert_eq!(g.name, "Fake NVIDIA H100 80GB HBM3");
    assert_eq!(g.memory_bytes, (80 << 30) + (1 << 20));
    let det = Detected::Gpu(g);
    // Rounded down to whole 2 MB blocks for the engine.
    assert_eq!(det.memory_bytes(), Some(80 << 30));
    let b = residency_budget(0, &det);
    assert_eq!(
        (b.bytes, b.source.as_str()),
        (80 << 30, "detected GPU size (NVML)")
    );
    assert_eq!(gpu_memory(0, &det).bytes, 80 << 30);
    // The operator's value wins over detection.
    assert_eq!(residency_budget(4 << 30, &det).source, "config");
    assert_eq!(gpu_memory(40 << 30, &det).bytes, 40 << 30);
}

#[test]
fn the_gpu_uvm_attached_is_found_by_its_uuid() {
    let (_d, so) = fake("three", &["-DFAKE_GPUS=3"]);
    let lib = so.to_str().unwrap();
    let d = Detected::probe_uuid(lib, "GPU-FA4E0000-0000-0000-0000-000000000002");
    assert_eq!(d.device().map(|g| g.index), Some(2));
    let d = Detected::probe_uuid(lib, "GPU-00000000-0000-0000-0000-000000000000");
    assert!(matches!(d, Detected::None(w) if w.contains("no GPU GPU-0000")));
}

#[test]
fn a_gpu_the_host_does_not_have_is_named_in_the_refusal() {
    let (_d, so) = fake("one", &[]);
    let Detected::None(why) = probe(&so, 3) else {
        panic!("GPU 3 detected on a one-GPU host");
    };
    assert!(
        why.contains("GPU 3 does not exist") && why.contains("1 GPU"),
        "{why}"
    );
}

#[test]
fn no_library_means_no_gpu_with_a_reason_and_safe_defaults() {
    let det = Detected::probe("/nonexistent/libnvidia-ml.so.1", 0);
    let Detected::None(why) = &det else {
        panic!("detected a GPU without NVML");
    };
    assert!(why.starts_with("NVML is not available"), "{why}");
    // The module is told no size: it must not pre-evict.
    assert_eq!(residency_budget(0, &det).bytes, 0);
    let m = gpu_memory(0, &det);
    assert_eq!(m.bytes, FALLBACK_GPU_MEMORY);
    assert!(
        m.source.starts_with("default, not detected"),
        "{}",
        m.source
    );
}

#[test]
fn nvml_errors_carry_the_call_and_nvml_s_own_text() {
    let (_d, so) = fake("noinit", &["-DFAKE_FAIL=\"nvmlInit_v2\"", "-DFAKE_CODE=9"]);
    let Detected::None(why) = probe(&so, 0) else {
        panic!("detected through a failing init");
    };
    assert_eq!(why, "nvmlInit_v2 failed: Driver Not Loaded (9)");
    let (_d, so) = fake("nomem", &["-DFAKE_FAIL=\"nvmlDeviceGetMemoryInfo\""]);
    let Detected::None(why) = probe(&so, 0) else {
        panic!("detected with a failing memory query");
    };
    assert_eq!(why, "nvmlDeviceGetMemoryInfo failed: Unknown Error (999)");
    let (_d, so) = fake("nogpu", &["-DFAKE_GPUS=0"]);
    assert!(matches!(probe(&so, 0), Detected::None(w) if w.contains("0 GPU")));
}

#[test]
fn each_gpu_has_its_own_memory_unless_one_size_is_configured() {
    // The fake's GPU i has 80 GiB + i MiB: three different sizes.
    let (_d, so) = fake("sizes", &["-DFAKE_GPUS=3"]);
    let devs = devices(so.to_str().unwrap());
    let uuid = |i: u64| format!("GPU-fa4e0000-0000-0000-0000-00000000000{i}");
    assert_eq!(
        memory_by_uuid(0, &devs),
        [
            (uuid(0), 80 << 30),
            (uuid(1), 80 << 30), // 80 GiB + 1 MiB: whole 2 MB blocks
            (uuid(2), (80 << 30) + (2 << 20)),
        ]
    );
    // One configured size sizes every GPU; no NVML, no per-GPU sizes.
    assert!(memory_by_uuid(40 << 30, &devs).is_empty());
    let (_n, none) = fake("sizes-noinit", &["-DFAKE_FAIL=\"nvmlInit_v2\""]);
    assert!(memory_by_uuid(0, &devices(none.to_str().unwrap())).is_empty());
}
