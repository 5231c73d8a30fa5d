// SPDX-License-Identifier: GPL-2.0
//! The module's state behind one mutex: parameters, attached spaces and
//! counters; and the worker step that feeds the engines from the ring.

use core::ffi::c_int;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::abi::{self, ParamsAbi, MAX_SPACES};
use crate::discarded::Discarded;
use crate::feed::FEEDS;
use crate::glue::{self, FileRef, Global, Owner, Running};
use crate::gpus::{FaultGpu, SpaceGpus};
use crate::params::Params;
use crate::pump::{Limit, Pump, DEFAULT_WATERMARK_PCT};
use crate::ring::{Record, ATTACHED, RING};
use crate::round::{self, Limits, Populated};
use crate::space::{new_engine, Gpu, Space, SpaceEngine};
use crate::BLOCK_BYTES;

/// Ring records the worker takes per step (one hold of the State mutex)
/// before it looks at orphans, releases the mutex and reschedules.
const RECORDS_PER_STEP: usize = 64;
/// Spaces one non-root uid may own at once: no single user fills every
/// slot (root, the administrator, may).
const SPACES_PER_UID: usize = MAX_SPACES / 2;
/// Prefetch rounds after one fault at most, before the next record.
const ROUNDS_PER_FAULT: u32 = 8;
/// How long (in seconds / QUIET_DIV) the worker keeps polling the
/// execution-id pages after the last new id or record: a job that stopped
/// launching costs no more wake-ups (its next fault, or any record, starts
/// polling again).
const QUIET_DIV: u64 = 2;

#[path = "state_exec.rs"]
mod exec;
pub(crate) use exec::mode_params;

/// Everything the worker and the ioctls share (lock order: see
/// prescient_main.rs).
pub(crate) struct State {
    driver_version: u64,
    /// The bound driver branch has uvm_api_discard.
    discard: bool,
    /// The `gpu_uuid` parameter: where spaces no SET_GPU named prefetch to.
    default_gpu: Option<[u8; 16]>,
    /// GPU memory in blocks (the `gpu_blocks` parameter): the default
    /// budget; 0 = unknown (no prefetch or pre-eviction until a budget is set).
    gpu_blocks: u32,
    params: Params,
    inflight_limit: u32,
    watermark_pct: u32,
    budget_bytes: u64,
    enabled: bool,
    next_handle: u64,
    /// `MAX_SPACES` slots, on the heap: a `Space` is ~800 bytes, and the
    /// State built on the stack at load with the array inline overflowed
    /// the 16 KB stack (guard page hit in init, vm-tests, 2026-11-28).
    spaces: KVec<Option<Space>>,
    head: abi::StatsHead,
    /// Blocks the driver evicted on its own while the ledger held them.
    driver_evictions: u64,
    /// When (jiffies) the worker last saw a new execution id or a record.
    active_at: u64,
}

/// Counters logged at unload.
pub(crate) struct Totals {
    pub(crate) faults: u64,
    pub(crate) prefetched: u64,
    pub(crate) queue_drops: u64,
    pub(crate) unattached_faults: u64,
    pub(crate) cpu_faults: u64,
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
pub(crate) fn start(st: State, branch: u32) -> Result<Running<Mutex<State>>> {
    let boxed = KBox::pin_init(new_mutex!(st), GFP_KERNEL)?;
    RING.init();
    Running::start(&STATE, boxed, branch)
}

/// Worker step (kthread in glue.c): 1 if more work is pending, 2 if not
/// but execution-id pages are being written (poll them again soon), 0 if
/// idle.
#[no_mangle]
extern "C" fn prescient_rs_work() -> c_int {
    match with_state(|s| s.work()) {
        Some(Step::More) => 1,
        Some(Step::Poll) => 2,
        _ => 0,
    }
}

/// What the worker does after a step.
enum Step {
    /// Records or prefetch rounds are pending: step again at once.
    More,
    /// Nothing pending, but pages changed lately: poll them soon.
    Poll,
    /// Sleep until kicked.
    Idle,
}

impl State {
    /// The state at load: no space attached, the kernel defaults for `gpu`
    /// blocks of GPU memory (0 = unknown). ENOMEM if the space slots cannot
    /// be allocated.
    pub(crate) fn new(
        driver_version: u64,
        gpu: u32,
        enabled: bool,
        discard: bool,
        default_gpu: Option<[u8; 16]>,
    ) -> Result<Self> {
        let mut spaces = KVec::with_capacity(MAX_SPACES, GFP_KERNEL)?;
        for _ in 0..MAX_SPACES {
            spaces.push(None, GFP_KERNEL)?;
        }
        Ok(State {
            driver_version,
            discard,
            default_gpu,
            gpu_blocks: gpu,
            params: abi::kernel_default_params(gpu),
            inflight_limit: 16,
            watermark_pct: DEFAULT_WATERMARK_PCT,
            budget_bytes: 0,
            enabled,
            next_handle: 1,
            spaces,
            head: abi::StatsHead::default(),
            driver_evictions: 0,
            active_at: 0,
        })
    }

