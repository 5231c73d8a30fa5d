//! Prescient: the engine of prescient-core, driven as the kernel module
//! drives it. It sees faults (and, in execution-id mode, kernel starts), is
//! told of dead ranges, prefetches whole blocks in the background and
//! pre-evicts so that faults find free memory. Demand faults are still
//! serviced by the driver, which evicts in its own FIFO order if it must.

use super::driver::ResidencyFifo;
use crate::model::{Loc, Policy, State};
use crate::plan::Plan;
use prescient_core::{
    Admit, Block, Engine, Host, Limit, Mode, Params, Prefetch, Pump, Pumped, Victim, Why,
};

pub use prescient_core::DEFAULT_WATERMARK_PCT;

pub struct Prescient {
    engine: Engine<Vec<u64>>,
    fifo: ResidencyFifo,
    pump: Pump,
    limit: Limit,
    /// Blocks the engine asked for that were already on the GPU.
    already_resident: u64,
    /// Times the engine had no victim to offer (all resident blocks predicted).
    no_victim: u64,
    /// Faults on their way to the engine: (time it learns of it, block).
    events: std::collections::VecDeque<(f64, Block)>,
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
            pump: Pump::new(),
            limit: Limit {
                capacity_blocks: gpu_blocks as u64,
                watermark_pct: DEFAULT_WATERMARK_PCT,
            },
            already_resident: 0,
            no_victim: 0,
            events: std::collections::VecDeque::new(),
        })
    }

    /// The window's depth follows its regrets (`Engine::set_regret_window`).
    pub fn with_regret_window(mut self) -> Self {
        self.engine.set_regret_window(true);
        self
    }

    /// Resident blocks stay under `pct` percent of the GPU (the module's
    /// `pre_evict_watermark_pct`).
    pub fn with_watermark(mut self, pct: u32) -> Self {
        self.limit.watermark_pct = pct;
        self
    }
}

/// The simulated GPU as the shared host loop sees it: one round lasts until
/// the link is busy past `until`.
struct SimHost<'a> {
    st: &'a mut State,
    fifo: &'a mut ResidencyFifo,
    blocks: usize,
    until: f64,
    /// When the memory freed since the last prefetch is available.
    ready: f64,
    /// No prefetch starts before this: the events that caused it arrived.
    floor: f64,
}

impl Host for SimHost<'_> {
    fn resident_blocks(&self, _engine_count: u32) -> u64 {
        (self.st.cap - self.st.free_blocks()) as u64
    }

    fn is_resident(&self, b: Block, _engine_says: bool) -> bool {
        // As prescientd's ledger: resident only once every byte is (a partly
        // resident block is prefetched; the driver moves the rest).
        (b as usize) < self.blocks && self.st.is_full(b)
    }

    fn evict(&mut self, v: Victim, why: Why) -> bool {
        if v.block as usize >= self.blocks || self.st.pinned(v.block) || !self.st.is_on_gpu(v.block)
        {
            return false;
        }
        let at = self.st.now;
        let freed_at = self.st.evict(v.block, v.discard, at);
        if why == Why::Room {
            self.ready = self.ready.max(self.st.room_at(at, freed_at));
        }
        if !v.discard {
            self.st.it.pre_evictions += 1;
        }
        true
    }

    fn prefetch(&mut self, p: Prefetch) -> Admit {
        if p.block as usize >= self.blocks {
            return Admit::Declined;
        }
        self.st.prefetch(p.block, self.ready);
        self.ready = self.floor;
        self.fifo.push(p.block);
        Admit::Issued
    }

    fn has_capacity(&self) -> bool {
        // prescientd queues whatever the loop yields for its workers.
        if self.st.m.soft_budget {
            return true;
        }
        self.st.h2d_free < self.until
    }
}

impl Prescient {
    /// The engine learns of a fault on `b`.
    fn learn(&mut self, b: Block) {
        self.engine.fault(b);
        // Faults restart the window: what was queued came from the old one.
        self.pump.restart();
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

    fn fault(&mut self, st: &mut State, b: Block) {
        if st.m.event_latency_s > 0.0 {
            self.events.push_back((st.now + st.m.event_latency_s, b));
        } else {
            self.learn(b);
        }
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
        // Faults whose events have arrived by `until`; prefetches they cause
        // start no earlier than the last one's arrival.
        let mut now = st.now;
        while let Some(&(at, b)) = self.events.front() {
            if at > until {
                break;
            }
            self.events.pop_front();
            self.learn(b);
            now = now.max(at);
        }
        let mut host = SimHost {
            st,
            fifo: &mut self.fifo,
            blocks: plan.blocks,
            until,
            ready: now,
            floor: now,
        };
        let done: Pumped = self
            .pump
            .round(&mut self.engine, self.limit, usize::MAX, &mut host);
        self.already_resident += u64::from(done.already_resident);
        if done.no_room {
            self.no_victim += 1;
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
                "thrash_guards": s.thrash_guards,
                "thrash_guarded": self.engine.thrash_guarded(),
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
