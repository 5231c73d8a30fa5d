// SPDX-License-Identifier: GPL-2.0
//! prescient.ko: prefetching and pre-eviction of CUDA Unified Memory 2 MB
//! blocks, bound to nvidia-uvm (driver 580) by name. The prediction engine is
//! prescient-core's source, the ioctl ABI is prescient-uapi's source, both
//! included by path; glue.c holds only what the 6.12 `kernel` crate lacks.
//!
//! Flow: the driver's fault path calls uvm_perf_event_notify(FAULT) -> our
//! kprobe (glue.c) -> [`prescient_rs_fault`], which only pushes (address
//! space, block, time, access) into the bounded lock-free [`RING`] and kicks
//! the worker. The worker kthread ([`prescient_rs_work`]) drains the ring
//! first (faults take priority), feeds the engine, pre-evicts to stay under
//! the residency budget, then asks the engine for prefetches and issues them
//! with uvm_api_migrate (ASYNC), at most `inflight_limit` per round, holding a
//! reference on the target's /dev/nvidia-uvm file.
//!
//! # Lock order
//! 1. `State` mutex (this file; taken by the worker and by ioctls, never on
//!    the fault path), then
//! 2. nvidia-uvm's own locks (va_space lock, block locks), taken inside
//!    uvm_api_migrate / uvm_api_discard while we hold 1.
//!
//! The fault path (kprobe, called under the driver's va_space lock) takes no
//! lock of ours: it only touches [`RING`] (lock-free) and wakes the worker.
//! So the driver's locks are never held while waiting for 1.

use core::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::uaccess::UserSlice;

// The engine, shared with user space (no_std, no allocation, no unsafe).
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/block.rs"]
mod block;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/block_table.rs"]
mod block_table;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/engine/mod.rs"]
mod engine;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/exec_table.rs"]
mod exec_table;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/history.rs"]
mod history;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/layout.rs"]
mod layout;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/ledger.rs"]
mod ledger;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/params.rs"]
mod params;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/recent.rs"]
mod recent;
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../core/src/window.rs"]
mod window;
// The ioctl ABI, shared with user space.
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
#[path = "../uapi/src/abi.rs"]
mod abi;

/// What prescient-core's lib.rs defines at its root (engine files name them
/// as `crate::...`).
#[allow(dead_code)]
type Block = u64;
#[allow(dead_code)]
type ExecId = u32;
#[allow(dead_code)]
const NONE: u64 = u64::MAX;
const BLOCK_SHIFT: u32 = 21;
const BLOCK_BYTES: u64 = 1 << BLOCK_SHIFT;

/// The engine items abi.rs needs (it names them `crate::pcore::...`).
mod pcore {
    pub(crate) use crate::params::{Mode, ParamError, Params};
    pub(crate) use crate::BLOCK_BYTES;
}

use abi::{Cmd, Error as AbiError, ParamsAbi, MAX_SPACES};
use engine::{ChainState, Engine, Prefetch, Victim};
use params::Params;

module! {
    type: PrescientModule,
    name: "prescient",
    author: "Prescient",
    description: "Prefetch and pre-evict CUDA UM 2 MB blocks (DeepUM design), bound to nvidia-uvm 580",
    license: "GPL",
}

extern "C" {
    fn prescient_c_find_driver(ver: *mut c_char, len: c_int) -> c_int;
    fn prescient_c_release_driver();
    fn prescient_c_start() -> c_int;
    fn prescient_c_stop();
    fn prescient_c_kick();
    fn prescient_c_gpu_blocks() -> c_uint;
    fn prescient_c_enable() -> c_uint;
    fn prescient_c_capable_admin() -> c_int;
    fn prescient_c_tgid() -> c_int;
    fn prescient_c_log_bad(cmd: c_uint, err: c_int);
    fn prescient_c_file_from_fd(fd: c_int, va_space: *mut u64, err: *mut c_int) -> *mut c_void;
    fn prescient_c_file_from_pid(pid: c_int, va_space: *mut u64, err: *mut c_int) -> *mut c_void;
    fn prescient_c_file_put(f: *mut c_void);
    fn prescient_c_file_orphaned(f: *mut c_void) -> c_int;
    fn prescient_c_migrate(f: *mut c_void, base: u64, len: u64, to_cpu: c_int) -> u32;
    fn prescient_c_discard(f: *mut c_void, base: u64, len: u64) -> u32;
}

