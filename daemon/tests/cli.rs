//! prescientd's command line: the subcommands, flags refused where they do not
//! apply, and one-line refusals of sizes and durations (exit 2 for a flag, 78
//! for a config key), each naming the flag or key and the accepted forms.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_prescientd");
const SIZE_FORMS: &str = "is not a size: use bytes, or a number with K, M, G or T";
const DURATION_FORMS: &str = "is not a duration: use";

fn prescientd(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts exit status `code` and one stderr line holding every one of `words`.
fn refused(args: &[&str], code: i32, words: &[&str]) {
    let o = prescientd(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.lines().any(|l| words.iter().all(|w| l.contains(w))),
        "{args:?}: no line with {words:?} in:\n{err}"
    );
}

#[test]
fn bare_prescientd_prints_the_help_and_exits_2() {
    let o = prescientd(&[]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("Usage: prescientd <COMMAND>"), "{err}");
    assert!(err.contains("service") && err.contains("attach"), "{err}");
}

#[test]
fn bad_sizes_and_durations_in_flags_exit_2_naming_the_flag() {
    let attach = |flag: &'static str, v: &'static str| ["attach", "--pid", "1", flag, v];
    for (flag, v) in [
        ("--budget", "4X"),
        ("--budget", "-1"),
        ("--gpu-memory", "1.5"),
    ] {
        refused(&attach(flag, v), 2, &[flag, SIZE_FORMS]);
    }
    for (flag, v) in [
        ("--attach-wait", "1x"),
        ("--duration", "-5"),
        ("--stats-interval", "500"),
        ("--gate-settle", "2"),
        ("--backoff-probe", "soon"),
    ] {
        refused(&attach(flag, v), 2, &[flag, DURATION_FORMS]);
    }
}

#[test]
fn flags_of_the_other_subcommand_are_refused() {
    refused(&["service", "--budget", "4G"], 2, &["'--budget'"]);
    refused(&["service", "--pid", "7"], 2, &["'--pid'"]);
    refused(
        &["attach", "--pid", "7", "--config", "x"],
        2,
        &["'--config'"],
    );
    refused(&["attach", "--pid", "7", "--sweep"], 2, &["'--sweep'"]);
    refused(
        &["attach", "--pid", "7", "--victim-order", "next-use"],
        2,
        &["'--victim-order'"],
    );
    refused(&["--config", "x"], 2, &["'--config'"]);
    refused(&["attach"], 2, &["--pid"]);
}

#[test]
fn bad_sizes_in_the_config_exit_78_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let p = dir.path().join("prescientd.toml");
        std::fs::write(&p, text).unwrap();
        let p = p.to_str().unwrap().to_string();
        prescientd(&["service", "--check-config", "--config", &p])
    };
    for (text, key) in [
        ("[userspace]\ngpu_memory = \"4X\"", "userspace.gpu_memory"),
        (
            "[engine]\nresidency_budget = \"1.5Q\"",
            "engine.residency_budget",
        ),
        ("[engine]\nresidency_budget = -2", "engine.residency_budget"),
    ] {
        let o = check(text);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(78), "{text}: {err}");
        assert!(
            err.lines()
                .any(|l| l.contains(key) && l.contains(SIZE_FORMS)),
            "{text}: {err}"
        );
    }
    // The same grammar as the flags: 1.5G and 1536M are one budget.
    for v in ["\"1.5G\"", "\"1536M\"", "1610612736"] {
        let o = check(&format!("[engine]\nresidency_budget = {v}"));
        assert_eq!(o.status.code(), Some(0), "{v}: {}", stderr(&o));
    }
}

/// prescientd.toml(5): printed, written by --out-dir, and clean roff for
/// groff (every warning on) where groff is installed (man-db needs it).
#[test]
fn the_config_file_man_page_renders() {
    let o = prescientd(&["man", "--config-file"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = String::from_utf8(o.stdout).unwrap();
    assert!(page.starts_with(".TH PRESCIENTD.TOML 5"), "{page}");
    let dir = std::env::temp_dir().join(format!("prescientd-man5-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    let o = prescientd(&["man", "--config-file", "--out-dir", d]);
    assert!(o.status.success(), "{}", stderr(&o));
    let file = dir.join("prescientd.toml.5");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), page);
    if let Ok(o) = Command::new("groff")
        .args(["-man", "-ww", "-Tutf8", "-P-cbou", "-rLL=100n"])
        .arg(&file)
        .output()
    {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
        for want in [
            "engine.residency_budget = 0",
            "[userspace]",
            "control.socket_group",
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
