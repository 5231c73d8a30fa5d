// SPDX-License-Identifier: GPL-2.0
//! The C side (glue.c, uvm.c) behind safe wrappers: every `extern "C"`
//! prototype of the module and every `unsafe` block of its Rust code is in
//! this file.
//!
//! The prototypes mirror kmod/glue.h; the C functions take no lock of ours
//! and may be called from any thread unless a wrapper says otherwise.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;

use crate::execpage;
use crate::gpus::FaultGpu;

extern "C" {
    fn prescient_c_find_driver(ver: *mut c_char, len: c_int) -> c_int;
    fn prescient_c_release_driver();
    fn prescient_c_start(branch: c_int) -> c_int;
    fn prescient_c_stop();
    fn prescient_c_kick();
    fn prescient_c_gpu_blocks() -> c_uint;
    fn prescient_c_max_table_mib() -> c_uint;
    fn prescient_c_default_gpu(out: *mut u8) -> c_int;
    fn prescient_c_cond_resched();
    fn prescient_c_jiffies() -> u64;
    fn prescient_c_hz() -> c_uint;
    fn prescient_c_has_discard() -> c_int;
    fn prescient_c_cpu_faults() -> u64;
    fn prescient_c_enable() -> c_uint;
    fn prescient_c_capable_admin() -> c_int;
    fn prescient_c_log_bad(cmd: c_uint, err: c_int);
    fn prescient_c_file_from_fd(fd: c_int, va_space: *mut u64, err: *mut c_int) -> *mut c_void;
    fn prescient_c_file_from_pid(
        pid: c_int,
        va_space: *mut u64,
        owner: *mut *mut c_void,
        err: *mut c_int,
    ) -> *mut c_void;
    fn prescient_c_pid_current() -> *mut c_void;
    fn prescient_c_pid_find(nr: c_int) -> *mut c_void;
    fn prescient_c_pid_is_current(p: *mut c_void) -> c_int;
    fn prescient_c_pid_vnr(p: *mut c_void) -> c_int;
    fn prescient_c_pid_nr(p: *mut c_void) -> c_int;
    fn prescient_c_pid_uid(p: *mut c_void) -> u32;
    fn prescient_c_pid_put(p: *mut c_void);
    fn prescient_c_file_put(f: *mut c_void);
    fn prescient_c_file_orphaned(f: *mut c_void) -> c_int;
    fn prescient_c_migrate(f: *mut c_void, base: u64, len: u64, gpu_uuid: *const u8) -> u32;
    fn prescient_c_discard(f: *mut c_void, base: u64, len: u64) -> u32;
    fn prescient_c_exec_page_get(
        fd: c_int,
        bytes: u64,
        words: *mut *mut c_void,
        err: *mut c_int,
    ) -> *mut c_void;
    fn prescient_c_exec_page_put(folio: *mut c_void);
}

/// `-EOPNOTSUPP`, which the 6.12 `kernel` crate has no constant for.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(kernel::bindings::EOPNOTSUPP as c_int))
}

/// NV_ERR_INVALID_DEVICE: the destination UUID is not a processor of the
/// address space (uvm_api_migrate's answer to an unknown GPU).
const NV_ERR_INVALID_DEVICE: u32 = 0x26;

/// The driver answered a migration or discard with an NV_STATUS other than
/// NV_OK (or the glue could not make the call: NV_ERR_NO_MEMORY,
/// NV_ERR_INVALID_STATE, NV_ERR_NOT_SUPPORTED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NvError {
    /// NV_ERR_INVALID_DEVICE: the GPU UUID is not one of this space's.
    InvalidDevice,
    /// Any other status: only counted.
    Other,
}

/// Turns an NV_STATUS into a `Result` (NV_OK is 0).
fn nv_result(status: u32) -> Result<(), NvError> {
    match status {
        0 => Ok(()),
        NV_ERR_INVALID_DEVICE => Err(NvError::InvalidDevice),
        _ => Err(NvError::Other),
    }
}

