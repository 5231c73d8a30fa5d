//! prescient-runtime against a stand-in libcuda (tests/fake/libcuda.c,
//! written from cuda.h and the driver API reference): a C program
//! (tests/fake/driver.c) looks the driver up as CUDA's libraries do
//! (dlopen, dlsym of cuGetProcAddress_v2, lookups by base name, version and
//! per-thread flag) and prints one `key=value` per check; each test runs it
//! with or without the runtime preloaded. Needs a C compiler (`cc`).

mod common;
use common::runtime_so;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Compiles the fake driver library and the driver program once.
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
        // One folder per test process: nextest runs each test in its own.
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-cuda-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let lib = out.join("libcuda.so.1");
        let exe = out.join("driver");
        for (args, what) in [
            (
                vec![
                    "-shared",
                    "-fPIC",
                    "-O1",
                    "-o",
                    lib.to_str().unwrap(),
                    src.join("libcuda.c").to_str().unwrap(),
                ],
                "fake libcuda",
            ),
            (
                vec![
                    "-O1",
                    "-o",
                    exe.to_str().unwrap(),
                    src.join("driver.c").to_str().unwrap(),
                    "-ldl",
                ],
                "driver program",
            ),
        ] {
            let st = Command::new("cc")
                .args(&args)
                .status()
                .expect("a C compiler (cc) is needed");
            assert!(st.success(), "cc failed on the {what}");
        }
        (lib, exe)
    })
}

