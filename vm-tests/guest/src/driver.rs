//! Scenarios about the driver boundary: CPU-fault events shaped as the real
//! driver's, the prefetch destination (SET_GPU and the driver's
//! NV_ERR_INVALID_DEVICE), and the 550 branch (no discard, size unknown).
use crate::{attach, detach, info, ioc, marker, prescient, set_gpu, stats, uvm, Info};
use prescient_uapi as u;
use std::fs::File;
use std::os::fd::AsRawFd;

const STANDIN_IOCTL_CPU_FAULTS: u64 = 0x7e00_0006;
const STANDIN_IOCTL_KERNEL: u64 = 0x7e00_0004;
pub(crate) const BLOCK: usize = 2 << 20;

#[repr(C)]
struct CpuFaults {
    user_base: u64,
    n: u32,
    pad: u32,
}

/// A reserved, never-populated user mapping as large as the managed range:
/// the addresses the stand-in's CPU faults name (as the driver's name the
/// faulting address of the process's managed mapping).
fn user_range(inf: &Info) -> u64 {
    let len = inf.blocks as usize * BLOCK;
    // SAFETY: an anonymous PROT_NONE reservation; never touched, never freed
    // (the process is short-lived).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap");
    p as u64
}

/// Has the stand-in raise `n` CPU faults in the space of `f`.
fn cpu_faults(f: &File, base: u64, n: u32) -> Result<(), i32> {
    let mut a = CpuFaults {
        user_base: base,
        n,
        pad: 0,
    };
    ioc(
        f.as_raw_fd(),
        STANDIN_IOCTL_CPU_FAULTS,
        &mut a as *mut CpuFaults as *mut u8,
    )
}

/// Runs kernels `ks` of the trace in the space of `f` on GPU 1; faults raised.
pub(crate) fn run_kernels(f: &File, ks: std::ops::Range<u32>) -> u64 {
    run_kernels_on(f, ks, 0)
}

/// The stand-in's GPU selector: even blocks on GPU 1, odd on GPU 2.
const SPLIT: u64 = 0xff;
/// The stand-in's GPU selector: GPU 1, fault entries naming no GPU.
const ANONYMOUS: u64 = 0xfe;
const STANDIN_IOCTL_GPUS: u64 = 0x7e00_0007;

/// Runs kernels `ks` of the trace in the space of `f` on the GPUs `sel`
/// names (the stand-in's selector); faults raised.
fn run_kernels_on(f: &File, ks: std::ops::Range<u32>, sel: u64) -> u64 {
    let mut faults = 0;
    for k in ks {
        let arg = u64::from(k) | sel << 32;
        // SAFETY: a test ioctl whose argument is a plain number.
        let r = unsafe {
            libc::ioctl(
                f.as_raw_fd(),
                STANDIN_IOCTL_KERNEL as _,
                arg as libc::c_ulong,
            )
        };
        if r > 0 {
            faults += r as u64 & 0xffff;
        }
    }
    faults
}

/// Has the space of `f` register exactly the stand-in's GPUs in `ids`
/// (bit = processor id).
fn register_gpus(f: &File, ids: u64) -> bool {
    // SAFETY: a test ioctl whose argument is a plain number.
    unsafe { libc::ioctl(f.as_raw_fd(), STANDIN_IOCTL_GPUS as _, ids as libc::c_ulong) == 0 }
}

/// Waits until the worker has taken everything queued (a fault count that
/// stops moving), at most 3 s.
pub(crate) fn settle(p: &File) -> u::StatsHead {
    let mut last = stats(p).head;
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = stats(p).head;
        if now.faults_seen == last.faults_seen && now.cpu_faults == last.cpu_faults {
            return now;
        }
        last = now;
    }
    last
}

/// One counter of the stand-in's debugfs file.
pub(crate) fn standin_counter(name: &str) -> u64 {
    std::fs::read_to_string("/sys/kernel/debug/nvidia_uvm_standin/stats")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next().and_then(|v| v.parse().ok()))?
        })
        .unwrap_or(0)
}

/// The space `h` in GET_STATS.
pub(crate) fn space(p: &File, h: u64) -> u::SpaceStats {
    let s = stats(p);
    s.spaces[..s.head.n_spaces as usize]
        .iter()
        .find(|e| e.handle == h)
        .copied()
        .unwrap_or_default()
}