// ----- the fault ring: bounded, lock-free, many producers, one consumer -----

const RING_SIZE: usize = 4096;
const RING_MASK: u64 = RING_SIZE as u64 - 1;

/// One slot (Vyukov's bounded queue): `seq` says whose turn it is.
struct Slot {
    seq: AtomicU64,
    va_space: AtomicU64,
    events: AtomicU64,
    block: AtomicU64,
    time: AtomicU64,
    access: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    seq: AtomicU64::new(0),
    va_space: AtomicU64::new(0),
    events: AtomicU64::new(0),
    block: AtomicU64::new(0),
    time: AtomicU64::new(0),
    access: AtomicU64::new(0),
};

struct Ring {
    slots: [Slot; RING_SIZE],
    head: AtomicU64,
    tail: AtomicU64,
    drops: AtomicU64,
}

static RING: Ring = Ring {
    slots: [EMPTY_SLOT; RING_SIZE],
    head: AtomicU64::new(0),
    tail: AtomicU64::new(0),
    drops: AtomicU64::new(0),
};

/// [`FaultRec::access`] of a kernel start (SET_EXEC_ID): `block` holds the
/// execution id. Fault access types are 0..=4.
const KERNEL_START: u64 = u64::MAX;
/// [`FaultRec::access`] of a block the driver evicted on its own (MIGRATION
/// event, cause EVICTION): only `events` identifies the address space.
const DRIVER_EVICTED: u64 = u64::MAX - 1;

#[derive(Clone, Copy)]
struct FaultRec {
    va_space: u64,
    /// The address space's `uvm_perf_va_space_events_t *` (the hooked
    /// function's first argument); 0 for kernel starts.
    events: u64,
    block: u64,
    #[allow(dead_code)]
    time: u64,
    #[allow(dead_code)]
    access: u64,
}

impl Ring {
    /// Before any producer runs.
    fn init(&self) {
        for (i, s) in self.slots.iter().enumerate() {
            s.seq.store(i as u64, Ordering::Relaxed);
        }
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Release);
    }

    /// Never blocks, never allocates: a full ring drops the record (counted).
    fn push(&self, r: FaultRec) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & RING_MASK) as usize];
            let seq = slot.seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as i64;
            if dif == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.va_space.store(r.va_space, Ordering::Relaxed);
                        slot.events.store(r.events, Ordering::Relaxed);
                        slot.block.store(r.block, Ordering::Relaxed);
                        slot.time.store(r.time, Ordering::Relaxed);
                        slot.access.store(r.access, Ordering::Relaxed);
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                self.drops.fetch_add(1, Ordering::Relaxed);
                return false;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Single consumer: only the worker, under the State mutex.
    fn pop(&self) -> Option<FaultRec> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(pos & RING_MASK) as usize];
        if slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        let r = FaultRec {
            va_space: slot.va_space.load(Ordering::Relaxed),
            events: slot.events.load(Ordering::Relaxed),
            block: slot.block.load(Ordering::Relaxed),
            time: slot.time.load(Ordering::Relaxed),
            access: slot.access.load(Ordering::Relaxed),
        };
        slot.seq
            .store(pos.wrapping_add(RING_SIZE as u64), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(r)
    }

    fn is_empty(&self) -> bool {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(pos & RING_MASK) as usize];
        slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1)
    }
}

/// Fault callback (kprobe pre-handler on uvm_perf_event_notify, in the
/// driver's fault-servicing thread, under its locks): copy and return.
#[no_mangle]
pub extern "C" fn prescient_rs_fault(
    va_space: u64,
    events: u64,
    block_start: u64,
    time: u64,
    access: u32,
) {
    RING.push(FaultRec {
        va_space,
        events,
        block: block_start >> BLOCK_SHIFT,
        time,
        access: access as u64,
    });
    // SAFETY: plain C call; it only queues an irq_work (NMI-safe), which
    // wakes the worker.
    unsafe { prescient_c_kick() };
}

