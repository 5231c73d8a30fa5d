//! Who may do what: every ioctl's permission check as uid 65534, and attach
//! and marks from inside a new pid namespace (numbers there are not the
//! initial namespace's; a reused number is not the process).
pub(crate) use crate::{detach, info, ioc, marker, prescient, set_gpu, stats, uvm};
use prescient_uapi as u;
use prescient_uapi::errno::*;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};

/// A pipe as two Files (read end, write end).
fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: fds is a 2-int array, as pipe(2) expects.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

/// Forks; the child runs `f` and exits with its status (0 = pass).
pub(crate) fn fork(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the guest binary is single-threaded here; the child only runs
    // `f` and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let rc = f();
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(rc) };
    }
    pid
}

/// Waits for `pid`; its exit status (-1 if it did not exit normally).
pub(crate) fn wait(pid: libc::pid_t) -> i32 {
    let mut st = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        -1
    }
}

/// Drops to uid/gid 65534 (no capabilities left).
pub(crate) fn become_nobody() {
    // SAFETY: plain credential syscalls on the calling process.
    unsafe {
        libc::setgroups(0, std::ptr::null());
        assert_eq!(libc::setgid(65534), 0, "setgid");
        assert_eq!(libc::setuid(65534), 0, "setuid");
    }
}

fn read_u64(r: &mut File) -> u64 {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)
        .map(|_| u64::from_le_bytes(b))
        .unwrap_or(0)
}

fn write_u64(w: &mut File, v: u64) {
    let _ = w.write_all(&v.to_le_bytes());
}

fn target(kind: u32, id: u32, handle: u64) -> [u8; u::Target::SIZE] {
    u::Target { kind, id, handle }.to_bytes()
}

fn range(handle: u64, addr: u64) -> [u8; u::RangeAbi::SIZE] {
    u::RangeAbi {
        handle,
        addr,
        len: 4 << 20,
        flags: 0,
    }
    .to_bytes()
}

/// Every call as uid 65534, in order: one line per mismatch, the count.
fn nobody_calls(p: &File, other: u64, own: u64, own_uuid: [u8; 16], uvm_fd: i32) -> i32 {
    let fd = p.as_raw_fd();
    let mut bad = 0;
    let mut check = |name: &str, got: Result<(), i32>, want: Result<(), i32>| {
        if got != want {
            println!("eperm: {name}: got {got:?} want {want:?}");
            bad += 1;
        }
    };
    let mut b = [0u8; u::Stats::SIZE];
    check(
        "GET_VERSION",
        ioc(fd, u::PRESCIENT_IOC_GET_VERSION as u64, b.as_mut_ptr()),
        Ok(()),
    );
    check(
        "GET_PARAMS",
        ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, b.as_mut_ptr()),
        Ok(()),
    );
    check(
        "GET_STATS",
        ioc(fd, u::PRESCIENT_IOC_GET_STATS as u64, b.as_mut_ptr()),
        Ok(()),
    );
    let mut params = [0u8; u::ParamsAbi::SIZE];
    let _ = ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, params.as_mut_ptr());
    check(
        "SET_PARAMS",
        ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, params.as_mut_ptr()),
        Err(EPERM),
    );
    check(
        "RESET_TABLES",
        ioc(
            fd,
            u::PRESCIENT_IOC_RESET_TABLES as u64,
            std::ptr::null_mut(),
        ),
        Err(EPERM),
    );
    let mut t = target(u::TARGET_FD, uvm_fd as u32, 0);
    check(
        "ATTACH fd",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t.as_mut_ptr()),
        Err(EPERM),
    );
    let mut t = target(u::TARGET_PID, 1, 0);
    check(
        "ATTACH pid",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t.as_mut_ptr()),
        Err(EPERM),
    );
    let mut t = target(u::TARGET_HANDLE, 0, other);
    check(
        "DETACH",
        ioc(fd, u::PRESCIENT_IOC_DETACH as u64, t.as_mut_ptr()),
        Err(EPERM),
    );
    let mut t = target(u::TARGET_HANDLE, 0, own);
    check(
        "DETACH own",
        ioc(fd, u::PRESCIENT_IOC_DETACH as u64, t.as_mut_ptr()),
        Err(EPERM),
    );
    for (h, want, who) in [(other, Err(EPERM), "other's"), (own, Ok(()), "own")] {
        let mut x = u::ExecIdAbi {
            handle: h,
            exec_id: 3,
            reserved0: 0,
        }
        .to_bytes();
        check(
            &format!("SET_EXEC_ID {who}"),
            ioc(fd, u::PRESCIENT_IOC_SET_EXEC_ID as u64, x.as_mut_ptr()),
            want,
        );
        let mut r = range(h, 0x7f00_0000_0000);
        check(
            &format!("MARK_DEAD {who}"),
            ioc(fd, u::PRESCIENT_IOC_MARK_DEAD as u64, r.as_mut_ptr()),
            want,
        );
        let mut r = range(h, 0x7f00_0000_0000);
        check(
            &format!("MARK_ALIVE {who}"),
            ioc(fd, u::PRESCIENT_IOC_MARK_ALIVE as u64, r.as_mut_ptr()),
            want,
        );
        check(&format!("SET_GPU {who}"), set_gpu(p, h, own_uuid), want);
    }
    bad
}

