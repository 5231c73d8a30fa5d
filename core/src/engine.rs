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
//! # Chaining (DeepUM 5.2.2)
//! A *window* is one run of predictions. It starts at a fault (from the
//! faulted block in the running kernel's table) or at a kernel start that
//! was not predicted (from that kernel's start block). Inside a kernel the
//! chain walks the table breadth first: the rest of a block's run, then the
//! run's successors, MRU first; it stops at the kernel's end block. When the kernel is exhausted it
//! predicts the next execution id and continues from that kernel's start
//! block, up to `lookahead` kernels beyond the running one. A kernel start
//! that the window predicted slides the window on by one kernel instead of
//! restarting it. A block is emitted at most once while the kernel it was
//! predicted for has not yet run; the window restarts at a fault, at an
//! unpredicted kernel, and when `window_blocks` emissions fill it.
//!
//! State machine of the chain:
//! ```text
//!   Idle --fault / unpredicted kernel_start--> Running
//!   Running --kernel exhausted, lookahead reached--> Paused
//!   Paused --predicted kernel_start--> Running
//!   Running|Paused --prediction failed or window full--> Idle
//!   any --fault--> Running (new window)
//! ```
//! In transparent mode there are no kernels. By default the window follows
//! a global history of faulted runs (`history.rs`; the second `impl` block
//! below and docs/engine.md): a cursor where the program is, a window of the
//! blocks recorded after it, probes left to fault so that the window slides,
//! and a copy of what the cursor passed written back to the history. With
//! [`TransparentPredictor::Table`] it is the breadth-first walk of one global
//! block table from the faulted block, up to `window_blocks`.

use crate::block_table::{BlockTable, BlockTableRef, Geometry};
use crate::exec_table::{Evicted, ExecTable, NO_EXEC};
use crate::history::{History, HistoryRef, HistoryState, Place, CHAIN_STEPS};
use crate::ledger::{Ledger, LedgerState};
use crate::params::{
    Layout, Mode, ParamError, Params, HISTORY_AHEAD, RECENT_VICTIM_WORDS, WINDOW_SLOT_WORDS,
};
use crate::sweep::Sweeps;
use crate::{Block, ExecId, NONE};
use core::fmt;
use core::ops::DerefMut;

/// Kernels remembered for checking predictions: lookahead plus the running one.
const PRED_RING: usize = Params::MAX_LOOKAHEAD as usize + 1;
/// Live blocks examined per victim search before giving up (bounded work).
pub const VICTIM_SCAN: usize = 1024;
/// A resident block that the chain predicts again at most this many kernels
/// after its previous predicted use moves to the back of the victim order
/// (measured on the VM trace: 16 and 32 kernels did worse than 24).
const REUSE_KERNELS: u64 = 24;
/// Victims chosen by farthest next use per [`Engine::victims`] call at most
/// (transparent mode's history; the scan keeps them sorted in place).
const FARTHEST_MAX: usize = 64;
/// History blocks behind the cursor that the program may still be using:
/// a block used this recently is the last victim.
const IN_USE_BLOCKS: u64 = 16;
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
    /// Blocks offered by sequential sweeps (`Engine::set_sweep`).
    pub sweep_prefetches: u64,
    /// Pre-evicted blocks faulted again soon (`Engine::set_regret_window`
    /// says how soon).
    pub regrets: u64,
    /// Blocks the history window offered soon after pre-eviction took them.
    pub regret_offers: u64,
}

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

/// What the chain does with a block it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Visit {
    /// New to this window (or last predicted for a kernel that has run).
    Emit,
    /// Already predicted for an earlier kernel still to come (the old
    /// sequence number): now protected until this later one too; expand it,
    /// do not emit it again.
    Expand(u64),
    /// Already predicted for this kernel or a later one.
    Skip,
}

/// Transparent mode's predictor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransparentPredictor {
    /// The global history of faulted runs (`history.rs`), the default.
    History,
    /// One global block correlation table, as DeepUM's per-kernel tables
    /// (the predictor before the history existed; kept for comparison).
    Table,
}

/// The order in which live blocks become victims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VictimOrder {
    /// Least recently migrated (or re-used) first: the default.
    #[default]
    Migration,
    /// Transparent mode's history only (elsewhere as `Migration`): the
    /// block needed farthest from now first (Belady over one period of the
    /// history). Worse on the H100 wherever the history loses its place
    /// under pressure (BENCHMARKS-gpu.md, runs 22-24); kept to compare.
    NextUse,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainState {
    Idle,
    Running,
    Paused,
}

/// The whole engine. `S` owns the storage: `Vec<u64>`, a kernel `KVec<u64>`,
/// or `&mut [u64]`.
pub struct Engine<S> {
    p: Params,
    l: Layout,
    g: Geometry,
    storage: S,
    ledger: LedgerState,
    clock: u64,
    stats: Stats,

    // What runs now.
    cur: ExecId,
    hist: [ExecId; 3],
    seq: u64,
    last_fault: Block,
    kernel_faults: u32,

    // The chain.
    state: ChainState,
    gen: u64,
    window_len: u32,
    front_head: u32,
    front_len: u32,
    exp_block: Block,
    exp_pos: Block,
    exp_next: u32,
    start_pending: bool,
    chain_exec: ExecId,
    chain_hist: [ExecId; 3],
    chain_seq: u64,
    chain_table: Option<u32>,
    pred: [ExecId; PRED_RING],
    free_target: u32,
    /// Blocks emitted for kernels that have not run yet, and per kernel.
    pending: u32,
    pending_by_seq: [u32; PRED_RING],

    // Transparent mode's history and the window that follows it.
    predictor: TransparentPredictor,
    victim_order: VictimOrder,
    tape: HistoryState,
    /// The window follows the history (cursor, emit and copy are valid).
    following: bool,
    /// The place after the last fault the history predicted: the program
    /// is believed to be there.
    cursor: Place,
    /// The next place to emit a prefetch from.
    emit: Place,
    /// The furthest place emitted from since the last jump: below it the
    /// window is walked again, offering only what is still not resident.
    emit_hi: Place,
    /// The next place to copy to the head: what the cursor passed is
    /// recorded again, so the history keeps the whole order of use although
    /// blocks that were prefetched in time never fault.
    copy: Place,
    /// Faults in a row that the history did not predict.
    misses: u32,
    /// Blocks the history window may have in flight now: adapts between
    /// `MIN_HISTORY_WINDOW` and `window_blocks` (at most half the memory).
    hwin: u32,
    /// The last fault the history did not predict.
    last_miss: Block,
    /// Blocks the history window decided to move (probes included).
    emitted: u64,
    /// Regret-driven window depth (`Engine::set_regret_window`), and the
    /// current epoch's victims and regrets.
    regret_window: bool,
    epoch_victims: u32,
    epoch_regrets: u32,
    /// Sequential sweeps beside the history (`sweep.rs`), when enabled.
    sweep_on: bool,
    sweeps: Sweeps,
}

/// Mutable views of every storage region at once.
struct Regions<'a> {
    exec: ExecTable<'a>,
    window: &'a mut [u64],
    ledger: Ledger<'a>,
}

fn hash_block(b: Block, mask: usize) -> usize {
    (b.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24) as usize & mask
}

