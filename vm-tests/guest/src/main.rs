//! Guest-side test driver. Every check prints one marker line
//! `VMTEST: <name> PASS|FAIL <detail>` that vm-tests/run.sh collects.
use prescient_uapi as u;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

mod driver;
mod fuzz;
mod marks;
mod pagefeed;
mod race;
mod security;

const STANDIN_IOCTL_REPLAY: u64 = 0x7e00_0001;
const STANDIN_IOCTL_INFO: u64 = 0x7e00_0002;
const STANDIN_IOCTL_STORM: u64 = 0x7e00_0003;
const STANDIN_IOCTL_KERNEL: u64 = 0x7e00_0004;
const STANDIN_IOCTL_FAULTLOG: u64 = 0x7e00_0005;
const STANDIN_LOG: usize = 8192;
/// Why a faulted block was not resident (the stand-in's GONE_* codes).
const GONE: [&str; 5] = ["never", "evict-fault", "evict-migrate", "to-cpu", "discard"];

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FaultRec {
    kernel: u16,
    block: u8,
    cause: u8,
    /// The kernel that ran when the block left the GPU.
    gone_kernel: u16,
    pad: u16,
}

#[repr(C)]
struct FaultLog {
    n: u32,
    lost: u32,
    rec: [FaultRec; STANDIN_LOG],
}

/// The stand-in's faults since the last call (kernel, block, cause), cleared.
fn fault_log(f: &File) -> Vec<FaultRec> {
    let mut l = Box::new(FaultLog {
        n: 0,
        lost: 0,
        rec: [FaultRec::default(); STANDIN_LOG],
    });
    if ioc(
        f.as_raw_fd(),
        STANDIN_IOCTL_FAULTLOG,
        &mut *l as *mut FaultLog as *mut u8,
    )
    .is_err()
    {
        return vec![];
    }
    l.rec[..(l.n as usize).min(STANDIN_LOG)].to_vec()
}

/// One line per fault, `faultlog: <tag> iter <i> k <kernel> b <block> <cause>
/// (left during k <kernel>)`
/// (hostsim prints the same format), then a count per cause.
fn print_fault_log(tag: &str, it: usize, log: &[FaultRec]) {
    let mut by = [0u32; 6];
    for r in log {
        let c = (r.cause & 0x7f) as usize;
        let raced = r.cause & 0x80 != 0;
        println!(
            "faultlog: {tag} iter {it} k {} b {} {}{} (left during k {})",
            r.kernel,
            r.block,
            GONE.get(c).unwrap_or(&"?"),
            if raced { " raced" } else { "" },
            r.gone_kernel
        );
        by[c.min(4)] += 1;
        by[5] += raced as u32;
    }
    println!(
        "faultcause: {tag} iter {it} never {} evict-fault {} evict-migrate {} to-cpu {} discard {} (prefetch landed during the fault: {})",
        by[0], by[1], by[2], by[3], by[4], by[5]
    );
}
const MAX_ITERS: usize = 64;

#[repr(C)]
struct Replay {
    iterations: u32,
    kernel_us: u32,
    faults: [u64; MAX_ITERS],
    hits: [u64; MAX_ITERS],
}

#[repr(C)]
#[derive(Default, Debug)]
struct Info {
    base: u64,
    blocks: u32,
    gpu_blocks: u32,
    kernels: u32,
    accesses: u32,
    /// The space's GPU as the driver names it (what prescientd reads from
    /// the driver's processor table).
    gpu_uuid: [u8; 16],
}

/// The stand-in's description of the space behind `f`.
fn info(f: &File) -> Info {
    let mut info = Info::default();
    ioc(
        f.as_raw_fd(),
        STANDIN_IOCTL_INFO,
        &mut info as *mut Info as *mut u8,
    )
    .expect("INFO");
    info
}

/// SET_GPU: the GPU prefetches of space `handle` go to.
fn set_gpu(p: &File, handle: u64, uuid: [u8; 16]) -> Result<(), i32> {
    let mut g = u::GpuAbi::new(handle, uuid).to_bytes();
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_SET_GPU as u64,
        g.as_mut_ptr(),
    )
}

