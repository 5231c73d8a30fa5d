//! Guest scenarios against the REAL nvidia-uvm (vm-tests/real-uvm/): managed memory made the
//! way CUDA makes it, without libcuda (UVM_INITIALIZE, then an mmap of /dev/nvidia-uvm at
//! offset = address), with prescient.ko loaded and attached. Prints `VMTEST: <name> PASS|FAIL`.
//! usage: realuvm nodes | cpu-fault | migrate | discard | advice | tools | exit-attached | fault-loop SECS
//! The driver's numbers below are from its uvm_ioctl.h / uvm_linux_ioctl.h / uvm_types.h (550.163.01
//! and 580.142, compiled with offsetof by tools/uvm-layouts' method); a wrong one fails the
//! scenario, it cannot make it pass.
use prescient_uapi as u;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

/// UVM_INITIALIZE (uvm_linux_ioctl.h): params {u64 flags; u32 rmStatus}.
const UVM_INITIALIZE: u64 = 0x3000_0001;
/// UVM_MIGRATE (51): UVM_MIGRATE_PARAMS, 80 bytes; base 0, length 8, uuid 16, cpuNumaNode 52, rmStatus 72.
const UVM_MIGRATE: u64 = 51;
/// UVM_DISCARD (80; from 580.65.06): {base, length, flags, rmStatus @24}, 32 bytes.
const UVM_DISCARD: u64 = 80;
/// NV_PROCESSOR_UUID_CPU_DEFAULT (nvCpuUuid.c).
const UUID_CPU: [u8; 16] = [
    0xa6, 0x5e, 0x0f, 0x4e, 0xd7, 0xd4, 0x7b, 0xa2, 0x50, 0x47, 0x41, 0x2c, 0x14, 0x2a, 0x77, 0x73,
];
const NV_OK: u32 = 0;
const NV_ERR_INVALID_DEVICE: u32 = 0x26;
/// One managed range: 2 MiB-aligned, 8 MiB (4 va_blocks).
const RANGE: usize = 8 << 20;
const PAGE: usize = 4096;

fn marker(name: &str, ok: bool, detail: &str) -> bool {
    println!(
        "VMTEST: {name} {} {detail}",
        if ok { "PASS" } else { "FAIL" }
    );
    ok
}

