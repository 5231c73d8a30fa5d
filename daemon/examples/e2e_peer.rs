//! The e2e guest's socket peer (tests/e2e/guest-init.sh): the clients a
//! hostile or careless local user runs against prescientd's sockets.
//!
//! * `pid-reuse SOCK`: a connection made by a process that exits, kept open
//!   until its pid number belongs to another (live) process; then a dead
//!   mark on it. Prints the reply and both pids.
//! * `flood SOCK N`: N connections at once, a line far over the limit, an
//!   idle connection, and a pipelined mark flood; prints what each got.
//! * `revoke`: a marks socket of the daemon library (the server
//!   `prescientd attach --marks-socket` runs) for this process, whose
//!   connection holder dies holding dead marks; the receiving side applies
//!   marks as the backend loop does (in order, a revocation first) and
//!   prints which blocks are dead afterwards and what a discard would hit.
//! * `module-marks SOCK`: this process (root) opens the stand-in's
//!   /dev/nvidia-uvm, has prescientd (prescient.ko's backend) attach it,
//!   and sends its own dead and alive marks on the control socket while
//!   it runs the stand-in's kernels; prints what the module counted.
//! * `reload-marks SOCK DIR`: as `module-marks`, across an rmmod and an
//!   insmod of prescient.ko that the guest makes (it creates DIR/unloaded
//!   and DIR/reloaded once each is done): a mark while the module is gone
//!   is answered "unavailable" (the runtime pauses its dead marks on it,
//!   runtime/src/marks/pause.rs), and once the module is back the same
//!   process's dead marks are taken again without it doing anything else
//!   (prescientd re-attaches it) and the module discards its dead blocks.
//! * `notify-listen PATH SECS`: receives sd_notify datagrams, prints them.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| a.get(i).cloned().unwrap_or_default();
    let ok = match arg(1).as_str() {
        "pid-reuse" => pid_reuse(&arg(2)),
        "flood" => flood(&arg(2), arg(3).parse().unwrap_or(200)),
        "revoke" => revoke(),
        "module-marks" => module_marks(&arg(2)),
        "reload-marks" => reload_marks(&arg(2), &arg(3)),
        "notify-listen" => notify_listen(&arg(2), arg(3).parse().unwrap_or(30)),
        _ => {
            eprintln!(
                "usage: e2e-peer pid-reuse SOCK | flood SOCK N | revoke | module-marks SOCK | reload-marks SOCK DIR | notify-listen PATH SECS"
            );
            false
        }
    };
    std::process::exit(if ok { 0 } else { 1 });
}

/// One request line on `s`, one reply line back (with a timeout).
fn call(s: &mut UnixStream, line: &str) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A refused connection has its one reply waiting even if the daemon
    // closed it before our write: read it anyway.
    let _ = s.write_all(format!("{line}\n").as_bytes());
    let mut r = String::new();
    match BufReader::new(s.try_clone().unwrap()).read_line(&mut r) {
        Ok(0) => "(closed)".into(),
        Ok(_) => r.trim().to_string(),
        Err(e) => format!("(read: {e})"),
    }
}

/// fork(2); the child runs `f` and exits with its status.
fn fork(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: this helper is single-threaded when it forks.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn wait(pid: i32) -> i32 {
    let mut st = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    st
}

/// A socket connected to `path` by a child that has exited since.
fn orphan_connection(path: &str) -> Option<(UnixStream, i32)> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(c.as_bytes()) {
        *d = *s as libc::c_char;
    }
    let child = fork(|| {
        // SAFETY: connect(2) on memory prepared before the fork.
        let r = unsafe {
            libc::connect(
                fd,
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        i32::from(r != 0)
    });
    if wait(child) != 0 {
        return None;
    }
    // SAFETY: our fd, connected by the child (the socket is shared).
    Some((UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) }), child))
}

/// Forks short-lived children until one gets `pid`; that one stays (it
/// sleeps until killed). Returns it. pid_max is lowered so that the
/// numbers wrap quickly.
fn take_pid(pid: i32) -> Option<i32> {
    for _ in 0..5000 {
        let c = fork(|| {
            // SAFETY: getpid has no arguments.
            if unsafe { libc::getpid() } == pid {
                std::thread::sleep(Duration::from_secs(600));
            }
            0
        });
        if c == pid {
            return Some(c);
        }
        wait(c);
    }
    None
}