/// CPU faults (proc_id = CPU, cpu.fault_va a user address) in an attached
/// and an unattached space: counted, never decoded; GPU faults still are.
/// Before the fix the module read cpu.fault_va + 48 in kernel mode: an oops.
pub(crate) fn cpu_fault() -> bool {
    let p = prescient();
    let f = uvm();
    let inf = info(&f);
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    let base = user_range(&inf);
    let before = settle(&p);
    let n = 2000;
    let r1 = cpu_faults(&f, base, n);
    let g = uvm();
    let r2 = cpu_faults(&g, base, n);
    let mid = settle(&p);
    let gpu_faults = run_kernels(&f, 0..20);
    let after = settle(&p);
    detach(&p, h);
    let cpu = mid.cpu_faults - before.cpu_faults;
    let seen_cpu = mid.faults_seen - before.faults_seen;
    let seen_gpu = after.faults_seen - mid.faults_seen;
    marker(
        "cpu-fault",
        r1.is_ok() && r2.is_ok() && cpu == 2 * n as u64 && seen_cpu == 0 && seen_gpu == gpu_faults && gpu_faults > 0,
        &format!(
            "{} CPU-fault events (attached and not): {cpu} counted, {seen_cpu} fed to the engine; then {gpu_faults} GPU faults, {seen_gpu} seen",
            2 * n
        ),
    )
}

/// Only the CPU-fault events, with no other ioctl of the module (any ABI
/// version): for booting an older prescient.ko (VMTEST_KO) and seeing what
/// the real driver's CPU faults do to it.
pub(crate) fn cpu_fault_raw() -> bool {
    let f = uvm();
    let inf = info(&f);
    let base = user_range(&inf);
    println!("cpu-fault-raw: raising 100 CPU-fault events");
    let r = cpu_faults(&f, base, 100);
    marker(
        "cpu-fault-raw",
        r.is_ok(),
        "the module survived 100 CPU-fault events",
    )
}

/// Faults name their GPU: prefetches land with no SET_GPU. Faults whose
/// GPU the fault path cannot name (580's entry->gpu NULL) fall back to
/// SET_GPU: none, no prefetch; a UUID that is not a GPU of the space: the
/// driver answers NV_ERR_INVALID_DEVICE and prefetching stops
/// (GPU_REJECTED); the space's own GPU's UUID: prefetches land.
pub(crate) fn gpu_uuid() -> bool {
    let p = prescient();
    let named = uvm();
    let inf = info(&named);
    let k = inf.kernels;
    let hn = attach(&p, named.as_raw_fd()).expect("ATTACH");
    run_kernels(&named, 0..k);
    run_kernels(&named, 0..k);
    settle(&p);
    let from_faults = space(&p, hn);
    detach(&p, hn);
    let f = uvm();
    let mut other = inf.gpu_uuid;
    other[15] ^= 0x5a;
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    run_kernels_on(&f, 0..k, ANONYMOUS);
    settle(&p);
    let none = space(&p, h);
    let bad_before = standin_counter("bad_uuid");
    let set_other = set_gpu(&p, h, other);
    run_kernels_on(&f, 0..k, ANONYMOUS);
    settle(&p);
    let wrong = space(&p, h);
    let bad = standin_counter("bad_uuid") - bad_before;
    let set_own = set_gpu(&p, h, inf.gpu_uuid);
    run_kernels_on(&f, 0..k, ANONYMOUS);
    run_kernels_on(&f, 0..k, ANONYMOUS);
    settle(&p);
    let right = space(&p, h);
    detach(&p, h);
    let ok = from_faults.gpu == u::GPU_UNKNOWN
        && from_faults.fault_gpus == 1
        && from_faults.prefetched > 0
        && none.gpu == u::GPU_UNKNOWN
        && none.fault_gpus == 0
        && none.prefetched == 0
        && set_other.is_ok()
        && wrong.gpu == u::GPU_REJECTED
        && wrong.prefetched == 0
        && bad > 0
        && set_own.is_ok()
        && right.gpu == u::GPU_SET
        && right.prefetched > 0;
    marker(
        "gpu-uuid",
        ok,
        &format!(
            "faults naming their GPU, no SET_GPU: {} GPU, prefetched {}; faults naming none: no UUID: gpu {} prefetched {}; a UUID not of this space: gpu {} prefetched {}, driver refused {bad}; its GPU's UUID: gpu {} prefetched {}",
            from_faults.fault_gpus, from_faults.prefetched, none.gpu, none.prefetched, wrong.gpu, wrong.prefetched, right.gpu, right.prefetched
        ),
    )
}

