//! The cost model and the replay loop shared by every policy.
//!
//! Assumptions (docs/cost-model.md explains each):
//! - Kernels run one after another. A kernel starts computing once every
//!   block it touches is on the GPU, then computes for its traced time.
//! - A block that is not on the GPU when its kernel starts is demand-faulted.
//!   The driver's in-block prefetcher turns each fault into a 64 KiB
//!   migration and fetches the rest of a 2 MB block once half of it has
//!   faulted: a block costs ceil(touched / 64 KiB) faults, at most 16.
//!   Faults are serviced in batches of `fault_batch`; every batch costs
//!   `fault_latency`, and the faulted data crosses the link while the kernel
//!   waits.
//! - Prefetches (Prescient, oracle) move whole 2 MB blocks over the same
//!   host-to-device link in the background, overlapping computation; demand
//!   transfers go first. A kernel that touches a block still in flight waits
//!   for it and counts one fault (a late prefetch).
//! - Evicting a block copies it to the host over the device-to-host link
//!   only if the GPU copy was written since it arrived (dirty); a block that
//!   holds only dead data is discarded with no copy, but only by a policy that
//!   knows it is dead (the driver does not).
//! - Writing never-populated (or discarded) memory populates it on the GPU:
//!   no copy. Inputs the CPU provides before each iteration start on the host.
//! - Eviction on demand (the GPU is full when a fault needs room) sits on the
//!   fault path: its write-back delays the kernel.
//!
//! `check-gpu` replays recorded H100 runs in a GPU model (`partial` and the
//! fields after it; `model::partial`): 64 KiB granules with the driver's
//! in-block prefetch, granule fault batches, thread blocks running ahead,
//! prescientd's workers and its budget. docs/cost-model.md, "The GPU model".

mod partial;

pub use crate::plan::GRANULE_BYTES;
use crate::plan::{KernelPlan, Plan};
pub use partial::{density_fill, FULL};
use prescient_core::{Block, BLOCK_BYTES};
use serde::Serialize;

/// The driver's own fault-path copies' share of the host-to-device link
/// while prescientd's migrations to the GPU copy too (assumed: two streams
/// of copies split it evenly; docs/cost-model.md).
pub const DEMAND_SHARE: f64 = 0.5;

/// The machine being simulated.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CostModel {
    pub gpu_bytes: u64,
    /// Host-to-device bandwidth, bytes per second.
    pub h2d_bps: f64,
    /// Device-to-host bandwidth, bytes per second.
    pub d2h_bps: f64,
    /// Far-fault latency per fault batch, seconds.
    pub fault_latency_s: f64,
    /// Faults serviced per batch.
    pub fault_batch: u32,
    /// Bytes one fault migrates (the driver's in-block prefetch granule).
    pub fault_granule: u64,
    /// Faults after which the driver fetches the rest of the block.
    pub max_faults_per_block: u32,
    /// Delay from a GPU fault to the moment the prefetcher learns of it
    /// (the tools event's delivery; 0 for a prefetcher inside the driver).
    pub event_latency_s: f64,
    /// The GPU model (`check-gpu`): blocks are resident granule by granule
    /// as the driver migrates them, `fault_batch` counts granule faults,
    /// and evicting copies every resident granule back (the driver keeps no
    /// dirty bit). Off in G10's model, where a faulted block comes whole.
    pub partial: bool,
    /// In the GPU model, how many of the next kernels' steps a kernel's
    /// thread blocks run ahead into while its faults are served: their
    /// faults share its batches (0: the warps move in lock-step).
    pub wave_skew: u32,
    /// GPU memory is a residency budget prescientd keeps (the GPU itself
    /// has room): an eviction made for a migration runs beside it on
    /// another worker and the other link, and nothing waits for it; and
    /// prescientd queues every prefetch its loop yields, not only what the
    /// link can start before the next event.
    pub soft_budget: bool,
    /// In the GPU model, the largest region (in 64 KiB granules, 32 = the
    /// whole block) the driver's in-block prefetch fills.
    pub fill_max: u32,
    /// prescientd's migration workers (0: prefetches and write-backs move
    /// over the links, one at a time each way). The two directions cost a
    /// worker differently (GPU run 57, migbench): a job to the GPU holds
    /// its worker for `worker_call_s` per 2 MB (an ASYNC UVM_MIGRATE
    /// returns once its copy is queued) and its copy follows the copies
    /// queued before it at `migrate_h2d_bps`; a job to the host holds its
    /// worker until its copy is done, the copies one after another at
    /// `evict_bps` (UVM's rate to the host with this many threads).
    pub workers: u32,
    pub worker_call_s: f64,
    pub migrate_h2d_bps: f64,
    pub evict_bps: f64,
}

