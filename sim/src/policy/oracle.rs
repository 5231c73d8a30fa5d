//! The oracle: it knows every future access. It prefetches blocks in the
//! order they will be used, as fast as the link allows, and makes room by
//! Belady's rule (evict the resident block used furthest in the future,
//! only if that is later than the block it makes room for); it discards dead
//! data for free. It is the lower bound the other policies are measured
//! against (not a proven optimum of this cost model, but a strong one).

use crate::model::{Policy, State};
use crate::plan::Plan;
use prescient_core::Block;
use std::collections::BTreeSet;

const NEVER: u32 = u32::MAX;

pub struct Oracle {
    /// Block of every access, over all iterations, in order.
    access: Vec<Block>,
    /// Position of the next access of the same block, or NEVER.
    next_use: Vec<u32>,
    /// First access position of each kernel position, plus the end.
    kernel_first: Vec<u32>,
    /// Per block: position of its next access from now on.
    nu: Vec<u32>,
    /// Resident blocks by next use.
    resident: BTreeSet<(u32, Block)>,
    cursor: usize,
    prefetch_cursor: usize,
}

impl Oracle {
    pub fn new(plan: &Plan, iterations: usize) -> Self {
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
        Oracle {
            access,
            next_use,
            kernel_first,
            nu,
            resident: BTreeSet::new(),
            cursor: 0,
            prefetch_cursor: 0,
        }
    }

    fn set_nu(&mut self, st: &State, b: Block, nu: u32) {
        let i = b as usize;
        if st.is_on_gpu(b) {
            self.resident.remove(&(self.nu[i], b));
            self.resident.insert((nu, b));
        }
        self.nu[i] = nu;
    }

    /// The resident block used furthest ahead that the running kernel does
    /// not use, with its next use.
    fn furthest(&self, st: &State) -> Option<(u32, Block)> {
        self.resident
            .iter()
            .rev()
            .find(|&&(_, b)| !st.pinned(b))
            .copied()
    }

    fn became_resident(&mut self, b: Block) {
        self.resident.insert((self.nu[b as usize], b));
    }
}

impl Policy for Oracle {
    fn name(&self) -> String {
        "oracle".into()
    }

    fn kernel_start(&mut self, _st: &mut State, _plan: &Plan, _k: usize, pos: usize) {
        self.cursor = self.kernel_first[pos] as usize;
        // Prefetching for accesses already due is the fault path's job.
        self.prefetch_cursor = self
            .prefetch_cursor
            .max(self.kernel_first[pos + 1] as usize);
    }

    fn touched(&mut self, st: &mut State, b: Block) {
        debug_assert_eq!(self.access[self.cursor], b);
        let nu = self.next_use[self.cursor];
        self.cursor += 1;
        self.set_nu(st, b, nu);
    }

    fn demand_arrived(&mut self, _st: &mut State, b: Block) {
        self.became_resident(b);
    }

    fn demand_victim(&mut self, st: &mut State) -> Option<(Block, bool)> {
        let (_, b) = self.furthest(st)?;
        Some((b, st.dead[b as usize]))
    }

    fn evicted(&mut self, _st: &mut State, b: Block) {
        self.resident.remove(&(self.nu[b as usize], b));
    }

    fn advance(&mut self, st: &mut State, _plan: &Plan, until: f64) {
        while st.h2d_free < until && self.prefetch_cursor < self.access.len() {
            let q = self.prefetch_cursor;
            let b = self.access[q];
            if st.is_on_gpu(b) {
                self.prefetch_cursor += 1;
                continue;
            }
            let mut ready = st.now;
            if st.free_blocks() == 0 {
                match self.furthest(st) {
                    Some((nu, v)) if nu as usize > q => {
                        ready = st.evict(v, st.dead[v as usize], st.now);
                        if !st.dead[v as usize] {
                            st.it.pre_evictions += 1;
                        }
                        self.resident.remove(&(nu, v));
                    }
                    // Everything resident is needed before b: wait.
                    _ => return,
                }
            }
            st.prefetch(b, ready);
            self.became_resident(b);
            self.prefetch_cursor += 1;
        }
    }

    fn dead(&mut self, st: &mut State, b: Block) {
        if !st.is_on_gpu(b) {
            st.loc[b as usize] = crate::model::Loc::Unpopulated;
        }
    }
}
