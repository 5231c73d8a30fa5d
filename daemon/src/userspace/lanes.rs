//! One engine, one residency ledger and one budget per GPU of a process
//! (a "lane"): a DDP worker computes on one GPU and gets one lane, exactly
//! the engine it had before lanes existed; a pipeline-parallel process
//! faults from two GPUs and gets two, each learning its own GPU's fault
//! stream and keeping its own GPU under its own budget. Every lane runs the
//! shared host loop (core's `Pump`, pump.rs) unchanged: nothing of the
//! policy is forked per GPU.
//!
//! A lane is made when its GPU first faults (or first receives a
//! migration): a process that sees eight GPUs and computes on one holds one
//! engine, not eight. A lane whose GPU leaves the process's processor table
//! (a reset, a MIG reconfiguration) is dropped with one line: nothing is
//! prefetched to it again.
//!
//! Without read duplication a block is resident on one processor at a
//! time: a block that enters one lane's ledger leaves every other lane's
//! (the driver moved it there, or our prefetch did).

use super::ahead::issue::Once;
use super::ahead::sweep::Sweep;
use super::config::{engine_params, Config};
use super::discard::Leaving;
use super::marks::{Discarded, Mark};
use super::migrator::{gpu_bytes, Counters, Evicted};
use super::mode::PolicyMode;
use super::residency::{fault_in, Left, Residency};
use super::snapshot::EngineView;
use prescient_core::{Engine, Pump, Stats};
use prescient_uapi::control::{Applied, GpuLane};
use prescient_uvm::Gpu;
use std::collections::HashSet;
use std::time::Instant;

/// What one GPU of a process carries from turn to turn.
pub(super) struct Lane {
    pub(super) gpu: Gpu,
    /// This GPU's residency budget (None: no pre-eviction below its size).
    pub(super) budget: Option<u64>,
    /// This GPU's memory in 2 MB blocks (`Config::gpu_blocks_of`): it sizes
    /// the engine, and is the capacity kept when there is no budget.
    pub(super) gpu_blocks: u32,
    pub(super) engine: Engine<Vec<u64>>,
    pub(super) residency: Residency,
    /// Blocks the ledger had as resident when the gate last opened: maybe
    /// still resident, maybe not. Prefetched when predicted (a resident one
    /// copies nothing), but never held out by the back-off: a hold-out on a
    /// block that is in fact resident would never fault, and count as a
    /// wrong prediction (daemon/README.md, "Measured history").
    pub(super) uncertain: HashSet<u64>,
    /// This turn's victims on their way out.
    pub(super) leaving: Leaving,
    /// The shared host loop's candidates, kept between turns.
    pub(super) pump: Pump,
    /// Discarded blocks marked alive, to migrate back to this GPU.
    pub(super) refetch: Vec<u64>,
    /// Discarded blocks an alive mark brought back to this GPU before its
    /// reply (alive.rs): to count on the GPU at the next turn.
    pub(super) populated: Vec<u64>,
    /// The engine learnt a fault this turn (the policy restarts its pump).
    pub(super) faulted: bool,
    /// An eviction of this lane completed since the policy last looked:
    /// room is free (the oracle looks at its window again).
    pub(super) evictions_ended: bool,
    /// The last block this GPU faulted on (a run of faults on one block is
    /// learnt once).
    pub(super) last_fault_block: u64,
    /// Counters of this GPU alone.
    pub(super) fault_blocks: u64,
    pub(super) max_resident_bytes: u64,
    pub(super) pre_evicted_blocks: u64,
    pub(super) prefetch_other_gpu: u64,
    /// When the launches to come were last ordered for victim choice
    /// (ahead/issue.rs `order_upcoming`).
    pub(super) upcoming_ordered: Option<Instant>,
    /// The generation of the next uses the blocks were last ordered by
    /// (the next-use order, ahead/queue.rs `NextUses`).
    pub(super) next_use_ordered: u64,
    /// A large window's blocks prefetched since its launches started
    /// (ahead/issue.rs `Once`).
    pub(super) large_sent: Once,
    /// The engine's thrash guard was on at the end of the last turn (its
    /// changes are logged).
    pub(super) guarded: bool,
    /// Where the GPU is in running launches larger than the budget
    /// (ahead/sweep.rs), and the faults since the last turn that say it
    /// (the last [`TURN_FAULTS`] at most).
    pub(super) sweep: Sweep,
    pub(super) turn_faults: Vec<u64>,
}

