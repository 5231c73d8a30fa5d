//! prescient-sim on bad input: a clear message naming the file, line or
//! parameter, a non-zero exit, never a panic.

use std::io::Write;
use std::process::Command;

fn sim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_prescient-sim"))
        .args(args)
        .output()
        .expect("run prescient-sim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn bert() -> String {
    format!(
        "{}/traces/BERT_256.kernels.txt.gz",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn tmp_file(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f
}

fn assert_fails(args: &[&str], needle: &str) {
    let (code, _, err) = sim(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert_ne!(code, 101, "{args:?} panicked: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: {err:?} should mention {needle:?}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn nonsense_parameters_are_refused_by_name() {
    let t = bert();
    let t = t.as_str();
    assert_fails(&["run", "--trace", t, "--rows", "0"], "rows = 0");
    assert_fails(&["run", "--trace", t, "--rows", "1000"], "power of two");
    assert_fails(
        &["run", "--trace", t, "--rows", "4", "--assoc", "8"],
        "assoc = 8 must not exceed rows = 4",
    );
    assert_fails(&["run", "--trace", t, "--succs", "99"], "succs");
    assert_fails(&["run", "--trace", t, "--h2d=-3GB/s"], "--h2d");
    assert_fails(
        &["run", "--trace", t, "--h2d", "3parsecs"],
        "unknown bandwidth unit",
    );
    assert_fails(
        &["run", "--trace", t, "--gpu-mem", "1MiB"],
        "smaller than one 2 MiB block",
    );
    assert_fails(&["run", "--trace", t, "--fault-latency", "0us"], "positive");
    assert_fails(&["run", "--trace", t, "--iterations", "0"], "iterations");
    assert_fails(&["run", "--trace", t, "--policy", "magic"], "magic");
    assert_fails(
        &["sweep", "--trace", t, "--grid", "64:2"],
        "rows:assoc:succs",
    );
}

/// Sizes and durations take prescient-units' grammar: the refusal is exit 2
/// and one line naming the flag and the accepted forms; "40G", "40GiB" and
/// "40GB" are one size (the simulator read "40GB" as 10^9 bytes before).
#[test]
fn sizes_and_durations_use_the_shared_grammar() {
    let t = bert();
    let t = t.as_str();
    for (flag, v, forms) in [
        (
            "--gpu-mem",
            "40X",
            "is not a size: use bytes, or a number with K, M, G or T",
        ),
        ("--gpu-mem", "1.5", "is not a size: use bytes"),
        (
            "--fault-latency",
            "45",
            "is not a duration: use a number with a unit",
        ),
    ] {
        let (code, _, err) = sim(&["run", "--trace", t, flag, v]);
        assert_eq!(code, 2, "{flag} {v}: {err}");
        assert!(
            err.lines().any(|l| l.contains(flag) && l.contains(forms)),
            "{flag} {v}: {err}"
        );
    }
    let json = |mem: &str| {
        let args = [
            "run",
            "--trace",
            t,
            "--policy",
            "driver",
            "--iterations",
            "1",
            "--json",
        ];
        let (code, out, err) = sim(&[&args[..], &["--gpu-mem", mem]].concat());
        assert_eq!(code, 0, "{mem}: {err}");
        out
    };
    let g40 = json("40GiB");
    for mem in ["40G", "40GB", "40960M", "42949672960"] {
        assert_eq!(json(mem), g40, "{mem}");
    }
}

#[test]
fn broken_traces_are_refused_with_file_and_place() {
    assert_fails(
        &["run", "--trace", "/nonexistent/trace.gz"],
        "/nonexistent/trace.gz: cannot open",
    );
    let g10 = tmp_file(b"Kernel ID: 0, Name: A\nExecution Time: 12x\n");
    let p = g10.path().to_str().unwrap();
    assert_fails(&["run", "--trace", p, "--format", "g10"], &format!("{p}:2"));
    let truncated = tmp_file(b"Kernel ID: 0, Name: A\nExecution Time: 12\nInput Tensors:\n");
    let p = truncated.path().to_str().unwrap();
    assert_fails(&["run", "--trace", p], "truncated");
    let native = tmp_file(b"PRSCTRC\n\x07");
    let p = native.path().to_str().unwrap();
    assert_fails(&["run", "--trace", p], "version 7 is not supported");
    let native = tmp_file(b"PRSCTRC\n\x01\x01x\x01\x05");
    let p = native.path().to_str().unwrap();
    assert_fails(
        &["run", "--trace", p, "--format", "native"],
        "truncated at byte",
    );
    let garbage = tmp_file(&[0x1f, 0x8b, 0, 1, 2, 3]);
    let p = garbage.path().to_str().unwrap().to_string() + ".gz";
    std::fs::copy(garbage.path(), &p).unwrap();
    let (code, _, err) = sim(&["run", "--trace", &p]);
    assert!(code != 0 && code != 101 && err.contains(&p), "{err}");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn json_output_has_the_documented_shape() {
    let (code, out, err) = sim(&[
        "run",
        "--trace",
        &bert(),
        "--policy",
        "driver,prescient",
        "--iterations",
        "2",
        "--gpu-mem",
        "40GiB",
        "--h2d",
        "15.754GB/s",
        "--d2h",
        "15.754GB/s",
        "--fault-latency",
        "45us",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["trace"], "BERT_256");
    assert!(v["ideal_s"].as_f64().unwrap() > 7.0);
    let p = &v["policies"].as_array().unwrap();
    assert_eq!(p.len(), 2);
    for (pol, name) in p.iter().zip(["driver", "prescient"]) {
        assert_eq!(pol["name"], name);
        for key in ["iteration_s", "faults", "stall_s"] {
            assert_eq!(pol[key].as_array().unwrap().len(), 2, "{key}");
        }
        for key in ["bytes_h2d", "bytes_d2h", "table_bytes"] {
            assert!(pol[key].is_u64(), "{key}");
        }
    }
}

#[test]
fn plot_and_text_report() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("out.svg");
    let (code, out, err) = sim(&[
        "run",
        "--trace",
        &bert(),
        "--iterations",
        "2",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("steady-state faults"), "{out}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("prescient"));
}

/// The simulator runs what prescientd deploys unless told otherwise, and
/// says which configuration ran.
#[test]
fn defaults_are_the_deployed_engine_and_the_mode_is_named() {
    let t = bert();
    let common = [
        "run",
        "--trace",
        &t,
        "--iterations",
        "1",
        "--policy",
        "prescient",
        "--json",
    ];
    let (code, out, err) = sim(&common);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("engine: transparent mode, rows 512, assoc 2, succs 4, lookahead 4"),
        "{err}"
    );
    let (code, out2, err) = sim(&[&common[..], &["--deepum"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("engine: exec-id mode, rows 2048, assoc 2, succs 4, lookahead 16"),
        "{err}"
    );
    assert_ne!(out, out2, "--deepum changed nothing");
    assert_fails(
        &["run", "--trace", &t, "--transparent", "--exec-id"],
        "--exec-id",
    );
}

#[test]
fn man_pages_and_completions_for_every_subcommand() {
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = sim(&["man", "--out-dir", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for page in [
        "prescient-sim",
        "prescient-sim-run",
        "prescient-sim-sweep",
        "prescient-sim-convert",
    ] {
        assert!(d.path().join(format!("{page}.1")).exists(), "{page}.1");
    }
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, _) = sim(&["completions", shell]);
        assert_eq!(code, 0);
        assert!(out.contains("--deepum"), "{shell}");
    }
}
