//! The prediction engine: DeepUM's correlation prefetcher and pre-eviction
//! policy over caller-provided storage.
//!
//! # Events in, commands out
//! The backend (kernel module, daemon or simulator) reports what happened:
//! [`Engine::kernel_start`] (execution-id mode only), [`Engine::fault`],
//! [`Engine::migrated_in`], [`Engine::evicted`], [`Engine::mark_dead`]. It asks
//! for work: [`Engine::prefetches`] (blocks to migrate to the GPU, soonest
//! needed first) and [`Engine::victims`] (blocks to discard or evict). Every
//! call does bounded work and never allocates.
//!
//! # Parts
//! `Engine` keeps the storage, the statistics and this event API, and hands
//! each event to one part:
//! - `chain.rs`: execution-id mode's chain of per-kernel block tables;
//! - `follow.rs`: transparent mode's history follower;
//! - `plan.rs`: transparent mode's plan follower, on small memories;
//! - `victims.rs`: victim selection and the regret window;
//! - `thrash.rs`: the thrash guard, from the regret window's epochs.
//!
//! The window set and frontier they share live in `crate::window`.

mod chain;
mod follow;
mod plan;
mod thrash;
mod victims;

use crate::block::{Block, ExecId, NONE};
use crate::block_table::Geometry;
use crate::exec_table::{ExecTable, NO_EXEC};
use crate::layout::Layout;
use crate::ledger::{Ledger, LedgerState, Residency};
use crate::params::{Mode, ParamError, Params};
use crate::window::{window_seq, Window};
use chain::Chain;
use core::fmt;
use core::ops::DerefMut;
use follow::Follower;
use thrash::Thrash;
use victims::Regret;

/// Chain steps per [`Engine::prefetches`] call, per output slot.
const STEPS_PER_SLOT: usize = 4;

/// A block to migrate to the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Prefetch {
    pub block: Block,
    /// Kernels between the running one and the one predicted to use it
    /// (0: the running kernel).
    pub ahead: u32,
}

/// A block to take off the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Victim {
    pub block: Block,
    /// The block holds only dead data: discard it, no copy.
    pub discard: bool,
}

/// Counters, all monotonic since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub faults: u64,
    pub kernel_starts: u64,
    pub windows: u64,
    pub prefetches: u64,
    pub predictions: u64,
    pub mispredictions: u64,
    pub prediction_failures: u64,
    pub window_full: u64,
    pub table_replacements: u64,
    pub entry_replacements: u64,
    pub exec_evictions: u64,
    pub victims_discard: u64,
    pub victims_evict: u64,
    pub victim_shortfall: u64,
    pub ledger_overflow: u64,
    /// Blocks the driver had to evict on the fault path (memory was full).
    pub demand_evictions: u64,
    /// Faults on blocks Prescient had pre-evicted shortly before.
    pub refaults: u64,
    /// Transparent mode: faults the history had predicted (they move the
    /// window on), ...
    pub history_hits: u64,
    /// ... faults it had not (they are recorded), ...
    pub history_misses: u64,
    /// ... and times the window moved to another place in the history.
    pub history_jumps: u64,
    /// Pre-evicted blocks faulted again soon (`Engine::set_regret_window`
    /// says how soon).
    pub regrets: u64,
    /// Blocks the history window offered soon after pre-eviction took them.
    pub regret_offers: u64,
    /// Times the thrash guard turned on (`Engine::thrash_guarded`).
    pub thrash_guards: u64,
}

/// Why an engine could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    Param(ParamError),
    /// The storage slice is shorter than `Params::storage_words`.
    StorageTooSmall {
        need: usize,
        got: usize,
    },
}

impl From<ParamError> for EngineError {
    fn from(e: ParamError) -> Self {
        EngineError::Param(e)
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Param(e) => e.fmt(f),
            EngineError::StorageTooSmall { need, got } => write!(
                f,
                "engine storage too small: {need} words needed, {got} given"
            ),
        }
    }
}

/// Whether the prediction window has work to do (the chain's states, see
/// `chain.rs`; the follower's, see `follow.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainState {
    Idle,
    Running,
    Paused,
}

/// Where the program is: the running kernel, or in transparent mode the
/// history offset the follower believes the program has reached.
#[derive(Clone, Copy, Debug)]
struct Running {
    /// The running kernel's execution id (execution-id mode).
    exec: ExecId,
    /// The three kernels before it, oldest first.
    previous: [ExecId; 3],
    /// Kernels started so far; in transparent mode the cursor's offset in
    /// the history.
    seq: u64,
    /// The last block faulted (in this kernel, in execution-id mode).
    last_fault: Block,
    /// Faults in the running kernel.
    kernel_faults: u32,
}