impl CostModel {
    /// G10's parameters: 40 GB GPU, 15.754 GB/s each way, 45 us per batch.
    pub fn g10() -> Self {
        CostModel {
            gpu_bytes: 40 << 30,
            h2d_bps: 15.754e9,
            d2h_bps: 15.754e9,
            fault_latency_s: 45e-6,
            fault_batch: 50,
            fault_granule: 64 << 10,
            max_faults_per_block: 16,
            event_latency_s: 0.0,
            partial: false,
            wave_skew: 0,
            soft_budget: false,
            fill_max: 32,
            workers: 0,
            worker_call_s: 0.0,
            migrate_h2d_bps: 0.0,
            evict_bps: 0.0,
        }
    }

    pub fn gpu_blocks(&self) -> usize {
        (self.gpu_bytes / BLOCK_BYTES) as usize
    }

    pub fn faults_for(&self, touched: u32) -> u32 {
        (touched as u64)
            .div_ceil(self.fault_granule)
            .clamp(1, self.max_faults_per_block as u64) as u32
    }

    pub fn h2d_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.h2d_bps
    }

    pub fn d2h_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.d2h_bps
    }
}

/// Where a block's data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// Never written, or discarded: nothing to copy.
    Unpopulated,
    Host,
    /// On the GPU, or on its way there (arrival time in `State::arrival`).
    Gpu,
}

/// Per-iteration results.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IterStats {
    pub time_s: f64,
    pub faults: u64,
    /// Blocks that faulted, once per fault batch they appear in (the GPU's
    /// fault blocks); a late prefetch counts once.
    pub fault_blocks: u64,
    pub fault_batches: u64,
    /// Blocks with demand faults, once per kernel that faulted on them.
    pub demand_blocks: u64,
    pub stall_s: f64,
    pub late_prefetches: u64,
    pub prefetches: u64,
    pub prefetches_used: u64,
    pub prefetches_wasted: u64,
    pub bytes_h2d: u64,
    pub bytes_d2h: u64,
    pub evictions_on_demand: u64,
    /// Demand-faulted blocks that needed a copy from the host.
    pub demand_copies: u64,
    /// Demand-faulted blocks populated on the GPU (first write, no copy).
    pub demand_populates: u64,
    pub pre_evictions: u64,
    pub discards: u64,
}

/// Everything the policies share: block states, link clocks, counters.
pub struct State {
    pub m: CostModel,
    pub cap: usize,
    pub used: usize,
    pub loc: Vec<Loc>,
    pub arrival: Vec<f64>,
    pub dirty: Vec<bool>,
    pub dead: Vec<bool>,
    /// The granules of a GPU block that are on the GPU ([`FULL`] for every
    /// GPU block unless the model is `partial`).
    pub present: Vec<u32>,
    /// The granules of a GPU block that are not present hold data on the
    /// host (they were not just never written).
    pub copy_rest: Vec<bool>,
    pub prefetched: Vec<bool>,
    /// The global kernel position that last touched each block: blocks of
    /// the running kernel are never evicted.
    pub pinned_by: Vec<usize>,
    pub kernel_pos: usize,
    /// Time the H2D link finishes its last scheduled transfer.
    pub h2d_free: f64,
    /// Time the D2H link finishes its last scheduled write-back (with
    /// workers: the copy of the last eviction queued).
    pub d2h_free: f64,
    /// When each of prescientd's workers is free (empty: no workers).
    pub workers: Vec<f64>,
    /// With workers, when the copies of the migrations queued so far to the
    /// GPU are done (`h2d_free` is then when the next worker is free).
    pub mig_h2d_free: f64,
    /// When a worker starts the job that prefetches each block.
    pub job_start: Vec<f64>,
    pub now: f64,
    pub it: IterStats,
    /// (time, faults in the kernel) per kernel, for plots.
    pub fault_timeline: Vec<(f64, u32)>,
}

