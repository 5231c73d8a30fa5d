//! Tries to break the marks protocol: the real [`Marks`] code against a
//! model of two CUDA streams, of PyTorch's caching allocator and of
//! prescientd's backend, interleaved at random.
//!
//! The model follows the real things, not protocol.rs:
//! - streams run their work in order; an event completes when the work
//!   queued before it has (cuda.h `cuEventRecord`);
//! - the allocator (c10/cuda/CUDACachingAllocator.cpp) reports ALLOC before
//!   it returns a block; a freed block is reused only on its own stream; a
//!   free of a block used on another stream (`record_stream`) records
//!   events on those streams and completes (FREE_COMPLETED) at a later
//!   malloc once they have completed (`process_events`); emptying the cache
//!   synchronizes the device (`synchronize_and_free_events`) and frees the
//!   segments, whose addresses a later segment may get again;
//! - prescientd (daemon/src/userspace/marks.rs, process.rs) takes one
//!   process's marks in order, answers a dead mark once queued and an alive
//!   mark once applied, may answer "busy" without queueing, and its
//!   backend thread discards blocks dead in its engine: here, every one of
//!   them, after every mark it applies (the most a backend could do).
//!
//! The check: no discard ever hits a block in use, i.e. a block of memory
//! handed out (its ALLOC returned) and not yet freed by the program, or
//! touched by a kernel still queued on a stream. Two broken variants (no
//! fence; an alive mark answered before it is applied) must be caught.

use super::protocol::{Fence, Kind, Link, Marks, Reply};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::ops::Range;
use std::rc::Rc;

const MB: u64 = 1 << 20;
/// The arena: 48 units of 1 MB (24 blocks of 2 MB), at this address.
const UNITS: usize = 48;
const BASE: u64 = 1 << 32;

fn addr(unit: usize) -> u64 {
    BASE + unit as u64 * MB
}