fn pid_reuse(sock: &str) -> bool {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap_or_default();
    // Numbers wrap to 300 above 400: a reuse takes at most ~100 forks.
    let _ = std::fs::write("/proc/sys/kernel/pid_max", "400");
    for _ in 0..400 {
        let c = fork(|| 0);
        wait(c);
        if (310..390).contains(&c) {
            break;
        }
    }
    let Some((mut held, old)) = orphan_connection(sock) else {
        println!("PEER: cannot connect to {sock}");
        return false;
    };
    let new = take_pid(old);
    let _ = std::fs::write("/proc/sys/kernel/pid_max", max.trim());
    let Some(new) = new else {
        println!("PEER: pid {old} was not reused");
        return false;
    };
    let held_reply = call(
        &mut held,
        r#"{"cmd":"mark","dead":true,"ranges":[[2097152,8388608]]}"#,
    );
    println!("PEER: reused pid={old} by_live_process={new}");
    println!("PEER: held={held_reply}");
    // SAFETY: ends our own child.
    unsafe { libc::kill(new, libc::SIGKILL) };
    wait(new);
    true
}

fn flood(sock: &str, n: usize) -> bool {
    let t = Instant::now();
    let (mut ok, mut busy, mut other) = (0, 0, 0);
    let mut held = Vec::new();
    for _ in 0..n {
        let Ok(mut s) = UnixStream::connect(sock) else {
            other += 1;
            continue;
        };
        let r = call(&mut s, r#"{"cmd":"version"}"#);
        if r.contains("\"busy\"") {
            busy += 1;
        } else if r.starts_with("{\"ok\"") {
            ok += 1;
            held.push(s);
        } else {
            other += 1;
        }
    }
    println!("PEER: connections accepted={ok} busy={busy} other={other}");
    std::io::stdout().flush().ok();
    // A line far over the limit: refused, the connection closed.
    let long = if let Some(s) = held.last_mut() {
        let mut big = vec![b'x'; 1 << 20];
        big.push(b'\n');
        let _ = s.write_all(&big[..8192]);
        let mut r = String::new();
        let _ = BufReader::new(s.try_clone().unwrap()).read_line(&mut r);
        r.trim().to_string()
    } else {
        String::new()
    };
    println!(
        "PEER: long-line={}",
        long.chars().take(120).collect::<String>()
    );
    // A mark flood, pipelined on one connection.
    let mut marks = 0;
    let tf = Instant::now();
    if let Some(s) = held.first_mut() {
        let line = "{\"cmd\":\"mark\",\"dead\":true,\"ranges\":[[2097152,2097152]]}\n".repeat(2000);
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || w.write_all(line.as_bytes()).is_ok());
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut l = String::new();
        while marks < 2000 && r.read_line(&mut l).map(|k| k > 0).unwrap_or(false) {
            marks += 1;
            l.clear();
        }
        let _ = writer.join();
    }
    println!(
        "PEER: mark-flood replies={marks} in {:.2}s",
        tf.elapsed().as_secs_f64()
    );
    println!("PEER: holding {} connections", held.len());
    std::io::stdout().flush().ok();
    // Idle: the daemon closes a silent connection after its idle timeout
    // (a fresh one: the held ones went idle during the flood).
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let mut idle_closed = String::from("no");
    if let Ok(mut s) = UnixStream::connect(sock) {
        let r = call(&mut s, r#"{"cmd":"version"}"#);
        if !r.starts_with("{\"ok\"") {
            println!("PEER: idle connection not accepted: {r}");
        }
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let ti = Instant::now();
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Ok(0)) {
            idle_closed = format!("{:.1}s", ti.elapsed().as_secs_f64());
        }
    }
    println!("PEER: idle-closed-after={idle_closed}");
    println!("PEER: total {:.2}s", t.elapsed().as_secs_f64());
    true
}

/// What the backend loop does with marks, in its order: a revocation
/// (alive) before anything queued; dead blocks are the discard candidates.
fn apply(dead: &mut BTreeSet<u64>, m: &prescientd::userspace::marks::Mark) {
    for b in m.blocks.iter().flat_map(|r| r.clone()) {
        if m.dead {
            dead.insert(b);
        } else {
            dead.remove(&b);
        }
    }
}

