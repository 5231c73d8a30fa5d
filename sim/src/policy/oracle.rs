//! The oracle: it knows every future access. It prefetches blocks in the
//! order they will be used, as fast as the link allows, and makes room by
//! Belady's rule (evict the resident block used furthest in the future,
//! only if that is later than the block it makes room for). It is the lower
//! bound the other policies are measured against (not a proven optimum of
//! this cost model, but `sim/tests/oracle_bound.rs` checks that no policy
//! beats it on any bundled or recorded trace).
//!
//! Three things make it a bound rather than just a good policy:
//! - A block that leaves the GPU after the prefetch cursor passed it (a
//!   demand victim, or one Belady chose for a sooner need) is prefetched
//!   again in order of its next use (in two of its three schedules);
//!   before, it always waited for a demand fault.
//! - Data that will never be read again is worth nothing: a block whose
//!   every byte is dead, and an input block the CPU rewrites before its next
//!   use, are evicted first and discarded with no copy.
//! - The next iteration's inputs are prefetched only once the CPU has
//!   written them; before, the oracle moved the old batch in, the rewrite
//!   threw it out, and every input block then faulted (the bundled H200
//!   dnn and random traces ran at the driver's speed from iteration 2).

use crate::model::{Policy, State};
use crate::plan::Plan;
use prescient_core::Block;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// The schedules the report tries, as (reach, refetch victims); the oracle
/// is the fastest of them in steady state. On the bundled random trace the
/// unlimited reach lost 0.2% to Prescient and a reach of 4 kernels did not;
/// on BERT at a quarter of its footprint prefetching victims again in order
/// cost 4% (1.144 against 1.099 x ideal without it).
pub const ORACLE_SCHEDULES: [(Option<usize>, bool); 3] =
    [(None, true), (Some(4), true), (None, false)];

/// "No further use" as an access position.
const NEVER: u32 = u32::MAX;

pub struct Oracle {
    /// Block of every access, over all iterations, in order.
    access: Vec<Block>,

    /// Position of the next access of the same block, or NEVER.
    next_use: Vec<u32>,
    /// First access position of each kernel position, plus the end.
    kernel_first: Vec<u32>,
    /// Kernels in one iteration.
    kernels_per_iter: usize,
    /// Accesses in one iteration.
    accesses_per_iter: u32,
    /// Per block: the CPU rewrites it before each iteration.
    host_input: Vec<bool>,
    /// Per block: populated ahead of its next use while dead (a slot kept
    /// for it, not stale data).
    reserved: Vec<bool>,
    /// Per block: position of its next access from now on.
    nu: Vec<u32>,
    /// Per block: its key in `resident`, None while not resident.
    key: Vec<Option<u32>>,
    /// Resident blocks by the position at which their data is next needed.
    resident: BTreeSet<(u32, Block)>,
    /// Accesses behind the prefetch cursor whose block is not on the GPU,
    /// soonest first (stale entries are skipped when popped).
    behind: BinaryHeap<Reverse<(u32, Block)>>,
    /// Next iteration's input accesses, held back until the CPU rewrote them.
    deferred: Vec<(u32, Block)>,
    /// The running kernel's iteration.
    iteration: usize,
    /// First access after the running kernel's: earlier targets are the
    /// fault path's (demand goes ahead of queued prefetches).
    horizon: u32,
    cursor: usize,
    prefetch_cursor: usize,
    /// The running kernel's global position.
    pos: usize,
    /// Kernels after the running one it prefetches for at most (None: no
    /// limit).
    reach: Option<usize>,
    /// Whether a block that left the GPU behind the prefetch cursor is
    /// prefetched again in order of its next use (else it faults back).
    refetch: bool,
}