/// ioctl with a byte buffer; Ok(()) or Err(errno).
fn ioc(fd: i32, cmd: u64, buf: *mut u8) -> Result<(), i32> {
    // SAFETY: every caller passes a buffer at least as large as the command reads or writes.
    let r = unsafe { libc::ioctl(fd, cmd as _, buf) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

fn rw(path: &str) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"))
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The bound driver's branch (550, 580) from /sys/module/nvidia_uvm/version.
fn branch() -> u32 {
    let v = std::fs::read_to_string("/sys/module/nvidia_uvm/version").unwrap_or_default();
    v.trim()
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// /dev/nvidia-uvm (minor 0) and /dev/nvidia-uvm-tools (minor 1): nvidia-uvm only allocates a
/// chrdev region, so nothing creates the nodes (udev would, from the driver's userspace).
fn nodes() -> bool {
    let devs = std::fs::read_to_string("/proc/devices").unwrap_or_default();
    let Some(major) = devs.lines().find_map(|l| {
        let (n, name) = l.trim().split_once(' ')?;
        (name == "nvidia-uvm")
            .then(|| n.parse::<u32>().ok())
            .flatten()
    }) else {
        return marker("real-uvm-nodes", false, "no nvidia-uvm in /proc/devices");
    };
    for (path, minor) in [("/dev/nvidia-uvm\0", 0), ("/dev/nvidia-uvm-tools\0", 1)] {
        // SAFETY: a NUL-terminated path; mknod has no memory effects on this process.
        let r = unsafe {
            libc::mknod(
                path.as_ptr().cast(),
                libc::S_IFCHR | 0o666,
                libc::makedev(major, minor),
            )
        };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return marker("real-uvm-nodes", false, &format!("mknod {path}"));
        }
    }
    true
}

/// A va_space: /dev/nvidia-uvm after UVM_INITIALIZE (what cuInit does first).
fn va_space() -> File {
    let f = rw("/dev/nvidia-uvm");
    let mut p = [0u8; 16];
    ioc(f.as_raw_fd(), UVM_INITIALIZE, p.as_mut_ptr()).expect("UVM_INITIALIZE");
    assert_eq!(get32(&p, 8), NV_OK, "UVM_INITIALIZE rmStatus");
    f
}

/// A managed range of RANGE bytes the way cudaMallocManaged makes it: reserve 2 MiB-aligned VA,
/// then map /dev/nvidia-uvm over it at offset = address (uvm_mmap demands both).
fn managed(f: &File) -> *mut u8 {
    // SAFETY: an anonymous PROT_NONE reservation; only this function uses the addresses.
    let res = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            RANGE * 2,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(res, libc::MAP_FAILED, "reserve");
    let addr = (res as usize + (2 << 20) - 1) & !((2 << 20) - 1);
    // SAFETY: MAP_FIXED over our own reservation, at offset = address as the driver requires.
    let m = unsafe {
        libc::mmap(
            addr as *mut _,
            RANGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            f.as_raw_fd(),
            addr as libc::off_t,
        )
    };
    assert_eq!(m as usize, addr, "mmap /dev/nvidia-uvm at offset = address");
    m.cast()
}

/// Writes then reads back every page: each first touch is a CPU fault on managed memory
/// (uvm_vm_fault -> uvm_va_block_cpu_fault -> uvm_perf_event_notify(FAULT, proc_id = CPU)).
fn touch(m: *mut u8, salt: u8) -> bool {
    for off in (0..RANGE).step_by(PAGE) {
        // SAFETY: off < RANGE, inside the mapping managed() made.
        unsafe { m.add(off).write_volatile((off / PAGE) as u8 ^ salt) };
    }
    // SAFETY: as above.
    (0..RANGE)
        .step_by(PAGE)
        .all(|off| unsafe { m.add(off).read_volatile() } == (off / PAGE) as u8 ^ salt)
}

/// GET_STATS; the default (all zero) if the module refuses it (an older ABI: the CPU-fault
/// scenario must still touch the memory, to show what that module does then).
fn prescient_stats(p: &File) -> u::Stats {
    let mut b = [0u8; u::Stats::SIZE];
    match ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_GET_STATS as u64,
        b.as_mut_ptr(),
    ) {
        Ok(()) => u::Stats::from_bytes(&b).unwrap_or_default(),
        Err(e) => {
            println!("realuvm: GET_STATS errno {e}");
            u::Stats::default()
        }
    }
}

fn prescient_version(p: &File) -> u::Version {
    let mut b = [0u8; u::Version::SIZE];
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_GET_VERSION as u64,
        b.as_mut_ptr(),
    )
    .expect("GET_VERSION");
    u::Version::from_bytes(&b).expect("version")
}