/// The slot of `b` in window generation `gen`, if the window reached it.
fn window_slot(win: &[u64], gen: u64, b: Block) -> Option<&[u64]> {
    let mask = win.len() / WINDOW_SLOT_WORDS - 1;
    let mut i = hash_block(b, mask);
    loop {
        let w = &win[i * WINDOW_SLOT_WORDS..(i + 1) * WINDOW_SLOT_WORDS];
        if w[1] != gen {
            return None;
        }
        if w[0] == b {
            return Some(w);
        }
        i = (i + 1) & mask;
    }
}

/// The kernel sequence number `b` was last predicted for in window
/// generation `gen`, if the window reached it. `win` is the window set
/// (linear probing; slots of other generations are empty).
fn window_seq(win: &[u64], gen: u64, b: Block) -> Option<u64> {
    window_slot(win, gen, b).map(|w| w[2])
}

impl<S: DerefMut<Target = [u64]>> Engine<S> {
    /// Validates `params` and takes `storage` (at least
    /// `params.storage_words()` words; its contents are overwritten).
    pub fn new(params: Params, storage: S) -> Result<Self, EngineError> {
        params.validate()?;
        let l = params.layout();
        if storage.len() < l.total {
            return Err(EngineError::StorageTooSmall {
                need: l.total,
                got: storage.len(),
            });
        }
        let mut e = Engine {
            p: params,
            l,
            g: Geometry {
                rows: params.rows as usize,
                assoc: params.assoc as usize,
                succs: params.succs as usize,
            },
            storage,
            ledger: LedgerState::new(params.max_resident_blocks),
            clock: 1,
            stats: Stats::default(),
            cur: NO_EXEC,
            hist: [NO_EXEC; 3],
            seq: 0,
            last_fault: NONE,
            kernel_faults: 0,
            state: ChainState::Idle,
            gen: 0,
            window_len: 0,
            front_head: 0,
            front_len: 0,
            exp_block: NONE,
            exp_pos: NONE,
            exp_next: 0,
            start_pending: false,
            chain_exec: NO_EXEC,
            chain_hist: [NO_EXEC; 3],
            chain_seq: 0,
            chain_table: None,
            pred: [NO_EXEC; PRED_RING],
            free_target: params.free_min,
            pending: 0,
            pending_by_seq: [0; PRED_RING],
            predictor: TransparentPredictor::History,
            victim_order: VictimOrder::Migration,
            tape: HistoryState::default(),
            following: false,
            cursor: Place { pos: 0, off: 0 },
            emit: Place { pos: 0, off: 0 },
            emit_hi: Place { pos: 0, off: 0 },
            copy: Place { pos: 0, off: 0 },
            misses: 0,
            hwin: 0,
            last_miss: NONE,
            emitted: 0,
            regret_window: false,
            epoch_victims: 0,
            epoch_regrets: 0,
            sweep_on: false,
            sweeps: Sweeps::new(),
        };
        e.reset();
        Ok(e)
    }

    pub fn params(&self) -> &Params {
        &self.p
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn chain_state(&self) -> ChainState {
        if self.sweeping() && self.sweeps.pending() {
            return ChainState::Running;
        }
        self.state
    }

    /// Bytes of storage the engine uses (tables, window, ledger).
    pub fn storage_bytes(&self) -> usize {
        self.l.total * 8
    }

    /// Bytes of the correlation tables alone (execution-id and block
    /// tables; in transparent mode also the history and its index).
    pub fn table_bytes(&self) -> usize {
        let l = &self.l;
        (l.exec.len() + l.tables.len() + l.history.len() + l.history_index.len()) * 8
    }

    pub fn resident_blocks(&self) -> u32 {
        self.ledger.len()
    }

    /// Forgets everything learnt and every resident block; keeps parameters.
    pub fn reset(&mut self) {
        self.storage[..self.l.total].fill(NONE);
        let mut r = self.regions();
        r.exec.clear();
        r.ledger.clear();
        self.clock = 1;
        self.stats = Stats::default();
        self.cur = NO_EXEC;
        self.hist = [NO_EXEC; 3];
        self.seq = 0;
        self.last_fault = NONE;
        self.kernel_faults = 0;
        self.state = ChainState::Idle;
        self.gen = 1;
        self.window_len = 0;
        self.front_head = 0;
        self.front_len = 0;
        self.exp_block = NONE;
        self.start_pending = false;
        self.free_target = self.p.free_min;
        self.following = false;
        self.misses = 0;
        self.last_miss = NONE;
        self.hwin = self.history_window_max();
        self.epoch_victims = 0;
        self.epoch_regrets = 0;
        self.sweeps.clear();
        if self.p.mode == Mode::Transparent {
            let g = self.g;
            let tw = self.l.table_words;
            let mut t = BlockTable::new(&mut self.storage[self.l.tables.start..][..tw], g);
            t.clear(0);
            self.tape_mut().clear();
        }
    }

    /// Chooses transparent mode's predictor (default: the history). Forgets
    /// everything learnt, as [`Engine::reset`].
    pub fn set_transparent_predictor(&mut self, p: TransparentPredictor) {
        self.predictor = p;
        self.reset();
    }

    pub fn transparent_predictor(&self) -> TransparentPredictor {
        self.predictor
    }

    /// Chooses the victim order; takes effect at the next request.
    pub fn set_victim_order(&mut self, o: VictimOrder) {
        self.victim_order = o;
    }

    pub fn victim_order(&self) -> VictimOrder {
        self.victim_order
    }

    /// Transparent mode's history: also follow sequential sweeps of faults
    /// (`sweep.rs`) and prefetch ahead of them. An experiment for budgets
    /// smaller than one kernel's footprint; off by default.
    pub fn set_sweep(&mut self, on: bool) {
        self.sweep_on = on;
        self.sweeps.clear();
    }

    pub fn sweep(&self) -> bool {
        self.sweep_on
    }

    /// Transparent mode's history: a window whose depth follows its
    /// regrets. A regret is a block pre-evicted and then needed again (a
    /// refault, or offered by the window) within about a window's depth of
    /// victims (`regret_horizon`): making room for the window pushed out a
    /// block needed sooner than what came in. Counted over epochs of
    /// `REGRET_EPOCH_WINDOWS` maximal windows of victims: an epoch with more
    /// than 1/`REGRET_RATE` of its victims regretted takes
    /// 1/`REGRET_SHRINK` off the depth; the window grows only when the
    /// program outruns it (1/`WINDOW_GROW`). A rate, not each regret: a
    /// stream larger than the memory regrets a few of its victims too (H100
    /// run 29: 0.4-0.7% against 3.6% for loops whose kernels thrash the
    /// memory), and shrinking on each of them took its window from 256 to
    /// 16 blocks. Known limit: a shallower window regrets more (blocks just
    /// past its reach are unprotected), so a cut can feed itself; growing
    /// back on quiet epochs did not undo that in a synthetic stream
    /// (core/tests/engine.rs) and is not in. Off: refaults shrink the
    /// window by 1/`WINDOW_SHRINK`, which rounds to nothing below 1024
    /// blocks, so the depth stays at its maximum under a small budget. Off
    /// by default in the engine; prescientd turns it on under a budget
    /// (BENCHMARKS-gpu.md runs 29-32).
    pub fn set_regret_window(&mut self, on: bool) {
        self.regret_window = on;
    }

    pub fn regret_window(&self) -> bool {
        self.regret_window
    }

    /// Transparent mode's history: blocks the window may have in flight now.
    pub fn window_depth(&self) -> u32 {
        self.history_window() as u32
    }

    /// Victims chosen after a block within which its return is a regret.
    /// Under pressure each block the window brings in pushes one out, and
    /// what it brings in is needed at most a window's depth ahead: a victim
    /// needed again within about that many victims was needed before the
    /// block that displaced it. Twice the depth, for the slack of
    /// pre-eviction running ahead in bursts.
    fn regret_horizon(&self) -> u64 {
        2 * self.history_window()
    }

    /// A pre-evicted block is needed again, `age` victims after it went:
    /// `offered` by the window, else faulted.
    fn regret(&mut self, age: u64, offered: bool) {
        if age > self.regret_horizon() {
            return;
        }
        if offered {
            self.stats.regret_offers += 1;
        } else {
            self.stats.regrets += 1;
        }
        self.epoch_regrets = self.epoch_regrets.saturating_add(1);
    }

    /// `n` more victims chosen: at the end of an epoch, the regret window
    /// shrinks if too many of the epoch's victims were regretted.
    fn end_regret_epoch(&mut self, n: u32) {
        self.epoch_victims = self.epoch_victims.saturating_add(n);
        let epoch = self
            .history_window_max()
            .saturating_mul(REGRET_EPOCH_WINDOWS);
        if self.epoch_victims < epoch {
            return;
        }
        let rate = self.epoch_regrets as u64 * REGRET_RATE;
        let victims = self.epoch_victims as u64;
        if self.regret_window && self.uses_history() && rate > victims {
            let cut = (self.hwin / REGRET_SHRINK).max(1);
            self.hwin = self.hwin.saturating_sub(cut).max(MIN_HISTORY_WINDOW);
        }
        self.epoch_victims = 0;
        self.epoch_regrets = 0;
    }

    fn sweeping(&self) -> bool {
        self.sweep_on && self.uses_history()
    }

    /// Victims by next use: transparent mode's history knows it.
    fn by_next_use(&self) -> bool {
        self.victim_order == VictimOrder::NextUse && self.uses_history()
    }

    fn tape_mut(&mut self) -> History<'_> {
        let l = &self.l;
        let (ring, index) =
            self.storage[l.history.start..l.history_index.end].split_at_mut(l.history.len());
        History::new(&mut self.tape, ring, index)
    }