impl Running {
    const fn new() -> Self {
        Running {
            exec: NO_EXEC,
            previous: [NO_EXEC; 3],
            seq: 0,
            last_fault: NONE,
            kernel_faults: 0,
        }
    }
}

/// The whole engine: storage, statistics, and the parts that decide.
///
/// `S` owns the storage: `Vec<u64>`, a kernel `KVec<u64>`, or `&mut [u64]`.
pub struct Engine<S> {
    params: Params,
    layout: Layout,
    geometry: Geometry,
    storage: S,
    ledger: LedgerState,
    /// Stamps for least-recently-used replacement in the tables.
    clock: u64,
    stats: Stats,
    running: Running,
    /// The prediction window's state, shared by the chain and the follower.
    state: ChainState,
    window: Window,
    chain: Chain,
    follower: Follower,
    regret: Regret,
    thrash: Thrash,
    /// Blocks pre-eviction keeps free (see [`Engine::free_target`]).
    free_target: u32,
}

/// Mutable views of the storage regions the chain and the ledger use.
struct Regions<'a> {
    exec: ExecTable<'a>,
    ledger: Ledger<'a>,
}

impl<S: DerefMut<Target = [u64]>> Engine<S> {
    /// Validates `params` and takes `storage` (at least
    /// `params.storage_words()` words; its contents are overwritten).
    pub fn new(params: Params, storage: S) -> Result<Self, EngineError> {
        params.validate()?;
        let layout = params.layout();
        if storage.len() < layout.total {
            return Err(EngineError::StorageTooSmall {
                need: layout.total,
                got: storage.len(),
            });
        }
        let mut e = Engine {
            params,
            layout,
            geometry: Geometry {
                rows: params.rows as usize,
                assoc: params.assoc as usize,
                succs: params.succs as usize,
            },
            storage,
            ledger: LedgerState::new(params.max_resident_blocks),
            clock: 1,
            stats: Stats::default(),
            running: Running::new(),
            state: ChainState::Idle,
            window: Window::default(),
            chain: Chain::new(),
            follower: Follower::new(),
            regret: Regret::default(),
            thrash: Thrash::new(),
            free_target: params.free_min,
        };
        e.reset();
        Ok(e)
    }

    /// The parameters the engine was built with.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The counters since the last reset.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether [`Engine::prefetches`] has more to give now.
    pub fn chain_state(&self) -> ChainState {
        self.state
    }

    /// Bytes of storage the engine uses (tables, window, ledger).
    pub fn storage_bytes(&self) -> usize {
        self.layout.total * 8
    }

    /// Bytes of the correlation tables alone (execution-id and block
    /// tables; in transparent mode the history and its index).
    pub fn table_bytes(&self) -> usize {
        let l = &self.layout;
        (l.exec.len() + l.tables.len() + l.history.len() + l.history_index.len()) * 8
    }

    /// Blocks the ledger holds as resident.
    pub fn resident_blocks(&self) -> u32 {
        self.ledger.len()
    }

    /// Forgets everything learnt and every resident block; keeps parameters.
    pub fn reset(&mut self) {
        self.storage[..self.layout.total].fill(NONE);
        let mut r = self.regions();
        r.exec.clear();
        r.ledger.clear();
        self.clock = 1;
        self.stats = Stats::default();
        self.running = Running::new();
        self.state = ChainState::Idle;
        self.window = Window {
            generation: 1,
            ..Window::default()
        };
        self.chain = Chain::new();
        self.free_target = self.params.free_min;
        self.regret.clear();
        self.thrash = Thrash::new();
        self.forget_history();
    }

    /// The runtime reports that kernel `exec` starts now (execution-id mode;
    /// ignored in transparent mode).
    ///
    /// Records the transition and slides or restarts the prediction window.
    pub fn kernel_start(&mut self, exec: ExecId) {
        if self.params.mode == Mode::Transparent || exec == NO_EXEC {
            return;
        }
        self.chain_kernel_start(exec);
    }

    /// A GPU fault on `block`: learn from it, and restart the window from it.
    pub fn fault(&mut self, block: Block) {
        if block == NONE {
            return;
        }
        self.stats.faults += 1;
        self.thrash.fault(self.epoch_victims());
        let victim_age = self.take_recent_victim(block);
        let refault = victim_age.is_some();
        if let Some(age) = victim_age {
            self.regret(age, false);
            self.thrash.returned(age, self.free_target);
            // We evicted it and it was needed: pre-eviction ran too far ahead.
            self.stats.refaults += 1;
            self.free_target = self.free_target.saturating_sub(1).max(self.params.free_min);
        }
        match self.params.mode {
            Mode::Transparent if self.replans() => self.plan_fault(block),
            Mode::Transparent => self.history_fault(block, refault),
            Mode::ExecId => self.chain_fault(block),
        }
    }

