//! Prescient: the engine of prescient-core, driven as the kernel module
//! drives it. It sees faults (and, in execution-id mode, kernel starts), is
//! told of dead ranges, prefetches whole blocks in the background and
//! pre-evicts so that faults find free memory. Demand faults are still
//! serviced by the driver, which evicts in its own FIFO order if it must.

use super::driver::ResidencyFifo;
use crate::model::{Loc, Policy, State};
use crate::plan::Plan;
use prescient_core::{Block, ChainState, Engine, Mode, Params, Prefetch, Victim};
use std::collections::VecDeque;

pub struct Prescient {
    engine: Engine<Vec<u64>>,
    fifo: ResidencyFifo,
    queue: VecDeque<Prefetch>,
    /// Blocks the engine asked for that were already on the GPU.
    already_resident: u64,
    /// Times the engine had no victim to offer (all resident blocks predicted).
    no_victim: u64,
}

impl Prescient {
    pub fn new(params: Params, plan: &Plan, gpu_blocks: usize) -> anyhow::Result<Self> {
        // The ledger tracks every block the GPU can hold.
        let params = Params {
            max_resident_blocks: params.max_resident_blocks.max(gpu_blocks as u32),
            ..params
        };
        let engine = Engine::new(params, vec![0u64; params.storage_words()])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Prescient {
            engine,
            fifo: ResidencyFifo::new(plan.blocks),
            queue: VecDeque::new(),
            already_resident: 0,
            no_victim: 0,
        })
    }

    /// The window's depth follows its regrets (`Engine::set_regret_window`).
    pub fn with_regret_window(mut self) -> Self {
        self.engine.set_regret_window(true);
        self
    }

    fn next_candidate(&mut self) -> Option<Prefetch> {
        if self.queue.is_empty() {
            let mut buf = [Prefetch::default(); 32];
            // A call may do only bookkeeping (blocks already emitted): retry
            // a bounded number of times while the chain is running.
            for _ in 0..64 {
                let n = self.engine.prefetches(&mut buf);
                self.queue.extend(&buf[..n]);
                if n > 0 || self.engine.chain_state() != ChainState::Running {
                    break;
                }
            }
        }
        self.queue.pop_front()
    }

    /// Pre-evicts until more than `want` blocks are free. Returns the time
    /// the freed memory is available, or None if the engine had no victim.
    fn make_room(&mut self, st: &mut State, want: usize) -> Option<f64> {
        let mut ready = st.now;
        let mut buf = [Victim::default(); 8];
        while st.free_blocks() <= want {
            let need = (want + 1 - st.free_blocks()).min(buf.len());
            let n = self.engine.victims(&mut buf[..need]);
            let mut freed = false;
            for v in &buf[..n] {
                if st.pinned(v.block) || !st.is_on_gpu(v.block) {
                    continue;
                }
                ready = ready.max(st.evict(v.block, v.discard, st.now));
                if !v.discard {
                    st.it.pre_evictions += 1;
                }
                self.engine.evicted(v.block);
                freed = true;
                if st.free_blocks() > want {
                    break;
                }
            }
            if !freed {
                self.no_victim += 1;
                return None;
            }
        }
        Some(ready)
    }
}

impl Policy for Prescient {
    fn name(&self) -> String {
        if self.engine.regret_window() {
            "prescient-regret".into()
        } else {
            "prescient".into()
        }
    }

    fn table_bytes(&self) -> usize {
        self.engine.table_bytes()
    }

    fn kernel_start(&mut self, _st: &mut State, plan: &Plan, k: usize, _pos: usize) {
        if self.engine.params().mode == Mode::ExecId {
            self.engine.kernel_start(plan.kernels[k].exec_id);
        }
    }

    fn fault(&mut self, _st: &mut State, b: Block) {
        self.engine.fault(b);
        // Faults restart the window: what was queued came from the old one.
        self.queue.clear();
    }

    fn demand_arrived(&mut self, _st: &mut State, b: Block) {
        self.engine.migrated_in(b);
        self.fifo.push(b);
    }

    fn demand_victim(&mut self, st: &mut State) -> Option<(Block, bool)> {
        let b = self.fifo.victim(st)?;
        self.engine.demand_evicted(b);
        Some((b, false))
    }

    fn evicted(&mut self, _st: &mut State, b: Block) {
        self.engine.evicted(b);
    }

    fn dead(&mut self, st: &mut State, b: Block) {
        if !self.engine.mark_dead(b) && st.loc[b as usize] == Loc::Host {
            // Dead and on the host: discard there too, so that the next
            // write populates the GPU without a copy.
            st.loc[b as usize] = Loc::Unpopulated;
        }
    }

    fn alive(&mut self, _st: &mut State, b: Block) {
        self.engine.mark_alive(b);
    }

    fn advance(&mut self, st: &mut State, plan: &Plan, until: f64) {
        let reserve = self.engine.free_target() as usize;
        if self.make_room(st, reserve).is_none() {
            return;
        }
        while st.h2d_free < until {
            let Some(pf) = self.next_candidate() else {
                break;
            };
            let b = pf.block;
            if b as usize >= plan.blocks {
                continue;
            }
            if st.is_on_gpu(b) {
                self.already_resident += 1;
                continue;
            }
            let Some(ready) = self.make_room(st, reserve) else {
                // Everything resident is predicted: keep the candidate.
                self.queue.push_front(pf);
                break;
            };
            st.prefetch(b, ready);
            self.engine.migrated_in(b);
            self.fifo.push(b);
        }
    }

    fn extra(&self) -> serde_json::Value {
        let s = self.engine.stats();
        serde_json::json!({
            "engine": {
                "faults": s.faults,
                "kernel_starts": s.kernel_starts,
                "windows": s.windows,
                "prefetches": s.prefetches,
                "predictions": s.predictions,
                "mispredictions": s.mispredictions,
                "prediction_failures": s.prediction_failures,
                "window_full": s.window_full,
                "table_replacements": s.table_replacements,
                "exec_evictions": s.exec_evictions,
                "entry_replacements": s.entry_replacements,
                "victims_discard": s.victims_discard,
                "victims_evict": s.victims_evict,
                "victim_shortfall": s.victim_shortfall,
                "ledger_overflow": s.ledger_overflow,
                "demand_evictions": s.demand_evictions,
                "refaults": s.refaults,
                "regrets": s.regrets,
                "regret_offers": s.regret_offers,
                "window_depth": self.engine.window_depth(),
                "history_hits": s.history_hits,
                "history_misses": s.history_misses,
                "history_jumps": s.history_jumps,
                "free_target": self.engine.free_target(),
            },
            "already_resident": self.already_resident,
            "no_victim": self.no_victim,
        })
    }
}