/// Faults kept for a turn's sweep at most: the last ones place the front.
pub(super) const TURN_FAULTS: usize = 256;

impl Lane {
    /// A lane for `gpu` under `budget`, its engine built from `cfg` for
    /// that GPU's own memory.
    pub(super) fn new(
        gpu: Gpu,
        budget: Option<u64>,
        cfg: &Config,
        exec_mode: bool,
    ) -> anyhow::Result<Lane> {
        let gpu_blocks = cfg.gpu_blocks_of(&gpu);
        let params = engine_params(cfg, budget, gpu_blocks, exec_mode)?;
        let mut engine = Engine::new(params, vec![0u64; params.storage_words()])
            .map_err(|e| anyhow::anyhow!("engine: {e}"))?;
        engine.set_regret_window(cfg.regret_window);
        Ok(Lane {
            gpu,
            budget,
            gpu_blocks,
            engine,
            residency: Residency::default(),
            uncertain: HashSet::new(),
            leaving: Leaving::default(),
            pump: Pump::new(),
            refetch: Vec::new(),
            populated: Vec::new(),
            faulted: false,
            evictions_ended: false,
            last_fault_block: u64::MAX,
            fault_blocks: 0,
            max_resident_bytes: 0,
            pre_evicted_blocks: 0,
            guarded: false,
            prefetch_other_gpu: 0,
            upcoming_ordered: None,
            next_use_ordered: 0,
            large_sent: Once::default(),
            sweep: Sweep::default(),
            turn_faults: Vec::new(),
        })
    }
}

impl Lane {
    /// A fault on `b` that is not a repeat of the last one (the caller
    /// checks `last_fault_block`): counted, kept for the turn's sweep (the
    /// last [`TURN_FAULTS`] at most), and learnt by the engine if `learns`.
    /// The GPU_FAULT path ([`Lane::fault`]) and the migration path
    /// (process.rs `migration_fault`) both come here.
    pub(super) fn new_fault(&mut self, b: u64, learns: bool) {
        self.last_fault_block = b;
        self.fault_blocks += 1;
        if self.turn_faults.len() >= TURN_FAULTS {
            self.turn_faults.drain(..TURN_FAULTS / 2);
        }
        self.turn_faults.push(b);
        if learns {
            self.engine.fault(b);
            self.faulted = true;
        }
    }

    /// A fault of this GPU on block `b`, as the one-engine loop handled
    /// it: once per run of faults on one block, the engine learns it
    /// (`learns`) and the ledger counts it resident. None for a repeat;
    /// else the engine's counters before and after, when `stats` asks
    /// (the block log's verdict).
    pub(super) fn fault(
        &mut self,
        b: u64,
        learns: bool,
        stats: bool,
    ) -> Option<Option<(Stats, Stats)>> {
        if b == self.last_fault_block {
            return None;
        }
        self.uncertain.remove(&b);
        let before = stats.then(|| self.engine.stats());
        self.new_fault(b, learns);
        let both = before.map(|x| (x, self.engine.stats()));
        fault_in(&mut self.residency, &mut self.engine, b);
        Some(both)
    }
}

impl Lane {
    /// One of this lane's evictions ended (`Lanes::evictions_ended`);
    /// returns the blocks the driver refused.
    pub(super) fn eviction_ended(&mut self, e: &Evicted) -> u64 {
        let mut refused = 0;
        for b in e.blocks() {
            match self.residency.left(b, e.left) {
                Left::Gone => self.evictions_ended = true,
                Left::Stays => {
                    self.engine.migrated_in(b);
                    refused += 1;
                }
                Left::Moot => {}
            }
        }
        refused
    }
}

/// The lanes of one process, by GPU.
#[derive(Default)]
pub(super) struct Lanes {
    lanes: Vec<Lane>,
    /// GPUs whose lane could not be made (said once each).
    failed: Vec<Gpu>,
}

impl Lanes {
    /// The lane of `gpu`, made on first use with the budget `cfg` gives
    /// it; None when its engine cannot be built (said once).
    pub(super) fn get_or_make(
        &mut self,
        gpu: Gpu,
        cfg: &Config,
        exec_mode: bool,
    ) -> Option<&mut Lane> {
        if let Some(i) = self.lanes.iter().position(|l| l.gpu == gpu) {
            return Some(&mut self.lanes[i]);
        }
        if self.failed.contains(&gpu) {
            return None;
        }
        let budget = cfg.budget_of(&gpu);
        match Lane::new(gpu, budget, cfg, exec_mode) {
            Ok(l) => {
                tracing::info!(
                    index = gpu.index,
                    gpu = %gpu,
                    budget = budget.map_or("none".into(), |b| format!("{} MiB", b >> 20)),
                    gpu_memory = format!("{} MiB", u64::from(l.gpu_blocks) * 2),
                    "a GPU this process computes on: its own engine, ledger and budget"
                );
                self.lanes.push(l);
                self.lanes.last_mut()
            }
            Err(e) => {
                tracing::error!(index = gpu.index, gpu = %gpu, "no engine for this GPU, its faults are not learnt: {e:#}");
                self.failed.push(gpu);
                None
            }
        }
    }

