//! The C header declares the same layout and ioctl numbers as the Rust ABI:
//! compile a C program against it that prints every size, offset and number,
//! and compare with the Rust values.
use prescient_uapi::*;
use std::fmt::Write as _;
use std::process::Command;

type Fields = &'static [(&'static str, usize, usize)];

fn structs() -> Vec<(&'static str, usize, Fields)> {
    vec![
        ("prescient_version", Version::SIZE, Version::FIELDS),
        ("prescient_params", ParamsAbi::SIZE, ParamsAbi::FIELDS),
        (
            "prescient_space_stats",
            SpaceStats::SIZE,
            SpaceStats::FIELDS,
        ),
        ("prescient_stats_head", StatsHead::SIZE, StatsHead::FIELDS),
        ("prescient_target", Target::SIZE, Target::FIELDS),
        ("prescient_exec_id", ExecIdAbi::SIZE, ExecIdAbi::FIELDS),
        ("prescient_range", RangeAbi::SIZE, RangeAbi::FIELDS),
        ("prescient_gpu", GpuAbi::SIZE, GpuAbi::FIELDS),
        (
            "prescient_exec_page",
            ExecPageAbi::SIZE,
            ExecPageAbi::FIELDS,
        ),
        ("prescient_handle", HandleAbi::SIZE, HandleAbi::FIELDS),
    ]
}

#[test]
fn header_matches_rust_layout() {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"prescient.h\"\nint main(void){\n",
    );
    let mut want = String::new();
    for (name, size, fields) in structs() {
        writeln!(c, "printf(\"{name} %zu\\n\", sizeof(struct {name}));").unwrap();
        writeln!(want, "{name} {size}").unwrap();
        for (f, off, sz) in fields {
            writeln!(c, "printf(\"{name}.{f} %zu %zu\\n\", offsetof(struct {name}, {f}), sizeof(((struct {name}*)0)->{f}));").unwrap();
            writeln!(want, "{name}.{f} {off} {sz}").unwrap();
        }
    }
    writeln!(c, "printf(\"prescient_stats %zu %zu\\n\", sizeof(struct prescient_stats), offsetof(struct prescient_stats, spaces));").unwrap();
    writeln!(
        want,
        "prescient_stats {} {}",
        Stats::SIZE,
        core::mem::offset_of!(Stats, spaces)
    )
    .unwrap();
    for (_, n, name) in COMMANDS {
        writeln!(c, "printf(\"{name} %#x\\n\", (unsigned){name});").unwrap();
        writeln!(want, "{name} {n:#x}").unwrap();
    }
    for (name, v) in [
        ("PRESCIENT_ABI_VERSION", ABI_VERSION as u64),
        ("PRESCIENT_MAX_SPACES", MAX_SPACES as u64),
        ("PRESCIENT_MAX_INFLIGHT", MAX_INFLIGHT as u64),
        ("PRESCIENT_MAX_RANGE_LEN", MAX_RANGE_LEN),
        ("PRESCIENT_TARGET_FD", TARGET_FD as u64),
        ("PRESCIENT_MODE_TRANSPARENT", MODE_TRANSPARENT as u64),
        ("PRESCIENT_MODE_EXEC_ID", MODE_EXEC_ID as u64),
        ("PRESCIENT_TARGET_PID", TARGET_PID as u64),
        ("PRESCIENT_TARGET_HANDLE", TARGET_HANDLE as u64),
        ("PRESCIENT_VERSION_FLAG_BOUND", VERSION_FLAG_BOUND as u64),
        (
            "PRESCIENT_VERSION_FLAG_ENABLED",
            VERSION_FLAG_ENABLED as u64,
        ),
        ("PRESCIENT_MARK_NO_POPULATE", MARK_NO_POPULATE),
    ] {
        writeln!(c, "printf(\"{name} %llu\\n\", (unsigned long long){name});").unwrap();
        writeln!(want, "{name} {v}").unwrap();
    }
    c.push_str("return 0;}\n");

    let dir = std::env::temp_dir().join(format!("prescient-hdr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("t.c");
    let exe = dir.join("t");
    std::fs::write(&src, c).unwrap();
    let inc = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I", inc, "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(st.success(), "header does not compile");
    let out = Command::new(&exe).output().unwrap();
    let got = String::from_utf8(out.stdout).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    for (g, w) in got.lines().zip(want.lines()) {
        assert_eq!(g, w, "C header and Rust ABI differ");
    }
    assert_eq!(got.lines().count(), want.lines().count());
}