/// Eviction callback (same kprobe, MIGRATION event with cause EVICTION): the
/// driver took `block_start` off the GPU to make room. Copy and return.
#[no_mangle]
pub extern "C" fn prescient_rs_evicted(events: u64, block_start: u64) {
    RING.push(FaultRec {
        va_space: 0,
        events,
        block: block_start >> BLOCK_SHIFT,
        time: 0,
        access: DRIVER_EVICTED,
    });
    // SAFETY: as in prescient_rs_fault.
    unsafe { prescient_c_kick() };
}

// ----- state -----

/// A counted reference on a /dev/nvidia-uvm `struct file`, dropped with fput.
struct FileRef(*mut c_void);

// SAFETY: a `struct file` reference may be used and dropped from any thread.
unsafe impl Send for FileRef {}

impl Drop for FileRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference, taken by fget/get_file in glue.c.
        unsafe { prescient_c_file_put(self.0) };
    }
}

struct Space {
    handle: u64,
    pid: u64,
    va_space: u64,
    /// The driver's perf-events pointer of this space, learnt from its
    /// first fault (eviction events carry only this).
    events: u64,
    file: FileRef,
    /// Boxed: an engine is ~1.8 KB, and a stack holding `MAX_SPACES` of
    /// them (SET_PARAMS builds every new engine before it swaps any) would
    /// overflow the kernel's 16 KB stack.
    engine: KBox<Engine<VVec<u64>>>,
    st: abi::SpaceStats,
}

struct State {
    driver_version: u64,
    params: Params,
    inflight_limit: u32,
    watermark_pct: u32,
    budget_bytes: u64,
    enabled: bool,
    next_handle: u64,
    spaces: [Option<Space>; MAX_SPACES],
    head: abi::StatsHead,
    unattached_faults: u64,
    /// Blocks the driver evicted on its own while the ledger held them.
    driver_evictions: u64,
}

static STATE: AtomicPtr<Mutex<State>> = AtomicPtr::new(core::ptr::null_mut());
static GPU_BLOCKS: AtomicU64 = AtomicU64::new(24);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    let p = STATE.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: STATE points into the module's pinned box from init until
    // Drop, and Drop clears it only after every caller (ioctl, worker) has
    // been stopped by prescient_c_stop.
    let m = unsafe { &*p };
    let mut g = m.lock();
    Some(f(&mut g))
}

fn new_engine(p: &Params) -> Result<KBox<Engine<VVec<u64>>>, AbiError> {
    let bad = AbiError::BadLength {
        want: p.storage_words(),
        got: 0,
    };
    let storage = VVec::from_elem(0u64, p.storage_words(), GFP_KERNEL).map_err(|_| bad)?;
    let engine = Engine::new(*p, storage).map_err(|_| bad)?;
    KBox::new(engine, GFP_KERNEL).map_err(|_| bad)
}

impl State {
    fn budget_blocks(&self) -> u64 {
        if self.budget_bytes == 0 {
            GPU_BLOCKS.load(Ordering::Relaxed)
        } else {
            self.budget_bytes / BLOCK_BYTES
        }
    }

    /// Resident blocks kept at or below this (pre-eviction starts above it).
    fn limit_blocks(&self) -> u32 {
        let l = self.budget_blocks() * self.watermark_pct as u64 / 100;
        l.clamp(1, u32::MAX as u64) as u32
    }

    fn space_by_va(&mut self, va: u64) -> Option<&mut Space> {
        self.spaces.iter_mut().flatten().find(|s| s.va_space == va)
    }

    fn space_by_handle(&mut self, h: u64) -> Option<&mut Space> {
        self.spaces.iter_mut().flatten().find(|s| s.handle == h)
    }