impl State {
    pub fn new(m: CostModel, plan: &Plan) -> State {
        let n = plan.blocks;
        let mut s = State {
            m,
            cap: m.gpu_blocks(),
            used: 0,
            loc: vec![Loc::Unpopulated; n],
            arrival: vec![0.0; n],
            dirty: vec![false; n],
            dead: vec![false; n],
            present: vec![0; n],
            copy_rest: vec![false; n],
            prefetched: vec![false; n],
            pinned_by: vec![usize::MAX; n],
            kernel_pos: usize::MAX,
            h2d_free: 0.0,
            d2h_free: 0.0,
            workers: vec![0.0; m.workers as usize],
            mig_h2d_free: 0.0,
            job_start: vec![0.0; n],
            now: 0.0,
            it: IterStats::default(),
            fault_timeline: Vec::new(),
        };
        for &b in &plan.host_initial {
            s.loc[b as usize] = Loc::Host;
        }
        s
    }

    pub fn is_on_gpu(&self, b: Block) -> bool {
        self.loc[b as usize] == Loc::Gpu
    }

    /// True when every granule of `b` is on the GPU (or on its way).
    pub fn is_full(&self, b: Block) -> bool {
        self.is_on_gpu(b) && self.present[b as usize] == FULL
    }

    /// True while the running kernel uses `b`: not a victim.
    pub fn pinned(&self, b: Block) -> bool {
        self.pinned_by[b as usize] == self.kernel_pos
    }

    pub fn free_blocks(&self) -> usize {
        self.cap.saturating_sub(self.used)
    }

    /// Takes `b` off the GPU at time `at`: discarded if `discard`, else
    /// written back when dirty. Returns when its GPU memory is free again.
    pub fn evict(&mut self, b: Block, discard: bool, at: f64) -> f64 {
        // The driver copies back whatever is resident; G10's model only
        // what was written.
        let copy = self.dirty[b as usize] || self.m.partial;
        self.leave(b, discard, copy, at)
    }

    /// Gives `bytes` to the worker free first, no earlier than `at`;
    /// returns when the job is done. `h2d_free` then says when the next
    /// job can start, as the link's clock does without workers.
    fn on_worker(&mut self, at: f64, bytes: u64, h2d: bool) -> (f64, f64) {
        let (w, free) = self
            .workers
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("workers");
        let start = at.max(free);
        let (busy_until, end) = self.job_times(start, bytes, h2d);
        self.workers[w] = busy_until;
        self.h2d_free = self.workers.iter().copied().fold(f64::MAX, f64::min);
        (start, end)
    }

    /// When a job started at `start` frees its worker and when its copy is
    /// done (the same moment for a job to the host, whose call returns only
    /// after its copy).
    fn job_times(&mut self, start: f64, bytes: u64, h2d: bool) -> (f64, f64) {
        let m = self.m;
        if h2d {
            let call = m.worker_call_s * bytes as f64 / BLOCK_BYTES as f64;
            let copied = start.max(self.mig_h2d_free) + bytes as f64 / m.migrate_h2d_bps;
            self.mig_h2d_free = copied;
            return (start + call, copied);
        }
        let copied = start.max(self.d2h_free) + bytes as f64 / m.evict_bps;
        self.d2h_free = copied;
        (copied, copied)
    }