/// Migrations to each of the stand-in's GPUs, the refusals of UUIDs that
/// are not the space's, and GPU migrations of a block to a GPU other than
/// the one that faulted on it last.
fn gpu_counters() -> [u64; 5] {
    [
        standin_counter("migrated_to_gpu1"),
        standin_counter("migrated_to_gpu2"),
        standin_counter("migrated_to_gpu3"),
        standin_counter("bad_uuid"),
        standin_counter("wrong_gpu"),
    ]
}

/// One process on two GPUs (the stand-in's GPUs 1 and 2 registered in its
/// space, GPU 3 in the driver but not in the space): even blocks only ever
/// faulted from GPU 1, odd blocks from GPU 2, no SET_GPU. Every block's
/// migrations go to the GPU that faulted on it, both GPUs get prefetches,
/// GPU 3 none, and no UUID is refused. Then GPU 2 leaves the space: the
/// driver refuses it at most once, and nothing goes to it afterwards.
pub(crate) fn multi_gpu() -> bool {
    let p = prescient();
    let f = uvm();
    let k = info(&f).kernels;
    let reg = register_gpus(&f, 0b110);
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    let c0 = gpu_counters();
    let mut faults = vec![];
    for _ in 0..4 {
        faults.push(run_kernels_on(&f, 0..k, SPLIT));
    }
    settle(&p);
    let sp = space(&p, h);
    let c1 = gpu_counters();
    let d: Vec<u64> = (0..5).map(|i| c1[i] - c0[i]).collect();
    let routed = reg
        && sp.fault_gpus == 2
        && sp.gpu == u::GPU_UNKNOWN
        && d[0] > 0
        && d[1] > 0
        && d[2] == 0
        && d[3] == 0
        && d[4] == 0;
    marker(
        "multi-gpu",
        routed,
        &format!(
            "2 of 3 GPUs in the space, faults per iteration {faults:?}: {} GPUs named by faults; migrations to GPU1 {}, GPU2 {}, GPU3 (not the space's) {}; UUIDs refused {}; blocks sent to a GPU other than their faulting one {}",
            sp.fault_gpus, d[0], d[1], d[2], d[3], d[4]
        ),
    );
    // GPU 2 leaves; GPU 1 takes over the odd blocks.
    let left = register_gpus(&f, 0b010);
    run_kernels_on(&f, 0..k, 0);
    run_kernels_on(&f, 0..k, 0);
    settle(&p);
    let c2 = gpu_counters();
    detach(&p, h);
    let refused = c2[3] - c1[3];
    let ok = left && refused <= 1 && c2[2] == c1[2] && c2[0] > c1[0];
    marker(
        "gpu-leaves",
        ok,
        &format!(
            "GPU 2 unregistered: refused {refused} time(s), then migrations to GPU1 {}, GPU2 {}, GPU3 {}",
            c2[0] - c1[0],
            c2[1] - c1[1],
            c2[2] - c1[2]
        ),
    ) && routed
}

