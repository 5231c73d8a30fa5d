//! Execution-id mode's chain: per-kernel block tables walked ahead of the
//! program (DeepUM 5.2.2).
//!
//! A *window* is one run of predictions. It starts at a fault (from the
//! faulted block in the running kernel's table) or at a kernel start that
//! was not predicted (from that kernel's start block). Inside a kernel the
//! chain walks the table breadth first: the rest of a block's run, then the
//! run's successors, MRU first; it stops at the kernel's end block. When the
//! kernel is exhausted it predicts the next execution id and continues from
//! that kernel's start block, up to `lookahead` kernels beyond the running
//! one. A kernel start that the window predicted slides the window on by one
//! kernel instead of restarting it. A block is emitted at most once while
//! the kernel it was predicted for has not yet run; the window restarts at a
//! fault, at an unpredicted kernel, and when `window_blocks` emissions fill
//! it.
//!
//! State machine of the chain:
//! ```text
//!   Idle --fault / unpredicted kernel_start--> Running
//!   Running --kernel exhausted, lookahead reached--> Paused
//!   Paused --predicted kernel_start--> Running
//!   Running|Paused --prediction failed or window full--> Idle
//!   any --fault--> Running (new window)
//! ```

use super::{ChainState, Engine, Prefetch, STEPS_PER_SLOT};
use crate::block::{Block, ExecId, NONE};
use crate::block_table::{BlockTable, BlockTableRef};
use crate::exec_table::{Evicted, NO_EXEC};
use crate::params::Params;
use crate::window::{claim_at, Visit};
use core::ops::DerefMut;

/// Kernels remembered for checking predictions: lookahead plus the running one.
const PRED_RING: usize = Params::MAX_LOOKAHEAD as usize + 1;
/// A resident block that the chain predicts again at most this many kernels
/// after its previous predicted use moves to the back of the victim order
/// (measured on the VM trace: 16 and 32 kernels did worse than 24).
const REUSE_KERNELS: u64 = 24;

/// The chain's walk through the tables of the kernels it predicts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Chain {
    /// The block whose run and successors are being expanded (NONE: take
    /// the next one from the frontier).
    expanding: Block,
    /// The next block of `expanding`'s run to emit.
    next_in_run: Block,
    /// The next successor of `expanding`'s run to emit.
    next_successor: u32,
    /// A kernel was entered: emit its start block next.
    start_pending: bool,
    /// The kernel the chain is in, and the three before it.
    exec: ExecId,
    previous: [ExecId; 3],
    /// The kernel sequence number the chain is in.
    seq: u64,
    /// The block table of the kernel the chain is in.
    table: Option<u32>,
    /// The execution id predicted for each kernel sequence number.
    predicted: [ExecId; PRED_RING],
    /// Blocks emitted for kernels that have not run yet, and per kernel.
    pending: u32,
    pending_by_seq: [u32; PRED_RING],
}

impl Chain {
    pub(super) const fn new() -> Self {
        Chain {
            expanding: NONE,
            next_in_run: NONE,
            next_successor: 0,
            start_pending: false,
            exec: NO_EXEC,
            previous: [NO_EXEC; 3],
            seq: 0,
            table: None,
            predicted: [NO_EXEC; PRED_RING],
            pending: 0,
            pending_by_seq: [0; PRED_RING],
        }
    }
}

/// What one step of the chain produced.
enum Step {
    /// Nothing this step; go on.
    Next,
    /// Stop this call.
    Stop,
    /// Emit this block for `ahead` kernels on.
    Emit(Prefetch),
}