    fn tape_ref(&self) -> HistoryRef<'_> {
        let l = &self.l;
        HistoryRef::new(
            &self.tape,
            &self.storage[l.history.clone()],
            &self.storage[l.history_index.clone()],
        )
    }

    fn uses_history(&self) -> bool {
        self.p.mode == Mode::Transparent && self.predictor == TransparentPredictor::History
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn regions(&mut self) -> Regions<'_> {
        let l = &self.l;
        let (exec, rest) = self.storage[..l.total].split_at_mut(l.exec.len());
        let (_tables, rest) = rest.split_at_mut(l.tables.len());
        let (window, rest) = rest.split_at_mut(l.window.len());
        let (_frontier, rest) = rest.split_at_mut(l.frontier.len());
        let (slots, rest) = rest.split_at_mut(l.ledger_slots.len());
        let (index, _victims) = rest.split_at_mut(l.ledger_index.len());
        Regions {
            exec: ExecTable::new(exec, l.exec_sets, self.p.exec_records as usize),
            window,
            ledger: Ledger::new(&mut self.ledger, slots, index),
        }
    }

    fn table_ref(&self, idx: u32) -> BlockTableRef<'_> {
        let tw = self.l.table_words;
        let at = self.l.tables.start + idx as usize * tw;
        BlockTableRef::new(&self.storage[at..at + tw], self.g)
    }

    fn table_mut(&mut self, idx: u32) -> BlockTable<'_> {
        let tw = self.l.table_words;
        let at = self.l.tables.start + idx as usize * tw;
        BlockTable::new(&mut self.storage[at..at + tw], self.g)
    }

    /// An execution id left the exec table: its block table is free again.
    fn forget_evicted(&mut self, ev: Option<Evicted>) {
        if let Some(ev) = ev {
            self.stats.exec_evictions += 1;
            if let Some(t) = ev.table {
                self.table_mut(t).clear(NONE);
            }
        }
    }

    /// The block table of `exec`, allocating one from the pool (replacing the
    /// least recently used table when the pool is full).
    fn table_for(&mut self, exec: ExecId) -> u32 {
        let stamp = self.tick();
        let ev = self.regions().exec.ensure(exec, stamp);
        self.forget_evicted(ev);
        if let Some(t) = self.regions().exec.table_of(exec) {
            self.table_mut(t).touch(stamp);
            return t;
        }
        // Pool scan: a free table (owner NONE) first, else the oldest.
        let mut best = 0u32;
        let mut best_stamp = u64::MAX;
        for t in 0..self.p.max_tables {
            let tr = self.table_ref(t);
            let s = if tr.owner() == NONE { 0 } else { tr.stamp() };
            if s < best_stamp {
                best_stamp = s;
                best = t;
                if s == 0 {
                    break;
                }
            }
        }
        let old_owner = self.table_ref(best).owner();
        if old_owner != NONE {
            self.stats.table_replacements += 1;
            self.regions().exec.set_table(old_owner as ExecId, None);
        }
        let mut t = self.table_mut(best);
        t.clear(exec as u64);
        t.set_owner(exec as u64, stamp);
        self.regions().exec.set_table(exec, Some(best));
        best
    }

    fn existing_table(&mut self, exec: ExecId) -> Option<u32> {
        match self.p.mode {
            Mode::Transparent => Some(0),
            Mode::ExecId => self.regions().exec.table_of(exec),
        }
    }

    /// The runtime reports that kernel `exec` starts now (execution-id mode;
    /// ignored in transparent mode). Records the transition and slides or
    /// restarts the prediction window.
    pub fn kernel_start(&mut self, exec: ExecId) {
        if self.p.mode == Mode::Transparent || exec == NO_EXEC {
            return;
        }
        self.stats.kernel_starts += 1;
        let stamp = self.tick();
        if self.cur != NO_EXEC {
            // The kernel that just ended: remember its last fault as its end
            // block when that block leads nowhere inside the kernel.
            if self.kernel_faults > 0 {
                let cur = self.cur;
                if let Some(t) = self.regions().exec.table_of(cur) {
                    let last = self.last_fault;
                    let tr = self.table_ref(t);
                    let tail = tr.run(last).is_none_or(|r| tr.successors(&r)[0] == NONE);
                    if tail {
                        self.table_mut(t).set_end(last);
                    }
                }
            }
            let (hist, cur) = (self.hist, self.cur);
            let ev = self.regions().exec.record(hist, cur, exec, stamp);
            self.forget_evicted(ev);
        }
        self.hist = [self.hist[1], self.hist[2], self.cur];
        self.cur = exec;
        let done = self.seq as usize % PRED_RING;
        self.pending -= self.pending_by_seq[done];
        self.pending_by_seq[done] = 0;
        self.seq += 1;
        self.last_fault = NONE;
        self.kernel_faults = 0;
        if let Some(t) = self.existing_table(exec) {
            self.table_mut(t).touch(stamp);
        }

        let predicted = self.state != ChainState::Idle
            && self.chain_seq >= self.seq
            && self.pred[self.seq as usize % PRED_RING] == exec;
        if predicted {
            let half = (self.l.window_slots / 2) as u32;
            if self.window_len < half {
                if self.state == ChainState::Paused {
                    self.state = ChainState::Running;
                }
                return;
            }
            // The window is nearly full of blocks for kernels that ran:
            // start a fresh one from this kernel.
        } else if self.state != ChainState::Idle && self.chain_seq >= self.seq {
            self.stats.mispredictions += 1;
        }
        self.start_window_at_kernel();
    }

    /// A GPU fault on `block`: learn from it, and restart the window from it.
    pub fn fault(&mut self, block: Block) {
        if block == NONE {
            return;
        }
        self.stats.faults += 1;
        let victim_age = self.take_recent_victim(block);
        let refault = victim_age.is_some();
        if let Some(age) = victim_age {
            self.regret(age, false);
            // We evicted it and it was needed: pre-eviction ran too far ahead.
            self.stats.refaults += 1;
            self.free_target = self.free_target.saturating_sub(1).max(self.p.free_min);
        }
        if self.uses_history() {
            self.history_fault(block, refault);
            return;
        }
        let stamp = self.tick();
        let table = match self.p.mode {
            Mode::Transparent => Some(0),
            Mode::ExecId if self.cur == NO_EXEC => None,
            Mode::ExecId => Some(self.table_for(self.cur)),
        };
        let Some(t) = table else {
            return;
        };
        let prev = self.last_fault;
        let first_in_kernel = self.kernel_faults == 0;
        let known = self.table_ref(t).contains(block);
        // A fault on a block the window predicted for a coming kernel (late,
        // or evicted since) teaches nothing new; recording it would only put
        // a skip edge in front of the successors that predicted it. In
        // transparent mode a window has no kernels and may cover the whole
        // working set: learn from every fault there, as DeepUM does.
        if self.p.mode == Mode::Transparent || !self.in_window(block) {
            let rec = self.table_mut(t).record(prev, block, stamp);
            self.stats.entry_replacements += rec.replaced as u64;
        }
        if self.p.mode == Mode::ExecId && first_in_kernel {
            let start = self.table_ref(t).start();
            if start == NONE {
                self.table_mut(t).set_start(block);
            } else if start != block && !known {
                // A block never seen in this kernel faulted first: it becomes
                // the start and leads to the old start, so that everything
                // learnt before stays reachable.
                let mut tm = self.table_mut(t);
                let rec = tm.record(block, start, stamp);
                tm.set_start(block);
                self.stats.entry_replacements += rec.replaced as u64;
            }
        }
        self.last_fault = block;
        self.kernel_faults = self.kernel_faults.saturating_add(1);
        self.new_window();
        self.chain_table = Some(t);
        // The faulted block is being fetched on demand: mark it, expand it.
        let seq = self.seq;
        self.visit(block, seq);
        self.push_front(block);
    }

    fn new_window(&mut self) {
        self.stats.windows += 1;
        self.gen += 1;
        self.window_len = 0;
        self.pending = 0;
        self.pending_by_seq = [0; PRED_RING];
        self.front_head = 0;
        self.front_len = 0;
        self.exp_block = NONE;
        self.start_pending = false;
        self.state = ChainState::Running;
        self.chain_exec = self.cur;
        self.chain_hist = self.hist;
        self.chain_seq = self.seq;
        self.pred[self.seq as usize % PRED_RING] = self.cur;
    }

    fn start_window_at_kernel(&mut self) {
        self.new_window();
        self.chain_table = self.existing_table(self.cur);
        self.start_pending = true;
    }

    /// Emits and queues the start block of the kernel the chain is in.
    fn enter_kernel_start(&mut self) -> Option<Block> {
        let t = self.chain_table?;
        let start = self.table_ref(t).start();
        if start == NONE {
            return None;
        }
        let seq = self.chain_seq;
        match self.visit(start, seq) {
            Visit::Emit => {
                self.push_front(start);
                Some(start)
            }
            Visit::Expand(_) => {
                self.push_front(start);
                None
            }
            Visit::Skip => None,
        }
    }

    fn push_front(&mut self, b: Block) {
        let cap = self.l.frontier.len() as u32;
        if self.front_len >= cap {
            return;
        }
        let at = (self.front_head + self.front_len) % cap;
        self.storage[self.l.frontier.start + at as usize] = b;
        self.front_len += 1;
    }

    fn pop_front(&mut self) -> Option<Block> {
        if self.front_len == 0 {
            return None;
        }
        let cap = self.l.frontier.len() as u32;
        let b = self.storage[self.l.frontier.start + self.front_head as usize];
        self.front_head = (self.front_head + 1) % cap;
        self.front_len -= 1;
        Some(b)
    }

    /// Marks `b` as predicted for kernel `seq` in this window and says what
    /// the chain does with it.
    fn visit(&mut self, b: Block, seq: u64) -> Visit {
        let v = self.claim(b, seq);
        let at = seq as usize % PRED_RING;
        match v {
            Visit::Emit => {
                // A resident block predicted again soon after its last
                // predicted use is re-used at the chain's time scale: it
                // goes to the back of the victim order.
                self.regions().ledger.use_at(b, seq + 1, REUSE_KERNELS);
                self.window_len += 1;
                self.pending += 1;
                self.pending_by_seq[at] += 1;
            }
            Visit::Expand(old) => {
                let was = &mut self.pending_by_seq[old as usize % PRED_RING];
                *was = was.saturating_sub(1);
                self.pending_by_seq[at] += 1;
            }
            Visit::Skip => {}
        }
        v
    }

    fn claim(&mut self, b: Block, seq: u64) -> Visit {
        self.claim_at(b, seq, 0)
    }

    /// [`Engine::claim`], remembering history position `pos` with the block.
    fn claim_at(&mut self, b: Block, seq: u64, pos: u64) -> Visit {
        let (gen, now) = (self.gen, self.seq);
        let r = self.regions();
        let mask = r.window.len() / WINDOW_SLOT_WORDS - 1;
        let mut i = hash_block(b, mask);
        loop {
            let w = &mut r.window[i * WINDOW_SLOT_WORDS..(i + 1) * WINDOW_SLOT_WORDS];
            if w[1] != gen {
                // Empty in this generation: claim it.
                w[0] = b;
                w[1] = gen;
                w[2] = seq;
                w[3] = pos;
                return Visit::Emit;
            }
            if w[0] == b {
                let old = w[2];
                if old >= seq {
                    return Visit::Skip;
                }
                w[2] = seq;
                // Emitted for a kernel that has already run: it may have been
                // evicted since, emit it again. Emitted for a kernel still to
                // come: it is on its way, only extend its protection (and
                // keep the place where it is needed first).
                return if old < now {
                    w[3] = pos;
                    Visit::Emit
                } else {
                    Visit::Expand(old)
                };
            }
            i = (i + 1) & mask;
        }
    }

    /// True if `b` was reached by the current window at all.
    fn in_window(&self, b: Block) -> bool {
        window_seq(&self.storage[self.l.window.clone()], self.gen, b).is_some()
    }

    /// True if `b` is predicted for the running kernel or one of the next
    /// `lookahead` (in transparent mode: for the current window).
    pub fn is_predicted(&self, b: Block) -> bool {
        window_seq(&self.storage[self.l.window.clone()], self.gen, b).is_some_and(|s| s >= self.seq)
            || (self.sweeping() && self.sweeps.protects(b))
    }

    /// Fills `out` with the next blocks to prefetch, soonest needed first;
    /// returns how many. Does at most `STEPS_PER_SLOT * out.len()` steps; call
    /// again while [`Engine::chain_state`] is `Running`.
    pub fn prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        if self.uses_history() {
            let mut n = 0;
            if self.sweep_on {
                n = self.sweep_prefetches(out);
            }
            n += self.history_prefetches(&mut out[n..]);
            self.stats.prefetches += n as u64;
            return n;
        }
        let mut n = 0;
        let mut steps = STEPS_PER_SLOT * out.len();
        while n < out.len() && steps > 0 && self.state == ChainState::Running {
            steps -= 1;
            if self.pending >= self.p.window_blocks {
                // Predicted enough to fill the memory budget: wait for a
                // kernel to finish (or, transparent, for the next fault).
                self.state = ChainState::Paused;
                break;
            }
            if self.window_len as usize >= self.l.window_slots / 2 {
                self.stats.window_full += 1;
                self.state = ChainState::Idle;
                break;
            }
            // A kernel entered by the chain: its start block comes first.
            if self.start_pending {
                self.start_pending = false;
                if let Some(start) = self.enter_kernel_start() {
                    out[n] = Prefetch {
                        block: start,
                        ahead: (self.chain_seq - self.seq) as u32,
                    };
                    n += 1;
                }
                continue;
            }
            // Resume the block being expanded, else take the next one.
            if self.exp_block == NONE {
                match self.pop_front() {
                    Some(b) => {
                        self.exp_block = b;
                        self.exp_pos = b.saturating_add(1);
                        self.exp_next = 0;
                    }
                    None => {
                        if !self.next_kernel() {
                            break;
                        }
                        self.start_pending = true;
                        continue;
                    }
                }
            }
            let Some((s, is_successor)) = self.next_expansion() else {
                self.exp_block = NONE;
                continue;
            };
            // In transparent mode one table holds every kernel's successors:
            // follow only the most recent one, emit the others as leaves.
            let expand = is_successor && (self.p.mode == Mode::ExecId || self.exp_next == 1);
            let seq = self.chain_seq;
            match self.visit(s, seq) {
                Visit::Emit => {
                    if expand {
                        self.push_front(s);
                    }
                    out[n] = Prefetch {
                        block: s,
                        ahead: (seq - self.seq) as u32,
                    };
                    n += 1;
                }
                Visit::Expand(_) if expand => self.push_front(s),
                Visit::Expand(_) | Visit::Skip => {}
            }
        }
        self.stats.prefetches += n as u64;
        n
    }

    /// The next block reached from the block being expanded: first the rest
    /// of its run, then its run's successors (flagged true). None when done;
    /// in execution-id mode nothing past the kernel's end block.
    fn next_expansion(&mut self) -> Option<(Block, bool)> {
        let t = self.chain_table?;
        let tr = self.table_ref(t);
        let run = tr.run(self.exp_block)?;
        let end = tr.end();
        let stops_at_end = self.p.mode == Mode::ExecId && end >= self.exp_block && end < run.end();
        let last = if stops_at_end { end + 1 } else { run.end() };
        if self.exp_pos < last {
            let b = self.exp_pos;
            self.exp_pos += 1;
            return Some((b, false));
        }
        if stops_at_end {
            return None;
        }
        let s = *tr.successors(&run).get(self.exp_next as usize)?;
        if s == NONE {
            return None;
        }
        self.exp_next += 1;
        Some((s, true))
    }

    /// The chain moves on to the next predicted kernel. False when it stops
    /// (transparent mode, lookahead reached, or no prediction).
    fn next_kernel(&mut self) -> bool {
        if self.p.mode == Mode::Transparent {
            self.state = ChainState::Idle;
            return false;
        }
        if self.chain_seq - self.seq >= self.p.lookahead as u64 {
            self.state = ChainState::Paused;
            return false;
        }
        let (hist, cur) = (self.chain_hist, self.chain_exec);
        let next = if cur == NO_EXEC {
            None
        } else {
            self.regions().exec.predict(hist, cur)
        };
        let Some(next) = next else {
            self.stats.prediction_failures += 1;
            self.state = ChainState::Idle;
            return false;
        };
        self.stats.predictions += 1;
        self.chain_hist = [hist[1], hist[2], cur];
        self.chain_exec = next;
        self.chain_seq += 1;
        self.pred[self.chain_seq as usize % PRED_RING] = next;
        self.chain_table = self.regions().exec.table_of(next);
        true
    }

    /// `block` is now resident on the GPU (migrated or populated there).
    pub fn migrated_in(&mut self, block: Block) {
        if !self.regions().ledger.migrated_in(block) {
            self.stats.ledger_overflow += 1;
        } else {
            // Its use: the kernel the window predicted it for, else now.
            let w = window_seq(&self.storage[self.l.window.clone()], self.gen, block);
            let now = w.unwrap_or(self.seq).max(self.seq) + 1;
            self.regions().ledger.use_at(block, now, 0);
            if self.by_next_use() {
                let next = self.next_use_after(block, now - 1);
                self.regions().ledger.set_next_use(block, next);
            }
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
        self.free_target = (self.free_target + 1).min(self.p.free_max);
    }

    /// Blocks pre-eviction keeps free: adapts between `free_min` and
    /// `free_max`, up on every eviction the driver had to do on the fault
    /// path, down on every fault of a block pre-evicted shortly before.
    pub fn free_target(&self) -> u32 {
        self.free_target
    }

    fn victim_slot(&self, b: Block) -> usize {
        let n = self.l.victims.len() / RECENT_VICTIM_WORDS;
        self.l.victims.start + RECENT_VICTIM_WORDS * hash_block(b, n - 1)
    }

    /// Remembers `b` as the victim chosen after `count` others (direct
    /// mapped: a later victim in the same slot forgets it).
    fn note_recent_victim(&mut self, b: Block, count: u64) {
        let i = self.victim_slot(b);
        self.storage[i] = b;
        self.storage[i + 1] = count;
    }

    /// If `b` is a remembered victim: its slot, and how many victims were
    /// chosen after it.
    fn recent_victim(&self, b: Block) -> Option<(usize, u64)> {
        let i = self.victim_slot(b);
        (self.storage[i] == b).then(|| {
            (
                i,
                self.stats.victims_evict.saturating_sub(self.storage[i + 1]),
            )
        })
    }

    fn recent_victim_age(&self, b: Block) -> Option<u64> {
        self.recent_victim(b).map(|(_, age)| age)
    }

    /// `recent_victim_age`, and forgets `b`.
    fn take_recent_victim(&mut self, b: Block) -> Option<u64> {
        let (i, age) = self.recent_victim(b)?;
        self.storage[i] = NONE;
        Some(age)
    }

    /// The application declared `block` dead (all of it): if resident, it is
    /// discarded before anything is evicted. Returns whether it is resident.
    pub fn mark_dead(&mut self, block: Block) -> bool {
        self.regions().ledger.set_dead(block, true)
    }

    /// The application uses `block` again.
    pub fn mark_alive(&mut self, block: Block) -> bool {
        self.regions().ledger.set_dead(block, false)
    }

    pub fn is_resident(&mut self, block: Block) -> bool {
        self.regions().ledger.contains(block)
    }

    /// Fills `out` with distinct blocks to take off the GPU: dead blocks
    /// (discard) first, then live blocks least recently migrated (or
    /// re-used, see `REUSE_KERNELS`) first,
    /// never one predicted for the running or the next `lookahead` kernels.
    /// Examines at most `VICTIM_SCAN` live blocks. The caller reports each
    /// one it acts on through [`Engine::evicted`].
    pub fn victims(&mut self, out: &mut [Victim]) -> usize {
        let mut n = 0;
        {
            let r = self.regions();
            for b in r.ledger.oldest_dead(out.len()) {
                out[n] = Victim {
                    block: b,
                    discard: true,
                };
                n += 1;
            }
        }
        self.stats.victims_discard += n as u64;
        if n == out.len() {
            return n;
        }
        let by_next_use = self.by_next_use();
        let l = &self.l;
        let (head, rest) = self.storage[..l.total].split_at_mut(l.ledger_slots.start);
        let win = &head[l.window.clone()];
        let (slots, rest) = rest.split_at_mut(l.ledger_slots.len());
        let index = &mut rest[..l.ledger_index.len()];
        let ledger = Ledger::new(&mut self.ledger, slots, index);
        let (gen, seq) = (self.gen, self.seq);
        let sweeps = self.sweep_on.then_some(&self.sweeps);
        let predicted = |b: Block| {
            window_seq(win, gen, b).is_some_and(|s| s >= seq)
                || sweeps.is_some_and(|s| s.protects(b))
        };
        let before = n;
        if by_next_use {
            // Belady over the history: the blocks needed farthest from now
            // first. A block with no known next use, or whose predicted use
            // the program has passed without it, is needed farthest.
            // Between equals, the least recently migrated first.
            // A block the program used just now is still in use (the
            // cursor moves ahead of the GPU's stragglers): the last choice.
            let far = |last: u64, next: u64| {
                if last.saturating_add(IN_USE_BLOCKS) > seq {
                    0
                } else if next == 0 || next < seq {
                    u64::MAX
                } else {
                    next
                }
            };
            let want = out.len() - n;
            let mut keys = [0u64; FARTHEST_MAX];
            let mut k = 0usize;
            for (b, last, next) in ledger.oldest_live_uses(VICTIM_SCAN) {
                if predicted(b) {
                    continue;
                }
                let key = far(last, next);
                // Insertion into the first k (sorted farthest first, stable).
                let cap = want.min(FARTHEST_MAX);
                if k == cap && keys[k - 1] >= key {
                    continue;
                }
                let mut i = if k < cap { k } else { k - 1 };
                while i > 0 && keys[i - 1] < key {
                    keys[i] = keys[i - 1];
                    out[n + i] = out[n + i - 1];
                    i -= 1;
                }
                keys[i] = key;
                out[n + i] = Victim {
                    block: b,
                    discard: false,
                };
                if k < cap {
                    k += 1;
                }
            }
            n += k;
            if k < want.min(FARTHEST_MAX) {
                self.stats.victim_shortfall += 1;
            }
        } else {
            for b in ledger.oldest_live(VICTIM_SCAN) {
                if n == out.len() {
                    break;
                }
                if !predicted(b) {
                    out[n] = Victim {
                        block: b,
                        discard: false,
                    };
                    n += 1;
                }
            }
        }
        for (v, count) in out[before..n].iter().zip(self.stats.victims_evict..) {
            self.note_recent_victim(v.block, count);
        }
        self.stats.victims_evict += (n - before) as u64;
        self.end_regret_epoch((n - before) as u32);
        if !by_next_use && n < out.len() {
            self.stats.victim_shortfall += 1;
        }
        n
    }
}

