//! prescient.ko reading a runtime's execution-id page (SET_EXEC_PAGE).
//!
//! The guest plays prescient-runtime: it makes the page as the runtime does
//! (a memfd named `execpage::MEMFD_NAME`, one page, `Page::init`), claims a
//! stream slot, and before each kernel of the trace writes that kernel's id
//! into the slot (the store the GPU's stream-ordered cuStreamWriteValue64
//! makes when the stream reaches the kernel), then launches the kernel in
//! the stand-in. Nothing tells the module which kernel runs but the page.
use crate::{
    attach, detach, fault_log, info, ioc, marker, prescient, print_fault_log, set_gpu, stats, uvm,
    STANDIN_IOCTL_KERNEL,
};
use prescient_uapi as u;
use prescient_uapi::execpage::{self, Page, PAGE_BYTES, PAGE_WORDS};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::AtomicU64;

/// A memfd as the runtime makes it, mapped shared.
pub(crate) struct Memfd {
    pub(crate) file: File,
    addr: usize,
}

impl Memfd {
    /// A memfd named as the runtime names it, `len` bytes long, its first
    /// page mapped if it has one.
    pub(crate) fn new(len: u64) -> Memfd {
        let name = std::ffi::CString::new(execpage::MEMFD_NAME).expect("name");
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: fd is ours alone.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len).expect("ftruncate");
        let addr = if len >= PAGE_BYTES as u64 {
            // SAFETY: one shared page of our own memfd.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    PAGE_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            p as usize
        } else {
            0
        };
        Memfd { file, addr }
    }

    /// The page's raw words (the memfd is at least a page long).
    pub(crate) fn words(&self) -> &[AtomicU64] {
        assert_ne!(self.addr, 0, "no page mapped");
        // SAFETY: a live shared mapping of PAGE_BYTES, page-aligned, unmapped
        // only on drop; AtomicU64 has u64's layout.
        unsafe { std::slice::from_raw_parts(self.addr as *const AtomicU64, PAGE_WORDS) }
    }

    /// The page in the runtime's format.
    pub(crate) fn page(&self) -> Page<'_> {
        Page::new(self.words()).expect("one page")
    }

    /// A page initialised by this process, as the runtime does at start.
    pub(crate) fn runtime_page() -> Memfd {
        let m = Memfd::new(PAGE_BYTES as u64);
        m.page().init(std::process::id());
        m
    }
}

impl Drop for Memfd {
    fn drop(&mut self) {
        if self.addr != 0 {
            // SAFETY: our own mapping, unmapped once.
            unsafe { libc::munmap(self.addr as *mut libc::c_void, PAGE_BYTES) };
        }
    }
}

/// SET_EXEC_PAGE for `handle` with the caller's descriptor `fd`.
pub(crate) fn set_page(p: &File, handle: u64, fd: i32) -> Result<(), i32> {
    let mut b = u::ExecPageAbi {
        handle,
        fd: fd as u32,
        flags: 0,
    }
    .to_bytes();
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_SET_EXEC_PAGE as u64,
        b.as_mut_ptr(),
    )
}

/// CLEAR_EXEC_PAGE for `handle`.
pub(crate) fn clear_page(p: &File, handle: u64) -> Result<(), i32> {
    let mut b = u::HandleAbi { handle }.to_bytes();
    ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_CLEAR_EXEC_PAGE as u64,
        b.as_mut_ptr(),
    )
}