/// A uid-65534 child: every ioctl's permission check. The parent (root)
/// attaches one space of its own and, by pid, the child's, so the child
/// owns one space and not the other.
pub(crate) fn unprivileged_eperm() -> bool {
    let p = prescient();
    let mine = uvm();
    let other = crate::attach(&p, mine.as_raw_fd()).expect("ATTACH");
    let (mut to_child_r, mut to_child_w) = pipe();
    let (mut to_parent_r, mut to_parent_w) = pipe();
    let mine_fd = mine.as_raw_fd();
    let child = fork(|| {
        // The inherited copy of the parent's space would be found first by
        // ATTACH by pid (the first VA-space file in the table): close it.
        // SAFETY: closes this child's copy of an fd it owns.
        unsafe { libc::close(mine_fd) };
        let f = uvm();
        let uuid = info(&f).gpu_uuid;
        become_nobody();
        write_u64(&mut to_parent_w, 1);
        let own = read_u64(&mut to_child_r);
        let p = prescient();
        nobody_calls(&p, other, own, uuid, f.as_raw_fd()).min(100)
    });
    let ready = read_u64(&mut to_parent_r);
    let mut t = target(u::TARGET_PID, child as u32, 0);
    let attached = ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_ATTACH as u64,
        t.as_mut_ptr(),
    );
    let own = u::Target::from_bytes(&t).map(|x| x.handle).unwrap_or(0);
    write_u64(&mut to_child_w, own);
    let rc = wait(child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let left = stats(&p).head.n_spaces;
    detach(&p, other);
    marker(
        "unprivileged-eperm",
        ready == 1 && attached.is_ok() && rc == 0 && left == 1,
        &format!(
            "uid 65534: GET_* allowed; SET_PARAMS, RESET_TABLES, ATTACH (fd, pid), DETACH: EPERM; SET_EXEC_ID, MARK_DEAD, MARK_ALIVE, SET_GPU: EPERM on another's space, allowed on its own; ATTACH by pid {attached:?}; mismatches {rc}"
        ),
    )
}

/// Reads the caller's pid in the INITIAL namespace: /proc is the initial
/// namespace's mount, so /proc/self names the global number.
fn global_pid() -> u64 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

/// The space of `handle` in GET_STATS as the caller sees it: its pid.
fn pid_of(p: &File, handle: u64) -> u64 {
    let s = stats(p);
    s.spaces[..s.head.n_spaces as usize]
        .iter()
        .find(|e| e.handle == handle)
        .map(|e| e.pid)
        .unwrap_or(u64::MAX)
}

/// Inside a new pid namespace (run as its pid 1, root): fork G (pid 2 there)
/// holding the namespace's uvm fd, attach G by its namespace number, G
/// (dropped to uid 65534) marks its own space; then G exits, its number is
/// handed to a new process G2 (ns_last_pid), and G2's marks and a DETACH by
/// that number are refused. Writes G's global pid and the handle to `out`.
fn in_namespace(out: &mut File) -> i32 {
    let mut fails = 0;
    let mut expect = |name: &str, ok: bool| {
        if !ok {
            println!("pidns: {name} failed");
            fails += 1;
        }
    };
    let f = uvm();
    let p = prescient();
    let (mut g_r, mut g_w) = pipe();
    let (mut go_r, mut go_w) = pipe();
    let (go_r, go_w) = (&mut go_r, &mut go_w);
    let g = fork(|| {
        write_u64(&mut g_w, global_pid());
        become_nobody();
        let h = read_u64(go_r);
        let p = prescient();
        let mut r = range(h, 0x7f00_0000_0000);
        let dead = ioc(
            p.as_raw_fd(),
            u::PRESCIENT_IOC_MARK_DEAD as u64,
            r.as_mut_ptr(),
        );
        let mut x = u::ExecIdAbi {
            handle: h,
            exec_id: 1,
            reserved0: 0,
        }
        .to_bytes();
        let exec = ioc(
            p.as_raw_fd(),
            u::PRESCIENT_IOC_SET_EXEC_ID as u64,
            x.as_mut_ptr(),
        );
        i32::from(dead.is_err() || exec.is_err())
    });
    let g_global = read_u64(&mut g_r);
    expect("G is pid 2 here", g == 2);
    let mut t = target(u::TARGET_PID, g as u32, 0);
    let att = ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_ATTACH as u64,
        t.as_mut_ptr(),
    );
    expect("ATTACH by namespace pid", att.is_ok());
    let h = u::Target::from_bytes(&t).map(|x| x.handle).unwrap_or(0);
    expect("stats pid in this namespace", pid_of(&p, h) == g as u64);
    write_u64(go_w, h);
    expect("owner G marks its space as uid 65534", wait(g) == 0);
    // The number 2 again, for another process: not the owner.
    let _ = std::fs::write("/proc/sys/kernel/ns_last_pid", "1");
    let (mut ready_r, mut ready_w) = pipe();
    let (mut go_r, mut go_w) = pipe();
    let g2 = fork(|| {
        become_nobody();
        let p = prescient();
        let mut r = range(h, 0x7f00_0000_0000);
        let dead = ioc(
            p.as_raw_fd(),
            u::PRESCIENT_IOC_MARK_DEAD as u64,
            r.as_mut_ptr(),
        );
        write_u64(&mut ready_w, 1);
        let _ = read_u64(&mut go_r);
        i32::from(dead != Err(EPERM))
    });
    let _ = read_u64(&mut ready_r);
    expect("the reused number is a new process", g2 == g);
    let mut d = target(u::TARGET_PID, g2 as u32, 0);
    let det = ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_DETACH as u64,
        d.as_mut_ptr(),
    );
    expect("DETACH by the reused number: ENOENT", det == Err(ENOENT));
    write_u64(&mut go_w, 1);
    expect("the reused number may not mark", wait(g2) == 0);
    write_u64(out, g_global);
    write_u64(out, h);
    drop(f);
    fails
}

