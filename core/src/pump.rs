//! The host loop that follows every engine decision: keep resident blocks
//! under a limit, then migrate the predicted blocks in, making room one
//! victim at a time.
//!
//! prescient.ko's worker, prescientd's user-space loop and the simulator's
//! `prescient` policy all run this file with the same limit, so one policy
//! runs in all three; each host only says how to move a block ([`Host`]).
//!
//! # The limit
//! [`Limit::blocks`]: `min(capacity * watermark_pct / 100, capacity -
//! free_target)`, at least 1, where `capacity` is the residency budget (or
//! the GPU's size without one) and `free_target` is the engine's adaptive
//! reserve ([`Engine::free_target`]: up on every eviction the driver had to
//! make on the fault path, down on every refault of a pre-evicted block).
//!
//! # Blocks on their way out
//! A block counts as resident until its eviction has completed: a host whose
//! evictions complete later than [`Host::evict`] returns (prescientd's
//! workers) counts them in [`Host::resident_blocks`] and says how many in
//! [`Host::leaving_blocks`]. They are no victims any more (the engine forgot
//! them), but their memory is not free yet: prescientd counted a block gone
//! when its eviction was queued, and admitted prefetches into room that was
//! not free (GPU runs 58 and 60: 1.12-1.31x the budget).
//!
//! Victims are taken until the blocks that *stay* (resident minus leaving)
//! are under `limit`; a prefetch is admitted only while *all* counted blocks
//! (leaving ones and prefetches in flight included) are under the capacity,
//! the budget itself. The reserve between the two (`free_target`, at least
//! 2.5% of the budget: [`crate::Params::for_gpu`]) is how many evictions can
//! be on their way while prefetches still go in. For a host whose evictions
//! complete at once the second rule never binds: the first keeps resident
//! below `limit`, at most the capacity.
//!
//! # One round ([`Pump::round`])
//! 1. Settle: while more than `limit` blocks stay resident, take the
//!    engine's victims (dead blocks are discarded, live ones evicted).
//! 2. Prefetch: take candidates from the engine (soonest needed first); for
//!    each one not resident, make room (staying blocks below `limit`, one
//!    victim at a time) and hand it to the host if it fits under the
//!    capacity now. Stop at `max_prefetches`, when the host has no capacity
//!    left, when no victim is left (every resident block is predicted), or
//!    when the room made is still leaving (`waiting`); the candidate is kept
//!    for the next round in the last two cases.
//!
//! While the engine's thrash guard is on ([`Engine::thrash_guarded`]: most
//! victims came straight back), the reserve is 0 and step 2 evicts nothing:
//! a prefetch goes in only where room is free already.
//!
//! Candidates the engine emitted but the round did not reach stay queued in
//! the [`Pump`] until the next round; a fault starts a new prediction window
//! and the host drops them with [`Pump::restart`].

use crate::engine::{ChainState, Engine, Prefetch, Victim};
use crate::Block;
use core::ops::DerefMut;

/// The watermark every host uses unless configured otherwise: 100, so the
/// engine's adaptive free target alone decides what stays free (a fixed 90%
/// was slower on the transformer traces in the simulator: BENCHMARKS.md).
pub const DEFAULT_WATERMARK_PCT: u32 = 100;
/// Candidates queued between rounds at most (one engine call fills it).
pub const PUMP_QUEUE: usize = 32;
/// Victims asked of the engine per call at most while making room.
const VICTIM_BATCH: usize = 8;
/// Engine calls per refill at most: a call may only do bookkeeping (blocks
/// emitted already) while the chain still runs.
const REFILL_TRIES: usize = 64;

/// What a host does for the pump: count, evict and migrate blocks.
pub trait Host {
    /// Blocks of this address space the host counts on the GPU: those
    /// whose eviction has not completed and those whose prefetch is in
    /// flight included.
    ///
    /// `engine_count` is the engine's own ledger count: a host that keeps no
    /// ledger of its own (prescient.ko) returns it.
    fn resident_blocks(&self, engine_count: u32) -> u64;

    /// Of [`Host::resident_blocks`], those whose eviction was started
    /// ([`Host::evict`] returned true) and has not completed: still on the
    /// GPU, no victims any more. A host whose evictions complete before
    /// `evict` returns (prescient.ko migrates synchronously; the simulator
    /// delays the prefetch that needs the room instead) keeps the default.
    fn leaving_blocks(&self) -> u64 {
        0
    }

    /// True if `block` is on the GPU already, as far as the host knows.
    ///
    /// `engine_says` is the engine's ledger's answer: a host that keeps no
    /// ledger of its own (prescient.ko) returns it.
    fn is_resident(&self, block: Block, engine_says: bool) -> bool;

    /// Takes `victim` off the GPU (discards it when `victim.discard`).
    ///
    /// `why` says whether it keeps residency under the limit or makes room
    /// for the next prefetch (the simulator lets a prefetch wait only for
    /// the evictions made for it). Returns false if the block cannot leave
    /// now (the simulator: the running kernel uses it); the engine then
    /// keeps counting it.
    fn evict(&mut self, victim: Victim, why: Why) -> bool;