fn revoke() -> bool {
    use prescientd::pidfd::Pidfd;
    use prescientd::userspace::marks;
    use std::sync::Arc;
    let dir = format!("/tmp/e2e-revoke-{}", std::process::id());
    let _ = std::fs::create_dir_all(&dir);
    let path = format!("{dir}/marks.sock");
    let me = std::process::id() as i32;
    let (tx, rx) = marks::channel();
    // The client connects before the server's threads exist: it forks below.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = {
        let _g = rt.enter();
        tokio::net::UnixListener::bind(&path).unwrap()
    };
    let mut client = UnixStream::connect(&path).unwrap();
    // Our client (this process) marks 8 blocks dead, in two requests...
    let mut dead = BTreeSet::new();
    let target = Arc::new(Pidfd::open(me).unwrap());
    let server = std::thread::spawn(move || rt.block_on(marks::serve(listener, target, tx)));
    let r1 = call(
        &mut client,
        r#"{"cmd":"mark","dead":true,"ranges":[[2097152,8388608]]}"#,
    );
    let r2 = call(
        &mut client,
        r#"{"cmd":"mark","dead":true,"ranges":[[33554432,8388608]]}"#,
    );
    for _ in 0..2 {
        if let Some(m) = rx.wait(Duration::from_secs(5)) {
            apply(&mut dead, &m);
        }
    }
    let before = dead.len();
    // ...and the connection's holder dies (SIGKILL), holding them: a child
    // that inherited the connection, ours closed.
    let holder = {
        let fd = client.try_clone().unwrap();
        let c = fork(move || {
            let _keep = fd;
            std::thread::sleep(Duration::from_secs(600));
            0
        });
        drop(client);
        c
    };
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: ends our own child.
    unsafe { libc::kill(holder, libc::SIGKILL) };
    wait(holder);
    let killed = Instant::now();
    let first = rx.wait(Duration::from_secs(5));
    let first_kind = match &first {
        Some(m) if !m.dead && m.owner.is_none() => "revocation",
        Some(m) if m.dead => "dead",
        Some(_) => "alive",
        None => "none",
    };
    if let Some(m) = &first {
        apply(&mut dead, m);
    }
    // A discard would hit the blocks still dead when the loop next turns.
    println!(
        "PEER: replies={} {}; dead-before={before} first-after-death={first_kind} after {:.0} ms; dead-now={} discard-candidates={:?}",
        r1.contains("marked"),
        r2.contains("marked"),
        killed.elapsed().as_secs_f64() * 1e3,
        dead.len(),
        dead
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    before == 8 && first_kind == "revocation" && dead.is_empty()
}

/// The stand-in's description of a space (vm-tests/guest's `Info`).
#[repr(C)]
#[derive(Default)]
struct StandinInfo {
    base: u64,
    blocks: u32,
    gpu_blocks: u32,
    kernels: u32,
    accesses: u32,
    gpu_uuid: [u8; 16],
}

