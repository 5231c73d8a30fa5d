//! Launch footprints against the stand-in libcuda (tests/fake/libcuda.c):
//! tests/fake/footprint.c allocates through the runtime, sends allocator
//! events as PyTorch's trace tracker does, launches kernels whose
//! parameters have PyTorch's layouts (struct parameters by value, and the
//! `extra` buffer) and reads the launch ring back as prescientd does.
//! Needs a C compiler (`cc`).

mod common;
use common::runtime_so;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const MB: u64 = 1 << 20;

/// Compiles the fake libcuda and the program (once per test process).
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(build)
}

fn build() -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("footprint-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let (lib, exe) = (out.join("libcuda.so.1"), out.join("footprint"));
    let cc = |args: &[&str]| {
        let st = Command::new("cc").args(args).status().expect("cc");
        assert!(st.success(), "cc {args:?}");
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-o",
        &s(&lib),
        &s(&src.join("libcuda.c")),
    ]);
    cc(&["-O1", "-o", &s(&exe), &s(&src.join("footprint.c")), "-ldl"]);
    (lib, exe)
}

fn run(env: &[(&str, &str)]) -> HashMap<String, String> {
    let (lib, exe) = built();
    let out = Command::new(exe)
        .arg(lib)
        .env("LD_PRELOAD", runtime_so())
        .env("PRESCIENT_MODE", "exec-id")
        .env_remove("PRESCIENT_MARKS_SOCKET")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The 2 MB blocks the byte ranges touch.
fn blocks(ranges: &[(u64, u64)]) -> BTreeSet<u64> {
    let mut s = BTreeSet::new();
    for &(start, end) in ranges {
        s.extend(start >> 21..=(end - 1) >> 21);
    }
    s
}

/// The blocks of a printed record's `first:count` ranges.
fn recorded(m: &HashMap<String, String>, name: &str) -> BTreeSet<u64> {
    let v = &m[&format!("{name}_ranges")];
    let mut s = BTreeSet::new();
    for r in v.split(',').filter(|r| !r.is_empty()) {
        let (f, n) = r.split_once(':').unwrap();
        let (f, n): (u64, u64) = (f.parse().unwrap(), n.parse().unwrap());
        s.extend(f..f + n);
    }
    s
}

#[test]
fn launches_publish_their_ids_and_the_blocks_their_pointers_point_into() {
    check_launches(&run(&[]));
}

/// The records and ids footprint.c's launches must give (each run's
/// tensors at their own addresses `a`, `b` and `c`).
fn check_launches(m: &HashMap<String, String>) {
    let get = |k: &str| {
        m.get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{k}: {m:?}"))
    };
    assert_eq!(get("ring_found"), "1");
    assert_eq!(get("ring_pid_ok"), "1");
    assert_eq!(get("events_found"), "1");
    assert_eq!(get("records_unasked"), "0", "nothing without a reader");
    assert_eq!(get("sizeof_tl2"), "3144", "the fake's parameter size");
    let (a, b): (u64, u64) = (get("a").parse().unwrap(), get("b").parse().unwrap());
    // Elementwise: three live tensors, one through a view inside a block.
    assert_eq!(get("elementwise_committed"), "1");
    assert_eq!(
        get("elementwise_id"),
        get("page_id"),
        "the id the page gets"
    );
    assert_eq!(get("elementwise_stream"), (0x7000).to_string());
    assert_eq!(get("elementwise_truncated"), "0");
    assert_eq!(
        get("elementwise_guessed"),
        "0",
        "every pointer in a live block"
    );
    let want = blocks(&[
        (a, a + MB),
        (a + 2 * MB, a + 5 * MB),
        (b + 10 * MB, b + 10 * MB + 4096),
    ]);
    assert_eq!(recorded(m, "elementwise"), want);
    // Foreach: a live tensor, and two pointers with no block known: the
    // segment from each, to its end; the numels are no pointers.
    let want = blocks(&[(a, a + MB), (b + 40 * MB, b + 96 * MB)]);
    for name in ["foreach", "extra"] {
        assert_eq!(get(&format!("{name}_committed")), "1", "{name}");
        assert_eq!(get(&format!("{name}_truncated")), "0", "{name}");
        assert_eq!(get(&format!("{name}_guessed")), "1", "{name}");
        assert_eq!(recorded(m, name), want, "{name}");
    }
    // A freed tensor's pointer stands for 64 MB of its segment.
    let want = blocks(&[
        (a, a + MB),
        (a + 2 * MB, a + 5 * MB),
        (b + 10 * MB, b + 74 * MB),
    ]);
    assert_eq!(recorded(m, "after_free"), want);
    assert_eq!(get("after_free_guessed"), "1");
    // The job's own managed allocation stands for itself, no guess: from
    // the pointer to the allocation's end.
    let c: u64 = get("c").parse().unwrap();
    assert_eq!(get("own_managed_committed"), "1");
    assert_eq!(recorded(m, "own_managed"), blocks(&[(c + MB, c + 6 * MB)]));
    assert_eq!(
        get("own_managed_guessed"),
        "0",
        "a buffer the job allocated itself"
    );
    // A CUkernel's pointer argument is found too (its sizes come from
    // cuKernelGetParamInfo).
    assert_eq!(get("kernel_committed"), "1");
    assert_eq!(recorded(m, "kernel"), blocks(&[(a, a + MB)]));
    assert_eq!(get("kernel_guessed"), "0");
    assert_eq!(get("head"), "8");
    assert_eq!(get("dropped"), "0");
}

/// The `(start, end)` pairs of a printed advice table.
fn advice(m: &HashMap<String, String>, name: &str) -> Vec<(u64, u64)> {
    let v = &m[&format!("{name}_ranges")];
    (v.split(',').filter(|r| !r.is_empty()))
        .map(|r| {
            let (a, b) = r.split_once(':').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

/// The job's `cuMemAdvise` (at 13.0, as cudaMemAdvise calls it) reaches
/// the ring's host-advice table at its next launch: the host-preferred
/// ranges, a GPU preference cutting one, nothing for advice the driver
/// refused, and a free taking its allocation's advice away; the 8.0 ABI
/// (older cudart) the same.
#[test]
fn the_jobs_host_advice_reaches_the_ring() {
    let m = run(&[]);
    let n = |k: &str| -> u64 { m[k].parse().unwrap() };
    let (b, c) = (n("b"), n("c"));
    assert_eq!((n("advice_before_n"), n("advice_before_seq")), (0, 0));
    assert_eq!(
        m["adv_rc"], "0,0,0,1",
        "the last pointer is in no allocation"
    );
    assert_eq!(m["adv1_rc"], "0");
    let a = n("a");
    let mut want = vec![
        (a, a + MB),
        (b, b + 32 * MB),
        (b + 64 * MB, b + 96 * MB),
        (c, c + 6 * MB),
    ];
    want.sort_unstable();
    assert_eq!(advice(&m, "advised"), want);
    assert_eq!(m["free_rc"], "0");
    want.retain(|&(s, _)| s != c);
    assert_eq!(advice(&m, "after_free_c"), want);
    let (s1, s2) = (n("advised_seq"), n("after_free_c_seq"));
    assert!(s1 > 0 && s1 % 2 == 0 && s2 > s1 && s2 % 2 == 0, "{s1} {s2}");
    assert_eq!(n("after_free_c_left_out"), 0);
}

#[test]
fn no_ring_when_footprints_are_off() {
    let m = run(&[("PRESCIENT_FOOTPRINTS", "0")]);
    assert_eq!(m["ring_found"], "0");
}

/// PRESCIENT_FOOTPRINT_UNKNOWN_BYTES=0: a pointer with no live block known
/// stands for its own 2 MB block only.
#[test]
fn unknown_pointers_can_stand_for_their_own_block_only() {
    let m = run(&[("PRESCIENT_FOOTPRINT_UNKNOWN_BYTES", "0")]);
    let (a, b): (u64, u64) = (m["a"].parse().unwrap(), m["b"].parse().unwrap());
    let want = blocks(&[
        (a, a + MB),
        (b + 40 * MB, b + 40 * MB + 1),
        (b + 90 * MB, b + 90 * MB + 1),
    ]);
    assert_eq!(recorded(&m, "foreach"), want);
}

/// PRESCIENT_ID_ARGS=all (ids over every argument byte; one lookup of the
/// sizes per launch gives the id and the footprint both): the default
/// mode's records, and the page gets the id the ring has.
#[test]
fn ids_over_all_arguments_keep_the_footprints() {
    check_launches(&run(&[("PRESCIENT_ID_ARGS", "all")]));
}