    /// The host-to-device rate left to the driver's own copies at `at`:
    /// while migrations to the GPU are copying, the link's
    /// [`DEMAND_SHARE`].
    pub fn demand_h2d_bps(&self, at: f64) -> f64 {
        if self.mig_h2d_free > at {
            self.m.h2d_bps * DEMAND_SHARE
        } else {
            self.m.h2d_bps
        }
    }

    /// When room made by evicting at `at` (done at `freed`) can be used.
    pub fn room_at(&self, at: f64, freed: f64) -> f64 {
        if self.m.soft_budget {
            at
        } else {
            freed
        }
    }

    /// Takes `b` off the GPU with no copy: the CPU rewrites it.
    pub fn drop_stale(&mut self, b: Block, at: f64) -> f64 {
        self.leave(b, false, false, at)
    }

    fn leave(&mut self, b: Block, discard: bool, copy: bool, at: f64) -> f64 {
        let i = b as usize;
        debug_assert_eq!(self.loc[i], Loc::Gpu);
        self.used -= 1;
        let bytes = self.present[i].count_ones() as u64 * GRANULE_BYTES;
        self.present[i] = 0;
        if self.prefetched[i] {
            self.prefetched[i] = false;
            self.it.prefetches_wasted += 1;
        }
        // A block still arriving cannot leave before it has arrived.
        let at = at.max(self.arrival[i]);
        if discard {
            self.loc[i] = Loc::Unpopulated;
            self.dirty[i] = false;
            self.it.discards += 1;
            return at;
        }
        self.loc[i] = Loc::Host;
        self.dirty[i] = false;
        if !copy {
            return at;
        }
        self.it.bytes_d2h += bytes;
        if !self.workers.is_empty() {
            return self.on_worker(at, bytes, false).1;
        }
        let start = at.max(self.d2h_free);
        self.d2h_free = start + self.m.d2h_s(bytes);
        self.d2h_free
    }

    /// Starts a background migration of `b` to the GPU no earlier than
    /// `not_before`; the caller has made room. Returns the arrival time.
    pub fn prefetch(&mut self, b: Block, not_before: f64) -> f64 {
        let i = b as usize;
        let start = not_before.max(self.now);
        let copy = match self.loc[i] {
            Loc::Unpopulated => 0,
            Loc::Host => BLOCK_BYTES,
            Loc::Gpu if self.present[i] == FULL => return self.arrival[i],
            // The rest of a partly resident block: already counted in `used`.
            Loc::Gpu => {
                let missing = (!self.present[i]).count_ones() as u64 * GRANULE_BYTES;
                self.used -= 1;
                if self.copy_rest[i] {
                    missing
                } else {
                    0
                }
            }
        };
        let arrival = if copy == 0 {
            start
        } else if !self.workers.is_empty() {
            self.it.bytes_h2d += copy;
            let (began, end) = self.on_worker(start, copy, true);
            self.job_start[i] = began;
            end
        } else {
            let s = start.max(self.h2d_free);
            self.h2d_free = s + self.m.h2d_s(copy);
            self.it.bytes_h2d += copy;
            self.h2d_free
        };
        self.loc[i] = Loc::Gpu;
        self.present[i] = FULL;
        self.copy_rest[i] = false;
        self.arrival[i] = arrival;
        self.dirty[i] = false;
        self.prefetched[i] = true;
        self.used += 1;
        self.it.prefetches += 1;
        arrival
    }
}

