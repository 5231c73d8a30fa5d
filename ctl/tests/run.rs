//! `prescientctl run` as a user runs it: the command's exit status, the
//! environment it gets, one line when prescientd is absent, nested runs.

use std::process::Command;

fn ctl() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_prescientctl"));
    c.env("PRESCIENT_SOCKET", "/nonexistent/prescient.sock");
    c.env_remove("PRESCIENT_RUN_PID");
    c
}

/// An empty file standing for the runtime: the dynamic loader says it
/// cannot preload it and runs the command without it.
fn fake_runtime() -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("run-test-runtime.so");
    std::fs::write(&p, b"").unwrap();
    p
}

#[test]
fn the_command_gets_the_settings_and_its_exit_status_is_returned() {
    let out = ctl()
        .env("PRESCIENT_RUNTIME", fake_runtime())
        .env(
            "PYTORCH_ALLOC_CONF",
            "backend:cudaMallocAsync,max_split_size_mb:64",
        )
        .args(["run", "--budget", "4G", "--mode", "exec-id", "--"])
        .args([
            "sh",
            "-c",
            r#"echo "$PYTORCH_ALLOC_CONF|$PRESCIENT_MODE|$PRESCIENT_BUDGET_BYTES"; exit 7"#,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert_eq!(
        stdout.trim(),
        "backend:native,expandable_segments:False,max_split_size_mb:64|exec-id|4294967296"
    );
    // One line for what is in force (prescientd absent: unaccelerated), one
    // for the overridden allocator setting.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("prescientctl run:"))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].contains("prescientd not available") && lines[0].contains("unaccelerated"),
        "{stderr}"
    );
    assert!(lines[1].contains("cudaMallocAsync overridden"), "{stderr}");
}

#[test]
fn a_killed_command_exits_as_a_shell_reports_it() {
    let st = ctl()
        .env("PRESCIENT_RUNTIME", "/nonexistent/runtime.so")
        .args(["run", "--", "sh", "-c", "kill -9 $$"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(137));
}

#[test]
fn a_run_inside_a_run_runs_the_command_as_it_is() {
    let out = ctl()
        .env("PRESCIENT_RUN_PID", "4242")
        .args([
            "run",
            "--mode",
            "transparent",
            "--",
            "sh",
            "-c",
            "echo ${PRESCIENT_MODE:-unset}; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "unset");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already inside prescientctl run (pid 4242)")
    );
}

#[test]
fn a_missing_command_fails_with_127() {
    let st = ctl()
        .env("PRESCIENT_RUNTIME", "/nonexistent/runtime.so")
        .args(["run", "--", "/nonexistent/command"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(127));
}