    /// Feeds one ring record to its space's engine. True if it was a fault
    /// of an attached space.
    fn on_fault(&mut self, r: FaultRec) -> bool {
        if r.access == KERNEL_START {
            if let Some(sp) = self.space_by_va(r.va_space) {
                sp.engine.kernel_start(r.block as u32);
            }
            return false;
        }
        if r.access == DRIVER_EVICTED {
            // Records are in the driver's order: a later fault or our own
            // migration of this block comes after this one.
            let sp = self
                .spaces
                .iter_mut()
                .flatten()
                .find(|s| s.events != 0 && s.events == r.events);
            if let Some(sp) = sp {
                if sp.engine.is_resident(r.block) {
                    sp.engine.demand_evicted(r.block);
                    self.driver_evictions += 1;
                }
            }
            return false;
        }
        self.head.faults_seen += 1;
        let Some(sp) = self.space_by_va(r.va_space) else {
            self.unattached_faults += 1;
            return false;
        };
        sp.st.faults += 1;
        sp.events = r.events;
        let late = sp.engine.is_resident(r.block);
        sp.engine.fault(r.block);
        sp.engine.migrated_in(r.block);
        if late {
            self.head.late_prefetches += 1;
        }
        true
    }

    /// Takes one victim off the GPU. False if the engine has none to give.
    fn evict_one(sp: &mut Space, head: &mut abi::StatsHead) -> bool {
        let mut v = [Victim::default(); 1];
        if sp.engine.victims(&mut v) == 0 {
            return false;
        }
        let base = v[0].block << BLOCK_SHIFT;
        let st = if v[0].discard {
            // SAFETY: sp.file holds a reference on the target's file.
            unsafe { prescient_c_discard(sp.file.0, base, BLOCK_BYTES) }
        } else {
            // SAFETY: as above.
            unsafe { prescient_c_migrate(sp.file.0, base, BLOCK_BYTES, 1) }
        };
        // Whatever the driver answered, stop counting the block as ours.
        sp.engine.evicted(v[0].block);
        if st != 0 {
            sp.st.migrate_errors += 1;
            head.migrate_errors += 1;
        } else if v[0].discard {
            sp.st.discards += 1;
            head.discards += 1;
        } else {
            sp.st.pre_evictions += 1;
            head.pre_evictions += 1;
        }
        true
    }

    /// Pre-evicts down to the limit, then issues up to `inflight_limit`
    /// prefetches per space. True if a space's chain still has work.
    fn prefetch_round(&mut self) -> bool {
        let wm_limit = self.limit_blocks();
        let budget = self.budget_blocks().min(u32::MAX as u64) as u32;
        let per_round = (self.inflight_limit as usize).min(16);
        let mut more = false;
        let head = &mut self.head;
        for sp in self.spaces.iter_mut().flatten() {
            // The engine's free target grows with every eviction the driver
            // had to make (memory was full) and shrinks on refaults.
            let limit = wm_limit
                .min(budget.saturating_sub(sp.engine.free_target()))
                .max(1);
            while sp.engine.resident_blocks() > limit {
                if !Self::evict_one(sp, head) {
                    break;
                }
            }
            if !self.enabled {
                continue;
            }
            let mut buf = [Prefetch::default(); 16];
            let n = sp.engine.prefetches(&mut buf[..per_round]);
            for p in &buf[..n] {
                if sp.engine.is_resident(p.block) {
                    continue;
                }
                let mut room = true;
                while sp.engine.resident_blocks() >= limit {
                    if !Self::evict_one(sp, head) {
                        room = false;
                        break;
                    }
                }
                if !room {
                    break;
                }
                // SAFETY: sp.file holds a reference on the target's file.
                let st = unsafe {
                    prescient_c_migrate(sp.file.0, p.block << BLOCK_SHIFT, BLOCK_BYTES, 0)
                };
                if st == 0 {
                    sp.engine.migrated_in(p.block);
                    sp.st.prefetched += 1;
                    head.blocks_prefetched += 1;
                } else {
                    sp.st.migrate_errors += 1;
                    head.migrate_errors += 1;
                }
            }
            if sp.engine.chain_state() == ChainState::Running {
                more = true;
            }
        }
        more
    }

    /// Detaches spaces whose process has gone (we hold the last reference).
    fn reap_orphans(&mut self) {
        for slot in self.spaces.iter_mut() {
            let gone = match slot {
                // SAFETY: the file is referenced by this Space.
                Some(sp) => (unsafe { prescient_c_file_orphaned(sp.file.0) }) != 0,
                None => false,
            };
            if gone {
                if let Some(sp) = slot.take() {
                    pr_info!("pid {} exited, detached handle {}\n", sp.pid, sp.handle);
                }
            }
        }
    }