    /// Adds a lane made by the caller.
    pub(super) fn push(&mut self, l: Lane) {
        self.lanes.push(l);
    }

    /// The lane of the GPU at processor index `index`, if it has one.
    pub(super) fn at(&mut self, index: u16) -> Option<&mut Lane> {
        self.lanes.iter_mut().find(|l| l.gpu.index == index)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Lane> {
        self.lanes.iter_mut()
    }

    pub(super) fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Block `b` is now resident on the GPU at `index`: it left every
    /// other lane's ledger (and engine).
    pub(super) fn moved_to(&mut self, index: u16, b: u64) {
        for l in self.lanes.iter_mut().filter(|l| l.gpu.index != index) {
            if l.residency.get(b) > 0 {
                l.residency.sub(b, prescient_core::BLOCK_BYTES);
                l.engine.evicted(b);
            }
        }
    }

    /// Applies the evictions that ended to the ledgers of the lanes that
    /// chose them: blocks that left stop counting; blocks the driver
    /// refused stay, and are the engine's again (victims again). Returns
    /// the blocks refused.
    pub(super) fn evictions_ended(&mut self, done: &[Evicted]) -> u64 {
        let mut refused = 0;
        for e in done {
            // A lane that went with its GPU has nothing to count.
            if let Some(l) = self.lanes.iter_mut().find(|l| l.gpu.uuid == e.from()) {
                refused += l.eviction_ended(e);
            }
        }
        refused
    }

    /// Drops the lanes whose GPU is no longer at its index in the table
    /// (`still`): their engine, ledger and budget go, with one line each.
    pub(super) fn retain_gpus(&mut self, still: impl Fn(&Gpu) -> bool) {
        self.lanes.retain(|l| {
            let keep = still(&l.gpu);
            if !keep {
                tracing::warn!(
                    index = l.gpu.index,
                    gpu = %l.gpu,
                    resident_blocks = l.residency.blocks(),
                    "GPU left the process's processor table: its engine, ledger and budget are dropped, nothing is prefetched to it"
                );
            }
            keep
        });
    }

    /// Every lane's engine counters, summed (the process's totals).
    pub(super) fn stats(&self) -> Stats {
        let mut t = Stats::default();
        for l in &self.lanes {
            add_stats(&mut t, &l.engine.stats());
        }
        t
    }

    /// What the snapshot shows of the engines and ledgers: the process's
    /// sums and one entry per GPU (`c`: the workers' bytes by GPU;
    /// `indices`: nvidia-smi's index of each UUID).
    pub(super) fn view(&self, c: &Counters, indices: &[(String, u32)]) -> EngineView {
        let ls = &self.lanes;
        EngineView {
            stats: self.stats(),
            free_target: ls.iter().map(|l| l.engine.free_target()).sum(),
            guarded_lanes: ls.iter().filter(|l| l.engine.thrash_guarded()).count() as u32,
            window_blocks: ls.iter().map(|l| l.engine.window_depth() as u64).sum(),
            engine_resident_blocks: ls.iter().map(|l| l.engine.resident_blocks()).sum(),
            resident_bytes: ls.iter().map(|l| l.residency.total()).sum(),
            resident_blocks: ls.iter().map(|l| l.residency.blocks()).sum(),
            gpus: ls.iter().map(|l| lane_of(l, c, indices)).collect(),
        }
    }
}

/// Adds `s` to `t`, field by field.
fn add_stats(t: &mut Stats, s: &Stats) {
    t.faults += s.faults;
    t.kernel_starts += s.kernel_starts;
    t.windows += s.windows;
    t.prefetches += s.prefetches;
    t.predictions += s.predictions;
    t.mispredictions += s.mispredictions;
    t.prediction_failures += s.prediction_failures;
    t.window_full += s.window_full;
    t.table_replacements += s.table_replacements;
    t.entry_replacements += s.entry_replacements;
    t.exec_evictions += s.exec_evictions;
    t.victims_discard += s.victims_discard;
    t.victims_evict += s.victims_evict;
    t.victim_shortfall += s.victim_shortfall;
    t.ledger_overflow += s.ledger_overflow;
    t.demand_evictions += s.demand_evictions;
    t.refaults += s.refaults;
    t.history_hits += s.history_hits;
    t.history_misses += s.history_misses;
    t.history_jumps += s.history_jumps;
    t.regrets += s.regrets;
    t.regret_offers += s.regret_offers;
    t.thrash_guards += s.thrash_guards;
}

/// Applies one dead or alive mark to the engines (prescient mode only):
/// a block is resident for the mark when some GPU's engine has it. Dead
/// blocks on no GPU (and not discarded already) are put in `host_dead`:
/// the caller may discard them where they are, before it applies the next
/// mark. Discarded blocks marked alive go to the `refetch` list of the lane
/// of the GPU that last faulted on them (the only lane when there is one):
/// the caller makes room for them there, counts them and migrates them
/// back; a block with no such GPU stays where it is (its fault brings it).
/// An alive mark that brings nothing back (`Mark::discarded`: a
/// revocation keeps them recorded, a `no_populate` mark forgets them)
/// leaves discarded blocks discarded.
pub(super) fn apply_mark(
    lanes: &mut Lanes,
    owner: impl Fn(u64) -> Option<u16>,
    discarded: &mut HashSet<u64>,
    mode: PolicyMode,
    m: &Mark,
    host_dead: &mut Vec<u64>,
) -> Applied {
    let mut a = Applied {
        blocks: m.blocks.iter().map(|r| r.end - r.start).sum(),
        ignored: !mode.learns(),
        ..Default::default()
    };
    if a.ignored {
        return a;
    }
    let single = (lanes.len() == 1)
        .then(|| lanes.iter().next().map(|l| l.gpu.index))
        .flatten();
    for b in m.blocks.iter().flat_map(|r| r.clone()) {
        if m.dead {
            let mut resident = false;
            for l in lanes.iter_mut() {
                resident |= l.engine.mark_dead(b);
            }
            if resident {
                a.resident += 1;
            } else if !discarded.contains(&b) {
                host_dead.push(b);
            }
            continue;
        }
        let mut resident = false;
        for l in lanes.iter_mut() {
            resident |= l.engine.mark_alive(b);
        }
        a.resident += u64::from(resident);
        match m.discarded {
            Discarded::BringBack => {}
            // Nobody is about to use it: a discarded block stays so,
            // recorded for the process's alive mark at its next use.
            Discarded::Keep => continue,
            // Going back to the driver: forgotten (a later dead mark of
            // the address is then discarded where it is, as any other).
            Discarded::Forget => {
                discarded.remove(&b);
                continue;
            }
        }
        // Brought back before the reply: counted on the GPU, not migrated
        // again (a block the gate still had as discarded after the backend
        // stopped doing so is counted too: it is on the GPU now).
        let populated = m.populated.binary_search(&b).is_ok();
        let was_discarded = discarded.remove(&b);
        a.refetched += u64::from(was_discarded);
        if was_discarded || populated {
            if let Some(l) = owner(b).or(single).and_then(|i| lanes.at(i)) {
                if populated {
                    l.populated.push(b);
                } else {
                    l.refetch.push(b);
                }
            }
        }
    }
    a
}

/// One lane's entry (the pid is the service's to fill).
fn lane_of(l: &Lane, c: &Counters, indices: &[(String, u32)]) -> GpuLane {
    let uuid = l.gpu.to_string();
    GpuLane {
        pid: 0,
        index: (indices.iter())
            .find(|(u, _)| u.eq_ignore_ascii_case(&uuid))
            .map(|(_, i)| *i),
        budget_bytes: l.budget,
        faults: l.fault_blocks,
        prefetched_bytes: gpu_bytes(&c.prefetch_bytes_by_gpu, &l.gpu.uuid),
        pre_evicted_bytes: gpu_bytes(&c.evict_bytes_by_gpu, &l.gpu.uuid),
        resident_bytes: l.residency.total(),
        max_resident_bytes: l.max_resident_bytes,
        prefetch_other_gpu: l.prefetch_other_gpu,
        uuid,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::userspace::residency::tests::{engine, GPU};
    use crate::userspace::route::tests::{index, table, uuid};
    use prescient_core::BLOCK_BYTES;
    use prescient_units::parse_budget;

    /// One lane on GPU index `GPU` over residency.rs's test engine.
    pub(crate) fn one_lane() -> Lanes {
        let gpu = Gpu {
            index: GPU,
            uuid: [1; 16],
        };
        let mut l = Lane::new(gpu, None, &Config::default(), false).unwrap();
        l.engine = engine();
        Lanes {
            lanes: vec![l],
            failed: Vec::new(),
        }
    }

    /// A config under `budget`, NVML naming GPU parent `p` index `p`.
    pub(crate) fn config(budget: &str, parents: &[u16]) -> Config {
        let t = table(parents);
        Config {
            budget: parse_budget(budget).unwrap(),
            gpu_indices: (t.gpus().iter())
                .zip(parents)
                .map(|(g, p)| (g.to_string(), u32::from(*p)))
                .collect(),
            gpu_blocks: 4096,
            ..Config::default()
        }
    }

    #[test]
    fn each_gpu_gets_its_own_budget_by_uuid_index_or_default() {
        let t = table(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let g = |p: u16| t.gpu(index(p)).unwrap();
        let u3 = g(3).to_string();
        let cfg = config(&format!("6M,{u3}=2M,1=4M"), &[0, 1, 2, 3, 4, 5, 6, 7]);
        let mut lanes = Lanes::default();
        for p in 0..8 {
            lanes.get_or_make(g(p), &cfg, false).unwrap();
        }
        let budgets: Vec<Option<u64>> = lanes.iter().map(|l| l.budget).collect();
        let mb = |n: u64| Some(n << 20);
        assert_eq!(
            budgets,
            [mb(6), mb(4), mb(6), mb(2), mb(6), mb(6), mb(6), mb(6)]
        );
        assert_eq!(lanes.len(), 8);
        // A second fault from GPU 3 finds its lane, not a new one.
        lanes.get_or_make(g(3), &cfg, false).unwrap();
        assert_eq!(lanes.len(), 8);
        // Without NVML the index cannot name a GPU: GPU 1 gets the default.
        let bare = Config {
            gpu_indices: Vec::new(),
            ..config("6M,1=4M", &[0, 1])
        };
        assert_eq!(bare.budget_of(&g(1)), Some(6 << 20));
        assert_eq!(config("1=4M", &[0, 1]).budget_of(&g(0)), None);
    }

    /// A node of mixed GPUs: each lane's engine is sized from its own
    /// GPU's memory (NVML's, by UUID), never from the table's first GPU;
    /// a GPU NVML does not name takes `gpu_blocks`.
    #[test]
    fn each_gpu_is_sized_from_its_own_memory() {
        let t = table(&[0, 1, 2, 3]);
        let g = |p: u16| t.gpu(index(p)).unwrap();
        let gib = |n: u64| n << 30;
        let cfg = Config {
            gpu_memory: vec![
                (g(0).to_string(), gib(80)),
                (g(1).to_string().to_lowercase(), gib(40)),
                (g(2).to_string(), gib(141) + (1 << 20)),
            ],
            budget: prescient_units::GpuBudget::default(),
            ..config("16M", &[0, 1, 2, 3])
        };
        let mut lanes = Lanes::default();
        // GPU 2 faults first: the table's first GPU (0) sizes nothing of it.
        for p in [2, 0, 1, 3] {
            lanes.get_or_make(g(p), &cfg, false).unwrap();
        }
        let blocks = |p: u16| lanes.iter().find(|l| l.gpu == g(p)).unwrap().gpu_blocks;
        assert_eq!(
            [blocks(0), blocks(1), blocks(2), blocks(3)],
            [40960, 20480, 72192, 4096]
        );
        // The engine is the one its own size gives: the window without a
        // budget is 1/8 of that GPU.
        for p in 0..4 {
            let l = lanes.at(index(p)).unwrap();
            let want = engine_params(&cfg, None, l.gpu_blocks, false).unwrap();
            assert_eq!(l.engine.window_depth(), want.history_window(), "GPU {p}");
        }
        let w = |p: u16| {
            lanes
                .iter()
                .find(|l| l.gpu == g(p))
                .unwrap()
                .engine
                .window_depth()
        };
        assert!(w(2) > w(0) && w(0) > w(1), "{} {} {}", w(0), w(1), w(2));
    }

    #[test]
    fn a_block_resident_on_one_gpu_leaves_the_others_ledger() {
        let t = table(&[0, 1]);
        let (g0, g1) = (t.gpu(index(0)).unwrap(), t.gpu(index(1)).unwrap());
        let cfg = config("16M", &[0, 1]);
        let mut lanes = Lanes::default();
        for b in 0..4 {
            lanes
                .get_or_make(g0, &cfg, false)
                .unwrap()
                .fault(b, true, false);
        }
        // GPU 1 faults on block 2: the driver moved it there.
        lanes.moved_to(g1.index, 2);
        lanes
            .get_or_make(g1, &cfg, false)
            .unwrap()
            .fault(2, true, false);
        let l0 = lanes.at(g0.index).unwrap();
        assert_eq!((l0.residency.blocks(), l0.residency.get(2)), (3, 0));
        assert_eq!(l0.engine.resident_blocks(), 3);
        let l1 = lanes.at(g1.index).unwrap();
        assert_eq!(
            (l1.residency.blocks(), l1.residency.get(2)),
            (1, BLOCK_BYTES)
        );
        assert_eq!(l1.fault_blocks, 1);
        // A repeat of the same fault is learnt once.
        assert!(l1.fault(2, true, false).is_none());
    }

    #[test]
    fn a_gpu_that_leaves_the_table_loses_its_lane_and_no_other() {
        let t = table(&[0, 1]);
        let cfg = config("16M", &[0, 1]);
        let mut lanes = Lanes::default();
        for g in t.gpus() {
            lanes
                .get_or_make(*g, &cfg, false)
                .unwrap()
                .fault(7, true, false);
        }
        let now = table(&[0]);
        lanes.retain_gpus(|g| now.gpu(g.index) == Some(*g));
        let left: Vec<[u8; 16]> = lanes.iter().map(|l| l.gpu.uuid).collect();
        assert_eq!(left, [uuid(0)]);
        // A GPU reset that came back under another UUID at the same index
        // is another GPU: the old lane goes.
        let mut raw = vec![[0u8; 16]; 32 * 8 + 1];
        raw[usize::from(index(0))] = [0x77; 16];
        let reset = prescient_uvm::ProcessorTable::from_raw(&raw);
        lanes.retain_gpus(|g| reset.gpu(g.index) == Some(*g));
        assert_eq!(lanes.len(), 0);
    }

    #[test]
    fn an_engine_that_cannot_be_built_is_said_once_and_gives_no_lane() {
        let t = table(&[0]);
        let g = t.gpu(index(0)).unwrap();
        let cfg = Config {
            window_blocks: Some(0),
            ..config("16M", &[0])
        };
        let mut lanes = Lanes::default();
        assert!(lanes.get_or_make(g, &cfg, false).is_none());
        assert!(lanes.get_or_make(g, &cfg, false).is_none());
        assert_eq!((lanes.len(), lanes.failed.len()), (0, 1));
    }

    /// `CUDA_VISIBLE_DEVICES=5,2` on an 8-GPU node: the VA space registers
    /// GPUs 2 and 5 only, at their node's id values, in node order (the
    /// job's device 0 is GPU 5). Faults from GPU 5 make GPU 5's lane, with
    /// the budget of nvidia-smi index 5, never of the job's ordinal 0 or
    /// of the table's first GPU; an index of a hidden GPU gets no lane.
    #[test]
    fn hidden_and_reordered_gpus_keep_their_node_identity() {
        use crate::userspace::route::{Learnt, Route};
        let mut r = Route::new(table(&[2, 5]));
        let cfg = config("4M,0=2M,5=6M", &[0, 1, 2, 3, 4, 5, 6, 7]);
        let mut lanes = Lanes::default();
        let hidden = || -> anyhow::Result<prescient_uvm::ProcessorTable> { Ok(table(&[2, 5])) };
        let Learnt::Gpu(g) = r.fault(index(5), 9, hidden) else {
            panic!("GPU 5 is in the table")
        };
        let l = lanes.get_or_make(g, &cfg, false).unwrap();
        assert_eq!((l.gpu.uuid, l.budget), (uuid(5), Some(6 << 20)));
        assert_ne!(Some(l.gpu), r.table().first(), "not the table's first GPU");
        // GPU 0 is hidden: a fault naming its index learns nothing.
        assert_eq!(r.fault(index(0), 9, hidden), Learnt::Unknown);
        assert_eq!(lanes.len(), 1);
        // GPU 2 gets the each-GPU size: "0=" is nvidia-smi's GPU 0.
        let g2 = r.table().gpu(index(2)).unwrap();
        assert_eq!(
            lanes.get_or_make(g2, &cfg, false).unwrap().budget,
            Some(4 << 20)
        );
    }
}