fn marker(name: &str, ok: bool, detail: &str) -> bool {
    println!(
        "VMTEST: {name} {} {detail}",
        if ok { "PASS" } else { "FAIL" }
    );
    ok
}

/// ioctl with a byte buffer; returns Ok(()) or Err(errno).
fn ioc(fd: i32, cmd: u64, buf: *mut u8) -> Result<(), i32> {
    // SAFETY: the caller passes a buffer at least as large as the command's size
    // (or a deliberately bad pointer, which the kernel must reject with EFAULT).
    let r = unsafe { libc::ioctl(fd, cmd as _, buf) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

fn uvm() -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/nvidia-uvm")
        .expect("open /dev/nvidia-uvm")
}
fn prescient() -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/prescient")
        .expect("open /dev/prescient")
}

/// Detaches the space `h` by handle: cleanup after a scenario, so the answer is not checked.
fn detach(p: &File, h: u64) {
    let mut d = u::Target {
        kind: u::TARGET_HANDLE,
        id: 0,
        handle: h,
    }
    .to_bytes();
    let _ = ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_DETACH as u64,
        d.as_mut_ptr(),
    );
}

fn attach(p: &File, uvm_fd: i32) -> Result<u64, i32> {
    let mut t = u::Target {
        kind: u::TARGET_FD,
        id: uvm_fd as u32,
        handle: 0,
    }
    .to_bytes();
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_ATTACH as u64,
        t.as_mut_ptr(),
    )?;
    Ok(u::Target::from_bytes(&t).map_err(|_| -1)?.handle)
}

fn stats(p: &File) -> u::Stats {
    let mut b = [0u8; u::Stats::SIZE];
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_GET_STATS as u64,
        b.as_mut_ptr(),
    )
    .expect("GET_STATS");
    u::Stats::from_bytes(&b).expect("stats")
}

/// The module's parameters (GET_PARAMS on the device `fd`).
fn get_params(fd: i32) -> u::ParamsAbi {
    let mut b = [0u8; u::ParamsAbi::SIZE];
    ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, b.as_mut_ptr()).expect("GET_PARAMS");
    u::ParamsAbi::from_bytes(&b).expect("params")
}

/// SET_PARAMS on the device `fd`: the module's answer.
fn set_params(fd: i32, p: u::ParamsAbi) -> Result<(), i32> {
    let mut b = p.to_bytes();
    ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, b.as_mut_ptr())
}