    fn stats(&self) -> abi::Stats {
        let mut s = abi::Stats {
            head: self.head,
            ..Default::default()
        };
        s.head.queue_drops = RING.drops.load(Ordering::Relaxed);
        s.head.prefetches_used = s
            .head
            .blocks_prefetched
            .saturating_sub(s.head.late_prefetches);
        let mut n = 0;
        for sp in self.spaces.iter().flatten() {
            s.head.table_bytes += sp.engine.table_bytes() as u64;
            let mut e = sp.st;
            e.handle = sp.handle;
            e.pid = sp.pid;
            e.resident_blocks = sp.engine.resident_blocks() as u64;
            s.spaces[n] = e;
            n += 1;
        }
        s.head.n_spaces = n as u32;
        s
    }

    fn params_abi(&self) -> ParamsAbi {
        ParamsAbi::from_engine(
            &self.params,
            self.inflight_limit,
            self.watermark_pct,
            self.budget_bytes,
            self.enabled,
        )
    }
}

/// Worker step (kthread in glue.c). Returns nonzero if more work is pending.
#[no_mangle]
pub extern "C" fn prescient_rs_work() -> c_int {
    with_state(|s| {
        let mut n = 0;
        while n < 512 {
            let Some(r) = RING.pop() else {
                break;
            };
            n += 1;
            if s.on_fault(r) {
                // A fault starts a new prediction window: walk it (and act
                // on it) before the engine sees the next event. Fed back to
                // back, a burst of faults leaves every window but the last
                // unwalked, and the engine learns and predicts differently
                // (vm-tests/README.md: 84% instead of 90% in the VM).
                let mut rounds = 0;
                while rounds < 8 && s.prefetch_round() {
                    rounds += 1;
                }
            }
        }
        s.reap_orphans();
        let more = s.prefetch_round();
        (more || !RING.is_empty()) as c_int
    })
    .unwrap_or(0)
}

// ----- ioctl -----

fn errno(e: Error) -> c_long {
    e.to_errno() as c_long
}

fn abi_errno(e: &AbiError) -> c_long {
    -(e.errno() as c_long)
}

/// ioctl on /dev/prescient.
#[no_mangle]
pub extern "C" fn prescient_rs_ioctl(cmd: c_uint, arg: c_ulong) -> c_long {
    let r = ioctl(cmd, arg as usize);
    if r < 0 && r != errno(EFAULT) {
        // SAFETY: plain C call, logs rate-limited.
        unsafe { prescient_c_log_bad(cmd, r as c_int) };
    }
    r
}

