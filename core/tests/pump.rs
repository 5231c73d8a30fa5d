//! The shared host loop (`Pump`) against a host that models a GPU of fixed
//! size: blocks it holds, blocks the running kernel pins, migrations it
//! refuses. The host keeps its own set of resident blocks and never reads
//! the engine's ledger, so the tests check the pump against what the GPU
//! holds, as prescientd and the simulator do.

use prescient_core::{Admit, Engine, Host, Limit, Mode, Prefetch, Pump, Victim, Why};
use proptest::prelude::*;

mod common;
use common::{drain, small};
use std::collections::BTreeSet;

/// A GPU as the host sees it.
#[derive(Default)]
struct Gpu {
    resident: BTreeSet<u64>,
    /// Blocks in use by the running kernel: they cannot leave.
    pinned: BTreeSet<u64>,
    /// Blocks the back-off declines.
    declined: BTreeSet<u64>,
    /// Blocks whose migration the driver refuses.
    failing: BTreeSet<u64>,
    discarded: Vec<u64>,
    evicted: Vec<u64>,
    prefetched: Vec<u64>,
    /// Prefetches the link takes this round (None: unlimited).
    link_slots: Option<usize>,
    /// Evictions complete only when the test says so (`complete`), as
    /// prescientd's do: its workers' UVM_MIGRATE to the CPU returns once
    /// the copy is done (uvm_migrate.c maps the CPU pages after
    /// `uvm_tracker_wait` on the block), after the round that queued it.
    slow_evictions: bool,
    /// Blocks whose eviction started and has not completed, oldest first:
    /// still in `resident`.
    leaving: Vec<u64>,
    /// With slow evictions, the capacity a prefetch must fit under, and
    /// the prefetches that did not (resident, leaving ones included, at the
    /// capacity already when it was issued).
    capacity: u64,
    over_capacity: usize,
}

impl Gpu {
    /// The oldest `n` evictions complete; with `fail`, the driver refused
    /// them and the blocks stay, so the engine counts them again.
    fn complete(&mut self, e: &mut Engine<Vec<u64>>, n: usize, fail: bool) {
        let n = n.min(self.leaving.len());
        for b in self.leaving.drain(..n) {
            if fail {
                e.migrated_in(b);
            } else {
                self.resident.remove(&b);
            }
        }
    }
}

impl Host for Gpu {
    fn resident_blocks(&self, _engine_count: u32) -> u64 {
        self.resident.len() as u64
    }
    fn is_resident(&self, block: u64, _engine_says: bool) -> bool {
        self.resident.contains(&block)
    }
    fn leaving_blocks(&self) -> u64 {
        self.leaving.len() as u64
    }
    fn evict(&mut self, v: Victim, _why: Why) -> bool {
        if self.pinned.contains(&v.block) || self.leaving.contains(&v.block) {
            return false;
        }
        if self.slow_evictions && self.resident.contains(&v.block) {
            self.leaving.push(v.block);
        } else if !self.resident.remove(&v.block) {
            return false;
        }
        if v.discard {
            self.discarded.push(v.block);
        } else {
            self.evicted.push(v.block);
        }
        true
    }
    fn prefetch(&mut self, p: Prefetch) -> Admit {
        if self.declined.contains(&p.block) {
            return Admit::Declined;
        }
        if self.failing.contains(&p.block) {
            return Admit::Failed;
        }
        if let Some(s) = self.link_slots.as_mut() {
            *s -= 1;
        }
        if self.slow_evictions && self.resident.len() as u64 >= self.capacity {
            self.over_capacity += 1;
        }
        self.resident.insert(p.block);
        self.prefetched.push(p.block);
        Admit::Issued
    }
    fn has_capacity(&self) -> bool {
        self.link_slots != Some(0)
    }
}

fn engine() -> Engine<Vec<u64>> {
    let p = small(Mode::ExecId);
    Engine::new(p, vec![0; p.storage_words()]).unwrap()
}

/// Demand-faults `block` in, as the driver would: the engine sees the fault
/// and the arrival, the GPU holds it.
fn demand(e: &mut Engine<Vec<u64>>, gpu: &mut Gpu, block: u64) {
    e.fault(block);
    e.migrated_in(block);
    gpu.resident.insert(block);
}