/// What a policy decides; the replay loop does the rest.
pub trait Policy {
    fn name(&self) -> String;
    /// Bytes of prediction tables (0 for policies without tables).
    fn table_bytes(&self) -> usize {
        0
    }
    /// Kernel `k` (global position `pos` over all iterations) starts.
    fn kernel_start(&mut self, _st: &mut State, _plan: &Plan, _k: usize, _pos: usize) {}
    /// The kernel touched `b` (resident or not), in access order.
    fn touched(&mut self, _st: &mut State, _b: Block) {}
    /// A GPU fault on `b` (demand, or a late prefetch).
    fn fault(&mut self, _st: &mut State, _b: Block) {}
    /// `b` arrived on demand.
    fn demand_arrived(&mut self, _st: &mut State, _b: Block) {}
    /// The GPU is full and a fault needs room: the block to evict now, and
    /// whether it may be discarded (no copy) because its data is dead.
    fn demand_victim(&mut self, st: &mut State) -> Option<(Block, bool)>;
    /// `b` left the GPU (so the policy can forget it).
    fn evicted(&mut self, _st: &mut State, _b: Block) {}
    /// Background work (prefetch, pre-evict) until the link is busy past `until`.
    fn advance(&mut self, _st: &mut State, _plan: &Plan, _until: f64) {}
    /// The application declared `b` dead / alive again.
    fn dead(&mut self, _st: &mut State, _b: Block) {}
    fn alive(&mut self, _st: &mut State, _b: Block) {}
    /// The policy's own counters for the report.
    fn extra(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Replays `iterations` iterations of `plan` under `policy`.
pub fn replay(plan: &Plan, m: CostModel, iterations: usize, policy: &mut dyn Policy) -> Replay {
    let mut st = State::new(m, plan);
    let mut iters = Vec::with_capacity(iterations);
    let ideal = plan.ideal_s();
    // One buffer for every kernel's demand faults: no allocation per kernel.
    let mut demand: Vec<(Block, u32)> = Vec::new();
    for it in 0..iterations {
        let t0 = st.now;
        st.it = IterStats::default();
        if it > 0 {
            reload_host_inputs(&mut st, plan, policy);
        }
        for k in 0..plan.kernels.len() {
            let pos = it * plan.kernels.len() + k;
            run_kernel(&mut st, plan, k, pos, policy, &mut demand);
        }
        st.it.time_s = st.now - t0;
        st.it.stall_s = st.it.time_s - ideal;
        iters.push(st.it.clone());
    }
    Replay {
        name: policy.name(),
        iterations: iters,
        table_bytes: policy.table_bytes(),
        fault_timeline: std::mem::take(&mut st.fault_timeline),
        extra: policy.extra(),
    }
}

/// Puts the next input batch on the host, as the CPU writes it between iterations.
fn reload_host_inputs(st: &mut State, plan: &Plan, policy: &mut dyn Policy) {
    for &b in &plan.host_inputs {
        if st.is_on_gpu(b) {
            // The GPU copy is stale once the CPU rewrites it: no write-back.
            st.drop_stale(b, st.now);
            policy.evicted(st, b);
        }
        st.loc[b as usize] = Loc::Host;
    }
}

/// Replays kernel `k` at global position `pos`: faults, transfers, compute.
fn run_kernel(
    st: &mut State,
    plan: &Plan,
    k: usize,
    pos: usize,
    policy: &mut dyn Policy,
    demand: &mut Vec<(Block, u32)>,
) {
    let kp = &plan.kernels[k];
    let t = st.now;
    for &b in &kp.born {
        st.dead[b as usize] = false;
        policy.alive(st, b);
    }
    st.kernel_pos = pos;
    for bt in &kp.touches {
        st.pinned_by[bt.block as usize] = pos;
    }
    policy.kernel_start(st, plan, k, pos);
    policy.advance(st, plan, t);
    demand.clear();
    let (ready, faults) = classify_touches(st, kp, t, policy, demand);
    let tc = if st.m.partial && !demand.is_empty() {
        let ahead = partial::ahead(st, plan, k, demand);
        partial::serve(st, t, demand, &ahead, policy)
    } else {
        serve_demand(st, t, demand, policy)
    };
    for bt in &kp.touches {
        if bt.write {
            st.dirty[bt.block as usize] = true;
        }
    }
    let start = tc.max(ready);
    let end = start + kp.duration_s;
    st.it.faults += faults;
    st.fault_timeline.push((end, faults as u32));
    // Background work runs while the kernel computes.
    st.now = start;
    policy.advance(st, plan, end);
    st.now = end;
    for &b in &kp.dead_after {
        st.dead[b as usize] = true;
        policy.dead(st, b);
    }
}

/// Sorts the kernel's blocks into resident, still arriving (late prefetch)
/// and missing (pushed onto `demand`); returns when the late prefetches have
/// all arrived and the kernel's fault count.
fn classify_touches(
    st: &mut State,
    kp: &KernelPlan,
    t: f64,
    policy: &mut dyn Policy,
    demand: &mut Vec<(Block, u32)>,
) -> (f64, u64) {
    let mut ready = t;
    let mut faults = 0u64;
    for bt in &kp.touches {
        let b = bt.block;
        let i = b as usize;
        policy.touched(st, b);
        let missing = bt.granules & !st.present[i];
        if st.m.partial && st.loc[i] == Loc::Gpu && st.arrival[i] > t && st.job_start[i] > t {
            // Its job still waits for a worker: the driver serves the fault
            // (in one batch: the job's copy is counted on its worker).
            st.it.late_prefetches += 1;
            demand.push((b, bt.granules));
            policy.fault(st, b);
        } else if st.loc[i] == Loc::Gpu && (missing == 0 || st.arrival[i] > t) {
            if st.prefetched[i] {
                st.prefetched[i] = false;
                st.it.prefetches_used += 1;
            }
            if st.arrival[i] > t {
                ready = ready.max(st.arrival[i]);
                faults += 1;
                st.it.fault_blocks += 1;
                st.it.late_prefetches += 1;
                policy.fault(st, b);
            }
        } else if st.m.partial {
            // Faults are counted as their batches are served.
            let need = if st.loc[i] == Loc::Gpu {
                missing
            } else {
                bt.granules
            };
            demand.push((b, need));
            policy.fault(st, b);
        } else {
            let f = st.m.faults_for(bt.bytes);
            faults += f as u64;
            demand.push((b, bt.bytes));
            policy.fault(st, b);
        }
    }
    (ready, faults)
}

/// Services the kernel's demand faults from time `t`: batches of latency plus
/// the transfers, evicting on the fault path when the GPU is full. Returns
/// when the last demanded block has arrived.
fn serve_demand(st: &mut State, t: f64, demand: &[(Block, u32)], policy: &mut dyn Policy) -> f64 {
    let mut tc = t;
    if demand.is_empty() {
        return tc;
    }
    st.it.demand_blocks += demand.len() as u64;
    let m = st.m;
    let demand_faults: u64 = demand
        .iter()
        .map(|&(_, bytes)| m.faults_for(bytes) as u64)
        .sum();
    let batches = demand_faults.div_ceil(m.fault_batch as u64);
    st.it.fault_batches += batches;
    // The kernel's warps fault on all its missing blocks at once, so every
    // batch holds faults of each of them (up to the batch's size).
    st.it.fault_blocks += batches * (demand.len() as u64).min(m.fault_batch as u64);
    tc += batches as f64 * m.fault_latency_s;
    for &(b, bytes) in demand {
        tc = room_for_demand(st, tc, policy);
        tc = demand_arrive(st, b, bytes, tc);
        policy.demand_arrived(st, b);
    }
    tc
}

/// Makes room for one demanded block when the GPU is full: the policy's
/// demand victim leaves on the fault path. Returns when the room is there
/// (`tc` when none was needed or the policy had no victim).
fn room_for_demand(st: &mut State, mut tc: f64, policy: &mut dyn Policy) -> f64 {
    if st.free_blocks() == 0 {
        if let Some((v, discard)) = policy.demand_victim(st) {
            st.it.evictions_on_demand += 1;
            let freed = st.evict(v, discard, tc);
            tc = tc.max(st.room_at(tc, freed));
            policy.evicted(st, v);
        }
    }
    tc
}

/// Brings demanded block `b` (`bytes` of it touched) onto the GPU from time
/// `tc`, copying it from the host or populating it; returns its arrival.
fn demand_arrive(st: &mut State, b: Block, bytes: u32, mut tc: f64) -> f64 {
    let m = st.m;
    let i = b as usize;
    if st.loc[i] == Loc::Host {
        st.it.demand_copies += 1;
        let moved = (bytes as u64).div_ceil(m.fault_granule) * m.fault_granule;
        let moved = moved.min(BLOCK_BYTES);
        // Demand goes ahead of queued prefetches, behind the
        // one block transfer already on the wire.
        let start = tc.max(st.h2d_free.min(tc + m.h2d_s(BLOCK_BYTES)));
        tc = start + m.h2d_s(moved);
        st.h2d_free = st.h2d_free.max(tc);
        st.it.bytes_h2d += moved;
    } else {
        st.it.demand_populates += 1;
    }
    st.loc[i] = Loc::Gpu;
    st.present[i] = FULL;
    st.arrival[i] = tc;
    st.dirty[i] = false;
    st.used += 1;
    tc
}

/// One policy's run.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    pub name: String,
    pub iterations: Vec<IterStats>,
    pub table_bytes: usize,
    #[serde(skip)]
    pub fault_timeline: Vec<(f64, u32)>,
    pub extra: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Kernel, Range, Touch, Workload};

