// SPDX-License-Identifier: GPL-2.0
//! The module's state behind one mutex: parameters, attached spaces and
//! counters; and the worker step that feeds the engines from the ring.

use core::ffi::c_int;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::abi::{self, ParamsAbi, MAX_SPACES};
use crate::glue::{self, FileRef, Global, Running};
use crate::params::Params;
use crate::ring::{Record, RING};
use crate::pump::{Limit, Pump, DEFAULT_WATERMARK_PCT};
use crate::round::{self, Limits};
use crate::space::{new_engine, Space, SpaceEngine};
use crate::BLOCK_BYTES;

/// Ring records the worker takes per step before it looks at orphans and
/// lets the kthread loop check for a stop.
const RECORDS_PER_STEP: usize = 512;
/// Prefetch rounds after one fault at most, before the next record.
const ROUNDS_PER_FAULT: u32 = 8;

/// Everything the worker and the ioctls share (lock order: see
/// prescient_main.rs).
pub(crate) struct State {
    driver_version: u64,
    /// GPU memory in blocks (the `gpu_blocks` parameter): the default budget.
    gpu_blocks: u32,
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

/// Counters logged at unload.
pub(crate) struct Totals {
    pub(crate) faults: u64,
    pub(crate) prefetched: u64,
    pub(crate) queue_drops: u64,
    pub(crate) unattached_faults: u64,
    pub(crate) driver_evictions: u64,
}

/// The state while the module runs, for the C callbacks (ioctl, worker).
static STATE: Global<Mutex<State>> = Global::new();

/// Runs `f` under the state mutex; `None` if the module is not running.
/// Only from the ioctl or the worker (see [`Global::with`]).
pub(crate) fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    STATE.with(|m| f(&mut m.lock()))
}

/// Publishes `st` for the callbacks and starts the worker, the device and
/// the driver hook.
pub(crate) fn start(st: State) -> Result<Running<Mutex<State>>> {
    let boxed = KBox::pin_init(new_mutex!(st), GFP_KERNEL)?;
    RING.init();
    Running::start(&STATE, boxed)
}

/// Worker step (kthread in glue.c). Returns nonzero if more work is pending.
#[no_mangle]
extern "C" fn prescient_rs_work() -> c_int {
    c_int::from(with_state(|s| s.work()).unwrap_or(false))
}

impl State {
    /// The state at load: no space attached, the kernel defaults for `gpu`
    /// blocks of GPU memory.
    pub(crate) fn new(driver_version: u64, gpu: u32, enabled: bool) -> Self {
        State {
            driver_version,
            gpu_blocks: gpu,
            params: abi::kernel_default_params(gpu),
            inflight_limit: 16,
            watermark_pct: DEFAULT_WATERMARK_PCT,
            budget_bytes: 0,
            enabled,
            next_handle: 1,
            spaces: Default::default(),
            head: abi::StatsHead::default(),
            unattached_faults: 0,
            driver_evictions: 0,
        }
    }

    /// The engine parameters in force.
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    /// GPU memory in blocks (the `gpu_blocks` module parameter).
    pub(crate) fn gpu_blocks(&self) -> u32 {
        self.gpu_blocks
    }

    fn budget_blocks(&self) -> u64 {
        if self.budget_bytes == 0 {
            u64::from(self.gpu_blocks)
        } else {
            self.budget_bytes / BLOCK_BYTES
        }
    }

    fn space_by_va(&mut self, va: u64) -> Option<&mut Space> {
        self.spaces
            .iter_mut()
            .flatten()
            .find(|s| s.va_space() == va)
    }

    /// The space `handle`, if the caller owns it (or is an administrator):
    /// ENOENT if there is none, EPERM if it is another process's.
    pub(crate) fn owned_space(&mut self, handle: u64, admin: bool) -> Result<&mut Space> {
        let me = glue::current_tgid();
        match self
            .spaces
            .iter_mut()
            .flatten()
            .find(|s| s.handle == handle)
        {
            None => Err(ENOENT),
            Some(sp) if !admin && sp.pid != me => Err(EPERM),
            Some(sp) => Ok(sp),
        }
    }