/// Kernel k touches blocks 100k .. 100k + 5.
fn blocks_of(k: u32) -> std::ops::Range<u64> {
    100 * k as u64..100 * k as u64 + 5
}

/// Kernels 0..6, learned over two iterations (faults only: nothing is
/// resident), then `filler` unrelated blocks populated on the GPU. The next
/// `kernel_start(0)` predicts kernel 2's blocks (kernel 1's were chained
/// already at the end of the second iteration).
fn learned(e: &mut Engine<Vec<u64>>, gpu: &mut Gpu, filler: u64) {
    for _ in 0..2 {
        for k in 0..6 {
            e.kernel_start(k);
            for b in blocks_of(k) {
                e.fault(b);
                drain(e);
            }
        }
    }
    for b in 1000..1000 + filler {
        e.migrated_in(b);
        gpu.resident.insert(b);
    }
}

const fn limit(capacity: u64) -> Limit {
    Limit {
        capacity_blocks: capacity,
        watermark_pct: 100,
    }
}

#[test]
fn settle_discards_dead_blocks_before_evicting_live_ones() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    for b in 0..10 {
        demand(&mut e, &mut gpu, b);
    }
    assert!(e.mark_dead(7));
    let done = Pump::new().round(&mut e, limit(8), 0, &mut gpu);
    assert_eq!(gpu.resident.len(), 8);
    assert_eq!(gpu.discarded, vec![7]);
    assert_eq!(gpu.evicted.len(), 1);
    assert_eq!((done.discarded, done.evicted), (1, 1));
    assert_eq!(e.resident_blocks(), 8);
}

#[test]
fn prefetches_never_push_residency_over_the_limit() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    learned(&mut e, &mut gpu, 6);
    e.kernel_start(0);
    let done = Pump::new().round(&mut e, limit(6), usize::MAX, &mut gpu);
    assert_eq!(gpu.resident.len(), 6);
    assert_eq!(done.prefetched, 5);
    // Each prefetch took one filler block's place.
    assert_eq!(gpu.prefetched, blocks_of(2).collect::<Vec<_>>());
    assert_eq!(gpu.evicted.len(), 5);
    assert!(gpu.evicted.iter().all(|b| *b >= 1000));
}

#[test]
fn a_candidate_without_room_is_kept_for_the_next_round() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    learned(&mut e, &mut gpu, 6);
    e.kernel_start(0);
    // Every resident block is pinned: there is room for one prefetch under
    // the limit of 7, then no victim can leave.
    gpu.pinned = gpu.resident.clone();
    let mut pump = Pump::new();
    let done = pump.round(&mut e, limit(7), usize::MAX, &mut gpu);
    assert!(done.no_room);
    assert_eq!(gpu.prefetched, vec![200]);
    // No room: another round now would not move anything.
    assert!(!done.more);
    assert_eq!(pump.queued(), 4);
    // The kernel ends: its blocks may leave, and the kept candidates go, in
    // order.
    gpu.pinned.clear();
    let done = pump.round(&mut e, limit(7), 2, &mut gpu);
    assert_eq!(done.prefetched, 2);
    assert_eq!(gpu.prefetched, vec![200, 201, 202]);
    assert_eq!(pump.queued(), 2);
}

#[test]
fn a_round_that_cannot_settle_prefetches_nothing() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    learned(&mut e, &mut gpu, 6);
    e.kernel_start(0);
    gpu.pinned = gpu.resident.clone();
    let mut pump = Pump::new();
    let done = pump.round(&mut e, limit(5), usize::MAX, &mut gpu);
    assert!(done.no_room);
    assert_eq!(done.prefetched, 0);
    assert_eq!(pump.queued(), 0);
    assert_eq!(done.refused_victims, 1);
    assert!(!done.more);
}

#[test]
fn restart_drops_the_queued_candidates() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    learned(&mut e, &mut gpu, 0);
    e.kernel_start(0);
    let mut pump = Pump::new();
    gpu.link_slots = Some(1);
    let done = pump.round(&mut e, limit(10_000), usize::MAX, &mut gpu);
    assert_eq!(done.prefetched, 1);
    assert_eq!(pump.queued(), 4);
    pump.restart();
    assert_eq!(pump.queued(), 0);
}