impl<S: DerefMut<Target = [u64]>> Engine<S> {
    fn table_ref(&self, idx: u32) -> BlockTableRef<'_> {
        let tw = self.layout.table_words;
        let at = self.layout.tables.start + idx as usize * tw;
        BlockTableRef::new(&self.storage[at..at + tw], self.geometry)
    }

    fn table_mut(&mut self, idx: u32) -> BlockTable<'_> {
        let tw = self.layout.table_words;
        let at = self.layout.tables.start + idx as usize * tw;
        BlockTable::new(&mut self.storage[at..at + tw], self.geometry)
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
        let best = self.oldest_table();
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

    /// Scans the table pool: a free table (owner NONE) first, else the
    /// least recently used one.
    #[cold]
    fn oldest_table(&self) -> u32 {
        let mut best = 0u32;
        let mut best_stamp = u64::MAX;
        for t in 0..self.params.max_tables {
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
        best
    }

    /// Kernel `exec` starts: records the transition and slides or restarts
    /// the window.
    pub(super) fn chain_kernel_start(&mut self, exec: ExecId) {
        self.stats.kernel_starts += 1;
        let stamp = self.tick();
        if self.running.exec != NO_EXEC {
            self.end_kernel();
            let (hist, cur) = (self.running.previous, self.running.exec);
            let ev = self.regions().exec.record(hist, cur, exec, stamp);
            self.forget_evicted(ev);
        }
        let r = &mut self.running;
        r.previous = [r.previous[1], r.previous[2], r.exec];
        r.exec = exec;
        let done = r.seq as usize % PRED_RING;
        self.chain.pending -= self.chain.pending_by_seq[done];
        self.chain.pending_by_seq[done] = 0;
        r.seq += 1;
        r.last_fault = NONE;
        r.kernel_faults = 0;
        if let Some(t) = self.regions().exec.table_of(exec) {
            self.table_mut(t).touch(stamp);
        }

        let seq = self.running.seq;
        let predicted = self.state != ChainState::Idle
            && self.chain.seq >= seq
            && self.chain.predicted[seq as usize % PRED_RING] == exec;
        if predicted {
            let half = (self.layout.window_slots / 2) as u32;
            if self.window.claimed < half {
                if self.state == ChainState::Paused {
                    self.state = ChainState::Running;
                }
                return;
            }
            // The window is nearly full of blocks for kernels that ran:
            // start a fresh one from this kernel.
        } else if self.state != ChainState::Idle && self.chain.seq >= seq {
            self.stats.mispredictions += 1;
        }
        self.start_window_at_kernel();
    }

    /// The running kernel ends: its last fault becomes its end block when
    /// that block leads nowhere inside the kernel.
    fn end_kernel(&mut self) {
        if self.running.kernel_faults == 0 {
            return;
        }
        let cur = self.running.exec;
        if let Some(t) = self.regions().exec.table_of(cur) {
            let last = self.running.last_fault;
            let tr = self.table_ref(t);
            let tail = tr.run(last).is_none_or(|r| tr.successors(&r)[0] == NONE);
            if tail {
                self.table_mut(t).set_end(last);
            }
        }
    }

    /// A fault in execution-id mode: learn the transition in the running
    /// kernel's table and restart the window from the faulted block.
    pub(super) fn chain_fault(&mut self, block: Block) {
        let stamp = self.tick();
        if self.running.exec == NO_EXEC {
            return;
        }
        let t = self.table_for(self.running.exec);
        let prev = self.running.last_fault;
        let first_in_kernel = self.running.kernel_faults == 0;
        let known = self.table_ref(t).contains(block);
        // A fault on a block the window predicted for a coming kernel (late,
        // or evicted since) teaches nothing new; recording it would only put
        // a skip edge in front of the successors that predicted it.
        if !self.in_window(block) {
            let rec = self.table_mut(t).record(prev, block, stamp);
            self.stats.entry_replacements += rec.replaced as u64;
        }
        if first_in_kernel {
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
        self.running.last_fault = block;
        self.running.kernel_faults = self.running.kernel_faults.saturating_add(1);
        self.new_window();
        self.chain.table = Some(t);
        // The faulted block is being fetched on demand: mark it, expand it.
        let seq = self.running.seq;
        self.visit(block, seq);
        self.push_front(block);
    }

    fn new_window(&mut self) {
        self.stats.windows += 1;
        self.window.restart();
        let r = self.running;
        self.chain = Chain {
            exec: r.exec,
            previous: r.previous,
            seq: r.seq,
            predicted: self.chain.predicted,
            ..Chain::new()
        };
        self.chain.predicted[r.seq as usize % PRED_RING] = r.exec;
        self.state = ChainState::Running;
    }

    fn start_window_at_kernel(&mut self) {
        self.new_window();
        let exec = self.running.exec;
        self.chain.table = self.regions().exec.table_of(exec);
        self.chain.start_pending = true;
    }

    /// Emits and queues the start block of the kernel the chain is in.
    fn enter_kernel_start(&mut self) -> Option<Block> {
        let t = self.chain.table?;
        let start = self.table_ref(t).start();
        if start == NONE {
            return None;
        }
        let seq = self.chain.seq;
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
        let ring = &mut self.storage[self.layout.frontier.clone()];
        self.window.frontier.push(ring, b);
    }

    fn pop_front(&mut self) -> Option<Block> {
        let ring = &self.storage[self.layout.frontier.clone()];
        self.window.frontier.pop(ring)
    }

    /// Marks `b` as predicted for kernel `seq` in this window and says what
    /// the chain does with it.
    fn visit(&mut self, b: Block, seq: u64) -> Visit {
        let (gen, now) = (self.window.generation, self.running.seq);
        let v = claim_at(self.window_set_mut(), gen, now, b, seq, 0);
        let at = seq as usize % PRED_RING;
        match v {
            Visit::Emit => {
                // A resident block predicted again soon after its last
                // predicted use is re-used at the chain's time scale: it
                // goes to the back of the victim order.
                self.regions().ledger.use_at(b, seq + 1, REUSE_KERNELS);
                self.window.claimed += 1;
                self.chain.pending += 1;
                self.chain.pending_by_seq[at] += 1;
            }
            Visit::Expand(old) => {
                let was = &mut self.chain.pending_by_seq[old as usize % PRED_RING];
                *was = was.saturating_sub(1);
                self.chain.pending_by_seq[at] += 1;
            }
            Visit::Skip => {}
        }
        v
    }

    /// Fills `out` with the chain's next blocks; returns how many.
    pub(super) fn chain_prefetches(&mut self, out: &mut [Prefetch]) -> usize {
        let mut n = 0;
        let mut steps = STEPS_PER_SLOT * out.len();
        while n < out.len() && steps > 0 && self.state == ChainState::Running {
            steps -= 1;
            match self.chain_step() {
                Step::Next => {}
                Step::Stop => break,
                Step::Emit(p) => {
                    out[n] = p;
                    n += 1;
                }
            }
        }
        n
    }

    /// One step of the chain: at most one block emitted.
    fn chain_step(&mut self) -> Step {
        if self.chain.pending >= self.params.window_blocks {
            // Predicted enough to fill the memory budget: wait for a
            // kernel to finish.
            self.state = ChainState::Paused;
            return Step::Stop;
        }
        if self.window.claimed as usize >= self.layout.window_slots / 2 {
            self.stats.window_full += 1;
            self.state = ChainState::Idle;
            return Step::Stop;
        }
        // A kernel entered by the chain: its start block comes first.
        if self.chain.start_pending {
            self.chain.start_pending = false;
            return match self.enter_kernel_start() {
                Some(start) => Step::Emit(Prefetch {
                    block: start,
                    ahead: (self.chain.seq - self.running.seq) as u32,
                }),
                None => Step::Next,
            };
        }
        // Resume the block being expanded, else take the next one.
        if self.chain.expanding == NONE {
            match self.pop_front() {
                Some(b) => {
                    self.chain.expanding = b;
                    self.chain.next_in_run = b.saturating_add(1);
                    self.chain.next_successor = 0;
                }
                None => {
                    if !self.next_kernel() {
                        return Step::Stop;
                    }
                    self.chain.start_pending = true;
                    return Step::Next;
                }
            }
        }
        let Some((s, is_successor)) = self.next_expansion() else {
            self.chain.expanding = NONE;
            return Step::Next;
        };
        let seq = self.chain.seq;
        match self.visit(s, seq) {
            Visit::Emit => {
                if is_successor {
                    self.push_front(s);
                }
                Step::Emit(Prefetch {
                    block: s,
                    ahead: (seq - self.running.seq) as u32,
                })
            }
            Visit::Expand(_) if is_successor => {
                self.push_front(s);
                Step::Next
            }
            Visit::Expand(_) | Visit::Skip => Step::Next,
        }
    }

    /// The next block reached from the block being expanded: first the rest
    /// of its run, then its run's successors (flagged true).
    ///
    /// None when done; nothing past the kernel's end block.
    fn next_expansion(&mut self) -> Option<(Block, bool)> {
        let t = self.chain.table?;
        let tr = self.table_ref(t);
        let expanding = self.chain.expanding;
        let run = tr.run(expanding)?;
        let end = tr.end();
        let stops_at_end = end >= expanding && end < run.end();
        let last = if stops_at_end { end + 1 } else { run.end() };
        if self.chain.next_in_run < last {
            let b = self.chain.next_in_run;
            self.chain.next_in_run += 1;
            return Some((b, false));
        }
        if stops_at_end {
            return None;
        }
        let s = *tr
            .successors(&run)
            .get(self.chain.next_successor as usize)?;
        if s == NONE {
            return None;
        }
        self.chain.next_successor += 1;
        Some((s, true))
    }

    /// The chain moves on to the next predicted kernel. False when it stops
    /// (lookahead reached, or no prediction).
    fn next_kernel(&mut self) -> bool {
        if self.chain.seq - self.running.seq >= self.params.lookahead as u64 {
            self.state = ChainState::Paused;
            return false;
        }
        let (hist, cur) = (self.chain.previous, self.chain.exec);
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
        self.chain.previous = [hist[1], hist[2], cur];
        self.chain.exec = next;
        self.chain.seq += 1;
        self.chain.predicted[self.chain.seq as usize % PRED_RING] = next;
        self.chain.table = self.regions().exec.table_of(next);
        true
    }
}