fn ioctl(cmd: u32, arg: usize) -> c_long {
    let c = match Cmd::decode(cmd) {
        Ok(c) => c,
        Err(e) => return abi_errno(&e),
    };
    // SAFETY: plain C call.
    let admin = unsafe { prescient_c_capable_admin() } != 0;
    if c.needs_admin() && !admin {
        return errno(EPERM);
    }
    let mut inbuf = [0u8; 64];
    let insz = c.in_size();
    if insz > inbuf.len() {
        return errno(EINVAL);
    }
    if insz > 0 {
        let mut r = UserSlice::new(arg, insz).reader();
        if r.read_slice(&mut inbuf[..insz]).is_err() {
            return errno(EFAULT);
        }
    }
    let input = &inbuf[..insz];
    let out = |bytes: &[u8]| -> c_long {
        let mut w = UserSlice::new(arg, bytes.len()).writer();
        match w.write_slice(bytes) {
            Ok(()) => 0,
            Err(_) => errno(EFAULT),
        }
    };
    match c {
        Cmd::GetVersion => {
            let v = with_state(|s| abi::Version {
                abi_version: abi::ABI_VERSION,
                flags: abi::VERSION_FLAG_BOUND
                    | if s.enabled {
                        abi::VERSION_FLAG_ENABLED
                    } else {
                        0
                    },
                max_spaces: MAX_SPACES as u32,
                reserved0: 0,
                driver_version: s.driver_version,
            });
            match v {
                Some(v) => out(&v.to_bytes()),
                None => errno(ENODEV),
            }
        }
        Cmd::GetParams => match with_state(|s| s.params_abi()) {
            Some(p) => out(&p.to_bytes()),
            None => errno(ENODEV),
        },
        Cmd::GetStats => match with_state(|s| s.stats()) {
            Some(st) => {
                let b = st.to_bytes();
                out(&b)
            }
            None => errno(ENODEV),
        },
        Cmd::SetParams => with_state(|s| set_params(s, input)).unwrap_or(errno(ENODEV)),
        Cmd::ResetTables => with_state(|s| {
            for sp in s.spaces.iter_mut().flatten() {
                sp.engine.reset();
            }
            0
        })
        .unwrap_or(errno(ENODEV)),
        Cmd::Attach => {
            let t = match abi::Target::from_bytes(input) {
                Ok(t) => t,
                Err(e) => return abi_errno(&e),
            };
            if let Err(e) = t.check_attach() {
                return abi_errno(&e);
            }
            let h = match with_state(|s| attach(s, &t)) {
                Some(Ok(h)) => h,
                Some(Err(e)) => return e,
                None => return errno(ENODEV),
            };
            let mut t = t;
            t.handle = h;
            let r = out(&t.to_bytes());
            if r != 0 {
                with_state(|s| detach_handle(s, h));
            }
            r
        }
        Cmd::Detach => {
            let t = match abi::Target::from_bytes(input) {
                Ok(t) => t,
                Err(e) => return abi_errno(&e),
            };
            if let Err(e) = t.check_detach() {
                return abi_errno(&e);
            }
            with_state(|s| detach(s, &t)).unwrap_or(errno(ENODEV))
        }
        Cmd::SetExecId => {
            let x = match abi::ExecIdAbi::from_bytes(input) {
                Ok(x) => x,
                Err(e) => return abi_errno(&e),
            };
            if let Err(e) = x.check() {
                return abi_errno(&e);
            }
            with_state(|s| match owned_space(s, x.handle, admin) {
                Ok(sp) => {
                    // Through the ring, so that the worker sees the kernel
                    // start in order with the faults before and after it.
                    RING.push(FaultRec {
                        va_space: sp.va_space,
                        events: 0,
                        block: x.exec_id as u64,
                        time: 0,
                        access: KERNEL_START,
                    });
                    // SAFETY: plain C call; queues the worker's wake-up.
                    unsafe { prescient_c_kick() };
                    0
                }
                Err(e) => e,
            })
            .unwrap_or(errno(ENODEV))
        }
        Cmd::MarkDead | Cmd::MarkAlive => {
            let r = match abi::RangeAbi::from_bytes(input) {
                Ok(r) => r,
                Err(e) => return abi_errno(&e),
            };
            if let Err(e) = r.check() {
                return abi_errno(&e);
            }
            let dead = c == Cmd::MarkDead;
            with_state(|s| match owned_space(s, r.handle, admin) {
                Ok(sp) => {
                    // Dead rounds inward, alive outward: a block part of
                    // which is live again must not stay dead.
                    if dead {
                        for b in r.whole_blocks() {
                            sp.engine.mark_dead(b);
                        }
                    } else {
                        for b in r.touched_blocks() {
                            sp.engine.mark_alive(b);
                        }
                    }
                    0
                }
                Err(e) => e,
            })
            .unwrap_or(errno(ENODEV))
        }
    }
}

/// The space `handle`, if the caller owns it (or is an administrator).
fn owned_space(s: &mut State, handle: u64, admin: bool) -> Result<&mut Space, c_long> {
    // SAFETY: plain C call.
    let me = unsafe { prescient_c_tgid() } as u64;
    match s.space_by_handle(handle) {
        None => Err(errno(ENOENT)),
        Some(sp) if !admin && sp.pid != me => Err(errno(EPERM)),
        Some(sp) => Ok(sp),
    }
}

