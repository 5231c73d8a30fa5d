//! Concurrent ioctl sequences: several processes (root and uid 65534)
//! attaching, detaching, setting parameters and GPUs, marking and raising
//! faults at once, for a bounded time; afterwards nothing is left attached
//! and every driver file the module held is released.
use crate::pagefeed::{clear_page, set_page, Memfd};
use crate::security::{become_nobody, fork, wait};
use crate::{info, ioc, marker, prescient, stats, uvm};
use prescient_uapi as u;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const STANDIN_IOCTL_STORM: u64 = 0x7e00_0003;
const STANDIN_IOCTL_KERNEL: u64 = 0x7e00_0004;

/// xorshift64: a small deterministic generator (the seed is printed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Errnos a call may legitimately answer in a fuzzed sequence.
fn expected(e: i32) -> bool {
    use u::errno::*;
    [EPERM, ENOENT, EEXIST, ENOSPC, EINVAL, ESRCH, EBADF, ENOMEM].contains(&e)
}

/// One process's random sequence until `deadline`; the count of answers
/// outside [`expected`].
fn worker(seed: u64, deadline: Instant, p0: u::ParamsAbi) -> i32 {
    let mut rng = Rng(seed | 1);
    let p = prescient();
    let fd = p.as_raw_fd();
    let mut files: Vec<File> = vec![];
    let mut handles: Vec<u64> = vec![];
    let mut pages: Vec<Memfd> = vec![];
    let mut odd = 0;
    let mut note = |what: &str, r: Result<(), i32>| {
        if let Err(e) = r {
            if !expected(e) {
                println!("fuzz: {what}: unexpected errno {e}");
                odd += 1;
            }
        }
    };
    while Instant::now() < deadline {
        let h = if handles.is_empty() || rng.below(8) == 0 {
            rng.below(64)
        } else {
            handles[rng.below(handles.len() as u64) as usize]
        };
        match rng.below(16) {
            0 if files.len() < 3 => files.push(uvm()),
            1 if !files.is_empty() => {
                files.swap_remove(rng.below(files.len() as u64) as usize);
            }
            2 | 3 => {
                let (kind, id) = match (rng.below(3), files.first()) {
                    (0, Some(f)) => (u::TARGET_FD, f.as_raw_fd() as u32),
                    (1, _) => (u::TARGET_PID, std::process::id()),
                    _ => (u::TARGET_PID, 1 + rng.below(400) as u32),
                };
                let mut t = u::Target {
                    kind,
                    id,
                    handle: 0,
                }
                .to_bytes();
                let r = ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t.as_mut_ptr());
                if r.is_ok() {
                    handles.push(u::Target::from_bytes(&t).map(|x| x.handle).unwrap_or(0));
                }
                note("ATTACH", r);
            }
            4 => {
                let (kind, id) = if rng.below(2) == 0 {
                    (u::TARGET_HANDLE, 0)
                } else {
                    (u::TARGET_PID, std::process::id())
                };
                let mut t = u::Target {
                    kind,
                    id,
                    handle: if kind == u::TARGET_HANDLE {
                        h.max(1)
                    } else {
                        0
                    },
                }
                .to_bytes();
                note(
                    "DETACH",
                    ioc(fd, u::PRESCIENT_IOC_DETACH as u64, t.as_mut_ptr()),
                );
            }
            5 => {
                let uuid = files.first().map(|f| info(f).gpu_uuid).unwrap_or([7; 16]);
                let mut g = u::GpuAbi::new(h, uuid).to_bytes();
                note(
                    "SET_GPU",
                    ioc(fd, u::PRESCIENT_IOC_SET_GPU as u64, g.as_mut_ptr()),
                );
            }
            6 => {
                let mut x = u::ExecIdAbi {
                    handle: h,
                    exec_id: rng.below(5000) as u32,
                    reserved0: 0,
                }
                .to_bytes();
                note(
                    "SET_EXEC_ID",
                    ioc(fd, u::PRESCIENT_IOC_SET_EXEC_ID as u64, x.as_mut_ptr()),
                );
            }
            7 | 8 => {
                let len = if rng.below(4) == 0 {
                    u::MAX_RANGE_LEN
                } else {
                    (1 + rng.below(64)) << 21
                };
                let addr = (rng.below(1 << 30) << 12) & !((1 << 21) - 1);
                let mut r = u::RangeAbi {
                    handle: h,
                    addr,
                    len,
                    // 2 is no flag: EINVAL.
                    flags: rng.below(3),
                }
                .to_bytes();
                let cmd = if rng.below(2) == 0 {
                    u::PRESCIENT_IOC_MARK_DEAD
                } else {
                    u::PRESCIENT_IOC_MARK_ALIVE
                };
                note("MARK", ioc(fd, cmd as u64, r.as_mut_ptr()));
            }
            9 => {
                let mut pa = p0;
                match rng.below(4) {
                    0 => pa.rows = 1 << rng.below(12),
                    1 => pa.assoc = 1 + rng.below(8) as u32,
                    2 => {
                        pa.mode = if rng.below(2) == 0 {
                            u::MODE_EXEC_ID
                        } else {
                            u::MODE_TRANSPARENT
                        }
                    }
                    _ => pa.residency_budget_bytes = rng.below(64) << 21,
                }
                let mut b = pa.to_bytes();
                note(
                    "SET_PARAMS",
                    ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, b.as_mut_ptr()),
                );
            }
            10 => note(
                "RESET_TABLES",
                ioc(
                    fd,
                    u::PRESCIENT_IOC_RESET_TABLES as u64,
                    std::ptr::null_mut(),
                ),
            ),
            11 => {
                let _ = stats(&p);
            }
            12 => {
                if let Some(f) = files.first() {
                    let k = rng.below(1000);
                    // SAFETY: test ioctls whose arguments are plain numbers.
                    unsafe {
                        libc::ioctl(f.as_raw_fd(), STANDIN_IOCTL_KERNEL as _, k as libc::c_ulong);
                        libc::ioctl(
                            f.as_raw_fd(),
                            STANDIN_IOCTL_STORM as _,
                            300 as libc::c_ulong,
                        );
                    }
                }
            }
            13 => {
                // The runtime's page (or, one time in four, a page too
                // small to be one) for a random handle.
                let small = rng.below(4) == 0;
                let m = Memfd::new(if small { 64 } else { 4096 });
                if !small && rng.below(4) != 0 {
                    m.page().init(std::process::id());
                }
                note("SET_EXEC_PAGE", set_page(&p, h, m.file.as_raw_fd()));
                pages.push(m);
                if pages.len() > 4 {
                    pages.remove(0);
                }
            }
            14 => note("CLEAR_EXEC_PAGE", clear_page(&p, h)),
            _ => {}
        }
    }
    odd.min(100)
}