/// Against the stand-in built with 550's layouts (no uvm_api_discard),
/// loaded with uvm_enable_builtin_tests=1, and prescient.ko without
/// gpu_blocks: size unknown -> no prefetch or pre-eviction; a residency
/// budget -> prefetches, dead blocks migrated (never discarded); GPU faults
/// decoded at 550's offsets, CPU faults counted.
pub(crate) fn branch_550() -> bool {
    let p = prescient();
    let fd = p.as_raw_fd();
    let mut vb = [0u8; u::Version::SIZE];
    ioc(fd, u::PRESCIENT_IOC_GET_VERSION as u64, vb.as_mut_ptr()).expect("GET_VERSION");
    let v = u::Version::from_bytes(&vb).expect("version");
    let f = uvm();
    let inf = info(&f);
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    set_gpu(&p, h, inf.gpu_uuid).expect("SET_GPU");
    let k = inf.kernels;
    let faults0 = run_kernels(&f, 0..k);
    settle(&p);
    let unknown = space(&p, h);
    let unknown_ok = v.flags & u::VERSION_FLAG_GPU_SIZE_KNOWN == 0
        && unknown.faults == faults0
        && unknown.prefetched == 0
        && unknown.pre_evictions == 0
        && unknown.discards == 0;
    marker(
        "gpu-size-unknown",
        unknown_ok,
        &format!(
            "no gpu_blocks: flags {:#x}, {} faults seen, prefetched {}, pre-evicted {}",
            v.flags, unknown.faults, unknown.prefetched, unknown.pre_evictions
        ),
    );
    let mut pb = [0u8; u::ParamsAbi::SIZE];
    ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, pb.as_mut_ptr()).expect("GET_PARAMS");
    let p0 = u::ParamsAbi::from_bytes(&pb).expect("params");
    let mut b = u::ParamsAbi {
        residency_budget_bytes: u64::from(inf.gpu_blocks) * BLOCK as u64,
        ..p0
    }
    .to_bytes();
    let set = ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, b.as_mut_ptr());
    ioc(fd, u::PRESCIENT_IOC_GET_VERSION as u64, vb.as_mut_ptr()).expect("GET_VERSION");
    let v2 = u::Version::from_bytes(&vb).expect("version");
    let mut dead = u::RangeAbi {
        handle: h,
        addr: inf.base,
        len: u64::from(inf.blocks) * BLOCK as u64,
        flags: 0,
    }
    .to_bytes();
    let marked = ioc(fd, u::PRESCIENT_IOC_MARK_DEAD as u64, dead.as_mut_ptr());
    run_kernels(&f, 0..k);
    run_kernels(&f, 0..k);
    let base = user_range(&inf);
    let before = stats(&p).head.cpu_faults;
    let cpu = cpu_faults(&f, base, 100);
    let head = settle(&p);
    let known = space(&p, h);
    detach(&p, h);
    let ok = v.driver_version == (550u64 << 32 | 163 << 16 | 1)
        && v.flags & u::VERSION_FLAG_DISCARD == 0
        && set.is_ok()
        && marked.is_ok()
        && v2.flags & u::VERSION_FLAG_GPU_SIZE_KNOWN != 0
        && known.prefetched > 0
        && known.discards == 0
        && cpu.is_ok()
        && head.cpu_faults - before == 100
        && standin_counter("no_context") == 0;
    marker(
        "branch-550",
        ok,
        &format!(
            "550.163.01: flags {:#x} -> {:#x} with a budget; prefetched {}, pre-evicted {}, discarded {} (no uvm_api_discard), 100 CPU faults counted {}, thread contexts refused {}",
            v.flags,
            v2.flags,
            known.prefetched,
            known.pre_evictions,
            known.discards,
            head.cpu_faults - before,
            standin_counter("no_context")
        ),
    )
}

/// A fault storm in one attached space while the worker is held up (it
/// waits for that space's lock in a migration, as on a real fault batch)
/// and another attached space runs kernels: the storm may use only its
/// slot's share of the ring, so none of the other space's faults is lost.
pub(crate) fn ring_share() -> bool {
    const STANDIN_IOCTL_STORM: u64 = 0x7e00_0003;
    let p = prescient();
    let a = uvm();
    let b = uvm();
    let ha = attach(&p, a.as_raw_fd()).expect("ATTACH a");
    set_gpu(&p, ha, info(&a).gpu_uuid).expect("SET_GPU a");
    let hb = attach(&p, b.as_raw_fd()).expect("ATTACH b");
    let kernels = info(&b).kernels;
    let before = space(&p, hb).faults;
    let drops0 = stats(&p).head.queue_drops;
    let afd = a.as_raw_fd();
    let storm = std::thread::spawn(move || {
        // SAFETY: a test ioctl whose argument is a plain number.
        unsafe { libc::ioctl(afd, STANDIN_IOCTL_STORM as _, 300_000 as libc::c_ulong) }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let raised = run_kernels(&b, 0..kernels.min(200));
    let storm_rc = storm.join().unwrap_or(-1);
    settle(&p);
    let seen = space(&p, hb).faults - before;
    let drops = stats(&p).head.queue_drops - drops0;
    detach(&p, ha);
    detach(&p, hb);
    marker(
        "ring-share",
        storm_rc == 0 && raised > 0 && seen == raised && drops > 0,
        &format!(
            "300,000-event storm in one space ({drops} of its events dropped) while another ran kernels: {raised} faults raised there, {seen} seen"
        ),
    )
}
