//! The thrash guard from the engine's events, in the two shapes the H100
//! showed (BENCHMARKS-gpu.md runs 96, 99 and 103):
//! - umbench random under a budget of about its footprint: two thirds of
//!   the victims faulted back, most within a few hundred victims;
//! - umbench stream under 96% of its footprint: every victim needed again
//!   a little later, but brought back by the prefetches (7% faulted back);
//!   the guard counting those returns too made it 3x slower (run 103).
//!
//! The engine runs with prescientd's parameters for a 4 GiB budget
//! (`Params::for_budget`, its 6% reserve), and the pump's room rule is
//! checked on a host that holds exactly the budget.

use prescient_core::{Admit, Engine, Host, Limit, Mode, Params, Prefetch, Pump, Victim, Why};
use std::collections::{BTreeSet, VecDeque};

/// Blocks of the budget: umbench random's 4 GiB.
const CAPACITY: u64 = 2048;
/// prescientd's reserve under a budget: 6% of it.
const RESERVE: u32 = (CAPACITY * 6 / 100) as u32;

/// The engine prescientd runs under a budget of `CAPACITY` on an 80 GB GPU,
/// holding the whole budget.
fn full_engine() -> Engine<Vec<u64>> {
    let p = Params {
        free_min: RESERVE,
        mode: Mode::ExecId,
        ..Params::for_budget(CAPACITY as u32, 40_960)
    };
    let mut e = Engine::new(p, vec![0; p.storage_words()]).unwrap();
    for b in 0..CAPACITY {
        e.migrated_in(b);
    }
    e
}

/// What the GPU holds: the engine's blocks, kept alike by [`churn`].
fn all_blocks() -> BTreeSet<u64> {
    (0..CAPACITY).collect()
}

/// `n` victims, one at a time; each is evicted, and `back` says for the
/// i-th whether it comes back after `after` more victims and how: by a
/// fault (the GPU asked first) or by a prefetch (no fault). A block that
/// comes back replaces the block evicted at that moment, so the ledger
/// keeps the budget full; `gpu` follows the same moves.
fn churn(
    e: &mut Engine<Vec<u64>>,
    gpu: &mut BTreeSet<u64>,
    n: usize,
    after: usize,
    back: impl Fn(usize) -> Option<bool>,
) {
    let mut out = [Victim::default(); 1];
    let mut waiting: VecDeque<(usize, u64, bool)> = VecDeque::new();
    let mut next_new = 1 << 20;
    for i in 0..n {
        assert_eq!(e.victims(&mut out), 1, "a victim at {i}");
        let v = out[0].block;
        e.evicted(v);
        gpu.remove(&v);
        if let Some(by_fault) = back(i) {
            waiting.push_back((i + after, v, by_fault));
        }
        let b = match waiting.front() {
            Some(&(due, b, by_fault)) if due <= i => {
                waiting.pop_front();
                if by_fault {
                    e.fault(b);
                }
                b
            }
            _ => {
                next_new += 1;
                next_new
            }
        };
        e.migrated_in(b);
        gpu.insert(b);
    }
}

/// Random access a block past the budget (runs 96/99): two in three
/// victims faulted back, after fewer victims than the reserve holds.
fn random_past_the_budget(e: &mut Engine<Vec<u64>>, gpu: &mut BTreeSet<u64>) {
    churn(e, gpu, 20_000, RESERVE as usize / 2, |i| {
        (i % 3 != 0).then_some(true)
    });
}

#[test]
fn victims_faulted_straight_back_turn_it_on() {
    let mut e = full_engine();
    random_past_the_budget(&mut e, &mut all_blocks());
    assert!(e.stats().thrash_guards >= 1, "{:?}", e.stats());
    assert!(e.thrash_guarded());
    assert_eq!(e.free_target(), 0, "no reserve while guarded");
}

#[test]
fn victims_the_prefetches_bring_back_leave_it_off() {
    // A stream a little larger than the budget: every victim comes back as
    // soon, but by our prefetch, before the GPU asks.
    let mut e = full_engine();
    churn(
        &mut e,
        &mut all_blocks(),
        20_000,
        RESERVE as usize / 2,
        |_| Some(false),
    );
    assert_eq!(e.stats().thrash_guards, 0, "{:?}", e.stats());
    assert_eq!(e.free_target(), RESERVE);
}

#[test]
fn victims_faulted_back_much_later_leave_it_off() {
    // A stream twice the budget: every victim faulted back, a budget's
    // worth of victims later.
    let mut e = full_engine();
    churn(&mut e, &mut all_blocks(), 20_000, CAPACITY as usize, |_| {
        Some(true)
    });
    assert_eq!(e.stats().thrash_guards, 0, "{:?}", e.stats());
}

#[test]
fn it_turns_off_once_victims_stop_coming_back() {
    let mut e = full_engine();
    random_past_the_budget(&mut e, &mut all_blocks());
    assert!(e.thrash_guarded());
    churn(&mut e, &mut all_blocks(), 20_000, 0, |_| None);
    assert!(!e.thrash_guarded(), "{:?}", e.stats());
    assert_eq!(e.free_target(), RESERVE);
}

/// A GPU holding exactly what it is told.
#[derive(Default)]
struct Gpu {
    resident: BTreeSet<u64>,
    evicted: usize,
    prefetched: usize,
}

impl Host for Gpu {
    fn resident_blocks(&self, _engine_count: u32) -> u64 {
        self.resident.len() as u64
    }
    fn is_resident(&self, block: u64, _engine_says: bool) -> bool {
        self.resident.contains(&block)
    }
    fn evict(&mut self, v: Victim, _why: Why) -> bool {
        self.evicted += 1;
        self.resident.remove(&v.block)
    }
    fn prefetch(&mut self, p: Prefetch) -> Admit {
        self.prefetched += 1;
        self.resident.insert(p.block);
        Admit::Issued
    }
}

#[test]
fn while_guarded_the_pump_makes_no_room_for_a_prefetch() {
    let mut e = full_engine();
    let mut gpu = Gpu {
        resident: all_blocks(),
        ..Gpu::default()
    };
    random_past_the_budget(&mut e, &mut gpu.resident);
    assert!(e.thrash_guarded());
    assert_eq!(gpu.resident.len() as u64, CAPACITY);
    // A new kernel whose blocks are all elsewhere: the engine predicts
    // them once they are learnt.
    for round in 0..2 {
        e.kernel_start(99);
        for b in 5_000_000..5_000_040u64 {
            e.fault(b + round);
        }
    }
    e.kernel_start(99);
    let limit = Limit {
        capacity_blocks: CAPACITY,
        watermark_pct: 100,
    };
    let done = Pump::new().round(&mut e, limit, 32, &mut gpu);
    assert_eq!((gpu.evicted, gpu.prefetched), (0, 0), "{done:?}");
}