/// A 2 MB block number of a unit.
fn block(unit: usize) -> u64 {
    addr(unit) >> 21
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

enum Op {
    Kernel(Vec<Range<usize>>),
    Event(u64),
}

#[derive(Clone, Copy, Default)]
struct Knobs {
    /// The fence says "passed" at once (no fence at all).
    no_fence: bool,
    /// The daemon answers an alive mark before applying it.
    early_alive: bool,
}

struct World {
    rng: Rng,
    knobs: Knobs,
    streams: [VecDeque<Op>; 2],
    done: HashSet<u64>,
    next_event: u64,
    /// Units handed out and not freed by the program.
    live: [bool; UNITS],
    /// The daemon's queue (mark number, dead, blocks) and engine.
    queue: VecDeque<(u64, bool, Vec<u64>)>,
    applied: u64,
    queued: u64,
    engine_dead: BTreeSet<u64>,
    discards: u64,
    violations: Vec<String>,
}

impl World {
    fn gpu_step(&mut self) {
        let s = self.rng.below(2) as usize;
        match self.streams[s].pop_front() {
            Some(Op::Event(e)) => {
                self.done.insert(e);
            }
            Some(Op::Kernel(_)) | None => {}
        }
    }

    fn in_use(&self, b: u64) -> bool {
        let live = (0..UNITS).any(|u| self.live[u] && block(u) == b);
        let queued = self.streams.iter().flatten().any(|op| match op {
            Op::Kernel(rs) => rs.iter().flat_map(|r| r.clone()).any(|u| block(u) == b),
            Op::Event(_) => false,
        });
        live || queued
    }

    /// The backend applies one mark, then discards every dead block.
    fn daemon_step(&mut self) {
        if let Some((n, dead, blocks)) = self.queue.pop_front() {
            for b in blocks {
                if dead {
                    self.engine_dead.insert(b);
                } else {
                    self.engine_dead.remove(&b);
                }
            }
            self.applied = n;
        }
        let dead: Vec<u64> = self.engine_dead.iter().copied().collect();
        for b in dead {
            self.discards += 1;
            if self.in_use(b) {
                self.violations
                    .push(format!("block {b:#x} discarded while in use"));
            }
        }
    }

    /// Whatever else happens meanwhile (other threads, the GPU).
    fn meanwhile(&mut self) {
        for _ in 0..self.rng.below(4) {
            if self.rng.chance(50) {
                self.gpu_step();
            } else {
                self.daemon_step();
            }
        }
    }
}

type W = Rc<RefCell<World>>;

struct ModelLink(W);

impl Link for ModelLink {
    fn call(&mut self, kind: Kind, ranges: &[[u64; 2]]) -> Reply {
        // A release is an alive mark to the daemon (it only brings nothing
        // back, which no discard depends on).
        let dead = kind == Kind::Dead;
        let mut w = self.0.borrow_mut();
        w.meanwhile();
        if w.rng.chance(5) {
            return Reply::Busy;
        }
        let blocks = ranges
            .iter()
            .flat_map(|&[a, l]| (a >> 21)..((a + l) >> 21))
            .collect();
        w.queued += 1;
        let n = w.queued;
        w.queue.push_back((n, dead, blocks));
        if dead || w.knobs.early_alive {
            w.meanwhile();
            return Reply::Ok;
        }
        while w.applied < n {
            w.meanwhile();
            w.daemon_step();
        }
        Reply::Ok
    }

    fn pause(&mut self, _attempt: u32) {
        self.0.borrow_mut().meanwhile();
    }
}

struct ModelFence(W);

impl Fence for ModelFence {
    type Token = u64;
    fn record(&mut self, stream: u64) -> Option<u64> {
        let mut w = self.0.borrow_mut();
        w.next_event += 1;
        let e = w.next_event;
        w.streams[stream as usize].push_back(Op::Event(e));
        Some(e)
    }
    fn passed(&mut self, t: &u64) -> bool {
        let w = self.0.borrow();
        w.knobs.no_fence || w.done.contains(t)
    }
    fn release(&mut self, _t: u64) {}
}

struct Tensor {
    units: Range<usize>,
    /// Bytes requested (the allocator's ALLOC and FREE_COMPLETED size).
    len: u64,
    stream: usize,
    /// Other streams it was used on (`record_stream`).
    uses: BTreeSet<usize>,
}

/// The caching allocator's state, as far as the events go.
struct Allocator {
    /// The tensor holding each unit (allocated, free not completed).
    owner: [bool; UNITS],
    /// The stream a free unit may be reused on (None: a fresh segment).
    stream: [Option<usize>; UNITS],
    tensors: Vec<Tensor>,
    /// Frees waiting for their events on other streams.
    deferred: Vec<(Tensor, Vec<u64>)>,
}

type M = Marks<ModelLink, ModelFence>;

impl Allocator {
    fn new() -> Allocator {
        Allocator {
            owner: [false; UNITS],
            stream: [None; UNITS],
            tensors: Vec::new(),
            deferred: Vec::new(),
        }
    }

    /// FREE_COMPLETED: the units are free for reuse on the tensor's stream.
    fn free_completed(&mut self, m: &mut M, t: Tensor) {
        for u in t.units.clone() {
            self.owner[u] = false;
            self.stream[u] = Some(t.stream);
        }
        m.freed(addr(t.units.start), t.len, t.stream as u64);
    }

    /// `process_events`: deferred frees whose events have all completed.
    fn process_events(&mut self, w: &W, m: &mut M) {
        let ready: Vec<usize> = {
            let w = w.borrow();
            (0..self.deferred.len())
                .filter(|&i| self.deferred[i].1.iter().all(|e| w.done.contains(e)))
                .collect()
        };
        for i in ready.into_iter().rev() {
            let (t, _) = self.deferred.swap_remove(i);
            self.free_completed(m, t);
        }
    }

    /// `malloc`: first fit on the stream, ALLOC reported before returning.
    fn malloc(&mut self, w: &W, m: &mut M) {
        self.process_events(w, m);
        let (n, s, short) = {
            let mut w = w.borrow_mut();
            let n = 1 + w.rng.below(6) as usize;
            (n, w.rng.below(2) as usize, w.rng.below(MB / 2))
        };
        let fits = |u: usize| !self.owner[u] && self.stream[u].is_none_or(|x| x == s);
        let Some(start) = (0..=UNITS - n).find(|&st| (st..st + n).all(fits)) else {
            return;
        };
        for u in start..start + n {
            self.owner[u] = true;
            self.stream[u] = Some(s);
        }
        let len = n as u64 * MB - short;
        m.allocated(addr(start), len);
        // Returned: from here on the program may write it.
        w.borrow_mut().live[start..start + n].fill(true);
        self.tensors.push(Tensor {
            units: start..start + n,
            len,
            stream: s,
            uses: BTreeSet::new(),
        });
    }

    /// A kernel on a random stream over one or two tensors; a tensor used
    /// on a stream not its own gets `record_stream`, as PyTorch requires.
    fn launch(&mut self, w: &W) {
        let mut w = w.borrow_mut();
        if self.tensors.is_empty() {
            return;
        }
        let k = w.rng.below(2) as usize;
        let mut units = Vec::new();
        for _ in 0..1 + w.rng.below(2) {
            let i = w.rng.below(self.tensors.len() as u64) as usize;
            let t = &mut self.tensors[i];
            if t.stream != k {
                t.uses.insert(k);
            }
            units.push(t.units.clone());
        }
        w.streams[k].push_back(Op::Kernel(units));
    }

    /// The program drops a tensor: FREE_COMPLETED now, or after events on
    /// the other streams it was used on.
    fn free(&mut self, w: &W, m: &mut M) {
        let t = {
            let mut w = w.borrow_mut();
            if self.tensors.is_empty() {
                return;
            }
            let i = w.rng.below(self.tensors.len() as u64) as usize;
            let t = self.tensors.swap_remove(i);
            w.live[t.units.clone()].fill(false);
            t
        };
        if t.uses.is_empty() {
            return self.free_completed(m, t);
        }
        let mut w = w.borrow_mut();
        let events = t
            .uses
            .iter()
            .map(|&k| {
                w.next_event += 1;
                let e = w.next_event;
                w.streams[k].push_back(Op::Event(e));
                e
            })
            .collect();
        self.deferred.push((t, events));
    }

    /// `empty_cache`: synchronize, then give free segments back to the
    /// driver (the runtime's cuMemFree marks them alive first).
    fn empty_cache(&mut self, w: &W, m: &mut M) {
        {
            let mut w = w.borrow_mut();
            while w.streams.iter().any(|s| !s.is_empty()) {
                w.gpu_step();
            }
        }
        self.process_events(w, m);
        let mut u = 0;
        while u < UNITS {
            if self.owner[u] || self.stream[u].is_none() {
                u += 1;
                continue;
            }
            let start = u;
            while u < UNITS && !self.owner[u] && self.stream[u].is_some() {
                self.stream[u] = None;
                u += 1;
            }
            m.released(addr(start), (u - start) as u64 * MB);
        }
    }
}

struct Outcome {
    violations: Vec<String>,
    discards: u64,
    counters: super::protocol::Counters,
}

fn run(seed: u64, knobs: Knobs, steps: usize) -> Outcome {
    let w: W = Rc::new(RefCell::new(World {
        rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        knobs,
        streams: [VecDeque::new(), VecDeque::new()],
        done: HashSet::new(),
        next_event: 0,
        live: [false; UNITS],
        queue: VecDeque::new(),
        applied: 0,
        queued: 0,
        engine_dead: BTreeSet::new(),
        discards: 0,
        violations: Vec::new(),
    }));
    let mut m = Marks::new(ModelLink(w.clone()), ModelFence(w.clone()));
    let mut a = Allocator::new();
    for _ in 0..steps {
        let r = w.borrow_mut().rng.below(100);
        match r {
            0..=24 => a.malloc(&w, &mut m),
            25..=49 => a.launch(&w),
            50..=66 => a.free(&w, &mut m),
            67..=78 => {
                m.flush();
            }
            79..=98 => w.borrow_mut().meanwhile(),
            _ => a.empty_cache(&w, &mut m),
        }
    }
    let counters = m.counters;
    drop(m);
    let w = Rc::try_unwrap(w)
        .ok()
        .expect("the marks are dropped")
        .into_inner();
    Outcome {
        violations: w.violations,
        discards: w.discards,
        counters,
    }
}

const SEEDS: u64 = 400;
const STEPS: usize = 300;

#[test]
fn no_discard_ever_hits_memory_in_use() {
    let (mut discards, mut dead, mut alive, mut cancelled) = (0, 0, 0, 0);
    for seed in 1..=SEEDS {
        let o = run(seed, Knobs::default(), STEPS);
        assert!(o.violations.is_empty(), "seed {seed}: {:?}", o.violations);
        discards += o.discards;
        dead += o.counters.dead_blocks;
        alive += o.counters.alive_blocks;
        cancelled += o.counters.cancelled_blocks;
    }
    // The paths the argument is about were all taken, many times.
    assert!(discards > 1000, "{discards} discards");
    assert!(
        dead > 200 && alive > 100 && cancelled > 100,
        "{dead} {alive} {cancelled}"
    );
}

#[test]
fn without_the_fence_a_stream_still_reading_freed_memory_is_hit() {
    let knobs = Knobs {
        no_fence: true,
        ..Knobs::default()
    };
    let caught = (1..=SEEDS).filter(|&s| !run(s, knobs, STEPS).violations.is_empty());
    assert!(
        caught.count() > 0,
        "the model must catch a dead mark sent before its fence"
    );
}

#[test]
fn an_alive_mark_answered_before_it_is_applied_lets_a_queued_discard_hit_reuse() {
    let knobs = Knobs {
        early_alive: true,
        ..Knobs::default()
    };
    let caught = (1..=SEEDS).filter(|&s| !run(s, knobs, STEPS).violations.is_empty());
    assert!(
        caught.count() > 0,
        "the model must catch reuse racing a queued discard"
    );
}