    /// Takes parameters that the ioctl validated: new tables for every
    /// space, all allocated before anything changes (ENOMEM changes nothing).
    pub(crate) fn set_params(&mut self, a: &ParamsAbi, p: Params) -> Result {
        let mut fresh: [Option<KBox<SpaceEngine>>; MAX_SPACES] = Default::default();
        for (sp, e) in self.spaces.iter().zip(fresh.iter_mut()) {
            if sp.is_some() {
                *e = Some(new_engine(&p)?);
            }
        }
        for (sp, e) in self.spaces.iter_mut().zip(fresh.iter_mut()) {
            if let (Some(sp), Some(e)) = (sp.as_mut(), e.take()) {
                sp.engine = e;
                sp.pump.restart();
            }
        }
        self.params = p;
        self.inflight_limit = a.inflight_limit;
        self.watermark_pct = a.pre_evict_watermark_pct;
        self.budget_bytes = a.residency_budget_bytes;
        self.enabled = a.enabled != 0;
        Ok(())
    }

    /// Forgets what every space's engine learnt (RESET_TABLES).
    pub(crate) fn reset_tables(&mut self) {
        for sp in self.spaces.iter_mut().flatten() {
            sp.engine.reset();
            sp.pump.restart();
        }
    }

    /// Attaches the space of `file`, owned by `pid`; returns its handle.
    /// EEXIST if it is attached already, ENOSPC if every slot is taken.
    pub(crate) fn attach(&mut self, file: FileRef, pid: u64) -> Result<u64> {
        if self.space_by_va(file.va_space()).is_some() {
            return Err(EEXIST);
        }
        let Some(slot) = self.spaces.iter().position(|x| x.is_none()) else {
            return Err(ENOSPC);
        };
        let engine = new_engine(&self.params)?;
        let handle = self.next_handle;
        self.next_handle += 1;
        self.spaces[slot] = Some(Space {
            handle,
            pid,
            events: 0,
            file,
            engine,
            st: abi::SpaceStats::default(),
            pump: Pump::new(),
        });
        Ok(handle)
    }

    /// Detaches the first space for which `is_it` holds; ENOENT if none.
    pub(crate) fn detach_where(&mut self, is_it: impl Fn(&Space) -> bool) -> Result {
        for slot in self.spaces.iter_mut() {
            if slot.as_ref().is_some_and(&is_it) {
                *slot = None;
                return Ok(());
            }
        }
        Err(ENOENT)
    }

    /// GET_VERSION's answer.
    pub(crate) fn version(&self) -> abi::Version {
        let enabled = if self.enabled {
            abi::VERSION_FLAG_ENABLED
        } else {
            0
        };
        abi::Version {
            abi_version: abi::ABI_VERSION,
            flags: abi::VERSION_FLAG_BOUND | enabled,
            max_spaces: MAX_SPACES as u32,
            reserved0: 0,
            driver_version: self.driver_version,
        }
    }

    /// GET_PARAMS's answer.
    pub(crate) fn params_abi(&self) -> ParamsAbi {
        ParamsAbi::from_engine(
            &self.params,
            self.inflight_limit,
            self.watermark_pct,
            self.budget_bytes,
            self.enabled,
        )
    }