/// Where a migration sends a block.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination<'a> {
    /// The GPU with this processor UUID (a prefetch).
    Gpu(&'a [u8; 16]),
    /// The CPU (a pre-eviction).
    Cpu,
}

/// nvidia-uvm, found through /dev/nvidia-uvm and pinned (a module
/// reference) until this is dropped.
pub(crate) struct Driver {
    version: [u8; 64],
    len: usize,
}

impl Driver {
    /// Finds and pins nvidia-uvm; an error if it is not loaded or not the
    /// module that owns /dev/nvidia-uvm (glue.c logs why).
    pub(crate) fn find() -> Result<Self> {
        let mut version = [0u8; 64];
        // SAFETY: `version` is a writable buffer of exactly the length passed;
        // the C side writes at most that many bytes, NUL included.
        let r = unsafe {
            prescient_c_find_driver(
                version.as_mut_ptr().cast::<c_char>(),
                version.len() as c_int,
            )
        };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        let len = version
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(version.len());
        Ok(Driver { version, len })
    }

    /// The driver's MODULE_VERSION string, as bytes.
    pub(crate) fn version(&self) -> &[u8] {
        &self.version[..self.len]
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: `Driver::find` succeeded, so the C side holds exactly one
        // module reference on nvidia-uvm, which this drops; a later
        // `Driver::find` takes a new one.
        unsafe { prescient_c_release_driver() };
    }
}

/// A global pointer that the C side's callbacks (ioctl, worker) follow to a
/// value owned by a [`Running`]: null while the module is not running.
pub(crate) struct Global<T>(AtomicPtr<T>);

impl<T> Global<T> {
    /// An unpublished pointer.
    pub(crate) const fn new() -> Self {
        Global(AtomicPtr::new(core::ptr::null_mut()))
    }

    /// Calls `f` on the published value; `None` while none is published.
    ///
    /// Only code that runs inside a C callback (the ioctl, the worker) may
    /// call this: those are the callers [`Running::stop`] waits for.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let p = self.0.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer was stored by `Running::start` and
        // points into the pinned box that `Running` owns. `Running::stop`
        // stores null only after prescient_c_stop has waited for every
        // ioctl and stopped the worker (this function's only callers), and
        // the box is freed after that, so the value outlives this borrow.
        let v = unsafe { &*p };
        Some(f(v))
    }
}

/// The module running: `value` published in a [`Global`], the worker,
/// /dev/prescient and the driver hook started. Dropping it stops them all,
/// then frees `value`.
pub(crate) struct Running<T: 'static> {
    global: &'static Global<T>,
    value: Pin<KBox<T>>,
    stopped: bool,
}

impl<T: 'static> Running<T> {
    /// Publishes `value`, then resolves the driver's symbols and starts the
    /// worker, the misc device and the kprobe (prescient_c_start). The
    /// driver must be bound ([`Driver::find`]) and stay so while this lives.
    pub(crate) fn start(
        global: &'static Global<T>,
        value: Pin<KBox<T>>,
        branch: u32,
    ) -> Result<Self> {
        global
            .0
            .store((&*value as *const T).cast_mut(), Ordering::Release);
        // SAFETY: the value the callbacks will reach is published above, and
        // the caller holds the driver binding that prescient_c_start needs
        // (the symbols it resolves lie inside the pinned nvidia-uvm).
        let r = unsafe { prescient_c_start(branch as c_int) };
        if r != 0 {
            global.0.store(core::ptr::null_mut(), Ordering::Release);
            return Err(Error::from_errno(r));
        }
        Ok(Running {
            global,
            value,
            stopped: false,
        })
    }

    /// The published value (for the module's own teardown).
    pub(crate) fn value(&self) -> &T {
        &self.value
    }

    /// Stops the hook, the misc device and the worker, waits for them, and
    /// unpublishes the value. Idempotent.
    pub(crate) fn stop(&mut self) {
        if self.stopped {
            return;
        }
        // SAFETY: prescient_c_start succeeded and has not been undone (the
        // `stopped` flag); after this returns no kprobe handler, ioctl or
        // worker step runs or can start.
        unsafe { prescient_c_stop() };
        self.global
            .0
            .store(core::ptr::null_mut(), Ordering::Release);
        self.stopped = true;
    }
}