/// Waits until someone else (prescientd) has attached this process.
fn wait_attached(secs: f64) -> bool {
    let me = std::process::id() as u64;
    let t0 = std::time::Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        if let Ok(p) = OpenOptions::new().read(true).open("/dev/prescient") {
            let s = stats(&p);
            if s.spaces[..s.head.n_spaces as usize]
                .iter()
                .any(|e| e.pid == me)
            {
                println!(
                    "replay: attached from outside after {:.2}s",
                    t0.elapsed().as_secs_f64()
                );
                return true;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    println!("replay: not attached within {secs}s");
    false
}

fn replay(iters: u32, attach_it: bool, out: Option<&str>) -> Vec<u64> {
    replay_as(iters, attach_it, None, out)
}

/// `wait_secs`: the replay starts only once another process (the daemon)
/// has attached this one (or fails after that many seconds).
fn replay_as(iters: u32, attach_it: bool, wait_secs: Option<f64>, out: Option<&str>) -> Vec<u64> {
    let f = uvm();
    let info = info(&f);
    if let Some(w) = wait_secs {
        if !wait_attached(w) {
            return vec![];
        }
    }
    let mut handle = 0;
    if attach_it {
        let p = prescient();
        handle = attach(&p, f.as_raw_fd()).expect("ATTACH");
        set_gpu(&p, handle, info.gpu_uuid).expect("SET_GPU");
        // /dev/prescient is closed again: the attachment lives in the module.
    }
    let mut r = Replay {
        iterations: iters,
        kernel_us: 0,
        faults: [0; MAX_ITERS],
        hits: [0; MAX_ITERS],
    };
    let t0 = std::time::Instant::now();
    let res = ioc(
        f.as_raw_fd(),
        STANDIN_IOCTL_REPLAY,
        &mut r as *mut Replay as *mut u8,
    );
    let secs = t0.elapsed().as_secs_f64();
    if let Err(e) = res {
        println!("replay: error {e}");
        return vec![];
    }
    let v: Vec<u64> = r.faults[..iters as usize].to_vec();
    for i in 0..iters as usize {
        println!(
            "replay: {} iter {i} faults {} prefetch_hits {}",
            if attach_it {
                "with-prescient"
            } else {
                "baseline"
            },
            r.faults[i],
            r.hits[i]
        );
    }
    println!("replay: {info:?} handle {handle} {secs:.2}s");
    if let Some(path) = out {
        let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        std::fs::write(path, s.join(" ")).expect("write result");
    }
    if attach_it {
        print_replay_log(&fault_log(&f), iters as usize);
        if let Ok(p) = OpenOptions::new().read(true).open("/dev/prescient") {
            let s = stats(&p);
            println!("replay: prescient stats {:?}", s.head);
            if s.head.n_spaces > 0 {
                println!("replay: space0 {:?}", s.spaces[0]);
            }
        }
    }
    v
}

/// The fault log of one transparent replay (all its iterations; a new
/// iteration starts where the kernel index goes back): the second half
/// printed per fault, as hostsim's `LOG=1` prints it.
fn print_replay_log(log: &[FaultRec], iters: usize) {
    let mut it = 0;
    let mut from = 0;
    for i in 1..=log.len() {
        if i == log.len() || log[i].kernel < log[i - 1].kernel {
            if it >= iters / 2 {
                print_fault_log("with-prescient", it, &log[from..i]);
            }
            it += 1;
            from = i;
        }
    }
}

/// DeepUM's path: switch prescient.ko to execution-id mode, then act as the
/// runtime: report each kernel's execution id (SET_EXEC_ID) and launch it.
fn replay_exec(iters: usize, out: &str) -> bool {
    let p = prescient();
    let fd = p.as_raw_fd();
    let mut pb = [0u8; u::ParamsAbi::SIZE];
    ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, pb.as_mut_ptr()).expect("GET_PARAMS");
    let p0 = u::ParamsAbi::from_bytes(&pb).expect("params");
    let mut ex = u::ParamsAbi {
        mode: u::MODE_EXEC_ID,
        rows: 16,
        lookahead: std::env::var("VMTEST_LOOKAHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16),
        pre_evict_watermark_pct: std::env::var("VMTEST_WATERMARK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(p0.pre_evict_watermark_pct),
        ..p0
    }
    .to_bytes();
    if let Err(e) = ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, ex.as_mut_ptr()) {
        return marker(
            "replay-exec",
            false,
            &format!("SET_PARAMS exec-id mode: errno {e}"),
        );
    }
    let f = uvm();
    let info = info(&f);
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    set_gpu(&p, h, info.gpu_uuid).expect("SET_GPU");
    let t0 = std::time::Instant::now();
    let mut v = vec![];
    let mut ok = true;
    for it in 0..iters {
        let (mut faults, mut hits) = (0u64, 0u64);
        for k in 0..info.kernels {
            let mut x = u::ExecIdAbi {
                handle: h,
                exec_id: k + 1,
                reserved0: 0,
            }
            .to_bytes();
            ok &= ioc(fd, u::PRESCIENT_IOC_SET_EXEC_ID as u64, x.as_mut_ptr()).is_ok();
            // SAFETY: a test ioctl whose argument is a plain number.
            let r = unsafe {
                libc::ioctl(f.as_raw_fd(), STANDIN_IOCTL_KERNEL as _, k as libc::c_ulong)
            };
            if r < 0 {
                ok = false;
                break;
            }
            faults += r as u64 & 0xffff;
            hits += (r as u64 >> 16) & 0x7fff;
        }
        println!("replay: exec-id iter {it} faults {faults} prefetch_hits {hits}");
        let log = fault_log(&f);
        if it >= iters / 2 {
            print_fault_log("exec", it, &log);
        }
        v.push(faults);
    }
    let s = stats(&p);
    println!(
        "replay: exec-id {:.2}s prescient stats {:?}",
        t0.elapsed().as_secs_f64(),
        s.head
    );
    let mut d = u::Target {
        kind: u::TARGET_HANDLE,
        id: 0,
        handle: h,
    }
    .to_bytes();
    let _ = ioc(fd, u::PRESCIENT_IOC_DETACH as u64, d.as_mut_ptr());
    let mut back = p0.to_bytes();
    ok &= ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, back.as_mut_ptr()).is_ok();
    let txt: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    std::fs::write(out, txt.join(" ")).expect("write result");
    marker(
        "replay-exec",
        ok && v.len() == iters,
        "runtime reports an execution id before every kernel",
    )
}

fn steady(v: &[u64]) -> f64 {
    let tail = &v[v.len() / 2..];
    tail.iter().sum::<u64>() as f64 / tail.len().max(1) as f64
}

fn cut(base: &str, with: &str, name: &str) -> bool {
    let rd = |p: &str| -> Vec<u64> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    };
    let (b, w) = (rd(base), rd(with));
    if b.is_empty() || w.is_empty() {
        return marker(name, false, "missing replay results");
    }
    let (sb, sw) = (steady(&b), steady(&w));
    let c = if sb > 0.0 {
        100.0 * (1.0 - sw / sb)
    } else {
        0.0
    };
    let detail = format!("steady-state (2nd half) faults/iter: baseline {sb:.1}, with prescient.ko {sw:.1}: cut {c:.1}%");
    // The target (>= 90%) is reported separately as TARGET, not as a pass/fail check.
    println!(
        "VMTEST-TARGET: {name}-90 {} {detail}",
        if c >= 90.0 { "MET" } else { "MISSED" }
    );
    marker(name, c > 0.0, &detail)
}