fn set_params(s: &mut State, input: &[u8]) -> c_long {
    let gpu = GPU_BLOCKS.load(Ordering::Relaxed) as u32;
    let (a, mut p) = match ParamsAbi::decode_valid(input, &s.params) {
        Ok(x) => x,
        Err(e) => return abi_errno(&e),
    };
    // The ledger must hold every block that can be resident.
    let budget_blocks = (a.residency_budget_bytes / BLOCK_BYTES) as u32;
    p.max_resident_blocks = gpu.max(budget_blocks).clamp(1, Params::MAX_RESIDENT_BLOCKS);
    if let Err(e) = p.validate() {
        return abi_errno(&AbiError::Param(e));
    }
    // New tables for every space, all allocated before anything changes.
    let mut fresh: [Option<KBox<Engine<VVec<u64>>>>; MAX_SPACES] = Default::default();
    for (i, sp) in s.spaces.iter().enumerate() {
        if sp.is_some() {
            match new_engine(&p) {
                Ok(e) => fresh[i] = Some(e),
                Err(_) => return errno(ENOMEM),
            }
        }
    }
    for (sp, e) in s.spaces.iter_mut().zip(fresh.iter_mut()) {
        if let (Some(sp), Some(e)) = (sp.as_mut(), e.take()) {
            sp.engine = e;
        }
    }
    s.params = p;
    s.inflight_limit = a.inflight_limit;
    s.watermark_pct = a.pre_evict_watermark_pct;
    s.budget_bytes = a.residency_budget_bytes;
    s.enabled = a.enabled != 0;
    0
}

fn attach(s: &mut State, t: &abi::Target) -> Result<u64, c_long> {
    let mut va = 0u64;
    let mut err: c_int = 0;
    let f = if t.kind == abi::TARGET_FD {
        // SAFETY: out-pointers are valid locals.
        unsafe { prescient_c_file_from_fd(t.id as c_int, &mut va, &mut err) }
    } else {
        // SAFETY: as above.
        unsafe { prescient_c_file_from_pid(t.id as c_int, &mut va, &mut err) }
    };
    if f.is_null() {
        return Err(err as c_long);
    }
    let file = FileRef(f);
    if s.space_by_va(va).is_some() {
        return Err(errno(EEXIST));
    }
    let Some(slot) = s.spaces.iter().position(|x| x.is_none()) else {
        return Err(errno(ENOSPC));
    };
    let engine = new_engine(&s.params).map_err(|_| errno(ENOMEM))?;
    let pid = if t.kind == abi::TARGET_PID {
        t.id as u64
    } else {
        // SAFETY: plain C call.
        (unsafe { prescient_c_tgid() }) as u64
    };
    let handle = s.next_handle;
    s.next_handle += 1;
    s.spaces[slot] = Some(Space {
        handle,
        pid,
        va_space: va,
        events: 0,
        file,
        engine,
        st: abi::SpaceStats::default(),
    });
    Ok(handle)
}

fn detach_handle(s: &mut State, h: u64) -> c_long {
    for slot in s.spaces.iter_mut() {
        if slot.as_ref().is_some_and(|sp| sp.handle == h) {
            *slot = None;
            return 0;
        }
    }
    errno(ENOENT)
}

fn detach(s: &mut State, t: &abi::Target) -> c_long {
    match t.kind {
        abi::TARGET_HANDLE => detach_handle(s, t.handle),
        abi::TARGET_PID => {
            for slot in s.spaces.iter_mut() {
                if slot.as_ref().is_some_and(|sp| sp.pid == t.id as u64) {
                    *slot = None;
                    return 0;
                }
            }
            errno(ENOENT)
        }
        _ => {
            let mut va = 0u64;
            let mut err: c_int = 0;
            // SAFETY: out-pointers are valid locals.
            let f = unsafe { prescient_c_file_from_fd(t.id as c_int, &mut va, &mut err) };
            if f.is_null() {
                return err as c_long;
            }
            drop(FileRef(f));
            for slot in s.spaces.iter_mut() {
                if slot.as_ref().is_some_and(|sp| sp.va_space == va) {
                    *slot = None;
                    return 0;
                }
            }
            errno(ENOENT)
        }
    }
}

// ----- module -----

