//! The runtime's marks end to end, without a GPU: a C program plays
//! PyTorch's allocator tracker (tests/fake/allocator.c) against the runtime
//! preloaded over the stand-in libcuda (tests/fake/libcuda.c, from cuda.h),
//! and this test serves the marks socket as prescientd does (one JSON reply
//! line per request, daemon/src/userspace/marks.rs). A freed range must be
//! marked dead once its fence has passed, and marked alive (reply awaited)
//! when it is handed out again; in auto mode, only while a reader asks for
//! ids (a free before that is never marked), also while the job makes no
//! further allocator call (the runtime's flusher thread, which has no
//! current context of its own: the stand-in's event calls need one, as the
//! driver's do). The stand-in's cuCtxGetDevice has CUDA
//! 13.0's two-parameter ABI at 13.0: asking for it there (the bug of
//! BENCHMARKS-gpu.md run 42) loses the dead mark. Needs a C compiler.

mod common;
use common::runtime_so;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;

fn cc(out: &Path, args: &[&str]) {
    let st = Command::new("cc").args(args).arg("-o").arg(out).status();
    assert!(
        st.expect("a C compiler (cc) is needed").success(),
        "cc {args:?}"
    );
}

/// Builds the stand-in libcuda and the allocator player, serves the marks
/// socket, runs the player with `args` and `envs`; returns its stdout and
/// the requests the socket got.
fn run_player(tag: &str, args: &[&str], envs: &[(&str, &str)]) -> (String, Vec<String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("marks-e2e-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libcuda.so.1");
    let exe = dir.join("allocator");
    cc(
        &lib,
        &[
            "-shared",
            "-fPIC",
            "-O1",
            src.join("libcuda.c").to_str().unwrap(),
        ],
    );
    cc(
        &exe,
        &["-O1", src.join("allocator.c").to_str().unwrap(), "-ldl"],
    );
    let sock = dir.join("marks.sock");
    let _ = std::fs::remove_file(&sock);
    let l = UnixListener::bind(&sock).unwrap();
    let daemon = std::thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        let mut w = c.try_clone().unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(c).lines() {
            let Ok(line) = line else { break };
            lines.push(line);
            let r = r#"{"ok":{"marked":{"blocks":2,"resident":0,"refetched":0,"ignored":false}}}"#;
            if writeln!(w, "{r}").is_err() {
                break;
            }
        }
        lines
    });
    let out = Command::new(&exe)
        .arg(&lib)
        .args(args)
        .env("LD_PRELOAD", runtime_so())
        .env("PRESCIENT_MARKS_SOCKET", &sock)
        .env_remove("PRESCIENT_MODE")
        .env_remove("PRESCIENT_MARKS_FLUSHER")
        .env_remove("PRESCIENT_MARKS_HOLD_MS")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    // A runtime that never connected leaves the accept waiting: this
    // connection ends it with no requests.
    let _ = std::os::unix::net::UnixStream::connect(&sock);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && stdout.contains("ok=1"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = daemon.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (stdout, lines)
}

/// With no hold (the player hands the range out again 5 ms after its free,
/// within the default hold).
#[test]
fn a_free_is_marked_dead_after_its_fence_and_alive_before_reuse() {
    let (stdout, lines) = run_player("reuse", &[], &[("PRESCIENT_MARKS_HOLD_MS", "0")]);
    assert!(stdout.contains("events=1"), "one fence recorded: {stdout}");
    let range = format!("[[{},{}]]", 8u64 << 30, 4u64 << 20);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains(r#""dead":true"#) && lines[0].contains(&range),
        "{lines:?}"
    );
    assert!(
        lines[1].contains(r#""dead":false"#) && lines[1].contains(&range),
        "{lines:?}"
    );
}

/// A training step's CPU thread queues the step and then waits: no
/// allocator call comes while the GPU passes the frees' fences. Their dead
/// marks must go out anyway (the flusher thread; before it, they waited
/// for the next step and the daemon copied the dead blocks to the host:
/// BENCHMARKS-gpu.md run 101).
#[test]
fn a_dead_mark_goes_out_while_the_job_makes_no_allocator_call() {
    let (_, lines) = run_player("quiet", &["quiet"], &[]);
    let range = format!("[[{},{}]]", 8u64 << 30, 4u64 << 20);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(r#""dead":true"#) && lines[0].contains(&range),
        "{lines:?}"
    );
}

/// PRESCIENT_MARKS_FLUSHER=0: no thread, so the quiet free's mark waits
/// for an allocator call that never comes (the player leaves with _exit).
#[test]
fn without_the_flusher_a_quiet_free_stays_unsent() {
    let (_, lines) = run_player("off", &["quiet"], &[("PRESCIENT_MARKS_FLUSHER", "0")]);
    assert!(lines.is_empty(), "{lines:?}");
}

/// A range handed out again within the hold costs no request at all: its
/// dead mark was never sent, so no alive mark is either (the hold is long
/// here so that a slow machine cannot let it pass).
#[test]
fn a_range_reused_within_the_hold_is_never_marked() {
    let (stdout, lines) = run_player("hold", &[], &[("PRESCIENT_MARKS_HOLD_MS", "5000")]);
    assert!(stdout.contains("events=1"), "the free was taken: {stdout}");
    assert!(lines.is_empty(), "{lines:?}");
}