    /// GET_STATS's answer.
    pub(crate) fn stats(&self) -> abi::Stats {
        let mut s = abi::Stats {
            head: self.head,
            ..Default::default()
        };
        s.head.queue_drops = RING.drops();
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

    /// One worker step: drain the ring (faults first), walk each fault's
    /// prediction window, detach orphans, one more round. True if more work
    /// is pending.
    fn work(&mut self) -> bool {
        let mut n = 0;
        while n < RECORDS_PER_STEP {
            let Some(r) = RING.pop() else {
                break;
            };
            n += 1;
            if self.on_record(r) {
                // A fault starts a new prediction window: walk it (and act
                // on it) before the engine sees the next event. Fed back to
                // back, a burst of faults leaves every window but the last
                // unwalked, and the engine learns and predicts differently
                // (vm-tests/README.md: 84% instead of 90% in the VM).
                let mut rounds = 0;
                while rounds < ROUNDS_PER_FAULT && self.prefetch_round() {
                    rounds += 1;
                }
            }
        }
        self.reap_orphans();
        let more = self.prefetch_round();
        more || !RING.is_empty()
    }

    /// Feeds one ring record to its space's engine. True if it was a fault
    /// of an attached space.
    fn on_record(&mut self, r: Record) -> bool {
        match r {
            Record::KernelStart { va_space, exec_id } => {
                if let Some(sp) = self.space_by_va(va_space) {
                    sp.engine.kernel_start(exec_id);
                }
                false
            }
            Record::DriverEvicted { events, block } => {
                self.on_driver_evicted(events, block);
                false
            }
            Record::Fault {
                va_space,
                events,
                block,
            } => self.on_fault(va_space, events, block),
        }
    }

    /// A fault: the engine learns it, and the block is resident now.
    fn on_fault(&mut self, va_space: u64, events: u64, block: u64) -> bool {
        self.head.faults_seen += 1;
        let Some(sp) = self.space_by_va(va_space) else {
            self.unattached_faults += 1;
            return false;
        };
        sp.st.faults += 1;
        sp.events = events;
        let late = sp.engine.is_resident(block);
        sp.engine.fault(block);
        // The fault starts a new window: the queued candidates are stale.
        sp.pump.restart();
        sp.engine.migrated_in(block);
        if late {
            self.head.late_prefetches += 1;
        }
        true
    }

    /// The driver evicted `block` on its own: the ledger drops it. Records
    /// are in the driver's order, so a later fault or our own migration of
    /// this block comes after this one.
    fn on_driver_evicted(&mut self, events: u64, block: u64) {
        let sp = self
            .spaces
            .iter_mut()
            .flatten()
            .find(|s| s.events != 0 && s.events == events);
        if let Some(sp) = sp {
            if sp.engine.is_resident(block) {
                sp.engine.demand_evicted(block);
                self.driver_evictions += 1;
            }
        }
    }

    /// One [`round::round`] per space, with the limits in force. True if a
    /// space's chain still has work.
    fn prefetch_round(&mut self) -> bool {
        let lim = Limits {
            limit: Limit {
                capacity_blocks: self.budget_blocks(),
                watermark_pct: self.watermark_pct,
            },
            per_round: self.inflight_limit as usize,
            prefetch: self.enabled,
        };
        let mut more = false;
        for sp in self.spaces.iter_mut().flatten() {
            more |= round::round(sp, &lim, &mut self.head);
        }
        more
    }

    /// Detaches spaces whose process has gone (we hold the last reference).
    fn reap_orphans(&mut self) {
        for slot in self.spaces.iter_mut() {
            if slot.as_ref().is_some_and(|sp| sp.file.is_orphaned()) {
                if let Some(sp) = slot.take() {
                    pr_info!("pid {} exited, detached handle {}\n", sp.pid, sp.handle);
                }
            }
        }
    }

    /// Detaches every space (dropping engines and file references) and
    /// returns the counters to log at unload.
    pub(crate) fn shut_down(&mut self) -> Totals {
        for slot in self.spaces.iter_mut() {
            *slot = None;
        }
        Totals {
            faults: self.head.faults_seen,
            prefetched: self.head.blocks_prefetched,
            queue_drops: RING.drops(),
            unattached_faults: self.unattached_faults,
            driver_evictions: self.driver_evictions,
        }
    }
}