/// Every ioctl, valid and invalid.
fn ioctl_surface() -> bool {
    let p = prescient();
    let fd = p.as_raw_fd();
    let mut ok = true;
    let mut check = |name: &str, got: Result<(), i32>, want: Result<(), i32>| {
        let good = got == want;
        if !good {
            println!("ioctl: {name}: got {got:?} want {want:?}");
        }
        ok &= good;
    };
    use u::errno::*;
    // version
    let mut vb = [0u8; u::Version::SIZE];
    check(
        "GET_VERSION",
        ioc(fd, u::PRESCIENT_IOC_GET_VERSION as u64, vb.as_mut_ptr()),
        Ok(()),
    );
    let v = u::Version::from_bytes(&vb).expect("version");
    check(
        "version fields",
        if v.abi_version == u::ABI_VERSION && v.driver_version == (580u64 << 32 | 159 << 16 | 4) {
            Ok(())
        } else {
            Err(0)
        },
        Ok(()),
    );
    check(
        "GET_VERSION bad ptr",
        ioc(fd, u::PRESCIENT_IOC_GET_VERSION as u64, 8 as *mut u8),
        Err(EFAULT),
    );
    // unknown numbers and wrong sizes
    for bad in [
        0u64,
        0x5000,
        u::ioc(u::IOC_READ, b'P', 0x00, 8) as u64,
        u::ioc(u::IOC_READ, b'P', 0x30, 24) as u64,
        u::ioc(u::IOC_WRITE, b'P', 0x02, u::ParamsAbi::SIZE - 8) as u64,
        u::ioc(u::IOC_READ, b'Q', 0x00, 24) as u64,
        u::ioc(u::IOC_READ | u::IOC_WRITE, b'P', 0x03, u::Stats::SIZE) as u64,
    ] {
        let mut b = [0u8; 1024];
        check(
            "unknown/wrong-size",
            ioc(fd, bad, b.as_mut_ptr()),
            Err(ENOTTY),
        );
    }
    // params
    let mut pb = [0u8; u::ParamsAbi::SIZE];
    check(
        "GET_PARAMS",
        ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, pb.as_mut_ptr()),
        Ok(()),
    );
    let p0 = u::ParamsAbi::from_bytes(&pb).expect("params");
    let set = |pa: u::ParamsAbi| {
        let mut b = pa.to_bytes();
        ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, b.as_mut_ptr())
    };
    check("SET_PARAMS same", set(p0), Ok(()));
    check(
        "SET_PARAMS rows 1000",
        set(u::ParamsAbi { rows: 1000, ..p0 }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS rows 0",
        set(u::ParamsAbi { rows: 0, ..p0 }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS assoc>rows",
        set(u::ParamsAbi {
            rows: 4,
            assoc: 8,
            ..p0
        }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS succs 99",
        set(u::ParamsAbi { succs: 99, ..p0 }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS lookahead 0",
        set(u::ParamsAbi { lookahead: 0, ..p0 }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS inflight 0",
        set(u::ParamsAbi {
            inflight_limit: 0,
            ..p0
        }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS watermark 101",
        set(u::ParamsAbi {
            pre_evict_watermark_pct: 101,
            ..p0
        }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS budget unaligned",
        set(u::ParamsAbi {
            residency_budget_bytes: 4096,
            ..p0
        }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS enabled 2",
        set(u::ParamsAbi { enabled: 2, ..p0 }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS reserved",
        set(u::ParamsAbi { reserved1: 1, ..p0 }),
        Err(EINVAL),
    );
    check(
        "SET_PARAMS bad ptr",
        ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, 8 as *mut u8),
        Err(EFAULT),
    );
    check(
        "SET_PARAMS rows 1024",
        set(u::ParamsAbi { rows: 1024, ..p0 }),
        Ok(()),
    );
    let mut pb2 = [0u8; u::ParamsAbi::SIZE];
    check(
        "GET_PARAMS again",
        ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, pb2.as_mut_ptr()),
        Ok(()),
    );
    check(
        "params stuck",
        if u::ParamsAbi::from_bytes(&pb2).map(|x| x.rows) == Ok(1024) {
            Ok(())
        } else {
            Err(0)
        },
        Ok(()),
    );
    check("SET_PARAMS restore", set(p0), Ok(()));
    // stats, reset
    let mut sb = vec![0u8; u::Stats::SIZE];
    check(
        "GET_STATS",
        ioc(fd, u::PRESCIENT_IOC_GET_STATS as u64, sb.as_mut_ptr()),
        Ok(()),
    );
    check(
        "GET_STATS bad ptr",
        ioc(fd, u::PRESCIENT_IOC_GET_STATS as u64, 0x10 as *mut u8),
        Err(EFAULT),
    );
    check(
        "RESET_TABLES",
        ioc(
            fd,
            u::PRESCIENT_IOC_RESET_TABLES as u64,
            std::ptr::null_mut(),
        ),
        Ok(()),
    );
    // attach / detach
    let f = uvm();
    let tgt = |kind, id, handle| u::Target { kind, id, handle }.to_bytes();
    let mut t = tgt(u::TARGET_FD, f.as_raw_fd() as u32, 0);
    check(
        "ATTACH fd",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t.as_mut_ptr()),
        Ok(()),
    );
    let h = u::Target::from_bytes(&t).map(|x| x.handle).unwrap_or(0);
    check(
        "handle nonzero",
        if h != 0 { Ok(()) } else { Err(0) },
        Ok(()),
    );
    let mut t2 = tgt(u::TARGET_FD, f.as_raw_fd() as u32, 0);
    check(
        "ATTACH twice",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t2.as_mut_ptr()),
        Err(EEXIST),
    );
    let mut t3 = tgt(u::TARGET_FD, fd as u32, 0);
    check(
        "ATTACH non-uvm fd",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t3.as_mut_ptr()),
        Err(EINVAL),
    );
    let mut t4 = tgt(u::TARGET_FD, 999, 0);
    check(
        "ATTACH bad fd",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t4.as_mut_ptr()),
        Err(EBADF),
    );
    let mut t5 = tgt(7, 0, 0);
    check(
        "ATTACH bad kind",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t5.as_mut_ptr()),
        Err(EINVAL),
    );
    let mut t6 = tgt(u::TARGET_PID, 0, 0);
    check(
        "ATTACH pid 0",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t6.as_mut_ptr()),
        Err(EINVAL),
    );
    let mut t7 = tgt(u::TARGET_PID, 999_999, 0);
    check(
        "ATTACH no such pid",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t7.as_mut_ptr()),
        Err(ESRCH),
    );
    let mut t8 = tgt(u::TARGET_FD, f.as_raw_fd() as u32, 5);
    check(
        "ATTACH handle set",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t8.as_mut_ptr()),
        Err(EINVAL),
    );
    // exec id, ranges
    let mut x = u::ExecIdAbi {
        handle: h,
        exec_id: 42,
        reserved0: 0,
    }
    .to_bytes();
    check(
        "SET_EXEC_ID",
        ioc(fd, u::PRESCIENT_IOC_SET_EXEC_ID as u64, x.as_mut_ptr()),
        Ok(()),
    );
    let mut x = u::ExecIdAbi {
        handle: h + 100,
        exec_id: 42,
        reserved0: 0,
    }
    .to_bytes();
    check(
        "SET_EXEC_ID bad handle",
        ioc(fd, u::PRESCIENT_IOC_SET_EXEC_ID as u64, x.as_mut_ptr()),
        Err(ENOENT),
    );
    let mut x = u::ExecIdAbi {
        handle: h,
        exec_id: 1,
        reserved0: 3,
    }
    .to_bytes();
    check(
        "SET_EXEC_ID reserved",
        ioc(fd, u::PRESCIENT_IOC_SET_EXEC_ID as u64, x.as_mut_ptr()),
        Err(EINVAL),
    );
    let rng = |handle, addr, len| {
        u::RangeAbi {
            handle,
            addr,
            len,
            flags: 0,
        }
        .to_bytes()
    };
    for (cmd, n) in [
        (u::PRESCIENT_IOC_MARK_DEAD, "MARK_DEAD"),
        (u::PRESCIENT_IOC_MARK_ALIVE, "MARK_ALIVE"),
    ] {
        let mut r = rng(h, 0x7f00_0000_0000, 4 << 20);
        check(n, ioc(fd, cmd as u64, r.as_mut_ptr()), Ok(()));
        let mut r = rng(h, 0x7f00_0000_0001, 4 << 20);
        check(
            "range unaligned",
            ioc(fd, cmd as u64, r.as_mut_ptr()),
            Err(EINVAL),
        );
        let mut r = rng(h, u64::MAX - 4095, 8192);
        check(
            "range overflow",
            ioc(fd, cmd as u64, r.as_mut_ptr()),
            Err(EINVAL),
        );
        let mut r = rng(h, 0x1000, 0);
        check(
            "range empty",
            ioc(fd, cmd as u64, r.as_mut_ptr()),
            Err(EINVAL),
        );
        let mut r = rng(0, 0x1000, 0x1000);
        check(
            "range handle 0",
            ioc(fd, cmd as u64, r.as_mut_ptr()),
            Err(EINVAL),
        );
        check(
            "range bad ptr",
            ioc(fd, cmd as u64, 8 as *mut u8),
            Err(EFAULT),
        );
    }
    let gi = info(&f);
    check("SET_GPU", set_gpu(&p, h, gi.gpu_uuid), Ok(()));
    check("SET_GPU zero uuid", set_gpu(&p, h, [0; 16]), Err(EINVAL));
    check("SET_GPU cpu uuid", set_gpu(&p, h, u::UUID_CPU), Err(EINVAL));
    check("SET_GPU handle 0", set_gpu(&p, 0, gi.gpu_uuid), Err(EINVAL));
    check(
        "SET_GPU bad handle",
        set_gpu(&p, h + 100, gi.gpu_uuid),
        Err(ENOENT),
    );
    check(
        "SET_GPU bad ptr",
        ioc(fd, u::PRESCIENT_IOC_SET_GPU as u64, 8 as *mut u8),
        Err(EFAULT),
    );
    // Table memory is capped (max_table_mib): 2048 exec-id tables of 8192
    // rows x 16 ways would be tens of GB per space.
    check(
        "SET_PARAMS tables over the cap",
        set(u::ParamsAbi {
            mode: u::MODE_EXEC_ID,
            rows: 8192,
            assoc: 16,
            ..p0
        }),
        Err(EINVAL),
    );
    let s = stats(&p);
    check(
        "stats show space gpu",
        if s.spaces[0].gpu == u::GPU_SET {
            Ok(())
        } else {
            Err(s.spaces[0].gpu as i32)
        },
        Ok(()),
    );
    check(
        "stats show space",
        if s.head.n_spaces == 1 && s.spaces[0].handle == h {
            Ok(())
        } else {
            Err(0)
        },
        Ok(()),
    );
    let mut d = tgt(u::TARGET_HANDLE, 0, h);
    check(
        "DETACH handle",
        ioc(fd, u::PRESCIENT_IOC_DETACH as u64, d.as_mut_ptr()),
        Ok(()),
    );
    let mut d = tgt(u::TARGET_HANDLE, 0, h);
    check(
        "DETACH again",
        ioc(fd, u::PRESCIENT_IOC_DETACH as u64, d.as_mut_ptr()),
        Err(ENOENT),
    );
    let mut d = tgt(u::TARGET_HANDLE, 0, 0);
    check(
        "DETACH handle 0",
        ioc(fd, u::PRESCIENT_IOC_DETACH as u64, d.as_mut_ptr()),
        Err(EINVAL),
    );
    // attach by pid (own pid), detach by fd
    let mut t = tgt(u::TARGET_PID, std::process::id(), 0);
    check(
        "ATTACH pid",
        ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t.as_mut_ptr()),
        Ok(()),
    );
    let mut d = tgt(u::TARGET_FD, f.as_raw_fd() as u32, 0);
    check(
        "DETACH fd",
        ioc(fd, u::PRESCIENT_IOC_DETACH as u64, d.as_mut_ptr()),
        Ok(()),
    );
    // fill every slot, then one more
    let files: Vec<File> = (0..u::MAX_SPACES + 1).map(|_| uvm()).collect();
    for (i, g) in files.iter().enumerate() {
        let mut t = tgt(u::TARGET_FD, g.as_raw_fd() as u32, 0);
        let want = if i < u::MAX_SPACES {
            Ok(())
        } else {
            Err(ENOSPC)
        };
        check(
            "ATTACH slots",
            ioc(fd, u::PRESCIENT_IOC_ATTACH as u64, t.as_mut_ptr()),
            want,
        );
    }
    drop(files); // process keeps none of them: the worker detaches them as orphans
    std::thread::sleep(std::time::Duration::from_millis(400));
    let s = stats(&p);
    check(
        "orphans detached",
        if s.head.n_spaces == 0 {
            Ok(())
        } else {
            Err(s.head.n_spaces as i32)
        },
        Ok(()),
    );
    marker("ioctl-surface", ok, "every call valid and invalid")
}