    /// The engine parameters in force.
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    /// GPU memory in blocks (the `gpu_blocks` module parameter).
    pub(crate) fn gpu_blocks(&self) -> u32 {
        self.gpu_blocks
    }

    /// The residency budget in blocks; None while nobody said how large
    /// the GPU is (no `gpu_blocks` parameter, no SET_PARAMS budget).
    fn budget_blocks(&self) -> Option<u64> {
        if self.budget_bytes != 0 {
            Some(self.budget_bytes / BLOCK_BYTES)
        } else if self.gpu_blocks != 0 {
            Some(u64::from(self.gpu_blocks))
        } else {
            None
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
        match self
            .spaces
            .iter_mut()
            .flatten()
            .find(|s| s.handle == handle)
        {
            None => Err(ENOENT),
            Some(sp) if !admin && !sp.owner.is_current() => Err(EPERM),
            Some(sp) => Ok(sp),
        }
    }

    /// The engines SET_PARAMS must build for `p`, as the mode of each
    /// attached space in slot order (true: execution-id mode, the space has
    /// a page), or EINVAL if their tables together (at least one space's)
    /// would exceed the `max_table_mib` parameter.
    pub(crate) fn engine_modes(&self, p: &Params) -> Result<KVec<bool>> {
        if !self.tables_fit(p, None, usize::from(self.attached() == 0))? {
            return Err(EINVAL);
        }
        let mut v = KVec::with_capacity(MAX_SPACES, GFP_KERNEL)?;
        for sp in self.spaces.iter().flatten() {
            v.push(sp.exec.is_some(), GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// Takes parameters that the ioctl validated, with the engines it built
    /// for them outside the lock ([`State::engine_modes`]); a space attached
    /// or given a page since gets one built here. ENOMEM changes nothing.
    pub(crate) fn set_params(
        &mut self,
        a: &ParamsAbi,
        p: Params,
        mut fresh: KVec<Option<KBox<SpaceEngine>>>,
    ) -> Result {
        if !self.tables_fit(&p, None, usize::from(self.attached() == 0))? {
            return Err(EINVAL);
        }
        let mut built = KVec::with_capacity(MAX_SPACES, GFP_KERNEL)?;
        for (i, sp) in self.spaces.iter().flatten().enumerate() {
            let want = mode_params(&p, sp.exec.is_some())?;
            let e = match fresh.get_mut(i).and_then(Option::take) {
                Some(e) if e.params() == &want => e,
                _ => new_engine(&want)?,
            };
            built.push(e, GFP_KERNEL)?;
        }
        for (sp, e) in self.spaces.iter_mut().flatten().zip(built) {
            sp.engine = e;
            sp.pump.restart();
        }
        self.params = p;
        self.inflight_limit = a.inflight_limit;
        self.watermark_pct = a.pre_evict_watermark_pct;
        self.budget_bytes = a.residency_budget_bytes;
        self.enabled = a.enabled != 0;
        Ok(())
    }

    /// Attached spaces.
    fn attached(&self) -> usize {
        self.spaces.iter().flatten().count()
    }

    /// Forgets what every space's engine learnt (RESET_TABLES).
    pub(crate) fn reset_tables(&mut self) {
        for sp in self.spaces.iter_mut().flatten() {
            sp.engine.reset();
            sp.pump.restart();
        }
    }

    /// Attaches the space of `file`, owned by `owner`; returns its handle.
    /// EEXIST if it is attached already, ENOSPC if every slot is taken or
    /// the owner's (non-root) uid has [`SPACES_PER_UID`] already, ENOMEM if
    /// one more space's tables would exceed `max_table_mib`.
    pub(crate) fn attach(&mut self, file: FileRef, owner: Owner) -> Result<u64> {
        if self.space_by_va(file.va_space()).is_some() {
            return Err(EEXIST);
        }
        let Some(slot) = self.spaces.iter().position(|x| x.is_none()) else {
            return Err(ENOSPC);
        };
        let uid = owner.uid();
        let same_uid = self
            .spaces
            .iter()
            .flatten()
            .filter(|s| s.owner.uid() == uid)
            .count();
        if uid != 0 && same_uid >= SPACES_PER_UID {
            return Err(ENOSPC);
        }
        if !self.tables_fit(&self.params, None, 1)? {
            return Err(ENOMEM);
        }
        let engine = new_engine(&self.space_params(false)?)?;
        let handle = self.next_handle;
        self.next_handle += 1;
        ATTACHED.set(slot, file.va_space());
        self.spaces[slot] = Some(Space {
            handle,
            slot,
            owner,
            gpu: self.default_gpu.map_or(Gpu::Unknown, Gpu::Set),
            gpus: KBox::new(SpaceGpus::new()?, GFP_KERNEL)?,
            events: 0,
            file,
            engine,
            st: abi::SpaceStats::default(),
            pump: Pump::new(),
            exec: None,
            discarded: Discarded::new(),
        });
        Ok(handle)
    }

    /// Detaches the first space for which `is_it` holds; ENOENT if none.
    pub(crate) fn detach_where(&mut self, is_it: impl Fn(&Space) -> bool) -> Result {
        for (i, slot) in self.spaces.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(&is_it) {
                ATTACHED.clear(i);
                *slot = None;
                return Ok(());
            }
        }
        Err(ENOENT)
    }

    /// GET_VERSION's answer.
    pub(crate) fn version(&self) -> abi::Version {
        let mut flags = abi::VERSION_FLAG_BOUND;
        if self.enabled {
            flags |= abi::VERSION_FLAG_ENABLED;
        }
        if self.budget_blocks().is_some() {
            flags |= abi::VERSION_FLAG_GPU_SIZE_KNOWN;
        }
        if self.discard {
            flags |= abi::VERSION_FLAG_DISCARD;
        }
        abi::Version {
            abi_version: abi::ABI_VERSION,
            flags,
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
        s.head.cpu_faults = glue::cpu_faults();
        s.head.unattached_faults = ATTACHED.unattached_faults();
        s.head.prefetches_used = s
            .head
            .blocks_prefetched
            .saturating_sub(s.head.late_prefetches);
        let mut n = 0;
        for sp in self.spaces.iter().flatten() {
            s.head.table_bytes += sp.engine.table_bytes() as u64;
            let mut e = sp.st;
            e.handle = sp.handle;
            e.pid = sp.owner.vnr();
            e.gpu = sp.gpu.abi();
            e.fault_gpus = sp.gpus.count() as u64;
            e.resident_blocks = sp.engine.resident_blocks() as u64;
            if sp.exec.is_some() {
                e.exec_page = abi::EXEC_PAGE_SET;
                (e.exec_ids, e.exec_faults) = FEEDS.counts(sp.slot);
            }
            s.spaces[n] = e;
            n += 1;
        }
        s.head.n_spaces = n as u32;
        s.head.exec_pages = glue::exec_pages_held();
        s
    }

    /// One worker step: drain the ring (faults first), walk each fault's
    /// prediction window, detach orphans, one more round. True if more work
    /// is pending.
    fn work(&mut self) -> Step {
        let announced = self.poll_pages();
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
        if more || !RING.is_empty() {
            return Step::More;
        }
        let now = glue::jiffies();
        if announced || n > 0 {
            self.active_at = now;
        }
        let pages = self.spaces.iter().flatten().any(|sp| sp.exec.is_some());
        if pages && now.saturating_sub(self.active_at) < glue::hz() / QUIET_DIV {
            Step::Poll
        } else {
            Step::Idle
        }
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
                gpu,
            } => self.on_fault(va_space, events, block, gpu),
        }
    }

    /// A fault: the engine learns it, and the block is resident now.
    fn on_fault(&mut self, va_space: u64, events: u64, block: u64, gpu: Option<FaultGpu>) -> bool {
        // Only attached spaces' faults reach the ring; one of a space
        // detached since is dropped here.
        let Some(sp) = self
            .spaces
            .iter_mut()
            .flatten()
            .find(|s| s.va_space() == va_space)
        else {
            return false;
        };
        self.head.faults_seen += 1;
        sp.st.faults += 1;
        sp.events = events;
        sp.gpus.fault(block, gpu);
        // The driver brought it in: an alive mark has nothing to populate.
        sp.discarded.take(block);
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
    /// No round while the GPU's size is unknown: the module then never
    /// pre-evicts (nor prefetches) against a size nobody told it.
    fn prefetch_round(&mut self) -> bool {
        let Some(capacity_blocks) = self.budget_blocks() else {
            return false;
        };
        let lim = Limits {
            limit: Limit {
                capacity_blocks,
                watermark_pct: self.watermark_pct,
            },
            per_round: self.inflight_limit as usize,
            prefetch: self.enabled,
            discard: self.discard,
        };
        let mut more = false;
        for sp in self.spaces.iter_mut().flatten() {
            more |= round::round(sp, &lim, &mut self.head);
        }
        more
    }

    /// Detaches spaces whose process has gone (we hold the last reference).
    fn reap_orphans(&mut self) {
        for (i, slot) in self.spaces.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|sp| sp.file.is_orphaned()) {
                ATTACHED.clear(i);
                if let Some(sp) = slot.take() {
                    pr_info!(
                        "pid {} exited, detached handle {}\n",
                        sp.owner.nr(),
                        sp.handle
                    );
                }
            }
        }
    }

    /// Adds one MARK_ALIVE chunk's populate to the module-wide counters.
    pub(crate) fn count_populate(&mut self, p: Populated) {
        self.head.populated += p.blocks;
        self.head.migrate_errors += p.errors;
    }

    /// Detaches every space (dropping engines and file references) and
    /// returns the counters to log at unload.
    pub(crate) fn shut_down(&mut self) -> Totals {
        for (i, slot) in self.spaces.iter_mut().enumerate() {
            ATTACHED.clear(i);
            *slot = None;
        }
        Totals {
            faults: self.head.faults_seen,
            prefetched: self.head.blocks_prefetched,
            queue_drops: RING.drops(),
            unattached_faults: ATTACHED.unattached_faults(),
            cpu_faults: glue::cpu_faults(),
            driver_evictions: self.driver_evictions,
        }
    }
}