/// Runs [`in_namespace`] as pid 1 of a new pid namespace and checks, from
/// the initial namespace, that the space is G's (its global pid).
pub(crate) fn pidns() -> bool {
    let p = prescient();
    let (mut r, mut w) = pipe();
    // SAFETY: unshare(CLONE_NEWPID) affects only this process's future
    // children; the next fork is pid 1 of the new namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
        return marker("pidns", false, "unshare(CLONE_NEWPID) failed");
    }
    let init = fork(|| in_namespace(&mut w).min(100));
    let g_global = read_u64(&mut r);
    let h = read_u64(&mut r);
    let seen_here = pid_of(&p, h);
    let rc = wait(init);
    detach(&p, h);
    marker(
        "pidns",
        rc == 0 && g_global > 2 && seen_here == g_global,
        &format!(
            "attached by pid 2 inside a new namespace: the space is process {g_global} here ({seen_here}); its owner marked as uid 65534; the reused number refused; failures {rc}"
        ),
    )
}

/// Five uid-65534 processes, each with a VA space, attached by pid: one
/// user owns at most MAX_SPACES / 2 slots, the fifth gets ENOSPC (root may
/// still fill the rest).
pub(crate) fn slots_per_uid() -> bool {
    let p = prescient();
    let (mut ready_r, mut ready_w) = pipe();
    let (mut go_r, mut go_w) = pipe();
    let n = u::MAX_SPACES / 2 + 1;
    let kids: Vec<_> = (0..n)
        .map(|_| {
            fork(|| {
                let _f = uvm();
                become_nobody();
                write_u64(&mut ready_w, 1);
                let _ = read_u64(&mut go_r);
                0
            })
        })
        .collect();
    // Every child has its VA space before any attach: a ready token says
    // only that *some* child is ready, and attaching a child that has not
    // opened /dev/nvidia-uvm yet is ENOENT (seen twice on 2026-11-26).
    for _ in &kids {
        let _ = read_u64(&mut ready_r);
    }
    let mut got = vec![];
    let mut handles = vec![];
    for &k in &kids {
        let mut t = target(u::TARGET_PID, k as u32, 0);
        let r = ioc(
            p.as_raw_fd(),
            u::PRESCIENT_IOC_ATTACH as u64,
            t.as_mut_ptr(),
        );
        if r.is_ok() {
            handles.push(u::Target::from_bytes(&t).map(|x| x.handle).unwrap_or(0));
        }
        got.push(r);
    }
    let root = uvm();
    let root_ok = crate::attach(&p, root.as_raw_fd());
    for _ in &kids {
        write_u64(&mut go_w, 1);
    }
    for k in kids {
        wait(k);
    }
    for h in handles.into_iter().chain(root_ok.ok()) {
        detach(&p, h);
    }
    let want: Vec<Result<(), i32>> = (0..n)
        .map(|i| if i + 1 < n { Ok(()) } else { Err(ENOSPC) })
        .collect();
    marker(
        "slots-per-uid",
        got == want && root_ok.is_ok(),
        &format!("{n} spaces of uid 65534 attached by pid: {got:?}; then root's: {root_ok:?}"),
    )
}