/// Waits (at most 20 ms, spinning: the guest's sleeps are jiffy-sized)
/// until the module has read an id past `seen` for space `h`.
fn seen_after(p: &File, h: u64, seen: u64) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_millis(20) {
        if space(p, h).exec_ids > seen {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// The runtime's id of trace kernel `k`: a 48-bit hash (the runtime hashes
/// the kernel's identity), not the kernel's index.
fn kernel_id(k: u32) -> u64 {
    (u64::from(k) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16
}

/// Runs trace kernel `k` in the space of `f`: (faults, prefetch hits).
fn launch(f: &File, k: u32) -> Option<(u64, u64)> {
    // SAFETY: a test ioctl whose argument is a plain number.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), STANDIN_IOCTL_KERNEL as _, k as libc::c_ulong) };
    (r >= 0).then_some((r as u64 & 0xffff, (r as u64 >> 16) & 0x7fff))
}

/// The space entry of `handle` in GET_STATS.
fn space(p: &File, handle: u64) -> u::SpaceStats {
    let s = stats(p);
    s.spaces[..s.head.n_spaces as usize]
        .iter()
        .find(|e| e.handle == handle)
        .copied()
        .unwrap_or_default()
}

/// SET_PARAMS as the execution-id replay sets them (rows 16, lookahead and
/// watermark from the environment) but in TRANSPARENT mode: the space must
/// switch to execution-id mode because it has a page. Returns the old ones.
fn replay_params(p: &File) -> Result<u::ParamsAbi, i32> {
    let fd = p.as_raw_fd();
    let mut pb = [0u8; u::ParamsAbi::SIZE];
    ioc(fd, u::PRESCIENT_IOC_GET_PARAMS as u64, pb.as_mut_ptr())?;
    let p0 = u::ParamsAbi::from_bytes(&pb).map_err(|_| -1)?;
    let env = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let mut b = u::ParamsAbi {
        mode: u::MODE_TRANSPARENT,
        rows: 16,
        lookahead: env("VMTEST_LOOKAHEAD", 16),
        pre_evict_watermark_pct: env("VMTEST_WATERMARK", p0.pre_evict_watermark_pct),
        ..p0
    }
    .to_bytes();
    ioc(fd, u::PRESCIENT_IOC_SET_PARAMS as u64, b.as_mut_ptr())?;
    Ok(p0)
}

/// The execution-id replay with ids from the page only: 8 iterations of
/// the trace, the guest writing each kernel's id into its stream slot
/// before launching it. Faults per iteration go to `out` for the cut.
///
/// `long_kernels`: each kernel lasts until the module has read its id (the
/// launch waits for GET_STATS' `exec_ids` to move, at most 20 ms): kernels
/// longer than the module's poll period. This guest has no high-resolution
/// timers, so the worker's poll is jiffy-sized (4 ms) and the stand-in's
/// 1 ms kernels run back to back in 4 ms batches: without it most
/// kernels that do not fault are never seen. Without it (`false`) the
/// replay shows what the module makes of the kernels it sees.
pub(crate) fn replay_exec_page(iters: usize, out: &str, long_kernels: bool) -> bool {
    let name = if long_kernels {
        "replay-exec-page"
    } else {
        "replay-exec-page-short"
    };
    let p = prescient();
    let Ok(p0) = replay_params(&p) else {
        return marker("replay-exec-page", false, "SET_PARAMS");
    };
    let f = uvm();
    let inf = info(&f);
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    set_gpu(&p, h, inf.gpu_uuid).expect("SET_GPU");
    let m = Memfd::runtime_page();
    let page = m.page();
    let reg = set_page(&p, h, m.file.as_raw_fd());
    let sp = space(&p, h);
    let mut ok = reg.is_ok()
        && sp.exec_page == u::EXEC_PAGE_SET
        && stats(&p).head.exec_pages == 1
        && page.ids_wanted();
    println!(
        "exec-page: SET_EXEC_PAGE {reg:?}, space {sp:?}, ids wanted {}",
        page.ids_wanted()
    );
    // The runtime's stream: one slot, claimed as the runtime claims it.
    let slot = page.claim(0x5157_0001).slot();
    let t0 = std::time::Instant::now();
    let mut v = vec![];
    let (mut waited, mut late) = (std::time::Duration::ZERO, 0u64);
    for it in 0..iters {
        let (mut faults, mut hits) = (0, 0);
        for k in 0..inf.kernels {
            let seen = if long_kernels {
                space(&p, h).exec_ids
            } else {
                0
            };
            page.write_slot(slot, kernel_id(k));
            page.count_launch();
            let Some((fl, hi)) = launch(&f, k) else {
                ok = false;
                break;
            };
            faults += fl;
            hits += hi;
            if long_kernels {
                let w = std::time::Instant::now();
                late += u64::from(!seen_after(&p, h, seen));
                waited += w.elapsed();
            }
        }
        println!("replay: {name} iter {it} faults {faults} prefetch_hits {hits}");
        let log = fault_log(&f);
        if it >= iters / 2 {
            print_fault_log(name, it, &log);
        }
        v.push(faults);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let sp = space(&p, h);
    let attributed = sp.exec_faults as f64 / sp.faults.max(1) as f64;
    println!(
        "replay: {name} {:.2}s space {sp:?}: {:.1}% of faults attributed, {} ids read of {} kernels launched; waited {:.2}s for the module to read ids, {late} not read within 20 ms",
        t0.elapsed().as_secs_f64(),
        100.0 * attributed,
        sp.exec_ids,
        iters as u64 * u64::from(inf.kernels),
        waited.as_secs_f64()
    );
    ok &= attributed >= 0.99;
    // Unregister, twice: the second finds none.
    let c1 = clear_page(&p, h);
    let c2 = clear_page(&p, h);
    let after = space(&p, h);
    println!("exec-page: CLEAR {c1:?} then {c2:?}; space {after:?}");
    ok &= c1.is_ok()
        && c2 == Err(u::errno::ENOENT)
        && after.exec_page == u::EXEC_PAGE_NONE
        && stats(&p).head.exec_pages == 0
        && !page.ids_wanted();
    detach(&p, h);
    let mut back = p0.to_bytes();
    ok &= ioc(
        p.as_raw_fd(),
        u::PRESCIENT_IOC_SET_PARAMS as u64,
        back.as_mut_ptr(),
    )
    .is_ok();
    let txt: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    std::fs::write(out, txt.join(" ")).expect("write result");
    marker(
        name,
        ok && v.len() == iters,
        &format!(
            "ids from the page only (SET_EXEC_PAGE, space switched to execution-id mode); {:.1}% of faults attributed; CLEAR then CLEAR: Ok, ENOENT",
            100.0 * attributed
        ),
    )
}

/// Waits for child `pid`; true if it exited with status 0.
fn reap(pid: libc::pid_t) -> bool {
    let mut st = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    r == pid && libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
}

/// Forks; the child runs `f` and exits with 0 if it returned true.
fn fork_run(f: impl FnOnce() -> bool) -> libc::pid_t {
    // SAFETY: the guest binary is single-threaded here; the child only runs
    // `f` and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let ok = f();
        // SAFETY: leaves the child at once, without running the parent's
        // destructors a second time.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

/// Waits up to 2 s for GET_STATS' `exec_pages` to reach `want`.
fn pages_settle(p: &File, want: u32) -> u32 {
    let mut n = u32::MAX;
    for _ in 0..40 {
        n = stats(p).head.exec_pages;
        if n == want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    n
}

/// Bad input to SET_EXEC_PAGE / CLEAR_EXEC_PAGE: wrong descriptor types,
/// pages too small or not in the format, bad arguments, registering and
/// unregistering twice; a writer that exits while the page is registered;
/// a registered process that exits without cleaning up.
pub(crate) fn exec_page_bad() -> bool {
    use u::errno::*;
    let p = prescient();
    let f = uvm();
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    let mut ok = true;
    let mut check = |name: &str, got: Result<(), i32>, want: Result<(), i32>| {
        if got != want {
            println!("exec-page-bad: {name}: got {got:?} want {want:?}");
            ok = false;
        }
    };
    let null = File::open("/dev/null").expect("/dev/null");
    check("/dev/null", set_page(&p, h, null.as_raw_fd()), Err(EINVAL));
    check("nvidia-uvm fd", set_page(&p, h, f.as_raw_fd()), Err(EINVAL));
    check(
        "/dev/prescient",
        set_page(&p, h, p.as_raw_fd()),
        Err(EINVAL),
    );
    let mut pipe = [0i32; 2];
    // SAFETY: pipe() writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    check("pipe", set_page(&p, h, pipe[0]), Err(EINVAL));
    check("closed fd", set_page(&p, h, 999), Err(EBADF));
    check(
        "empty memfd",
        set_page(&p, h, Memfd::new(0).file.as_raw_fd()),
        Err(EINVAL),
    );
    let small = Memfd::new(100);
    check(
        "100-byte memfd",
        set_page(&p, h, small.file.as_raw_fd()),
        Err(EINVAL),
    );
    let blank = Memfd::new(PAGE_BYTES as u64);
    check(
        "uninitialised page",
        set_page(&p, h, blank.file.as_raw_fd()),
        Err(EINVAL),
    );
    let m = Memfd::runtime_page();
    let words = m.words();
    let store = |i: usize, v: u64| words[i].store(v, std::sync::atomic::Ordering::SeqCst);
    store(0, execpage::MAGIC + 1);
    check(
        "other format version",
        set_page(&p, h, m.file.as_raw_fd()),
        Err(EINVAL),
    );
    store(0, execpage::MAGIC);
    store(execpage::W_SLOTS, 9999);
    check(
        "wrong slot count",
        set_page(&p, h, m.file.as_raw_fd()),
        Err(EINVAL),
    );
    store(execpage::W_SLOTS, execpage::SLOTS as u64);
    let wo = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{}", m.file.as_raw_fd()))
        .expect("write-only reopen");
    check("write-only fd", set_page(&p, h, wo.as_raw_fd()), Err(EBADF));
    let raw = |handle: u64, fd: u32, flags: u32| {
        let mut b = u::ExecPageAbi { handle, fd, flags }.to_bytes();
        ioc(
            p.as_raw_fd(),
            u::PRESCIENT_IOC_SET_EXEC_PAGE as u64,
            b.as_mut_ptr(),
        )
    };
    let fd = m.file.as_raw_fd() as u32;
    check("handle 0", raw(0, fd, 0), Err(EINVAL));
    check("flags", raw(h, fd, 1), Err(EINVAL));
    check("fd > i32", raw(h, u32::MAX, 0), Err(EINVAL));
    check("unknown handle", raw(h + 100, fd, 0), Err(ENOENT));
    check(
        "bad pointer",
        ioc(
            p.as_raw_fd(),
            u::PRESCIENT_IOC_SET_EXEC_PAGE as u64,
            8 as *mut u8,
        ),
        Err(EFAULT),
    );
    check("CLEAR none", clear_page(&p, h), Err(ENOENT));
    check("CLEAR handle 0", clear_page(&p, 0), Err(EINVAL));
    check("CLEAR unknown", clear_page(&p, h + 100), Err(ENOENT));
    check("register", set_page(&p, h, m.file.as_raw_fd()), Ok(()));
    check(
        "register twice",
        set_page(&p, h, m.file.as_raw_fd()),
        Err(EEXIST),
    );
    let asking = m.page().ids_wanted();
    check(
        "a refused second registration leaves the ids asked for",
        if asking { Ok(()) } else { Err(0) },
        Ok(()),
    );
    check("CLEAR", clear_page(&p, h), Ok(()));
    check("CLEAR twice", clear_page(&p, h), Err(ENOENT));
    let bad_done = pages_settle(&p, 0) == 0;
    check(
        "nothing pinned",
        if bad_done { Ok(()) } else { Err(0) },
        Ok(()),
    );
    ok &= writer_exits(&p, &f, h);
    detach(&p, h);
    ok &= owner_exits(&p);
    marker(
        "exec-page-bad-input",
        ok,
        "wrong fd types, small/blank/foreign pages, bad args, register/CLEAR twice, a writer that exits, an owner that exits",
    )
}

/// A writer that exits: a child process (the runtime's role) writes ids
/// into the registered page while this process launches kernels, then
/// exits; this process then closes and unmaps its own copy, so only the
/// module still holds the page. Launches go on (stale ids, no error), the
/// page stays pinned until the space lets it go.
fn writer_exits(p: &File, f: &File, h: u64) -> bool {
    let m = Memfd::runtime_page();
    if set_page(p, h, m.file.as_raw_fd()).is_err() {
        println!("exec-page-bad: writer-exits: register failed");
        return false;
    }
    let slot = m.page().claim(0x77).slot();
    let child = fork_run(|| {
        let page = m.page();
        for i in 0..20_000u64 {
            page.write_slot(slot, 0x1234_0000 + i % 50);
            if i % 1000 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        true
    });
    let mut launched = 0;
    for k in 0..200 {
        launched += launch(f, k).is_some() as u32;
    }
    let child_ok = reap(child);
    drop(m);
    for k in 200..400 {
        launched += launch(f, k).is_some() as u32;
    }
    let sp = space(p, h);
    let held = stats(p).head.exec_pages;
    let cleared = clear_page(p, h);
    let freed = pages_settle(p, 0);
    println!(
        "exec-page-bad: writer exited ({child_ok}); {launched} launches; space {sp:?}; pages held {held}, after CLEAR {cleared:?}: {freed}"
    );
    child_ok && launched == 400 && sp.exec_ids > 0 && held == 1 && cleared.is_ok() && freed == 0
}

/// An owner that exits: a child attaches its own space, registers its
/// page and exits without DETACH or CLEAR; the worker detaches the orphan
/// and unpins the page.
fn owner_exits(p: &File) -> bool {
    let spaces0 = stats(p).head.n_spaces;
    let child = fork_run(|| {
        let p = prescient();
        let f = uvm();
        let m = Memfd::runtime_page();
        let Ok(h) = attach(&p, f.as_raw_fd()) else {
            return false;
        };
        let ok = set_page(&p, h, m.file.as_raw_fd()).is_ok() && stats(&p).head.exec_pages == 1;
        std::mem::forget((f, m));
        ok
    });
    let child_ok = reap(child);
    let freed = pages_settle(p, 0);
    let spaces = stats(p).head.n_spaces;
    println!("exec-page-bad: owner exited ({child_ok}); pages held {freed}, spaces {spaces} (before {spaces0})");
    child_ok && freed == 0 && spaces == spaces0
}

/// Attaches this process with a registered page, closes /dev/prescient
/// (an open one would pin the module) and keeps both for `secs` seconds,
/// writing ids and launching kernels: for rmmod with a page registered.
pub(crate) fn hold(secs: u64) -> bool {
    let f = uvm();
    let m = Memfd::runtime_page();
    let ok = {
        let p = prescient();
        let h = attach(&p, f.as_raw_fd());
        let inf = info(&f);
        h.is_ok_and(|h| {
            set_gpu(&p, h, inf.gpu_uuid).is_ok() && set_page(&p, h, m.file.as_raw_fd()).is_ok()
        })
    };
    println!("exec-page-hold: registered {ok}");
    let slot = m.page().claim(0x99).slot();
    let t0 = std::time::Instant::now();
    let mut k = 0;
    while t0.elapsed().as_secs() < secs {
        m.page().write_slot(slot, kernel_id(k));
        launch(&f, k);
        k = (k + 1) % 1000;
    }
    ok
}
