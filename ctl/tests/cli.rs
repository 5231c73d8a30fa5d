//! prescientctl against a scripted daemon on a temporary socket: the
//! requests it sends, its tables and JSON, and its exit statuses.

use prescient_uapi::control::{
    Counters, EngineParams, ErrorReply, Mode, ModuleInfo, ProcessStats, Reply, Request, Response,
    Stats, Status, UserspaceInfo, VersionInfo,
};
use prescient_units::DURATION_FORMS;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_prescientctl");

fn params(assoc: u32) -> EngineParams {
    EngineParams {
        rows: 512,
        assoc,
        succs: 4,
        lookahead: 4,
        inflight_limit: 16,
        pre_evict_watermark_pct: 90,
        residency_budget_bytes: 0,
        enabled: true,
        mode: Mode::Transparent,
    }
}

/// Serves one connection with `reply`, returns the request it got.
fn with_daemon(name: &str, reply: Response, args: &[&str]) -> (Output, Option<Request>) {
    let dir = std::env::temp_dir().join(format!("prescientctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock: PathBuf = dir.join("control.sock");
    let l = UnixListener::bind(&sock).unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().ok()?;
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .ok()?;
        let req: Request = serde_json::from_str(&line).ok()?;
        let mut w = s;
        let mut out = serde_json::to_string(&reply).unwrap();
        out.push('\n');
        w.write_all(out.as_bytes()).ok()?;
        Some(req)
    });
    let o = Command::new(BIN)
        .arg("--socket")
        .arg(&sock)
        .args(args)
        .output()
        .unwrap();
    let req = t.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (o, req)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn set_sends_only_the_changes_and_shows_old_and_new() {
    let (o, req) = with_daemon(
        "set",
        Response::Ok(Reply::ParamsChanged {
            old: params(2),
            new: params(4),
        }),
        &["set", "--assoc", "4", "--budget", "4G"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let Some(Request::SetParams { changes }) = req else {
        panic!("{req:?}")
    };
    assert_eq!(changes.assoc, Some(4));
    assert_eq!(changes.residency_budget_bytes, Some(4 << 30));
    assert_eq!(changes.rows, None);
    let out = stdout(&o);
    let assoc = out.lines().find(|l| l.starts_with("assoc")).unwrap();
    assert!(
        assoc.contains('2') && assoc.contains('4') && assoc.ends_with('*'),
        "{out}"
    );
    let rows = out.lines().find(|l| l.starts_with("rows")).unwrap();
    assert!(!rows.ends_with('*'), "{out}");
}

#[test]
fn stats_json_is_the_daemons_numbers() {
    let s = Stats {
        at_s: 3.5,
        backend_up: true,
        totals: Counters {
            faults: 777,
            prefetched_blocks: 55,
            ..Default::default()
        },
        processes: vec![ProcessStats {
            pid: 9,
            faults: 700,
            ..Default::default()
        }],
        backend: "module".into(),
        unavailable: None,
        gpus: Vec::new(),
    };
    let (o, req) = with_daemon(
        "stats",
        Response::Ok(Reply::Stats(s.clone())),
        &["stats", "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(req, Some(Request::Stats));
    let back: Stats = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(back, s);
    // The table names the counters and the process.
    let (o, _) = with_daemon("stats-t", Response::Ok(Reply::Stats(s)), &["stats"]);
    let out = stdout(&o);
    assert!(
        out.contains("faults") && out.contains("777") && out.contains("700"),
        "{out}"
    );
}

/// A status reply as prescientd (service/requests.rs) words it for each
/// backend and state.
fn status(backend: &str, module: Option<ModuleInfo>, userspace: Option<UserspaceInfo>) -> Status {
    Status {
        daemon_version: "0.1.0".into(),
        backend: backend.into(),
        backend_up: module.is_some() || userspace.is_some(),
        module,
        userspace,
        params: params(2),
        module_params: None,
        config_path: "/etc/prescient/prescientd.toml".into(),
        uptime_s: 5.0,
        attached: Vec::new(),
        gpu: None,
        settings: Vec::new(),
        gpu_budget: String::new(),
        gpus: Vec::new(),
    }
}

/// prescient.ko as a backend reports it: ABI 2, bound to a 550 driver.
fn module_info() -> ModuleInfo {
    ModuleInfo {
        abi_version: 2,
        driver_version: "550.163.01".into(),
        bound: true,
        enabled: true,
        max_processes: 8,
    }
}

/// The user-space backend as it reports itself: its driver, no module.
fn userspace_info() -> UserspaceInfo {
    UserspaceInfo {
        driver_version: "580.95.05".into(),
        enabled: true,
        max_processes: 8,
    }
}

/// Issue 18: the user-space backend was shown as "prescient.ko: ABI 2 ...".
/// Each backend, loaded or not: the line names the backend in force, and
/// prescient.ko appears as loaded only when it is the backend and loaded.
#[test]
fn status_names_the_backend_in_force_and_no_module_it_does_not_use() {
    let ko = module_info();
    let us = userspace_info();
    let cases = [
        (status("module", Some(ko), None), "prescient.ko: ABI 2, bound to nvidia-uvm 550.163.01", "user-space"),
        (status("module", None, None), "prescient.ko: not loaded", "user-space"),
        (
            status("userspace", None, Some(us)),
            "backend: user-space (prescientd attaches to each process itself; prescient.ko is not used), nvidia-uvm 580.95.05",
            "prescient.ko:",
        ),
        (status("userspace", None, None), "nvidia_uvm is not loaded", "prescient.ko:"),
    ];
    for (i, (st, want, never)) in cases.into_iter().enumerate() {
        let (o, _) = with_daemon(
            &format!("status-{i}"),
            Response::Ok(Reply::Status(st)),
            &["status"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(want), "case {i}: want {want:?} in\n{out}");
        assert!(!out.contains(never), "case {i}: {never:?} in\n{out}");
    }
}

/// Issue 18: `stats` exited 69 ("prescient.ko is not loaded (No such file
/// ...)") while `status` exited 0 in the same state. Now: the daemon's one
/// line (why, and what to do), exit 0, as `status`; JSON says it too.
#[test]
fn stats_without_a_loaded_backend_is_one_line_and_exits_as_status_does() {
    let why = "prescient.ko is not loaded (No such file or directory (os error 2)): no counters yet. Load it (`sudo modprobe prescient`), or run without it: backend = \"userspace\" in /etc/prescient/prescientd.toml";
    let s = Stats {
        at_s: 2.0,
        backend: "module".into(),
        unavailable: Some(why.into()),
        ..Default::default()
    };
    let (o, _) = with_daemon(
        "stats-down",
        Response::Ok(Reply::Stats(s.clone())),
        &["stats"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{why}\n"));
    let (o, _) = with_daemon(
        "stats-down-j",
        Response::Ok(Reply::Stats(s)),
        &["stats", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let back: Stats = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(!back.backend_up && back.unavailable.as_deref() == Some(why));
}

/// The user-space backend's counters: its own table, without the two
/// counters it cannot know (shown as 0 before).
#[test]
fn stats_of_the_userspace_backend_leave_out_what_it_cannot_know() {
    let s = Stats {
        at_s: 1.0,
        backend_up: true,
        backend: "userspace".into(),
        totals: Counters {
            faults: 321,
            ..Default::default()
        },
        ..Default::default()
    };
    let (o, _) = with_daemon("stats-us", Response::Ok(Reply::Stats(s)), &["stats"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("user-space backend (no prescient.ko)"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("faults") && l.contains("321")),
        "{out}"
    );
    assert!(
        !out.lines().any(|l| l.starts_with("prefetches used")),
        "{out}"
    );
}

#[test]
fn refusals_map_to_exit_statuses() {
    for (kind, code) in [
        ("permission", 77),
        ("invalid", 1),
        ("not-found", 1),
        ("unavailable", 69),
    ] {
        let (o, _) = with_daemon(
            kind,
            Response::Error(ErrorReply {
                kind: kind.into(),
                message: format!("the daemon says {kind}"),
            }),
            &["attach", "42"],
        );
        assert_eq!(o.status.code(), Some(code), "{kind}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("the daemon says {kind}")),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn no_daemon_exits_69_and_says_where_it_looked() {
    let o = Command::new(BIN)
        .args(["--socket", "/nonexistent/prescient.sock", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(69));
    assert!(
        stderr(&o).contains("/nonexistent/prescient.sock"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("is prescientd running"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usage_errors_exit_2() {
    let o = Command::new(BIN)
        .args(["set", "--assoc", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--assoc"), "{}", stderr(&o));
    let o = Command::new(BIN).args(["set"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(BIN).args(["frobnicate"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn completions_and_man_page() {
    let o = Command::new(BIN)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(stdout(&o).contains("prescientctl"));
    let o = Command::new(BIN).arg("man").output().unwrap();
    assert!(o.status.success());
    assert!(stdout(&o).starts_with(".ie") || stdout(&o).contains(".TH"));
}

#[test]
fn bad_durations_in_flags_exit_2_naming_the_flag() {
    let record = ["record", "1", "--out", "/tmp/never.trace"];
    for (before, flag, v) in [
        (&["stats"][..], "--watch", "soon"),
        (&["stats"][..], "--watch", "-1"),
        (&record[..], "--duration", "5x"),
        (&record[..], "--attach-wait", "2 fortnights"),
    ] {
        let o = Command::new(BIN)
            .args(before)
            .args([flag, v])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag} {v}: {o:?}");
        let err = stderr(&o);
        assert!(err.contains(flag) && err.contains(DURATION_FORMS), "{err}");
    }
    // Out of range in the same grammar: refused by name too.
    let o = Command::new(BIN)
        .args(["stats", "--watch", "50ms"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("--watch") && stderr(&o).contains("out of range"));
}

fn record(args: &[&str]) -> Output {
    Command::new(BIN).arg("record").args(args).output().unwrap()
}

#[test]
fn record_refuses_a_process_without_cuda_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let me = std::process::id().to_string();
    // --attach-wait 1: the refusal must come after the wait, not take 30 s of CI.
    let o = record(&[&me, "--out", out.to_str().unwrap(), "--attach-wait", "1"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a CUDA process"), "{err}");
    assert!(!out.exists());
}

#[test]
fn record_names_a_missing_process() {
    let o = record(&["2147483647", "--out", "/nonexistent/t.trace"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no such process"), "{err}");
}

#[test]
fn record_without_the_right_to_look_exits_77() {
    // As an unprivileged user, pid 1's fds are out of reach. When the tests
    // run as root, drop to nobody with setpriv (util-linux).
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let o = if root {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(["record", "1", "--out", "/tmp/never.trace"])
            .output()
            .expect("setpriv (util-linux) is needed to run this test as root")
    } else {
        record(&["1", "--out", "/tmp/never.trace"])
    };
    assert_eq!(o.status.code(), Some(77), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("permission denied") && err.contains("root"),
        "{err}"
    );
}

#[test]
fn version_exits_69_without_the_daemon_json_or_not_saying_it_once() {
    for json in [false, true] {
        let mut args = vec!["--socket", "/nonexistent/prescient.sock", "version"];
        if json {
            args.push("--json");
        }
        let o = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(69), "json {json}");
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        if json {
            let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert!(v["prescientd"].is_null());
        } else {
            assert!(stdout(&o).starts_with("prescientctl "), "{}", stdout(&o));
        }
    }
}

/// `version` under each backend: prescient.ko's ABI only where the module
/// is the backend (the user-space backend's reply names no module).
#[test]
fn version_names_the_module_only_where_it_is_the_backend() {
    let v = |backend: &str, module: Option<ModuleInfo>, userspace: Option<UserspaceInfo>| {
        Response::Ok(Reply::Version(VersionInfo {
            daemon: "0.1.0".into(),
            protocol: 1,
            module,
            backend: backend.into(),
            userspace,
        }))
    };
    let us = userspace_info();
    let ko = module_info();
    for (i, (reply, want, never)) in [
        (
            v("userspace", None, Some(us)),
            "backend      user-space (no prescient.ko), nvidia-uvm 580.95.05",
            "ABI",
        ),
        (v("userspace", None, None), "nvidia_uvm not loaded", "ABI"),
        (
            v("module", Some(ko), None),
            "prescient.ko ABI 2, bound to nvidia-uvm 550.163.01",
            "user-space",
        ),
        (
            v("module", None, None),
            "prescient.ko not loaded",
            "user-space",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (o, _) = with_daemon(&format!("version-{i}"), reply, &["version"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(
            out.contains(want) && !out.contains(never),
            "case {i}:\n{out}"
        );
    }
}

#[test]
fn set_json_alone_is_a_usage_error() {
    let o = Command::new(BIN)
        .args(["--socket", "/nonexistent/prescient.sock", "set", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn man_out_dir_writes_a_page_for_every_subcommand() {
    let d = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(["man", "--out-dir"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let main = std::fs::read_to_string(d.path().join("prescientctl.1"))
        .unwrap()
        .replace("\\-", "-");
    // Every page the main page refers to exists.
    for sub in [
        "status", "stats", "set", "reset", "attach", "detach", "version", "record",
    ] {
        let page = format!("prescientctl-{sub}");
        assert!(main.contains(&page), "{page} not in SEE ALSO");
        assert!(d.path().join(format!("{page}.1")).exists(), "{page}.1");
    }
}