    /// Starts migrating `prefetch.block` to the GPU.
    fn prefetch(&mut self, prefetch: Prefetch) -> Admit;

    /// True while the host takes more prefetches this round (the simulator:
    /// the link is free before the next event).
    fn has_capacity(&self) -> bool {
        true
    }
}

/// The host's answer to one prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// The migration was started: the block now counts as resident.
    Issued,
    /// The host chose not to move it (back-off, outside the job's memory).
    Declined,
    /// The driver refused the migration.
    Failed,
}

/// Why the pump takes a victim off the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Residency is over the limit.
    Settle,
    /// Room for the prefetch that comes next.
    Room,
}

/// Where [`make_room`] left the room for one more block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// It fits under the capacity now: admit it.
    Free,
    /// Victims are on their way out; it fits once their evictions
    /// complete (a later round).
    Leaving,
    /// The engine had no victim left (every resident block is predicted),
    /// or its thrash guard is on and nothing is free.
    None,
}

/// How far resident blocks may grow before pre-eviction starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The residency budget in blocks, else the GPU's size in blocks.
    pub capacity_blocks: u64,
    /// Resident blocks stay under this part of the capacity (1-100).
    pub watermark_pct: u32,
}

impl Limit {
    /// The resident-block limit for an engine whose reserve is `free_target`.
    pub fn blocks(&self, free_target: u32) -> u64 {
        let pct = u64::from(self.watermark_pct.clamp(1, 100));
        let by_watermark = self.capacity_blocks.saturating_mul(pct) / 100;
        let by_reserve = self.capacity_blocks.saturating_sub(u64::from(free_target));
        by_watermark.min(by_reserve).max(1)
    }
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pumped {
    /// Live blocks evicted to stay under the limit.
    pub evicted: u32,
    /// Dead blocks discarded to stay under the limit.
    pub discarded: u32,
    /// Victims the host could not take off the GPU.
    pub refused_victims: u32,
    /// Prefetches started.
    pub prefetched: u32,
    /// Candidates found resident already.
    pub already_resident: u32,
    /// Candidates the host declined.
    pub declined: u32,
    /// Prefetches the driver refused.
    pub failed: u32,
    /// The round stopped because no victim was left to make room, or the
    /// thrash guard made none (`guarded`).
    pub no_room: bool,
    /// The thrash guard is on and the round stopped at a full limit.
    pub guarded: bool,
    /// The round stopped because the room made for the next candidate is
    /// still leaving the GPU (its evictions have not completed).
    pub waiting: bool,
    /// Another round would do more now: candidates are queued or the chain
    /// still runs, and this round found room.
    pub more: bool,
}

/// The queue of candidates carried between rounds, and the round itself.
#[derive(Clone, Debug)]
pub struct Pump {
    queue: [Prefetch; PUMP_QUEUE],
    head: usize,
    len: usize,
}

impl Default for Pump {
    fn default() -> Self {
        Self::new()
    }
}

impl Pump {
    /// An empty pump.
    pub const fn new() -> Self {
        Pump {
            queue: [Prefetch { block: 0, ahead: 0 }; PUMP_QUEUE],
            head: 0,
            len: 0,
        }
    }