/// Open /dev/nvidia-uvm files (the stand-in's `spaces` counter): one the
/// module still referenced would stay counted.
fn standin_spaces() -> u64 {
    std::fs::read_to_string("/sys/kernel/debug/nvidia_uvm_standin/stats")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("spaces").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

/// `procs` processes (one in four as uid 65534) for `secs` seconds.
pub(crate) fn ioctl_fuzz(secs: u64) -> bool {
    let p = prescient();
    let mut pb = [0u8; u::ParamsAbi::SIZE];
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_GET_PARAMS as u64,
        pb.as_mut_ptr(),
    )
    .expect("GET_PARAMS");
    let p0 = u::ParamsAbi::from_bytes(&pb).expect("params");
    let procs = 4;
    let spaces0 = standin_spaces();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let seed = t0.elapsed().as_nanos() as u64 ^ u64::from(std::process::id()) << 32;
    println!("fuzz: {procs} processes for {secs}s, seed {seed:#x}");
    let kids: Vec<_> = (0..procs)
        .map(|i| {
            fork(|| {
                if i == procs - 1 {
                    become_nobody();
                }
                worker(seed.wrapping_add(i as u64 * 0x9e37_79b9), deadline, p0)
            })
        })
        .collect();
    // Meanwhile: how long a GET_STATS waits for the State mutex.
    let mut worst = Duration::ZERO;
    while Instant::now() < deadline {
        let t = Instant::now();
        let _ = stats(&p);
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    let rcs: Vec<i32> = kids.into_iter().map(wait).collect();
    let took = t0.elapsed().as_secs_f64();
    let mut back = p0.to_bytes();
    let restored = ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_SET_PARAMS as u64,
        back.as_mut_ptr(),
    );
    // Every fuzzing process has exited: the worker reaps their spaces.
    std::thread::sleep(Duration::from_millis(500));
    let left = stats(&p).head.n_spaces;
    let pages_left = stats(&p).head.exec_pages;
    let files_left = standin_spaces().saturating_sub(spaces0);
    let ok = rcs.iter().all(|&r| r == 0)
        && restored.is_ok()
        && left == 0
        && pages_left == 0
        && files_left == 0
        && took < secs as f64 + 30.0;
    marker(
        "ioctl-fuzz",
        ok,
        &format!(
            "{procs} processes x {secs}s in {took:.1}s, unexpected answers {rcs:?}, spaces left {left}, execution-id pages left {pages_left}, driver files left {files_left}, slowest GET_STATS {:.1} ms",
            worst.as_secs_f64() * 1e3
        ),
    )
}
