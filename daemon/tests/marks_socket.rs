//! The marks socket of `prescientd attach --pid PID --marks-socket PATH`, end to
//! end over a real Unix socket: this test process is the "target", a thread
//! stands in for its backend loop.

#[path = "support/marks_server.rs"]
mod support;

use prescientd::userspace::marks;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

fn call(s: &mut UnixStream, line: &str) -> serde_json::Value {
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut r = String::new();
    BufReader::new(s.try_clone().unwrap())
        .read_line(&mut r)
        .unwrap();
    serde_json::from_str(&r).unwrap()
}

#[test]
#[allow(clippy::single_range_in_vec_init)] // one block per mark
fn marks_reach_the_backend_and_alive_is_answered_once_gated() {
    let (rt, path, rx) = server("marks");
    let dir = path.parent().unwrap().to_path_buf();
    // The alive mark's reply does not wait for the backend: its blocks are
    // held in the gate until the backend applies it.
    let gate = rx.gate().clone();
    let backend = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Some(m) = rx.wait(Duration::from_secs(10)) {
            seen.push((m.dead, m.blocks.clone()));
            if let Some(id) = m.gate {
                rx.gate().close(id);
            }
        }
        seen
    });
    let mut s = UnixStream::connect(&path).unwrap();
    // 4 MB at a 2 MB boundary + 1 MB: one whole block is dead.
    let r = call(
        &mut s,
        r#"{"cmd":"mark","dead":true,"ranges":[[3145728,4194304]]}"#,
    );
    assert_eq!(r["ok"]["reply"], "marked", "{r}");
    let r = call(
        &mut s,
        r#"{"cmd":"mark","dead":false,"ranges":[[4194304,2097152]]}"#,
    );
    assert_eq!(r["ok"]["blocks"], 1, "{r}");
    let r = call(&mut s, r#"{"cmd":"status"}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    let r = call(&mut s, r#"{"cmd":"mark","dead":true,"ranges":[[1,2]]}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    let r = call(&mut s, "not json");
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    drop(s);
    drop(rt); // ends the server, and with it the last sender
    let seen = backend.join().unwrap();
    assert_eq!(seen, vec![(true, vec![2..3]), (false, vec![2..3])]);
    assert_eq!(gate.pending(), 0, "applied, so no longer held");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A marks server for this process on a fresh socket, one worker.
fn server(name: &str) -> (tokio::runtime::Runtime, std::path::PathBuf, marks::Receiver) {
    support::server(name, 1)
}

#[test]
#[allow(clippy::single_range_in_vec_init)]
fn a_client_that_goes_away_leaves_no_block_dead() {
    // Review finding 4: nothing undid a closed connection's dead marks.
    let (_rt, path, rx) = server("revoke");
    let mut s = UnixStream::connect(&path).unwrap();
    let r = call(
        &mut s,
        r#"{"cmd":"mark","dead":true,"ranges":[[2097152,8388608]]}"#,
    );
    assert_eq!(r["ok"]["reply"], "marked", "{r}");
    let m = rx.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((m.dead, m.blocks.clone()), (true, vec![1..5]));
    drop(s);
    // The revocation: an alive mark of the same blocks, nobody waiting,
    // its blocks held out of discards until it is applied.
    let m = rx.wait(Duration::from_secs(5)).expect("revocation");
    assert_eq!((m.dead, m.blocks.clone()), (false, vec![1..5]));
    assert!(rx.gate().guard().holds(3));
    rx.gate().close(m.gate.expect("a revocation is gated"));
    assert!(!rx.gate().guard().holds(3));
}

#[test]
fn a_connection_kept_after_its_process_exits_marks_nothing() {
    // Review finding 3: the connection of a process that has exited kept
    // the pid number it had at connect() as its identity.
    let (_rt, path, rx) = server("reuse");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(c.as_bytes()) {
        *d = *s as libc::c_char;
    }
    // SAFETY: the child only calls connect(2) and _exit(2), which are
    // async-signal-safe, on memory prepared before the fork.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: connect(2) and _exit(2) on memory prepared before the fork.
        unsafe {
            let r = libc::connect(
                fd,
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            );
            libc::_exit(if r == 0 { 0 } else { 1 });
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(status, 0, "the child's connect failed");
    // SAFETY: our fd, now connected by the child (one socket, shared).
    let mut s = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let r = call(
        &mut s,
        r#"{"cmd":"mark","dead":true,"ranges":[[2097152,8388608]]}"#,
    );
    assert_eq!(r["error"]["kind"], "permission", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("has exited"), "{msg}");
    assert!(rx.wait(Duration::from_millis(200)).is_none());
}

#[test]
fn floods_are_bounded() {
    // Review finding 9: no connection cap, and a line could be held open
    // forever. The default caps: 16 connections per uid.
    let (_rt, path, _rx) = server("flood");
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut s = UnixStream::connect(&path).unwrap();
        let r = call(&mut s, r#"{"cmd":"status"}"#);
        assert_eq!(r["error"]["kind"], "invalid", "{r}");
        held.push(s);
    }
    let mut s = UnixStream::connect(&path).unwrap();
    let mut line = String::new();
    BufReader::new(&mut s).read_line(&mut line).unwrap();
    assert!(
        line.contains("busy") && line.contains("too many connections"),
        "{line}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(100));
    let mut s = UnixStream::connect(&path).unwrap();
    let r = call(&mut s, r#"{"cmd":"status"}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    // A line over the limit is refused and the connection closed.
    // The server may answer and close before the whole line is written,
    // so the write may fail (EPIPE); the answer is read all the same.
    let long = format!("{{\"cmd\":\"mark\",\"pad\":\"{}\"}}\n", "x".repeat(8192));
    let _ = s.write_all(long.as_bytes());
    let mut line = String::new();
    BufReader::new(&mut s).read_line(&mut line).unwrap();
    let r: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
}