/// A burst of fault events far larger than the ring: drops are counted and
/// the burst is never blocked.
fn overflow() -> bool {
    let f = uvm();
    let p = prescient();
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    // With its GPU known the worker prefetches after each fault, as on a
    // real GPU: without one it only counts, and keeps up with any burst.
    set_gpu(&p, h, info(&f).gpu_uuid).expect("SET_GPU");
    let before = stats(&p).head;
    let n: u64 = 100_000;
    let t0 = std::time::Instant::now();
    let r = ioc(f.as_raw_fd(), STANDIN_IOCTL_STORM, n as usize as *mut u8);
    let secs = t0.elapsed().as_secs_f64();
    // The worker drains what the ring took (a prefetch round after each
    // fault, slower under lockdep): wait for it, at most 10 s.
    let (mut seen, mut drops) = (0, 0);
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let after = stats(&p).head;
        seen = after.faults_seen - before.faults_seen;
        drops = after.queue_drops - before.queue_drops;
        if seen + drops >= n {
            break;
        }
    }
    detach(&p, h);
    marker(
        "queue-overflow",
        r.is_ok() && drops > 0 && seen + drops == n,
        &format!("{n} events in {secs:.2}s: {seen} handled + {drops} dropped (counted)"),
    )
}

fn two_spaces() -> bool {
    let t = std::thread::spawn(|| replay(3, true, None));
    let v1 = replay(3, true, None);
    let v2 = t.join().unwrap_or_default();
    marker(
        "two-spaces",
        v1.len() == 3 && v2.len() == 3,
        &format!("two attached address spaces replayed at once: faults {v1:?} and {v2:?}"),
    )
}