    /// Four 2 MB blocks on the host with two workers at round rates:
    /// 2 MB to the host in 1 ms, to the GPU in 0.5 ms, a call 0.1 ms.
    fn four_blocks_two_workers() -> State {
        let w = Workload {
            name: "w".into(),
            kernels: vec![Kernel {
                name: "k".into(),
                exec_id: 0,
                duration_ns: 1,
                touches: vec![Touch {
                    range: Range {
                        addr: 0,
                        len: 8 << 20,
                    },
                    write: false,
                }],
                dead_after: vec![],
            }],
        };
        let plan = Plan::new(&w).unwrap();
        let block = BLOCK_BYTES as f64;
        let m = CostModel {
            partial: true,
            workers: 2,
            worker_call_s: 1e-4,
            migrate_h2d_bps: block / 5e-4,
            evict_bps: block / 1e-3,
            h2d_bps: block / 2.5e-4,
            ..CostModel::g10()
        };
        let mut st = State::new(m, &plan);
        st.loc.iter_mut().for_each(|l| *l = Loc::Host);
        st
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn prefetches_free_their_worker_after_the_call_and_copy_one_after_another() {
        let mut st = four_blocks_two_workers();
        // Three prefetches at once on two workers: each call frees its
        // worker after 0.1 ms, the copies follow each other at 0.5 ms.
        let arrivals: Vec<f64> = (0..3).map(|b| st.prefetch(b, 0.0)).collect();
        assert!(close(arrivals[0], 5e-4) && close(arrivals[1], 1e-3) && close(arrivals[2], 1.5e-3));
        assert!(
            close(st.job_start[2], 1e-4),
            "the third waited for a call, not a copy"
        );
        // While they copy, the driver's own copies get half the link.
        assert!(close(st.demand_h2d_bps(1e-3), st.m.h2d_bps * DEMAND_SHARE));
        assert!(close(st.demand_h2d_bps(2e-3), st.m.h2d_bps));
    }

    #[test]
    fn an_eviction_holds_its_worker_until_its_copy_and_evictions_queue() {
        let mut st = four_blocks_two_workers();
        for b in 0..3 {
            st.prefetch(b, 0.0);
        }
        // Two evictions at 2 ms: one after the other at UVM's rate to the
        // host, each worker held until its own copy is done.
        let done: Vec<f64> = (0..2).map(|b| st.evict(b, false, 2e-3)).collect();
        assert!(close(done[0], 3e-3) && close(done[1], 4e-3));
        assert!(
            close(st.h2d_free, 3e-3),
            "no worker free before the first copy"
        );
        assert_eq!(st.it.bytes_d2h, 2 * BLOCK_BYTES);
        // A prefetch waits for a worker, not for the evictions' copies.
        assert!(close(st.prefetch(3, 2e-3), 3e-3 + 5e-4));
    }
}