/// Runs kernels `ks` of the stand-in's trace in the space of `fd`, asking
/// prescientd's version on `keep` every second: the control socket closes
/// a connection quiet for `idle_timeout_ms` (3 s in this guest) unless it
/// holds dead marks, and this one holds none before its first.
fn run_kernels(fd: i32, ks: std::ops::Range<u32>, keep: &mut UnixStream) {
    const STANDIN_IOCTL_KERNEL: libc::c_ulong = 0x7e00_0004;
    let mut asked = Instant::now();
    for k in ks {
        // SAFETY: a test ioctl of the stand-in whose argument is a number.
        unsafe { libc::ioctl(fd, STANDIN_IOCTL_KERNEL as _, k as libc::c_ulong) };
        if asked.elapsed() > Duration::from_secs(1) {
            call(keep, r#"{"cmd":"version"}"#);
            asked = Instant::now();
        }
    }
    std::thread::sleep(Duration::from_millis(500));
}

/// (discards, populated blocks) prescientd reports for `pid`.
fn module_counts(s: &mut UnixStream, pid: i32) -> (u64, u64) {
    let r: serde_json::Value =
        serde_json::from_str(&call(s, r#"{"cmd":"stats"}"#)).unwrap_or_default();
    let procs = r["ok"]["processes"].as_array().cloned().unwrap_or_default();
    let me = procs.iter().find(|p| p["pid"] == pid);
    let n = |k: &str| me.and_then(|p| p[k].as_u64()).unwrap_or(0);
    (n("discards"), n("populated_blocks"))
}

/// `module-marks SOCK` (module comment): the whole range dead, a quarter
/// of the kernels (the module discards dead victims), the range alive with
/// `no_populate` (nothing populated), then alive (it populates what it
/// discarded and still has recorded: reported, not required); then dead again on a second
/// connection that closes: prescientd marks it alive, so a full replay
/// after that discards nothing; then dead on a third connection that stays
/// quiet for 7 s (past the guest's 3 s idle timeout) and is still there to
/// mark it alive (a connection holding dead marks is not closed as idle).
/// The stand-in's /dev/nvidia-uvm, opened by this process (its space),
/// and what the stand-in says of it.
fn open_standin() -> (std::fs::File, StandinInfo) {
    const STANDIN_IOCTL_INFO: libc::c_ulong = 0x7e00_0002;
    let uvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/nvidia-uvm")
        .unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&uvm);
    let mut inf = StandinInfo::default();
    // SAFETY: the stand-in writes an Info of this layout.
    unsafe { libc::ioctl(fd, STANDIN_IOCTL_INFO as _, &mut inf as *mut StandinInfo) };
    (uvm, inf)
}

/// A mark of the stand-in's whole range on `s` (`extra`: more fields).
fn mark_all(s: &mut UnixStream, inf: &StandinInfo, dead: bool, extra: &str) -> String {
    let range = format!("[[{},{}]]", inf.base, u64::from(inf.blocks) << 21);
    call(
        s,
        &format!(r#"{{"cmd":"mark","dead":{dead},"ranges":{range}{extra}}}"#),
    )
}

fn module_marks(sock: &str) -> bool {
    let me = std::process::id() as i32;
    let (uvm, inf) = open_standin();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&uvm);
    let mut c = UnixStream::connect(sock).unwrap();
    let attached = call(&mut c, &format!(r#"{{"cmd":"attach","pid":{me}}}"#));
    let mark_as = |s: &mut UnixStream, dead: bool, extra: &str| mark_all(s, &inf, dead, extra);
    let mark = |s: &mut UnixStream, dead: bool| mark_as(s, dead, "");
    run_kernels(fd, 0..inf.kernels, &mut c);
    let dead = mark(&mut c, true);
    run_kernels(fd, 0..inf.kernels / 4, &mut c);
    let (d1, p1) = module_counts(&mut c, me);
    // Alive with no_populate (memory going back to the driver):
    // MARK_NO_POPULATE, nothing brought back (checked). The module keeps
    // its record, so the plain alive mark after it may populate (reported).
    let alive_np = mark_as(&mut c, false, r#","no_populate":true"#);
    let (_, p_np) = module_counts(&mut c, me);
    let alive = mark(&mut c, false);
    let (_, p2) = module_counts(&mut c, me);
    let mut c2 = UnixStream::connect(sock).unwrap();
    let dead2 = mark(&mut c2, true);
    drop(c2);
    std::thread::sleep(Duration::from_millis(500));
    let (d3, _) = module_counts(&mut c, me);
    run_kernels(fd, 0..inf.kernels, &mut c);
    let (d4, _) = module_counts(&mut c, me);
    // A connection holding dead marks may stay quiet past the guest's
    // idle timeout (3 s): a job that frees nothing for a while keeps them.
    let mut c3 = UnixStream::connect(sock).unwrap();
    let dead3 = mark(&mut c3, true);
    std::thread::sleep(Duration::from_secs(7));
    let alive3 = mark(&mut c3, false);
    // (The first connection, quiet meanwhile and holding none, was closed.)
    let detached = call(&mut c3, &format!(r#"{{"cmd":"detach","pid":{me}}}"#));
    let ok_all = [
        &attached, &dead, &alive_np, &alive, &dead2, &dead3, &alive3, &detached,
    ]
    .iter()
    .all(|r| r.starts_with(r#"{"ok""#));
    println!(
        "PEER: attach/dead/alive-no-populate/alive/dead-on-a-closed-connection/dead-held-quiet-7s-then-alive/detach ok {ok_all}; {d1} blocks discarded after the dead mark, {} populated by the no_populate alive mark, {} by the alive mark after it; after the second connection closed holding its dead mark, a full replay discarded {}",
        p_np - p1,
        p2 - p_np,
        d4 - d3
    );
    if !ok_all {
        println!(
            "PEER: replies {attached} {dead} {alive_np} {alive} {dead2} {dead3} {alive3} {detached}"
        );
    }
    ok_all && d1 > 0 && p_np == p1 && d4 == d3
}

/// Waits (60 s at most) until `path` exists.
fn wait_for(path: &std::path::Path) -> bool {
    let t = Instant::now();
    while !path.exists() {
        if t.elapsed() > Duration::from_secs(60) {
            println!("PEER: no {} after 60 s", path.display());
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// Sends `mark` on a new connection every 200 ms until it is taken (15 s
/// at most): the connection, the last reply and how long it took.
fn until_taken(
    sock: &str,
    mark: &dyn Fn(&mut UnixStream) -> String,
) -> (UnixStream, String, Duration) {
    let t = Instant::now();
    loop {
        let mut c = UnixStream::connect(sock).unwrap();
        let r = mark(&mut c);
        if r.starts_with(r#"{"ok""#) || t.elapsed() > Duration::from_secs(15) {
            return (c, r, t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `reload-marks SOCK DIR` (module comment).
fn reload_marks(sock: &str, dir: &str) -> bool {
    let me = std::process::id() as i32;
    let (uvm, inf) = open_standin();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&uvm);
    let mark = |s: &mut UnixStream, dead: bool| mark_all(s, &inf, dead, "");
    let mut c = UnixStream::connect(sock).unwrap();
    let attached = call(&mut c, &format!(r#"{{"cmd":"attach","pid":{me}}}"#));
    let before = [mark(&mut c, true), mark(&mut c, false)];
    println!("PEER: ready");
    std::io::stdout().flush().ok();
    let dir = std::path::Path::new(dir);
    if !wait_for(&dir.join("unloaded")) {
        return false;
    }
    // The first connection may have been closed as idle meanwhile.
    let mut c = UnixStream::connect(sock).unwrap();
    let gone = mark(&mut c, true);
    println!("PEER: unavailable-seen");
    std::io::stdout().flush().ok();
    if !wait_for(&dir.join("reloaded")) {
        return false;
    }
    let (mut c, back, taken_after) = until_taken(sock, &|c| mark(c, true));
    // As module-marks: a pass for the re-attached space's engine to learn
    // (alive meanwhile), then dead again and a quarter of the kernels, in
    // which it discards dead victims.
    let learn = mark(&mut c, false);
    run_kernels(fd, 0..inf.kernels, &mut c);
    let dead_again = mark(&mut c, true);
    run_kernels(fd, 0..inf.kernels / 4, &mut c);
    let (discards, _) = module_counts(&mut c, me);
    let alive = mark(&mut c, false);
    let detached = call(&mut c, &format!(r#"{{"cmd":"detach","pid":{me}}}"#));
    let ok = |r: &String| r.starts_with(r#"{"ok""#);
    let all_ok = [
        &attached,
        &before[0],
        &before[1],
        &back,
        &learn,
        &dead_again,
        &alive,
        &detached,
    ]
    .into_iter()
    .all(ok);
    let unavailable = gone.contains(r#""kind":"unavailable""#);
    println!(
        "PEER: marks taken before the rmmod {all_ok}; while unloaded: {}; taken again {:.1} s after the insmod; {discards} blocks discarded after",
        gone.chars().take(140).collect::<String>(),
        taken_after.as_secs_f64()
    );
    if !all_ok {
        println!(
            "PEER: replies {attached} {} {} {back} {learn} {dead_again} {alive} {detached}",
            before[0], before[1]
        );
    }
    all_ok && unavailable && discards > 0
}

fn notify_listen(path: &str, secs: u64) -> bool {
    let _ = std::fs::remove_file(path);
    let Ok(s) = UnixDatagram::bind(path) else {
        println!("NOTIFY: cannot bind {path}");
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.recv(&mut buf) {
            Ok(n) => {
                println!("NOTIFY: {}", String::from_utf8_lossy(&buf[..n]).trim());
                std::io::stdout().flush().ok();
            }
            Err(_) => return true,
        }
    }
}