/// ATTACH the va_space behind `uvm` to prescient; the handle.
fn attach(p: &File, uvm: &File) -> Result<u64, i32> {
    let mut t = u::Target {
        kind: u::TARGET_FD,
        id: uvm.as_raw_fd() as u32,
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

/// CPU faults on managed memory with prescient bound and attached: data intact, the module
/// counted them (and did not decode cpu.fault_va as a GPU fault entry: today's module oopses).
fn cpu_fault() -> bool {
    let p = rw("/dev/prescient");
    let f = va_space();
    let h = attach(&p, &f);
    let before = prescient_stats(&p).head.cpu_faults;
    let m = managed(&f);
    let data = touch(m, 0x5a);
    let s = prescient_stats(&p).head;
    let n = s.cpu_faults - before;
    let ok = h.is_ok() && data && n > 0 && s.faults_seen == 0;
    marker("real-uvm-cpu-fault", ok, &format!(
        "(nvidia-uvm {}: {} pages touched, data {}, attach {:?}, cpu_faults +{n}, GPU faults seen {})",
        branch(), RANGE / PAGE, if data { "intact" } else { "WRONG" }, h, s.faults_seen))
}

/// UVM_MIGRATE of CPU-resident managed memory to the CPU (NV_OK) and to a GPU this va_space
/// does not have (NV_ERR_INVALID_DEVICE), the driver's own ioctl with prescient attached.
fn migrate() -> bool {
    let p = rw("/dev/prescient");
    let f = va_space();
    let h = attach(&p, &f);
    let m = managed(&f);
    let data = touch(m, 0x33);
    let run = |uuid: &[u8; 16]| {
        let mut b = [0u8; 80];
        put(&mut b, 0, &(m as u64).to_le_bytes());
        put(&mut b, 8, &(RANGE as u64).to_le_bytes());
        put(&mut b, 16, uuid);
        put(&mut b, 52, &(-1i32).to_le_bytes());
        ioc(f.as_raw_fd(), UVM_MIGRATE, b.as_mut_ptr()).map(|_| get32(&b, 72))
    };
    let to_cpu = run(&UUID_CPU);
    let to_bad = run(&[0x42; 16]);
    let still = touch(m, 0x33) && data;
    let ok = h.is_ok() && to_cpu == Ok(NV_OK) && to_bad == Ok(NV_ERR_INVALID_DEVICE) && still;
    marker(
        "real-uvm-migrate",
        ok,
        &format!(
        "(to CPU: {to_cpu:x?}, to an unknown GPU: {to_bad:x?} (want Ok(26)), data after: {still})"),
    )
}

/// UVM_DISCARD where the branch has it (580: NV_OK); on 550 the driver has no such ioctl and
/// prescient must say discard is off (VERSION_FLAG_DISCARD clear).
fn discard() -> bool {
    let p = rw("/dev/prescient");
    let flags = prescient_version(&p).flags;
    let f = va_space();
    let m = managed(&f);
    touch(m, 0x77);
    let mut b = [0u8; 32];
    put(&mut b, 0, &(m as u64).to_le_bytes());
    put(&mut b, 8, &(RANGE as u64).to_le_bytes());
    let r = ioc(f.as_raw_fd(), UVM_DISCARD, b.as_mut_ptr()).map(|_| get32(&b, 24));
    let has = flags & u::VERSION_FLAG_DISCARD != 0;
    let (ok, what) = match branch() {
        550 => (
            r.is_err() && !has,
            "550 has no UVM_DISCARD/uvm_api_discard: prescient degrades (discard off); \
                 its 580 discard path runs only through the stand-in (vm-tests/run.sh)",
        ),
        _ => (
            r == Ok(NV_OK) && has,
            "the real driver's UVM_DISCARD, prescient's discard on",
        ),
    };
    marker(
        "real-uvm-discard",
        ok,
        &format!(
            "(nvidia-uvm {}: UVM_DISCARD {r:x?}, prescient discard flag {has}; {what})",
            branch()
        ),
    )
}

/// prescientd's host-memory advice (daemon/src/userspace/shared.rs), through the uvm crate's
/// own calls: preferred location CPU and accessed by the CPU on a managed range (NV_OK), accessed
/// by a GPU the space does not have (NV_ERR_INVALID_DEVICE: the UUID is read where the driver
/// reads it), then both taken back (NV_OK); the data stays intact.
fn advice() -> bool {
    use prescient_uvm::ioctl::{self as uvm, IoctlError};
    let f = va_space();
    let m = managed(&f);
    let data = touch(m, 0x5a);
    let (fd, base, len) = (f.as_raw_fd(), m as u64, RANGE as u64);
    let pref = uvm::set_preferred_location(fd, base, len, uvm::CPU_UUID);
    let by_cpu = uvm::set_accessed_by(fd, base, len, uvm::CPU_UUID);
    let by_bad = uvm::set_accessed_by(fd, base, len, [0x42; 16]);
    let unset_by = uvm::unset_accessed_by(fd, base, len, uvm::CPU_UUID);
    let unset_pref = uvm::unset_preferred_location(fd, base, len);
    let still = touch(m, 0x5a) && data;
    let ok = pref.is_ok()
        && by_cpu.is_ok()
        && by_bad == Err(IoctlError::Rm(NV_ERR_INVALID_DEVICE))
        && unset_by.is_ok()
        && unset_pref.is_ok()
        && still;
    marker(
        "real-uvm-advice",
        ok,
        &format!(
            "(preferred CPU {pref:?}, accessed by CPU {by_cpu:?}, by an unknown GPU {by_bad:?} \
             (want Rm(38)), unset {unset_by:?} / {unset_pref:?}, data after: {still})"
        ),
    )
}

/// The tools event queue of this branch: (init ioctl, params size, version field, entry size).
/// 550: V1 entries (64 B) through UVM_TOOLS_INIT_EVENT_TRACKER (56) with requestedVersion 1 at
/// +52; 580: UVM_TOOLS_INIT_EVENT_TRACKER_V2 (76), 56-byte params, 72-byte entries.
fn tools_abi() -> (u64, usize, Option<usize>, usize) {
    if branch() >= 580 {
        (76, 56, None, 72)
    } else {
        (56, 64, Some(52), 64)
    }
}

/// The tools event queue: a tracker on /dev/nvidia-uvm-tools for this va_space with CPU-fault
/// events on; after the touches and UVM_TOOLS_FLUSH_EVENTS (67, an ioctl of the va_space fd, not
/// of the tools fd) the queue holds CPU faults.
fn tools() -> bool {
    let f = va_space();
    let t = rw("/dev/nvidia-uvm-tools");
    let (init, size, ver_at, entry) = tools_abi();
    let count = 256usize;
    let q = vec![0u8; count * entry + PAGE];
    let ctl = vec![0u8; 2 * PAGE];
    let qa = (q.as_ptr() as usize + PAGE - 1) & !(PAGE - 1);
    let ca = (ctl.as_ptr() as usize + PAGE - 1) & !(PAGE - 1);
    let mut b = vec![0u8; size];
    put(&mut b, 0, &(qa as u64).to_le_bytes());
    put(&mut b, 8, &(count as u64).to_le_bytes());
    put(&mut b, 16, &(ca as u64).to_le_bytes());
    put(&mut b, 40, &1u32.to_le_bytes()); // allProcessors
    put(&mut b, 44, &(f.as_raw_fd() as u32).to_le_bytes());
    if let Some(at) = ver_at {
        put(&mut b, at, &1u32.to_le_bytes());
    }
    let r_init = ioc(t.as_raw_fd(), init, b.as_mut_ptr()).map(|_| get32(&b, 48));
    let mut en = [0u8; 16];
    put(&mut en, 0, &(1u64 << 1).to_le_bytes()); // UVM_EVENT_ENABLE_CPU_FAULT (type 1)
    let r_en = ioc(t.as_raw_fd(), 58, en.as_mut_ptr()).map(|_| get32(&en, 8));
    let touched = touch(managed(&f), 0x11);
    let mut fl = [0u8; 4];
    let r_fl = ioc(f.as_raw_fd(), 67, fl.as_mut_ptr()).map(|_| get32(&fl, 0));
    // SAFETY: ca is inside `ctl`, 4-byte aligned; the driver writes put_behind (+12) there.
    let put_behind = unsafe { (ca as *const u32).add(3).read_volatile() } as usize;
    let cpu = (0..put_behind.min(count))
        // SAFETY: entry i lies inside `q` (i < count); byte 0 is the event type.
        .filter(|i| unsafe { *((qa + i * entry) as *const u8) } == 1)
        .count();
    let ok = r_init == Ok(NV_OK) && r_en == Ok(NV_OK) && r_fl == Ok(NV_OK) && touched && cpu > 0;
    marker("real-uvm-tools", ok, &format!(
        "(init {r_init:x?}, enable {r_en:x?}, flush {r_fl:x?}: {put_behind} events queued, {cpu} CPU faults)"))
}

/// A child makes managed memory, attaches it to prescient, faults and exits without cleaning
/// up: the driver tears the va_space down while prescient holds it; prescient forgets it.
fn exit_attached() -> bool {
    // SAFETY: fork in a single-threaded program; the child only runs Rust code and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let p = rw("/dev/prescient");
        let f = va_space();
        let ok = attach(&p, &f).is_ok() && touch(managed(&f), 0x99);
        std::process::exit(if ok { 0 } else { 1 });
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    let p = rw("/dev/prescient");
    let left = (0..50)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            prescient_stats(&p).head.n_spaces
        })
        .find(|&n| n == 0);
    marker(
        "real-uvm-exit-attached",
        st == 0 && left == Some(0),
        &format!("(child status {st}, attached spaces after its exit: {left:?})"),
    )
}