impl<T: 'static> Drop for Running<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wakes the worker. Safe in any context, the kprobe handler included: it
/// only queues an irq_work.
pub(crate) fn kick() {
    // SAFETY: prescient_c_kick only does an atomic exchange and
    // irq_work_queue, both NMI-safe; the irq_work exists from load to unload.
    unsafe { prescient_c_kick() };
}

/// The `gpu_blocks` module parameter: GPU memory in 2 MB blocks.
pub(crate) fn gpu_blocks_param() -> u32 {
    // SAFETY: reads a module parameter, fixed (0444) since load.
    unsafe { prescient_c_gpu_blocks() }
}

/// The `max_table_mib` module parameter: the most table memory of all
/// spaces together.
pub(crate) fn max_table_bytes_param() -> u64 {
    // SAFETY: reads a module parameter, fixed (0444) since load.
    u64::from(unsafe { prescient_c_max_table_mib() }) << 20
}

/// The `gpu_uuid` module parameter: the prefetch destination of spaces no
/// SET_GPU named; None if unset, EINVAL if malformed (logged).
pub(crate) fn default_gpu_param() -> Result<Option<[u8; 16]>> {
    let mut u = [0u8; 16];
    // SAFETY: `u` is 16 writable bytes, as the C side writes at most.
    match unsafe { prescient_c_default_gpu(u.as_mut_ptr()) } {
        0 => Ok(None),
        1 => Ok(Some(u)),
        e => Err(Error::from_errno(e)),
    }
}

/// Lets the scheduler run something else (process context, no spinlock
/// held: the ioctls between MARK chunks).
pub(crate) fn cond_resched() {
    // SAFETY: cond_resched may sleep; every caller is an ioctl holding no
    // lock (the State mutex is released between chunks).
    unsafe { prescient_c_cond_resched() };
}

/// The time in jiffies (64-bit: never wraps in practice).
pub(crate) fn jiffies() -> u64 {
    // SAFETY: get_jiffies_64 reads a counter; callable in any context.
    unsafe { prescient_c_jiffies() }
}

/// Jiffies per second (the kernel's HZ).
pub(crate) fn hz() -> u64 {
    // SAFETY: returns a compile-time constant.
    u64::from(unsafe { prescient_c_hz() })
}

/// True if the bound driver branch has uvm_api_discard.
pub(crate) fn has_discard() -> bool {
    // SAFETY: reads a pointer set once at bind, before any caller runs.
    (unsafe { prescient_c_has_discard() }) != 0
}

/// CPU faults the kprobe counted since load.
pub(crate) fn cpu_faults() -> u64 {
    // SAFETY: an atomic64 read.
    unsafe { prescient_c_cpu_faults() }
}

/// The `enable` module parameter: prefetch and pre-evict from the start.
pub(crate) fn enable_param() -> bool {
    // SAFETY: reads a module parameter, fixed (0444) since load.
    (unsafe { prescient_c_enable() }) != 0
}

/// True if the calling task has CAP_SYS_ADMIN.
pub(crate) fn capable_admin() -> bool {
    // SAFETY: capable() checks `current`'s credentials; it may be called in
    // any process context, and every caller here is one (an ioctl).
    (unsafe { prescient_c_capable_admin() }) != 0
}

/// A process (thread group), held as a counted `struct pid`: unlike its
/// number it is never reused, and it means the same in every pid namespace.
pub(crate) struct Owner(NonNull<c_void>);

// SAFETY: a struct pid reference may be used and dropped from any thread.
unsafe impl Send for Owner {}

impl Owner {
    /// The calling process (ESRCH only if it has no thread-group pid,
    /// which a task running an ioctl always has).
    pub(crate) fn current() -> Result<Self> {
        // SAFETY: get_pid(task_tgid(current)) of the running task.
        let p = unsafe { prescient_c_pid_current() };
        NonNull::new(p).map(Owner).ok_or(ESRCH)
    }