    /// Drops the queued candidates: a fault started a new window.
    pub fn restart(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Candidates queued now.
    pub fn queued(&self) -> usize {
        self.len
    }

    /// One round: settle under the limit, then up to `max_prefetches`
    /// prefetches (0: settle only; the module's prefetch switch).
    pub fn round<S, H>(
        &mut self,
        engine: &mut Engine<S>,
        limit: Limit,
        max_prefetches: usize,
        host: &mut H,
    ) -> Pumped
    where
        S: DerefMut<Target = [u64]>,
        H: Host + ?Sized,
    {
        let mut done = Pumped::default();
        let cap = limit.blocks(engine.free_target());
        if !settle(engine, cap, host, &mut done) {
            // No victim left: a prefetch could not find room either.
            done.no_room = true;
            return done;
        }
        while (done.prefetched as usize) < max_prefetches && host.has_capacity() {
            let Some(p) = self.next(engine) else {
                break;
            };
            let engine_says = engine.is_resident(p.block);
            if host.is_resident(p.block, engine_says) {
                done.already_resident += 1;
                continue;
            }
            match room(engine, limit, host, &mut done) {
                Room::Free => {}
                Room::Leaving => {
                    // Its room is on the way: keep the candidate.
                    self.push_front(p);
                    done.waiting = true;
                    break;
                }
                Room::None => {
                    // Everything resident is predicted: keep the candidate.
                    self.push_front(p);
                    done.no_room = true;
                    break;
                }
            }
            match host.prefetch(p) {
                Admit::Issued => {
                    engine.migrated_in(p.block);
                    done.prefetched += 1;
                }
                Admit::Declined => done.declined += 1,
                Admit::Failed => done.failed += 1,
            }
        }
        // Without room another round cannot move anything until an event
        // (a fault, a kernel start, an eviction completing) changes what is
        // resident.
        done.more = !done.no_room
            && !done.waiting
            && (self.len > 0 || engine.chain_state() == ChainState::Running);
        done
    }

    /// The next candidate: the queue's head, refilled from the engine.
    fn next<S: DerefMut<Target = [u64]>>(&mut self, engine: &mut Engine<S>) -> Option<Prefetch> {
        if self.len == 0 {
            self.refill(engine);
        }
        if self.len == 0 {
            return None;
        }
        let p = self.queue[self.head];
        self.head = (self.head + 1) % PUMP_QUEUE;
        self.len -= 1;
        Some(p)
    }

    /// Fills the empty queue with one engine call that emits something.
    fn refill<S: DerefMut<Target = [u64]>>(&mut self, engine: &mut Engine<S>) {
        self.head = 0;
        for _ in 0..REFILL_TRIES {
            let n = engine.prefetches(&mut self.queue);
            self.len = n;
            if n > 0 || engine.chain_state() != ChainState::Running {
                return;
            }
        }
    }

    /// Puts `p` back at the head (the queue has room: `p` was just taken).
    fn push_front(&mut self, p: Prefetch) {
        self.head = (self.head + PUMP_QUEUE - 1) % PUMP_QUEUE;
        self.queue[self.head] = p;
        self.len += 1;
    }
}

/// Evicts until at most `cap` blocks stay resident. False if the engine
/// ran out of victims first.
fn settle<S, H>(engine: &mut Engine<S>, cap: u64, host: &mut H, done: &mut Pumped) -> bool
where
    S: DerefMut<Target = [u64]>,
    H: Host + ?Sized,
{
    evict_down_to(engine, cap, Why::Settle, host, done)
}

/// Makes room under `limit` for one block the host brings in outside a
/// round (prescientd: a discarded block marked alive again, the blocks of
/// the launches to come); the host admits it only on [`Room::Free`].
pub fn make_room<S, H>(engine: &mut Engine<S>, limit: Limit, host: &mut H) -> Room
where
    S: DerefMut<Target = [u64]>,
    H: Host + ?Sized,
{
    room(engine, limit, host, &mut Pumped::default())
}

/// Evicts until fewer than `limit` blocks stay resident (room for one more
/// once the victims are gone), then says whether one more fits under the
/// capacity now, the blocks still leaving counted. While the engine's
/// thrash guard is on it evicts nothing: [`Room::None`] unless the room is
/// free already.
fn room<S, H>(engine: &mut Engine<S>, limit: Limit, host: &mut H, done: &mut Pumped) -> Room
where
    S: DerefMut<Target = [u64]>,
    H: Host + ?Sized,
{
    let cap = limit.blocks(engine.free_target());
    if engine.thrash_guarded() {
        // Every victim would come straight back: only room already free.
        if staying(engine, host) >= cap {
            done.guarded = true;
            return Room::None;
        }
    } else if !evict_down_to(engine, cap.saturating_sub(1), Why::Room, host, done) {
        return Room::None;
    }
    if host.resident_blocks(engine.resident_blocks()) < limit.capacity_blocks.max(1) {
        Room::Free
    } else {
        Room::Leaving
    }
}

/// Blocks that stay resident: those the host counts, less those leaving.
fn staying<S, H>(engine: &Engine<S>, host: &H) -> u64
where
    S: DerefMut<Target = [u64]>,
    H: Host + ?Sized,
{
    let counted = host.resident_blocks(engine.resident_blocks());
    counted.saturating_sub(host.leaving_blocks())
}

/// Takes the engine's victims, a batch at a time, until at most `target`
/// blocks stay resident (blocks already leaving do not stay). False when a
/// batch freed nothing (no victim, or the host refused every one). Each
/// freed victim frees one block, so the work is bounded by the excess.
fn evict_down_to<S, H>(
    engine: &mut Engine<S>,
    target: u64,
    why: Why,
    host: &mut H,
    done: &mut Pumped,
) -> bool
where
    S: DerefMut<Target = [u64]>,
    H: Host + ?Sized,
{
    let mut batch = [Victim::default(); VICTIM_BATCH];
    loop {
        let resident = staying(engine, host);
        if resident <= target {
            return true;
        }
        let want = ((resident - target) as usize).min(VICTIM_BATCH);
        let n = engine.victims(&mut batch[..want]);
        let mut freed = false;
        for v in &batch[..n] {
            if !host.evict(*v, why) {
                done.refused_victims += 1;
                continue;
            }
            engine.evicted(v.block);
            freed = true;
            if v.discard {
                done.discarded += 1;
            } else {
                done.evicted += 1;
            }
        }
        if !freed {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_takes_the_lower_of_watermark_and_reserve() {
        let l = Limit {
            capacity_blocks: 1000,
            watermark_pct: 90,
        };
        assert_eq!(l.blocks(10), 900);
        assert_eq!(l.blocks(200), 800);
        let full = Limit {
            capacity_blocks: 1000,
            watermark_pct: 100,
        };
        assert_eq!(full.blocks(10), 990);
        assert_eq!(full.blocks(5000), 1);
        let zero = Limit {
            capacity_blocks: 0,
            watermark_pct: 0,
        };
        assert_eq!(zero.blocks(0), 1);
    }
}