impl Oracle {
    /// The oracle for `iterations` iterations of `plan`, prefetching for at
    /// most `reach` kernels ahead of the running one (None: as far as the
    /// memory allows), refetching victims or not. Belady with unlimited
    /// reach moves the fewest bytes but can push out blocks a nearer kernel
    /// needs; the report runs each of `ORACLE_SCHEDULES` and keeps the
    /// fastest.
    pub fn new(plan: &Plan, iterations: usize, (reach, refetch): (Option<usize>, bool)) -> Self {
        let mut access = Vec::new();
        let mut kernel_first = Vec::new();
        for _ in 0..iterations {
            for k in &plan.kernels {
                kernel_first.push(access.len() as u32);
                access.extend(k.touches.iter().map(|t| t.block));
            }
        }
        kernel_first.push(access.len() as u32);
        let mut next_use = vec![NEVER; access.len()];
        let mut nu = vec![NEVER; plan.blocks];
        for p in (0..access.len()).rev() {
            let b = access[p] as usize;
            next_use[p] = nu[b];
            nu[b] = p as u32;
        }
        let mut host_input = vec![false; plan.blocks];
        for &b in &plan.host_inputs {
            host_input[b as usize] = true;
        }
        Oracle {
            accesses_per_iter: plan.kernels.iter().map(|k| k.touches.len() as u32).sum(),
            access,
            next_use,
            kernel_first,
            kernels_per_iter: plan.kernels.len(),
            host_input,
            reserved: vec![false; plan.blocks],
            nu,
            key: vec![None; plan.blocks],
            resident: BTreeSet::new(),
            behind: BinaryHeap::new(),
            deferred: Vec::new(),
            iteration: 0,
            horizon: 0,
            cursor: 0,
            prefetch_cursor: 0,
            pos: 0,
            reach,
            refetch,
        }
    }

    /// The iteration of access position `q`.
    fn iteration_of(&self, q: u32) -> usize {
        (q / self.accesses_per_iter.max(1)) as usize
    }

    /// True if `b`'s current data is never read again: all of it is dead, or
    /// it is an input the CPU rewrites before its next use.
    fn worthless(&self, st: &State, b: Block) -> bool {
        let i = b as usize;
        (st.dead[i] && !self.reserved[i])
            || (self.host_input[i]
                && self.nu[i] != NEVER
                && self.iteration_of(self.nu[i]) > self.iteration)
    }

    /// The position at which `b`'s data is next needed, for Belady's order.
    fn need(&self, st: &State, b: Block) -> u32 {
        if self.worthless(st, b) {
            NEVER
        } else {
            self.nu[b as usize]
        }
    }

    /// Re-files `b` in the resident set after its next use or worth changed.
    fn rekey(&mut self, st: &State, b: Block) {
        if self.key[b as usize].is_some() {
            self.became_resident(st, b);
        }
    }

    fn became_resident(&mut self, st: &State, b: Block) {
        let i = b as usize;
        if let Some(k) = self.key[i] {
            self.resident.remove(&(k, b));
        }
        let k = self.need(st, b);
        self.key[i] = Some(k);
        self.resident.insert((k, b));
    }

    /// `b` left the GPU: if the prefetch cursor is past its next use, queue
    /// that use so it is prefetched again in order.
    fn left(&mut self, b: Block) {
        let i = b as usize;
        if let Some(k) = self.key[i].take() {
            self.resident.remove(&(k, b));
        }
        let q = self.nu[i];
        if self.refetch && q != NEVER && (q as usize) < self.prefetch_cursor {
            self.behind.push(Reverse((q, b)));
        }
    }

    /// The resident block needed furthest ahead that the running kernel
    /// does not use, with that position.
    fn furthest(&self, st: &State) -> Option<(u32, Block)> {
        self.resident
            .iter()
            .rev()
            .find(|&&(_, b)| !st.pinned(b))
            .copied()
    }

    /// True (and kept for later) if access `q` reads an input the CPU has
    /// not written yet.
    fn held_back(&mut self, q: u32, b: Block) -> bool {
        let later = self.host_input[b as usize] && self.iteration_of(q) > self.iteration;
        if later {
            self.deferred.push((q, b));
        }
        later
    }