    /// The process numbered `nr` in the caller's pid namespace, if any.
    pub(crate) fn find(nr: i32) -> Option<Self> {
        // SAFETY: looks a number up in the caller's namespace; returns a
        // counted reference or NULL.
        NonNull::new(unsafe { prescient_c_pid_find(nr) }).map(Owner)
    }

    /// True if the caller belongs to this process.
    pub(crate) fn is_current(&self) -> bool {
        // SAFETY: `self.0` is a live reference; compares pointers only.
        (unsafe { prescient_c_pid_is_current(self.0.as_ptr()) }) != 0
    }

    /// True if both name the same process.
    pub(crate) fn same(&self, other: &Owner) -> bool {
        self.0 == other.0
    }

    /// Its number in the caller's pid namespace; 0 if not visible there.
    pub(crate) fn vnr(&self) -> u64 {
        // SAFETY: `self.0` is a live reference.
        (unsafe { prescient_c_pid_vnr(self.0.as_ptr()) }).max(0) as u64
    }

    /// Its number in the initial pid namespace (log lines).
    pub(crate) fn nr(&self) -> i32 {
        // SAFETY: `self.0` is a live reference.
        unsafe { prescient_c_pid_nr(self.0.as_ptr()) }
    }

    /// Its real uid; u32::MAX once it has exited.
    pub(crate) fn uid(&self) -> u32 {
        // SAFETY: `self.0` is a live reference.
        unsafe { prescient_c_pid_uid(self.0.as_ptr()) }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference and give it back once.
        unsafe { prescient_c_pid_put(self.0.as_ptr()) };
    }
}

/// Logs (rate-limited) an ioctl that was refused with `err`.
#[cold]
pub(crate) fn log_rejected(cmd: u32, err: Error) {
    // SAFETY: pr_warn_ratelimited with integer arguments only; callable from
    // process context (the ioctl).
    unsafe { prescient_c_log_bad(cmd, err.to_errno()) };
}

/// A counted reference on a /dev/nvidia-uvm VA-space `struct file`, and that
/// space's `uvm_va_space_t *`; dropped with fput.
pub(crate) struct FileRef {
    file: NonNull<c_void>,
    va_space: u64,
}

// SAFETY: a `struct file` reference may be used and dropped (fput) from any
// thread; `va_space` is a plain number.
unsafe impl Send for FileRef {}

/// Turns the C side's `(file or NULL, err)` answer into a [`FileRef`].
fn file_ref(f: *mut c_void, va_space: u64, err: c_int) -> Result<FileRef> {
    match NonNull::new(f) {
        Some(file) => Ok(FileRef { file, va_space }),
        None => Err(Error::from_errno(err)),
    }
}

impl FileRef {
    /// The VA-space file behind the caller's descriptor `fd`: EBADF if it is
    /// not open, EINVAL if it is not a /dev/nvidia-uvm VA space.
    pub(crate) fn from_fd(fd: i32) -> Result<Self> {
        let mut va = 0u64;
        let mut err: c_int = 0;
        // SAFETY: both out-pointers are valid, writable locals; the C side
        // writes `va` only on success and `err` only on failure.
        let f = unsafe { prescient_c_file_from_fd(fd, &mut va, &mut err) };
        file_ref(f, va, err)
    }

    /// A /dev/nvidia-uvm VA-space file open in process `pid` (the caller's
    /// pid namespace), and that process: ESRCH if there is no such process,
    /// EPERM if the caller may not ptrace-attach to it, ENOENT if it has
    /// none open.
    pub(crate) fn from_pid(pid: i32) -> Result<(Self, Owner)> {
        let mut va = 0u64;
        let mut owner: *mut c_void = core::ptr::null_mut();
        let mut err: c_int = 0;
        // SAFETY: all out-pointers are valid, writable locals; on success
        // the C side sets `owner` to a counted struct pid reference.
        let f = unsafe { prescient_c_file_from_pid(pid, &mut va, &mut owner, &mut err) };
        let file = file_ref(f, va, err)?;
        let owner = NonNull::new(owner).ok_or(EINVAL)?;
        Ok((file, Owner(owner)))
    }