/// Runs a command as uid/gid 65534 (the end-to-end test's unprivileged user).
fn as_nobody(cmd: &[String]) -> bool {
    use std::os::unix::process::CommandExt;
    let Some((prog, rest)) = cmd.split_first() else {
        eprintln!("usage: vmtest as-nobody CMD [ARGS]");
        return false;
    };
    let mut c = std::process::Command::new(prog);
    // std drops supplementary groups when root sets a uid.
    c.args(rest).uid(65534).gid(65534);
    let e = c.exec();
    eprintln!("as-nobody: {prog}: {e}");
    false
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let a = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let ok = match a(1) {
        "replay" => !replay(
            a(2).parse().unwrap_or(4),
            a(3) == "attach",
            args.get(4).map(String::as_str),
        )
        .is_empty(),
        "replay-wait" => !replay_as(
            a(2).parse().unwrap_or(4),
            false,
            Some(a(3).parse().unwrap_or(30.0)),
            args.get(4).map(String::as_str),
        )
        .is_empty(),
        "as-nobody" => as_nobody(&args[2..]),
        "cut" => cut(a(2), a(3), if a(4).is_empty() { "fault-cut" } else { a(4) }),
        "replay-exec" => replay_exec(a(2).parse().unwrap_or(8), a(3)),
        "replay-exec-page" => pagefeed::replay_exec_page(a(2).parse().unwrap_or(8), a(3), true),
        "replay-exec-page-short" => {
            pagefeed::replay_exec_page(a(2).parse().unwrap_or(8), a(3), false)
        }
        "exec-page-bad" => pagefeed::exec_page_bad(),
        "exec-page-hold" => pagefeed::hold(a(2).parse().unwrap_or(3)),
        "ioctl" => ioctl_surface(),
        "overflow" => overflow(),
        "two" => two_spaces(),
        "cpu-fault" => driver::cpu_fault(),
        "cpu-fault-raw" => driver::cpu_fault_raw(),
        "gpu-uuid" => driver::gpu_uuid(),
        "multi-gpu" => driver::multi_gpu(),
        "ring-share" => driver::ring_share(),
        "branch-550" => driver::branch_550(),
        "alive-populate" => marks::alive_populate(),
        "eperm" => security::unprivileged_eperm(),
        "pidns" => security::pidns(),
        "slots-per-uid" => security::slots_per_uid(),
        "fuzz" => fuzz::ioctl_fuzz(a(2).parse().unwrap_or(8)),
        "params-race" => race::params_race(),
        "stats" => {
            let s = stats(
                &OpenOptions::new()
                    .read(true)
                    .open("/dev/prescient")
                    .expect("open"),
            );
            println!("{:?}", s.head);
            true
        }
        _ => {
            eprintln!(
                "usage: vmtest replay N [attach|noattach] [out] | cut BASE WITH | ioctl | stats"
            );
            false
        }
    };
    std::process::exit(if ok { 0 } else { 1 });
}