    /// The next access to prefetch for, or None when there is none left.
    /// Consumes what it returns.
    fn next_target(&mut self, st: &State) -> Option<(u32, Block)> {
        while let Some(&Reverse((q, b))) = self.behind.peek() {
            let stale = q < self.horizon || self.nu[b as usize] != q || st.is_full(b);
            if stale {
                self.behind.pop();
                continue;
            }
            if (q as usize) >= self.prefetch_cursor {
                break;
            }
            self.behind.pop();
            if self.held_back(q, b) {
                continue;
            }
            return Some((q, b));
        }
        let limit = self.reach.map_or(self.access.len(), |k| {
            let last = (self.pos + 1 + k).min(self.kernel_first.len() - 1);
            self.kernel_first[last] as usize
        });
        while self.prefetch_cursor < limit {
            let q = self.prefetch_cursor as u32;
            let b = self.access[q as usize];
            self.prefetch_cursor += 1;
            if st.is_full(b) {
                continue;
            }
            if self.held_back(q, b) {
                continue;
            }
            return Some((q, b));
        }
        None
    }
}

impl Policy for Oracle {
    fn name(&self) -> String {
        "oracle".into()
    }

    fn kernel_start(&mut self, _st: &mut State, _plan: &Plan, _k: usize, pos: usize) {
        self.cursor = self.kernel_first[pos] as usize;
        self.pos = pos;
        self.horizon = self.kernel_first[pos + 1];
        let iteration = pos / self.kernels_per_iter.max(1);
        if iteration != self.iteration {
            // The CPU wrote this iteration's inputs: they may come in now.
            self.iteration = iteration;
            for (q, b) in std::mem::take(&mut self.deferred) {
                self.behind.push(Reverse((q, b)));
            }
        }
        // Prefetching for accesses already due is the fault path's job: a
        // prefetch would queue behind the link's backlog, a demand fault
        // goes ahead of it.
        self.prefetch_cursor = self.prefetch_cursor.max(self.horizon as usize);
    }

    fn touched(&mut self, st: &mut State, b: Block) {
        debug_assert_eq!(self.access[self.cursor], b);
        self.nu[b as usize] = self.next_use[self.cursor];
        self.cursor += 1;
        self.rekey(st, b);
    }

    fn demand_arrived(&mut self, st: &mut State, b: Block) {
        self.became_resident(st, b);
    }

    fn demand_victim(&mut self, st: &mut State) -> Option<(Block, bool)> {
        let (_, b) = self.furthest(st)?;
        Some((b, self.worthless(st, b)))
    }

    fn evicted(&mut self, _st: &mut State, b: Block) {
        self.left(b);
    }

    fn advance(&mut self, st: &mut State, _plan: &Plan, until: f64) {
        while st.h2d_free < until {
            let Some((q, b)) = self.next_target(st) else {
                return;
            };
            let mut ready = st.now;
            // A partly resident block has its chunk already.
            if st.free_blocks() == 0 && !st.is_on_gpu(b) {
                match self.furthest(st) {
                    Some((need, v)) if need > q => {
                        let discard = self.worthless(st, v);
                        let freed = st.evict(v, discard, st.now);
                        ready = st.room_at(st.now, freed);
                        if !discard {
                            st.it.pre_evictions += 1;
                        }
                        self.left(v);
                    }
                    _ => {
                        // Everything resident is needed before b: wait.
                        self.behind.push(Reverse((q, b)));
                        return;
                    }
                }
            }
            self.reserved[b as usize] = st.loc[b as usize] == crate::model::Loc::Unpopulated;
            st.prefetch(b, ready);
            self.became_resident(st, b);
        }
    }

    fn dead(&mut self, st: &mut State, b: Block) {
        self.reserved[b as usize] = false;
        if st.is_on_gpu(b) {
            self.rekey(st, b);
        } else {
            st.loc[b as usize] = crate::model::Loc::Unpopulated;
        }
    }

    fn alive(&mut self, st: &mut State, b: Block) {
        self.rekey(st, b);
    }
}