    /// The driver's `uvm_va_space_t *` of this file (its identity in fault
    /// events).
    pub(crate) fn va_space(&self) -> u64 {
        self.va_space
    }

    /// True when this is the last reference: the process that opened the
    /// file has closed it or exited.
    pub(crate) fn is_orphaned(&self) -> bool {
        // SAFETY: `self.file` is a live file: we hold a reference on it.
        (unsafe { prescient_c_file_orphaned(self.file.as_ptr()) }) != 0
    }

    /// Migrates `[base, base + len)` of this VA space (uvm_api_migrate,
    /// ASYNC). Takes the driver's locks: the caller must hold no lock the
    /// driver's fault path takes (see the lock order in prescient_main.rs).
    pub(crate) fn migrate(&self, base: u64, len: u64, to: Destination<'_>) -> Result<(), NvError> {
        let uuid = match to {
            Destination::Gpu(u) => u.as_ptr(),
            Destination::Cpu => core::ptr::null(),
        };
        // SAFETY: `self.file` is a live /dev/nvidia-uvm VA-space file (we
        // hold a reference), which is what uvm_api_migrate expects; the
        // driver stays loaded while the module runs (`Driver`); `uuid` is
        // NULL or 16 readable bytes that outlive the call.
        nv_result(unsafe { prescient_c_migrate(self.file.as_ptr(), base, len, uuid) })
    }

    /// Discards `[base, base + len)` of this VA space (uvm_api_discard): the
    /// data is dead, so the driver may drop it without copying.
    pub(crate) fn discard(&self, base: u64, len: u64) -> Result<(), NvError> {
        // SAFETY: as in `migrate`.
        nv_result(unsafe { prescient_c_discard(self.file.as_ptr(), base, len) })
    }
}

impl Drop for FileRef {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference, taken by fget/get_file in
        // the C side, and give it back once.
        unsafe { prescient_c_file_put(self.file.as_ptr()) };
    }
}

/// Execution-id pages held now (GET_STATS `exec_pages`).
static PAGES_HELD: AtomicU32 = AtomicU32::new(0);

/// Execution-id pages the module holds now.
pub(crate) fn exec_pages_held() -> u32 {
    PAGES_HELD.load(Ordering::Relaxed)
}

/// The first page of a runtime's execution-id memfd, pinned by a folio
/// reference, and its kernel address. Dropping it waits until no fault
/// path can still read it (synchronize_rcu), so it must be unpublished
/// ([`PublishedPage::clear`]) first.
pub(crate) struct PinnedPage {
    folio: NonNull<c_void>,
    words: NonNull<AtomicU64>,
    /// This registration asked the runtime for ids ([`Self::ask_ids`]).
    asked: bool,
}

// SAFETY: a folio reference may be used and dropped from any thread; the
// words are only accessed as atomics.
unsafe impl Send for PinnedPage {}

impl PinnedPage {
    /// The page behind the caller's descriptor `fd`: EBADF if it is not
    /// open (for reading), EINVAL if it is not a shmem file of at least a
    /// page or its header is not [`execpage::MAGIC`] with
    /// [`execpage::SLOTS`] slots (nothing of the user's layout is trusted
    /// beyond those words; the rest are only ever read as numbers).
    pub(crate) fn from_fd(fd: i32) -> Result<Self> {
        let mut words: *mut c_void = core::ptr::null_mut();
        let mut err: c_int = 0;
        // SAFETY: both out-pointers are valid, writable locals; on success
        // the C side returns a folio reference and its kernel address.
        let f = unsafe {
            prescient_c_exec_page_get(fd, execpage::PAGE_BYTES as u64, &mut words, &mut err)
        };
        let folio = NonNull::new(f).ok_or_else(|| Error::from_errno(err))?;
        let Some(words) = NonNull::new(words.cast::<AtomicU64>()) else {
            // SAFETY: the reference just taken, given back once (the C side
            // never returns a folio without its address: unreachable).
            unsafe { prescient_c_exec_page_put(folio.as_ptr()) };
            return Err(EINVAL);
        };
        PAGES_HELD.fetch_add(1, Ordering::Relaxed);
        let p = PinnedPage {
            folio,
            words,
            asked: false,
        };
        if !p.page().is_valid() {
            return Err(EINVAL);
        }
        Ok(p)
    }