/// Runs the driver program and returns its checks.
fn run(preload: bool, env: &[(&str, &str)]) -> HashMap<String, String> {
    let (lib, exe) = built();
    let mut cmd = Command::new(exe);
    cmd.arg(lib);
    for k in [
        "PRESCIENT_BUDGET_BYTES",
        "PRESCIENT_GPU_BUDGETS",
        "PRESCIENT_MODE",
        "PRESCIENT_ID_ARGS",
        "PRESCIENT_RUNTIME_LOG",
        "PRESCIENT_PLACE_FRESH",
        "LD_PRELOAD",
    ] {
        cmd.env_remove(k);
    }
    if preload {
        cmd.env("LD_PRELOAD", runtime_so());
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "driver failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn check(m: &HashMap<String, String>, want: &[(&str, &str)]) {
    for (k, v) in want {
        assert_eq!(m.get(*k).map(String::as_str), Some(*v), "{k} (all: {m:?})");
    }
}

#[test]
fn without_the_runtime_nothing_is_managed_or_marked() {
    let m = run(false, &[]);
    check(
        &m,
        &[
            ("alloc_managed", "0"),
            ("placed", "0"),
            ("dlsym_alloc_managed", "0"),
            ("gpa1_alloc_managed", "0"),
            ("id_written", "0"),
            ("launches_after_own_write", "0"),
            ("total", &(80u64 << 30).to_string()),
        ],
    );
}

#[test]
fn every_wrapper_symbol_version_and_per_thread_variant() {
    let m = run(true, &[("PRESCIENT_MODE", "exec-id")]);
    check(
        &m,
        &[
            // cuGetProcAddress_v2 from dlsym, and asked for itself, is the wrapper.
            ("gpa2_wrapped", "1"),
            ("gpa2_self_wrapped", "1"),
            // cuMemAlloc_v2 through cuGetProcAddress_v2, dlsym, the per-thread
            // flag and cuGetProcAddress v1: managed; the 32-bit ABI untouched.
            ("alloc_rc", "0"),
            ("alloc_managed", "1"),
            ("dlsym_alloc_managed", "1"),
            ("ptsz_flag_alloc_managed", "1"),
            ("gpa1_alloc_managed", "1"),
            ("v1_abi_passthrough", "1"),
            ("pitch_rc", "0"),
            ("pitch", "1024"),
            ("pitch_managed", "1"),
            ("pitch_bad_element_rc", "1"),
            ("free_rc", "0"),
            // No budget: the device's own numbers.
            ("free", &(70u64 << 30).to_string()),
            ("total", &(80u64 << 30).to_string()),
            // A fresh allocation goes to the device (no budget), except
            // while a stream captures.
            ("placed", "1"),
            ("placed_range", "1"),
            ("placed_device", "0"),
            ("placed_under_capture", "0"),
            // The page is made at the first allocation, so even a launch
            // captured before any uncaptured one is marked (its write is
            // captured with it).
            ("page_before_launch", "1"),
            ("captured_first_marked", "1"),
            // Launches: each of the six entry points writes its id on its own
            // stream (per-thread variants with the per-thread writer) just
            // before the kernel.
            ("id_written", "1"),
            ("id_same_launch_same", "1"),
            ("id_args_differ", "1"),
            ("id_shape_differs", "1"),
            // By default an id hashes the arguments that point into
            // managed memory, not the others; for a CUkernel too
            // (cuKernelGetParamInfo sizes its parameters).
            ("id_scalar_differs", "0"),
            ("kernel_id_pointer_differs", "1"),
            ("kernel_id_scalar_differs", "0"),
            ("launches", "14"),
            ("launches_after_own_write", "14"),
            ("streams_have_slots", "1"),
            ("captured_write", "1"),
            ("many_streams_after_write", "300"),
            // Never a flag the v2 memops refuse.
            ("refused_write_flags", "0"),
        ],
    );
}

#[test]
fn placing_fresh_memory_follows_the_budget_and_the_setting() {
    let budget = (40u64 << 30).to_string();
    let under_budget = run(true, &[("PRESCIENT_BUDGET_BYTES", &budget)]);
    check(&under_budget, &[("alloc_managed", "1"), ("placed", "0")]);
    let told = run(
        true,
        &[
            ("PRESCIENT_BUDGET_BYTES", &budget),
            ("PRESCIENT_PLACE_FRESH", "1"),
        ],
    );
    check(&told, &[("placed", "1"), ("placed_range", "1")]);
    let off = run(true, &[("PRESCIENT_PLACE_FRESH", "0")]);
    check(&off, &[("alloc_managed", "1"), ("placed", "0")]);
}

#[test]
fn unknown_newer_and_missing_names_pass_through_exactly() {
    let m = run(true, &[]);
    check(
        &m,
        &[
            ("unknown_passthrough", "1"),
            ("newer_passthrough", "1"),
            ("dlsym_passthrough", "1"),
            ("missing_rc", "500"),
            ("missing_status", "1"),
            ("missing_null", "1"),
            ("too_old_rc", "500"),
            ("too_old_status", "2"),
            // RTLD_NEXT from the program resolves after the program: to the
            // preloaded dlsym itself, as without interposition.
            ("rtld_next_dlsym_is_first", "1"),
        ],
    );
}

#[test]
fn the_budget_is_reported_as_the_device_size() {
    let budget = (40u64 << 30).to_string();
    let m = run(true, &[("PRESCIENT_BUDGET_BYTES", &budget)]);
    // Everything allocated was freed again before the query.
    check(
        &m,
        &[("info_rc", "0"), ("free", &budget), ("total", &budget)],
    );
}

#[test]
fn auto_mode_writes_ids_only_once_a_reader_asks() {
    let m = run(true, &[("PRESCIENT_MODE", "auto")]);
    check(
        &m,
        &[
            ("alloc_managed", "1"),
            ("id_written", "0"),
            ("id_after_want", "1"),
        ],
    );
}

#[test]
fn transparent_mode_keeps_managed_memory_and_writes_no_ids() {
    let m = run(true, &[("PRESCIENT_MODE", "transparent")]);
    check(
        &m,
        &[
            ("alloc_managed", "1"),
            ("id_written", "0"),
            ("launches_after_own_write", "0"),
            ("page_before_launch", "0"),
            ("captured_first_unmarked", "1"),
        ],
    );
}

#[test]
fn ids_without_arguments_ignore_argument_changes() {
    let m = run(
        true,
        &[("PRESCIENT_ID_ARGS", "0"), ("PRESCIENT_MODE", "exec-id")],
    );
    check(
        &m,
        &[
            ("id_written", "1"),
            ("id_same_launch_same", "1"),
            ("id_args_differ", "0"),
            ("id_shape_differs", "1"),
            ("id_scalar_differs", "0"),
            ("kernel_id_pointer_differs", "0"),
        ],
    );
}

#[test]
fn ids_with_all_arguments_see_scalars_too() {
    let m = run(
        true,
        &[("PRESCIENT_ID_ARGS", "all"), ("PRESCIENT_MODE", "exec-id")],
    );
    check(
        &m,
        &[
            ("id_args_differ", "1"),
            ("id_scalar_differs", "1"),
            ("kernel_id_pointer_differs", "1"),
            ("kernel_id_scalar_differs", "1"),
        ],
    );
}

/// Per-GPU budgets by UUID (`PRESCIENT_GPU_BUDGETS`, the launcher's):
/// `cuMemGetInfo` reports the budget of the current context's device, its
/// own when named, else the each-GPU one; with no current context the
/// driver's error, untouched.
#[test]
fn each_device_reports_its_own_budget() {
    let (b0, b1) = ((20u64 << 30).to_string(), (12u64 << 30).to_string());
    let gpus = format!(
        "GPU-fa4e0000-0000-0000-0000-000000000002={b1},GPU-fa4e0000-0000-0000-0000-000000000009=1073741824"
    );
    let m = run(
        true,
        &[
            ("PRESCIENT_BUDGET_BYTES", &b0),
            ("PRESCIENT_GPU_BUDGETS", &gpus),
        ],
    );
    check(
        &m,
        &[
            ("info_dev0_rc", "0"),
            ("info_dev0_free", &b0),
            ("info_dev0_total", &b0),
            ("info_dev1_rc", "0"),
            ("info_dev1_free", &b1),
            ("info_dev1_total", &b1),
            ("info_nocontext_rc", "201"),
        ],
    );
    // Without per-GPU budgets each device reports the one size; without
    // any, its own memory.
    let m = run(true, &[("PRESCIENT_BUDGET_BYTES", &b0)]);
    check(&m, &[("info_dev0_total", &b0), ("info_dev1_total", &b0)]);
    let m = run(true, &[]);
    let gib = |n: u64| (n << 30).to_string();
    check(
        &m,
        &[
            ("info_dev0_total", &gib(80)),
            ("info_dev1_free", &gib(30)),
            ("info_dev1_total", &gib(40)),
        ],
    );
}