#[test]
fn declined_and_failed_prefetches_do_not_count_as_resident() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    learned(&mut e, &mut gpu, 0);
    gpu.declined.insert(200);
    gpu.failing.insert(201);
    e.kernel_start(0);
    let done = Pump::new().round(&mut e, limit(10_000), usize::MAX, &mut gpu);
    assert_eq!((done.declined, done.failed, done.prefetched), (1, 1, 3));
    assert!(!gpu.resident.contains(&200) && !gpu.resident.contains(&201));
    assert!(!e.is_resident(200) && !e.is_resident(201));
    assert!(gpu.resident.contains(&202) && e.is_resident(202));
}

#[test]
fn the_watermark_keeps_part_of_the_capacity_free() {
    let mut e = engine();
    let mut gpu = Gpu::default();
    for b in 0..100 {
        demand(&mut e, &mut gpu, b);
    }
    let wm = Limit {
        capacity_blocks: 100,
        watermark_pct: 90,
    };
    Pump::new().round(&mut e, wm, 0, &mut gpu);
    assert_eq!(gpu.resident.len(), 90);
}

/// Evictions that complete after the round (prescientd's workers): the
/// victims' room is not free until they do, so the round queues them and
/// waits; the reserve between the limit and the capacity (here a 50%
/// watermark) is how many can be on their way while prefetches go in.
#[test]
fn prefetches_wait_for_the_evictions_that_make_their_room() {
    let mut e = engine();
    let mut gpu = Gpu {
        slow_evictions: true,
        capacity: 12,
        ..Gpu::default()
    };
    learned(&mut e, &mut gpu, 12);
    e.kernel_start(0);
    let half = Limit {
        capacity_blocks: 12,
        watermark_pct: 50,
    };
    let mut pump = Pump::new();
    let done = pump.round(&mut e, half, usize::MAX, &mut gpu);
    // Settling queued 6 victims, the first candidate 1 more; none has left.
    assert_eq!((done.evicted, done.prefetched), (7, 0));
    assert!(done.waiting && !done.no_room && !done.more);
    assert_eq!((gpu.resident.len(), gpu.leaving.len()), (12, 7));
    assert_eq!(pump.queued(), 5, "the candidate is kept");
    // Nothing completed: another round admits nothing and evicts nothing.
    let again = pump.round(&mut e, half, usize::MAX, &mut gpu);
    assert_eq!((again.evicted, again.prefetched), (0, 0));
    gpu.complete(&mut e, 7, false);
    let done = pump.round(&mut e, half, usize::MAX, &mut gpu);
    // All five go in while their victims (four) are still on their way:
    // 10 counted, under the capacity of 12.
    assert_eq!(gpu.prefetched, blocks_of(2).collect::<Vec<_>>());
    assert_eq!((done.evicted, done.waiting), (4, false));
    assert_eq!((gpu.resident.len(), gpu.leaving.len()), (10, 4));
    assert_eq!(gpu.over_capacity, 0);
}

/// An eviction the driver refused leaves its block resident: it counts
/// again, is a victim again, and its room never came.
#[test]
fn a_failed_eviction_gives_no_room_and_its_block_is_a_victim_again() {
    let mut e = engine();
    let mut gpu = Gpu {
        slow_evictions: true,
        capacity: 6,
        ..Gpu::default()
    };
    learned(&mut e, &mut gpu, 6);
    e.kernel_start(0);
    let mut pump = Pump::new();
    let done = pump.round(&mut e, limit(6), usize::MAX, &mut gpu);
    assert_eq!((done.evicted, done.prefetched), (1, 0));
    let victim = gpu.leaving[0];
    gpu.complete(&mut e, 1, true);
    assert!(e.is_resident(victim) && gpu.resident.contains(&victim));
    let done = pump.round(&mut e, limit(6), usize::MAX, &mut gpu);
    assert_eq!((done.evicted, done.prefetched), (1, 0));
    assert_eq!(gpu.resident.len(), 6);
    gpu.complete(&mut e, 1, false);
    let done = pump.round(&mut e, limit(6), usize::MAX, &mut gpu);
    assert_eq!(done.prefetched, 1);
    assert_eq!(gpu.over_capacity, 0);
}