/// Faults for SECS seconds on fresh managed ranges (for rmmod of prescient.ko meanwhile).
fn fault_loop(secs: u64) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut rounds = 0u32;
    while std::time::Instant::now() < end {
        let f = va_space();
        // attached, then /dev/prescient closed: an open fd would pin the module (no rmmod)
        if let Ok(p) = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/prescient")
        {
            let _ = attach(&p, &f);
        }
        if !touch(managed(&f), rounds as u8) {
            return marker(
                "real-uvm-fault-loop",
                false,
                &format!("data wrong in round {rounds}"),
            );
        }
        rounds += 1;
    }
    println!("realuvm: fault-loop {rounds} rounds");
    true
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ok = match args.get(1).map(String::as_str) {
        Some("nodes") => nodes(),
        Some("cpu-fault") => cpu_fault(),
        Some("migrate") => migrate(),
        Some("discard") => discard(),
        Some("advice") => advice(),
        Some("tools") => tools(),
        Some("exit-attached") => exit_attached(),
        Some("fault-loop") => fault_loop(args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5)),
        _ => {
            eprintln!("usage: realuvm nodes|cpu-fault|migrate|discard|advice|tools|exit-attached|fault-loop SECS");
            false
        }
    };
    std::process::exit(if ok { 0 } else { 1 });
}