/// Transparent mode: faults the history did not predict, in a row, before
/// the window leaves the place it follows (for a place further on, or one
/// that the last two unpredicted faults agree on).
const JUMP_AFTER: u32 = 4;
/// History entries copied to the head per fault at most (the copy also
/// advances one entry per prefetch step).
const COPY_PER_FAULT: usize = 1024;
/// Probes per window: blocks the window leaves to fault (see
/// `history_prefetches`); 0 for none.
const PROBE_EVERY: u64 = 16;
/// A fault predicts where the program is if it is at most this part of a
/// window past what was emitted (0 for a block pre-evicted shortly before:
/// it was needed earlier than its next place in the history).
const SLACK_PART: u64 = 4;
/// Two unpredicted faults are in the same context if the second one was
/// recorded at most this many blocks after the first one before.
const JUMP_CONTEXT: u64 = 64;
/// The history window grows by 1/WINDOW_GROW when the program outruns it
/// and shrinks by 1/WINDOW_SHRINK on every refault, never below
/// MIN_HISTORY_WINDOW blocks.
const WINDOW_GROW: u32 = 8;
const WINDOW_SHRINK: u32 = 1024;
/// With `Engine::set_regret_window`: an epoch is this many maximal windows
/// of victims; an epoch with more than 1/REGRET_RATE of them regretted takes
/// 1/REGRET_SHRINK off the window's depth.
const REGRET_EPOCH_WINDOWS: u32 = 4;
const REGRET_RATE: u64 = 50;
const REGRET_SHRINK: u32 = 4;
const MIN_HISTORY_WINDOW: u32 = 16;
/// Blocks offered between two probes at least.
const MIN_PROBE_GAP: u64 = 2;
/// Marks a probe in a window slot's position word.
const PROBE_FLAG: u64 = 1 << 63;
/// History entries scanned past the window's end for a fault.
const SCAN_ENTRIES: usize = 64;