#[derive(Clone, Debug)]
enum Event {
    Kernel(u32),
    Touch(u64),
    Dead(u64),
    Round { capacity: u64, max: usize },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (1u32..6).prop_map(Event::Kernel),
        (0u64..64).prop_map(Event::Touch),
        (0u64..64).prop_map(Event::Dead),
        (4u64..48, 0usize..20).prop_map(|(capacity, max)| Event::Round { capacity, max }),
    ]
}

proptest! {
    /// After every round that found room, the GPU holds at most the limit;
    /// the engine's ledger agrees with the GPU on every block the pump moved.
    #[test]
    fn rounds_keep_the_gpu_under_the_limit(events in proptest::collection::vec(event(), 1..300)) {
        let mut e = engine();
        let mut gpu = Gpu::default();
        let mut pump = Pump::new();
        for ev in events {
            match ev {
                Event::Kernel(k) => e.kernel_start(k),
                Event::Touch(b) => {
                    if !gpu.resident.contains(&b) {
                        demand(&mut e, &mut gpu, b);
                        pump.restart();
                    }
                }
                Event::Dead(b) => {
                    e.mark_dead(b);
                }
                Event::Round { capacity, max } => {
                    let l = limit(capacity);
                    let done = pump.round(&mut e, l, max, &mut gpu);
                    if !done.no_room {
                        prop_assert!(gpu.resident.len() as u64 <= l.blocks(e.free_target()));
                    }
                    prop_assert!(done.prefetched as usize <= max);
                    // The engine's ledger and the GPU agree on every block.
                    for b in 0..64 {
                        prop_assert_eq!(e.is_resident(b), gpu.resident.contains(&b), "block {}", b);
                    }
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Slow {
    Kernel(u32),
    Touch(u64),
    Complete(usize),
    Fail(usize),
    Round { max: usize },
}

fn slow_event() -> impl Strategy<Value = Slow> {
    prop_oneof![
        (1u32..6).prop_map(Slow::Kernel),
        (0u64..64).prop_map(Slow::Touch),
        (0usize..6).prop_map(Slow::Complete),
        (0usize..3).prop_map(Slow::Fail),
        (0usize..20).prop_map(|max| Slow::Round { max }),
    ]
}

proptest! {
    /// With evictions that complete later (or fail), no prefetch is
    /// admitted while the resident blocks, those still leaving included,
    /// fill the capacity; only faults (the driver's) go past it. The engine
    /// holds exactly the resident blocks that are not leaving.
    #[test]
    fn admitted_and_leaving_blocks_never_exceed_the_capacity(
        events in proptest::collection::vec(slow_event(), 1..300),
        capacity in 4u64..24,
        watermark in 50u32..=100,
    ) {
        let mut e = engine();
        let mut gpu = Gpu { slow_evictions: true, capacity, ..Gpu::default() };
        let l = Limit { capacity_blocks: capacity, watermark_pct: watermark };
        let mut pump = Pump::new();
        for ev in events {
            match ev {
                Slow::Kernel(k) => e.kernel_start(k),
                Slow::Touch(b) => {
                    if !gpu.resident.contains(&b) {
                        demand(&mut e, &mut gpu, b);
                        pump.restart();
                    }
                }
                Slow::Complete(n) => gpu.complete(&mut e, n, false),
                Slow::Fail(n) => gpu.complete(&mut e, n, true),
                Slow::Round { max } => {
                    let done = pump.round(&mut e, l, max, &mut gpu);
                    prop_assert!(done.prefetched as usize <= max);
                    prop_assert!(!(done.waiting && done.no_room));
                }
            }
            prop_assert_eq!(gpu.over_capacity, 0);
            for b in 0..64 {
                let staying = gpu.resident.contains(&b) && !gpu.leaving.contains(&b);
                prop_assert_eq!(e.is_resident(b), staying, "block {}", b);
            }
        }
    }
}