/// Driver versions whose layouts (glue.c's table) are known: the 580 branch,
/// read in source from 580.65.06 and measured on 580.159.04.
const KNOWN_LO: u64 = 580 << 32 | 65 << 16 | 6;
const KNOWN_HI: u64 = 580 << 32 | 159 << 16 | 4;

struct PrescientModule {
    state: Pin<KBox<Mutex<State>>>,
}

impl kernel::Module for PrescientModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let mut ver = [0u8; 64];
        // SAFETY: ver is a writable buffer of the given length.
        let r =
            unsafe { prescient_c_find_driver(ver.as_mut_ptr() as *mut c_char, ver.len() as c_int) };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        let len = ver.iter().position(|&c| c == 0).unwrap_or(ver.len());
        let text = core::str::from_utf8(&ver[..len]).unwrap_or("?");
        let v = abi::parse_driver_version(&ver[..len]);
        let known = matches!(v, Some(v) if (KNOWN_LO..=KNOWN_HI).contains(&v));
        if !known {
            pr_err!(
                "nvidia-uvm version '{}' is not one whose layouts this module knows (580.65.06 to 580.159.04): refusing to bind\n",
                text
            );
            // SAFETY: undoes prescient_c_find_driver.
            unsafe { prescient_c_release_driver() };
            return Err(Error::from_errno(-95)); // EOPNOTSUPP
        }
        // SAFETY: plain C calls reading module parameters.
        let (gpu, enable) = unsafe { (prescient_c_gpu_blocks(), prescient_c_enable()) };
        let gpu = gpu.clamp(1, Params::MAX_RESIDENT_BLOCKS);
        GPU_BLOCKS.store(gpu as u64, Ordering::Relaxed);
        let params = abi::kernel_default_params(gpu);
        let st = State {
            driver_version: v.unwrap_or(0),
            params,
            inflight_limit: 16,
            watermark_pct: 90,
            budget_bytes: 0,
            enabled: enable != 0,
            next_handle: 1,
            spaces: Default::default(),
            head: abi::StatsHead::default(),
            unattached_faults: 0,
            driver_evictions: 0,
        };
        let state = match KBox::pin_init(new_mutex!(st), GFP_KERNEL) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: undoes prescient_c_find_driver.
                unsafe { prescient_c_release_driver() };
                return Err(e);
            }
        };
        RING.init();
        STATE.store(
            &*state as *const Mutex<State> as *mut Mutex<State>,
            Ordering::Release,
        );
        // SAFETY: STATE is set; the C side starts the worker, device and hook.
        let r = unsafe { prescient_c_start() };
        if r != 0 {
            STATE.store(core::ptr::null_mut(), Ordering::Release);
            // SAFETY: undoes prescient_c_find_driver.
            unsafe { prescient_c_release_driver() };
            return Err(Error::from_errno(r));
        }
        pr_info!(
            "bound to nvidia-uvm {}, gpu {} blocks, rows {} assoc {} succs {} lookahead {}, {} bytes of tables per space\n",
            text,
            gpu,
            params.rows,
            params.assoc,
            params.succs,
            params.lookahead,
            params.storage_bytes()
        );
        Ok(PrescientModule { state })
    }
}

impl Drop for PrescientModule {
    fn drop(&mut self) {
        // SAFETY: init succeeded; after this no hook, ioctl or worker runs.
        unsafe { prescient_c_stop() };
        STATE.store(core::ptr::null_mut(), Ordering::Release);
        let (faults, pf, drops, unattached, evictions) = {
            let mut g = self.state.lock();
            for slot in g.spaces.iter_mut() {
                *slot = None; // drops engines and file references
            }
            (
                g.head.faults_seen,
                g.head.blocks_prefetched,
                RING.drops.load(Ordering::Relaxed),
                g.unattached_faults,
                g.driver_evictions,
            )
        };
        // SAFETY: no more uvm calls can happen; drop the module reference.
        unsafe { prescient_c_release_driver() };
        pr_info!(
            "unloaded (faults seen {}, prefetched {}, queue drops {}, unattached faults {}, driver evictions followed {})\n",
            faults,
            pf,
            drops,
            unattached,
            evictions
        );
    }
}