/// The offsets of `b`'s places in the history (none for NONE); returns how
/// many were written.
fn places_of(r: &HistoryRef<'_>, b: Block, out: &mut [u64; CHAIN_STEPS]) -> usize {
    let mut n = 0;
    if b != NONE {
        for (p, e) in r.occurrences(b) {
            let Some(slot) = out.get_mut(n) else {
                break;
            };
            *slot = e.offset + p.off;
            n += 1;
        }
    }
    n
}

/// True if offset `o` comes at most `JUMP_CONTEXT` blocks after one of
/// `before`.
fn in_context_of(before: &[u64], o: u64) -> bool {
    before.iter().any(|&q| q < o && o - q <= JUMP_CONTEXT)
}

/// Transparent mode: the history follower.
impl<S: DerefMut<Target = [u64]>> Engine<S> {
    /// Blocks the history window may have in flight now (adaptive, at most
    /// `Params::history_window`).
    fn history_window(&self) -> u64 {
        self.hwin.clamp(1, self.history_window_max()) as u64
    }

    fn history_window_max(&self) -> u32 {
        self.p.history_window()
    }

    /// The first place after offset `o` at which the history has `b` (the
    /// next time the program needs it, if it repeats what it did), or 0
    /// when the history has none. At most `CHAIN_STEPS` entries examined.
    fn next_use_after(&self, b: Block, o: u64) -> u64 {
        let mut next = 0;
        for (p, e) in self.tape_ref().occurrences(b) {
            let at = e.offset + p.off;
            if at > o && (next == 0 || at < next) {
                next = at;
            }
        }
        next
    }