    /// True if `b` is predicted for the running kernel or one of the next
    /// `lookahead` (in transparent mode: for the current window).
    pub fn is_predicted(&self, b: Block) -> bool {
        window_seq(self.window_set(), self.window.generation, b)
            .is_some_and(|s| s >= self.running.seq)
    }

    /// Fills `out` with the next blocks to prefetch, soonest needed first;
    /// returns how many.
    ///
    /// Does at most `STEPS_PER_SLOT * out.len()` steps; call again while
    /// [`Engine::chain_state`] is `Running`.
    pub fn prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        let n = match self.params.mode {
            Mode::Transparent if self.replans() => self.plan_prefetches(out),
            Mode::Transparent => self.history_prefetches(out),
            Mode::ExecId => self.chain_prefetches(out),
        };
        self.stats.prefetches += n as u64;
        n
    }

    /// `block` is now resident on the GPU (migrated or populated there).
    pub fn migrated_in(&mut self, block: Block) {
        if !self.regions().ledger.migrated_in(block) {
            self.stats.ledger_overflow += 1;
        } else {
            // Its use: the kernel the window predicted it for, else now.
            let w = window_seq(self.window_set(), self.window.generation, block);
            let now = w.unwrap_or(self.running.seq).max(self.running.seq) + 1;
            self.regions().ledger.use_at(block, now, 0);
        }
    }

    /// `block` left the GPU (evicted, discarded or freed).
    pub fn evicted(&mut self, block: Block) {
        self.regions().ledger.evicted(block);
    }

    /// The driver evicted `block` on the fault path because memory was full:
    /// pre-eviction should keep more memory free.
    pub fn demand_evicted(&mut self, block: Block) {
        self.evicted(block);
        self.stats.demand_evictions += 1;
        self.free_target = (self.free_target + 1).min(self.params.free_max);
    }

    /// Blocks pre-eviction keeps free.
    ///
    /// Adapts between `free_min` and `free_max`: up on every eviction the
    /// driver had to do on the fault path, down on every fault of a block
    /// pre-evicted shortly before. 0 while the thrash guard is on: then
    /// the free blocks would only be more blocks to fault back.
    pub fn free_target(&self) -> u32 {
        if self.thrash.on() {
            0
        } else {
            self.free_target
        }
    }

    /// True while the thrash guard is on (`thrash.rs`): most victims came
    /// straight back, so the host loop makes no room for prefetches and
    /// keeps the whole limit resident.
    pub fn thrash_guarded(&self) -> bool {
        self.thrash.on()
    }

    /// The application declared `block` dead (all of it): if resident, it is
    /// discarded before anything is evicted. Returns whether it is resident.
    pub fn mark_dead(&mut self, block: Block) -> bool {
        self.regions().ledger.set_dead(block, true)
    }

    /// The application uses `block` again; returns whether it is resident.
    pub fn mark_alive(&mut self, block: Block) -> bool {
        self.regions().ledger.set_dead(block, false)
    }

    /// True if the ledger holds `block` as resident.
    pub fn is_resident(&mut self, block: Block) -> bool {
        self.regions().ledger.contains(block)
    }

    /// True if the ledger holds `block` as resident and live (not
    /// declared dead: a dead one waits to be discarded).
    pub fn is_live(&mut self, block: Block) -> bool {
        self.regions().ledger.residency(block) == Some(Residency::Live)
    }

    /// The next stamp of the table clock.
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The window set's words.
    fn window_set(&self) -> &[u64] {
        &self.storage[self.layout.window.clone()]
    }

    /// The window set's words, mutable.
    fn window_set_mut(&mut self) -> &mut [u64] {
        &mut self.storage[self.layout.window.clone()]
    }

    /// True if `b` was reached by the current window at all.
    fn in_window(&self, b: Block) -> bool {
        window_seq(self.window_set(), self.window.generation, b).is_some()
    }

    /// The execution-id table and the ledger, over their storage regions.
    fn regions(&mut self) -> Regions<'_> {
        let l = &self.layout;
        let (exec, rest) = self.storage[..l.total].split_at_mut(l.exec.end);
        let rest = &mut rest[l.ledger_slots.start - l.exec.end..];
        let (slots, rest) = rest.split_at_mut(l.ledger_slots.len());
        let index = &mut rest[..l.ledger_index.len()];
        Regions {
            exec: ExecTable::new(exec, l.exec_sets, self.params.exec_records as usize),
            ledger: Ledger::new(&mut self.ledger, slots, index),
        }
    }
}
