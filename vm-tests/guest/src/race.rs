//! SET_PARAMS from many processes at once: the tables each call builds
//! outside the module's lock must not add up past what the module allows.
//!
//! Each call asks for execution-id tables of about 110 MiB for the one
//! attached space, under `max_table_mib` (256) alone. Eight at once would
//! build 0.9 GiB in this 1 GiB VM: the OOM killer took the fuzz's processes
//! that way (CI of 2026-11-27). The module now counts every engine's
//! storage against twice `max_table_mib` (kmod/space.rs `ENGINE_BYTES`), so
//! the calls past it answer ENOMEM, every process lives, and the memory
//! the race takes stays under that bound (MemAvailable, sampled).
use crate::security::{fork, wait};
use crate::{attach, detach, get_params, marker, prescient, set_params, uvm};
use prescient_core::{Mode, Params};
use prescient_uapi as u;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Processes calling SET_PARAMS at once.
const CALLERS: usize = 8;
/// The tables each call asks for stay under this (max_table_mib is 256).
const TABLE_MIB: usize = 120;
/// The module's bound on every engine's storage: twice max_table_mib.
const BOUND_MIB: i64 = 2 * 256;
/// What else the race may take: the callers themselves, page tables.
const SLACK_MIB: i64 = 64;

/// What a caller's SET_PARAMS answered, as its exit status.
const OK: i32 = 0;
const NOMEM: i32 = 1;
const INVAL: i32 = 2;
const OTHER: i32 = 3;

/// `p0` in execution-id mode with the most rows (2 ways) whose tables
/// stay under [`TABLE_MIB`]; and their size in MiB.
fn big(p0: u::ParamsAbi) -> (u::ParamsAbi, usize) {
    let mut rows = 1 << 14;
    loop {
        let p = Params {
            rows,
            assoc: 2,
            succs: p0.succs,
            max_tables: u::EXEC_MODE_TABLES,
            exec_ids: u::EXEC_MODE_IDS,
            mode: Mode::ExecId,
            ..Params::DEEPUM
        };
        let mib = (p.layout().tables.len() * 8) >> 20;
        if mib <= TABLE_MIB || rows == 1 {
            let a = u::ParamsAbi {
                rows,
                assoc: 2,
                mode: u::MODE_EXEC_ID,
                ..p0
            };
            return (a, mib);
        }
        rows /= 2;
    }
}

/// MemAvailable of /proc/meminfo, MiB.
fn available_mib() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb >> 10)
}

/// True while our child `pid` has not exited (it is not reaped here).
fn running(pid: libc::pid_t) -> bool {
    let mut info: libc::siginfo_t = zeroed_siginfo();
    // SAFETY: waits on our own child without reaping it (WNOWAIT).
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid for the CLD_* infos waitid fills in.
    r == 0 && unsafe { info.si_pid() } == 0
}

/// A zeroed siginfo_t (waitid leaves si_pid 0 when no child changed).
fn zeroed_siginfo() -> libc::siginfo_t {
    // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// One caller: waits for `start`, then one SET_PARAMS; its answer.
fn caller(p: u::ParamsAbi, start: Instant) -> i32 {
    let f = prescient();
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    match set_params(f.as_raw_fd(), p) {
        Ok(()) => OK,
        Err(e) if e == u::errno::ENOMEM => NOMEM,
        Err(e) if e == u::errno::EINVAL => INVAL,
        Err(_) => OTHER,
    }
}

/// The scenario: one space attached, [`CALLERS`] processes ask for big
/// tables at the same instant; every process must exit with OK or ENOMEM
/// (none killed), and afterwards one such call alone and the old
/// parameters must both be taken (nothing left counted).
pub(crate) fn params_race() -> bool {
    let p = prescient();
    let fd = p.as_raw_fd();
    let p0 = get_params(fd);
    let space = uvm();
    let h = attach(&p, space.as_raw_fd()).expect("ATTACH");
    let (pbig, mib) = big(p0);
    let before = available_mib();
    let start = Instant::now() + Duration::from_millis(300);
    let kids: Vec<_> = (0..CALLERS).map(|_| fork(|| caller(pbig, start))).collect();
    let mut least = before;
    while kids.iter().any(|&k| running(k)) {
        least = least.min(available_mib());
        std::thread::sleep(Duration::from_millis(2));
    }
    let rcs: Vec<i32> = kids.into_iter().map(wait).collect();
    let took = before - least;
    let alone = set_params(fd, pbig);
    let back = set_params(fd, p0);
    detach(&p, h);
    let count = |c: i32| rcs.iter().filter(|&&r| r == c).count();
    let ok = rcs.iter().all(|&r| r == OK || r == NOMEM)
        && took <= BOUND_MIB + SLACK_MIB
        && alone.is_ok()
        && back.is_ok();
    marker(
        "params-race",
        ok,
        &format!(
            "{CALLERS} processes, {mib} MiB of tables each: {} taken, {} ENOMEM, {} EINVAL, {} other, {} killed; the race took {took} MiB at most (bound {BOUND_MIB} + {SLACK_MIB}); then alone {alone:?}, back {back:?}",
            count(OK),
            count(NOMEM),
            count(INVAL),
            count(OTHER),
            count(-1)
        ),
    )
}