    /// Copies what the cursor passed to the head, at most `budget` entries.
    fn copy_step(&mut self, mut budget: usize) {
        while budget > 0 && self.following && self.copy < self.cursor {
            budget -= 1;
            let Some(e) = self.tape_ref().entry(self.copy.pos) else {
                self.copy = self.cursor;
                break;
            };
            let last = self.copy.pos == self.cursor.pos;
            let end = if last {
                self.cursor.off.min(e.len)
            } else {
                e.len
            };
            let from = self.copy.off;
            if from < end {
                self.tape_mut().append(e.head + from, end - from);
            }
            self.copy = if last {
                Place {
                    pos: self.copy.pos,
                    off: end.max(self.copy.off),
                }
            } else {
                Place {
                    pos: self.copy.pos + 1,
                    off: 0,
                }
            };
            if last {
                break;
            }
        }
    }

    fn mark_probe(&mut self, b: Block) {
        let gen = self.gen;
        let win = &mut self.storage[self.l.window.clone()];
        let mask = win.len() / WINDOW_SLOT_WORDS - 1;
        let mut i = hash_block(b, mask);
        loop {
            let w = &mut win[i * WINDOW_SLOT_WORDS..(i + 1) * WINDOW_SLOT_WORDS];
            if w[1] != gen {
                return;
            }
            if w[0] == b {
                w[3] |= PROBE_FLAG;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts a new window generation at the cursor: nothing emitted yet.
    fn history_rearm(&mut self) {
        self.stats.windows += 1;
        self.gen += 1;
        self.window_len = 0;
        self.front_head = 0;
        self.front_len = 0;
        self.emit = self.cursor;
        self.emit_hi = self.cursor;
        self.state = ChainState::Running;
    }

    /// The cursor moved to `to`: blocks emitted before it are behind the
    /// program now (no longer protected, no longer counted in the window).
    fn history_advance(&mut self, to: Place) {
        self.cursor = to;
        self.seq = self.tape_ref().offset_of(to).unwrap_or(self.seq);
        let cap = self.l.frontier.len() as u32;
        while self.front_len > 0 {
            let o = self.storage[self.l.frontier.start + self.front_head as usize];
            if o >= self.seq {
                break;
            }
            // No `%`: a division the compiler cannot prove safe leaves a
            // panic call that objtool flags in the kernel build.
            self.front_head += 1;
            if self.front_head >= cap {
                self.front_head = 0;
            }
            self.front_len -= 1;
        }
        // Walk the window again from here: what the backend dropped is
        // offered again (see `history_prefetches`).
        self.emit_hi = self.emit_hi.max(self.emit).max(to);
        self.emit = to;
        if self.state != ChainState::Running {
            self.state = ChainState::Running;
        }
    }

    fn history_fault(&mut self, b: Block, refault: bool) {
        if b == self.last_fault {
            // The same block faulting again (another page of it).
            return;
        }
        self.last_fault = b;
        if self.sweep_on {
            // Sweeps see every fault: a probe of theirs may be a block the
            // history predicted too.
            let depth = self.history_window_max();
            self.sweeps.fault(b, depth);
        }
        self.copy_step(COPY_PER_FAULT);
        let w = self.history_window();
        let r = self.tape_ref();
        let mut ahead: Option<Place> = None;
        let mut behind = false;
        // Where the previous unpredicted fault was recorded before: an
        // occurrence of `b` shortly after one of those is the same context.
        // Looked up only when `b` is not where the window expects it.
        let mut before = [0u64; CHAIN_STEPS];
        let mut nbefore = 0;
        let last_miss = self.last_miss;
        let mut in_context: Option<Place> = None;
        let mut onward: Option<Place> = None;
        let mut past_end = false;
        let total = self.tape.blocks();
        // Places this close to the head were just written: following them
        // would only replay what the program did a moment ago.
        let gap = w.min(total / 2);
        let at = if self.following {
            r.offset_of(self.cursor).zip(r.offset_of(self.emit))
        } else {
            None
        };
        match at {
            Some((cur, emit)) => {
                // A fault at most one window past what was emitted, and at
                // most half the distance to the head (beyond that it is the
                // copy of what the program already passed).
                let span = self.tape.blocks().saturating_sub(cur) / 2;
                let slack = if refault { 0 } else { w / SLACK_PART };
                let limit = emit.saturating_add(slack).min(cur.saturating_add(span));
                // Emitted by this window: its place is in the window set.
                let win = &self.storage[self.l.window.clone()];
                if let Some(s) = window_slot(win, self.gen, b) {
                    // The first place it is needed at (o: the last).
                    let (o, pos) = (s[2], s[3] & !PROBE_FLAG);
                    let first = r.entry(pos).filter(|e| e.contains(b)).map(|e| Place {
                        pos,
                        off: b - e.head,
                    });
                    let first_o = first.and_then(|p| r.offset_of(p)).unwrap_or(o);
                    if o >= cur && first_o < emit {
                        ahead = first.filter(|_| first_o >= cur);
                        behind = ahead.is_none();
                    } else if o < cur && o.saturating_add(w) >= cur {
                        behind = true;
                    }
                }
                // Just past the window's end: look a few entries ahead.
                if ahead.is_none() && !behind {
                    let mut at = self.emit;
                    for _ in 0..SCAN_ENTRIES {
                        let Some(e) = r.entry(at.pos) else {
                            break;
                        };
                        if e.offset + at.off > limit {
                            break;
                        }
                        if e.contains(b) && b - e.head >= at.off {
                            past_end = true;
                            ahead = Some(Place {
                                pos: at.pos,
                                off: b - e.head,
                            });
                            break;
                        }
                        at = Place {
                            pos: at.pos + 1,
                            off: 0,
                        };
                    }
                }
                if ahead.is_none() && !behind {
                    nbefore = places_of(&r, last_miss, &mut before);
                }
                for (p, e) in r.occurrences(b) {
                    let o = e.offset + p.off;
                    if ahead.is_some() || behind {
                        break;
                    }
                    if p >= self.cursor && o <= limit {
                        ahead = Some(ahead.map_or(p, |a| a.min(p)));
                    } else if p < self.cursor && o.saturating_add(w) >= cur {
                        behind = true;
                    } else if p > self.cursor && o <= cur.saturating_add(span) {
                        // Further on in this period: the program ran past
                        // the window unseen. The nearest such place.
                        onward = Some(onward.map_or(p, |q| q.min(p)));
                    } else if o.saturating_add(gap) <= total && in_context_of(&before[..nbefore], o)
                    {
                        in_context = Some(in_context.map_or(p, |q| q.max(p)));
                    }
                }
            }
            None => {
                nbefore = places_of(&r, last_miss, &mut before);
                for (p, e) in r.occurrences(b) {
                    let o = e.offset + p.off;
                    if o.saturating_add(gap) > total {
                        // Too close to the head: nothing to follow there.
                        continue;
                    }
                    if in_context_of(&before[..nbefore], o) {
                        in_context = Some(in_context.map_or(p, |q| q.max(p)));
                    }
                }
                self.following = false;
            }
        }
        if refault && !self.regret_window {
            // Pre-eviction took a block that was needed: the window, which
            // it must not touch, is too large. (The regret window judges
            // refaults by their rate instead.)
            self.hwin = (self.hwin - self.hwin / WINDOW_SHRINK).max(MIN_HISTORY_WINDOW);
        }
        if let Some(p) = ahead {
            if past_end && self.front_len as u64 >= w {
                // The program outran a full window: it may be larger.
                let max = self.history_window_max();
                self.hwin = (self.hwin + self.hwin / WINDOW_GROW + 1).min(max);
            }
            // Predicted: the program is here. Move the window on.
            self.stats.history_hits += 1;
            self.misses = 0;
            self.history_advance(Place {
                pos: p.pos,
                off: p.off + 1,
            });
            return;
        }
        if behind {
            // Passed a moment ago (a late or lost prefetch of a block the
            // cursor already passed): nothing new.
            return;
        }
        // Not predicted: record it where the program is now (after what the
        // cursor passed), then follow it if the window has lost its way.
        self.stats.history_misses += 1;
        self.copy_step(COPY_PER_FAULT);
        if !self.tape_mut().newest().is_some_and(|e| e.contains(b)) {
            self.tape_mut().append(b, 1);
        }
        if !refault {
            // A block pre-evicted too early says nothing about where the
            // program is.
            self.misses = self.misses.saturating_add(1);
        }
        self.last_miss = b;
        let sure = in_context.is_some() && last_miss != NONE;
        if self.following && self.misses < JUMP_AFTER && !(sure && self.misses >= 2) {
            return;
        }
        // A place is only taken on evidence: the previous unpredicted fault
        // was recorded just before it (the same sequence again), or it lies
        // further on in the period the window was following.
        match in_context.or(onward) {
            Some(p) => {
                self.stats.history_jumps += 1;
                self.following = true;
                self.misses = 0;
                let to = Place {
                    pos: p.pos,
                    off: p.off + 1,
                };
                // Blocks claimed before stay protected while they are ahead
                // of the new cursor; nothing emitted counts any more.
                self.copy = to;
                self.emit = to;
                self.emit_hi = to;
                self.front_len = 0;
                self.stats.windows += 1;
                self.history_advance(to);
            }
            None => {
                self.following = false;
                self.state = ChainState::Idle;
            }
        }
    }

    /// Offers of the sequential sweeps: blocks the history knows (so the
    /// program's memory: a sweep is cut at the first block it never saw)
    /// and not resident; probes are left to fault.
    fn sweep_prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        let mut n = 0;
        let mut steps = STEPS_PER_SLOT * out.len();
        while n < out.len() && steps > 0 {
            steps -= 1;
            let Some(o) = self.sweeps.next_offer() else {
                break;
            };
            if o.probe {
                continue;
            }
            if self.tape_ref().occurrences(o.block).next().is_none() {
                self.sweeps.cut(o.stream, o.block);
                continue;
            }
            if self.regions().ledger.contains(o.block) {
                continue;
            }
            out[n] = Prefetch {
                block: o.block,
                ahead: 0,
            };
            n += 1;
        }
        self.stats.sweep_prefetches += n as u64;
        n
    }

    fn history_prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        let mut n = 0;
        let mut steps = STEPS_PER_SLOT * out.len();
        let w = self.history_window();
        while n < out.len() && steps > 0 && self.state == ChainState::Running {
            steps -= 1;
            if !self.following {
                self.state = ChainState::Idle;
                break;
            }
            self.copy_step(1);
            let rewalk = self.emit < self.emit_hi;
            if !rewalk && self.front_len as u64 >= w {
                // The memory budget is in flight: wait for the next fault.
                self.state = ChainState::Paused;
                break;
            }
            if self.window_len as usize >= self.l.window_slots / 2 {
                // The window set is full of blocks the cursor passed: a new
                // generation, emitting again from the cursor.
                self.stats.window_full += 1;
                self.history_rearm();
                continue;
            }
            let Some(e) = self.tape_ref().entry(self.emit.pos) else {
                // Reached the head (or the ring overwrote the place).
                self.state = ChainState::Paused;
                break;
            };
            if self.emit.off >= e.len {
                self.emit = Place {
                    pos: self.emit.pos + 1,
                    off: 0,
                };
                continue;
            }
            let o = e.offset + self.emit.off;
            if !rewalk && o >= self.seq.saturating_add(HISTORY_AHEAD * w) {
                self.state = ChainState::Paused;
                break;
            }
            let b = e.head + self.emit.off;
            self.emit.off += 1;
            self.emit_hi = self.emit_hi.max(self.emit);
            let fresh = self.claim_at(b, o, self.emit.pos) == Visit::Emit;
            if fresh {
                self.window_len += 1;
            }
            if self.regions().ledger.contains(b) {
                // Resident: protected now, nothing to move. Once the
                // program has used it here, it is next needed further on.
                if self.by_next_use() {
                    let next = self.next_use_after(b, o);
                    let mut l = self.regions().ledger;
                    l.use_at(b, o + 1, 0);
                    l.set_next_use(b, next);
                }
                continue;
            }
            if !fresh {
                // Emitted before and still not resident: the backend dropped
                // it (no room, or a queue it cleared). Offer it again,
                // unless it is a probe.
                let win = &self.storage[self.l.window.clone()];
                if window_slot(win, self.gen, b).is_none_or(|s| s[3] & PROBE_FLAG != 0) {
                    continue;
                }
                out[n] = Prefetch { block: b, ahead: 0 };
                n += 1;
                continue;
            }
            self.emitted = self.emitted.wrapping_add(1);
            // Offered again after pre-eviction took it. With the regret
            // window on, the offer settles it (a later fault is no refault:
            // as measured in H100 run 30); off, it is only counted.
            let age = if self.regret_window {
                self.take_recent_victim(b)
            } else {
                self.recent_victim_age(b)
            };
            if let Some(age) = age {
                self.regret(age, true);
            }
            if PROBE_EVERY > 0
                && self
                    .emitted
                    .is_multiple_of((w / PROBE_EVERY).max(MIN_PROBE_GAP))
            {
                // A probe: left to fault, so that the cursor learns where
                // the program is while the window is still full.
                self.mark_probe(b);
                continue;
            }
            out[n] = Prefetch { block: b, ahead: 0 };
            n += 1;
            let cap = self.l.frontier.len() as u32;
            if self.front_len < cap {
                let at = (self.front_head + self.front_len) % cap;
                self.storage[self.l.frontier.start + at as usize] = o;
                self.front_len += 1;
            }
        }
        n
    }
}