    /// Asks the runtime for ids (its `auto` mode writes ids only while
    /// someone reads); dropping the page stops asking.
    pub(crate) fn ask_ids(&mut self) {
        self.page().want_ids(true);
        self.asked = true;
    }

    /// The page as the format's atomic words.
    pub(crate) fn page(&self) -> execpage::Page<'_> {
        // SAFETY: `words` is the kernel address of a page-aligned, pinned
        // folio of at least PAGE_BYTES (checked by the C side), alive while
        // `self` is; it is only accessed through atomics, so concurrent
        // writes by the runtime (or the GPU) are no data race on our side.
        let w = unsafe { core::slice::from_raw_parts(self.words.as_ptr(), execpage::PAGE_WORDS) };
        // PAGE_WORDS words: always Some.
        execpage::Page::new(w).unwrap_or_else(|| unreachable!())
    }
}

impl Drop for PinnedPage {
    fn drop(&mut self) {
        // Only a registration that asked stops asking: a refused second
        // registration of the same page must not silence the first. (Two
        // spaces given one page: the first to let go stops the ids.)
        if self.asked {
            self.page().want_ids(false);
        }
        PAGES_HELD.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: we own exactly one folio reference, taken by
        // prescient_c_exec_page_get, and give it back once; the put waits
        // for fault-path readers of the unpublished address first.
        unsafe { prescient_c_exec_page_put(self.folio.as_ptr()) };
    }
}

/// The address of a [`PinnedPage`] as the fault path sees it: published
/// under the State mutex, read lock-free by the kprobe.
pub(crate) struct PublishedPage(AtomicPtr<AtomicU64>);

impl PublishedPage {
    /// No page.
    pub(crate) const fn new() -> Self {
        PublishedPage(AtomicPtr::new(core::ptr::null_mut()))
    }

    /// Publishes `p` (its owner keeps it until after [`Self::clear`]).
    pub(crate) fn set(&self, p: &PinnedPage) {
        self.0.store(p.words.as_ptr(), Ordering::Release);
    }

    /// Unpublishes: a fault that starts after this does not read the page;
    /// one already reading it is waited for by [`PinnedPage`]'s drop.
    pub(crate) fn clear(&self) {
        self.0.store(core::ptr::null_mut(), Ordering::Release);
    }

    /// Calls `f` on the published page, if any. Only inside an RCU
    /// read-side section: the fault path (the kprobe handler, which runs
    /// with preemption off) or the worker's poll (rcu_read_lock, glue.c).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&execpage::Page<'_>) -> R) -> Option<R> {
        let p = self.0.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer was published by `set` from a live
        // PinnedPage. Its owner clears it before dropping the page, and the
        // drop waits (synchronize_rcu) for every reader that started
        // before: the kprobe handler runs with preemption disabled, an RCU
        // read-side section, and the worker's poll holds rcu_read_lock. So
        // the page outlives this borrow. Accesses are atomic.
        let w = unsafe { core::slice::from_raw_parts(p, execpage::PAGE_WORDS) };
        execpage::Page::new(w).map(|page| f(&page))
    }
}

/// The faulting GPU as uvm.c named it to the fault callback: its processor
/// id and a pointer to its 16-byte UUID, or NULL if it could not.
pub(crate) fn fault_gpu(proc: u32, uuid: *const u8) -> Option<FaultGpu> {
    if uuid.is_null() {
        return None;
    }
    let mut u = [0u8; 16];
    // SAFETY: uvm.c passes NULL or the address of 16 readable bytes (a
    // local of its callback frame), alive until the callback returns.
    unsafe { core::ptr::copy_nonoverlapping(uuid, u.as_mut_ptr(), 16) };
    Some(FaultGpu { proc, uuid: u })
}
