// SPDX-License-Identifier: GPL-2.0
//! The event ring: bounded, lock-free, many producers (the driver's fault
//! path, ioctls), one consumer (the worker). Faults, kernel starts and the
//! driver's own evictions travel through it in one order, so the worker sees
//! them as the driver and the runtime produced them.
//!
//! Only attached address spaces reach the ring (the fault path looks the
//! space up in [`ATTACHED`], a lock-free copy of the attached slots), and
//! each slot may hold at most [`SLOT_BUDGET`] records in it: no process,
//! attached or not, can fill the ring for the others.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::abi::MAX_SPACES;
use crate::feed::FEEDS;
use crate::glue;
use crate::gpus::FaultGpu;
use crate::{Block, BLOCK_SHIFT};

/// Records one attached space may have in the ring at once; more are
/// dropped (counted in [`Ring::drops`]).
pub(crate) const SLOT_BUDGET: u32 = (RING_SIZE / 4) as u32;

/// Slots in the ring; a power of two (positions are masked).
const RING_SIZE: usize = 4096;
const RING_MASK: u64 = RING_SIZE as u64 - 1;

/// One event, as the worker consumes it.
#[derive(Clone, Copy)]
pub(crate) enum Record {
    // Every variant travels with the slot it is charged to (see [`Slot`]).
    /// The driver serviced a fault on `block` of the address space
    /// `va_space`; `events` is that space's `uvm_perf_va_space_events_t *`
    /// (the hooked function's first argument); `gpu` is the faulting GPU,
    /// as the driver holds it for that space, if the fault path could name
    /// it (uvm.c).
    Fault {
        va_space: u64,
        events: u64,
        block: Block,
        gpu: Option<FaultGpu>,
    },
    /// The runtime announced (SET_EXEC_ID) that the kernel `exec_id` starts
    /// in the address space `va_space`.
    KernelStart { va_space: u64, exec_id: u32 },
    /// The driver evicted `block` on its own to make room (MIGRATION event,
    /// cause EVICTION); only `events` identifies the address space.
    DriverEvicted { events: u64, block: Block },
}

/// Words of an encoded record.
const WORDS: usize = 6;

/// [`Slot::kind`] values, one per [`Record`] variant.
const KIND_FAULT: u64 = 0;
const KIND_KERNEL_START: u64 = 1;
const KIND_DRIVER_EVICTED: u64 = 2;

impl Record {
    /// The record as slot words: (kind | charged slot << 8 | GPU known <<
    /// 16 | GPU processor id << 32, va_space, events, block, UUID bytes
    /// 0-7, UUID bytes 8-15).
    fn encode(self, slot: usize) -> [u64; WORDS] {
        let mut w = match self {
            Record::Fault {
                va_space,
                events,
                block,
                gpu,
            } => {
                let mut w = [KIND_FAULT, va_space, events, block, 0, 0];
                if let Some(g) = gpu {
                    w[0] |= (1 << 16) | (u64::from(g.proc) << 32);
                    (w[4], w[5]) = g.uuid_words();
                }
                w
            }
            Record::KernelStart { va_space, exec_id } => {
                [KIND_KERNEL_START, va_space, 0, u64::from(exec_id), 0, 0]
            }
            Record::DriverEvicted { events, block } => {
                [KIND_DRIVER_EVICTED, 0, events, block, 0, 0]
            }
        };
        w[0] |= (slot as u64 & 0xff) << 8;
        w
    }

    /// The inverse of [`Record::encode`]: the record and its charged slot.
    fn decode([word0, va_space, events, block, lo, hi]: [u64; WORDS]) -> (Self, usize) {
        let slot = ((word0 >> 8) & 0xff) as usize;
        let r = match word0 & 0xff {
            KIND_KERNEL_START => Record::KernelStart {
                va_space,
                exec_id: block as u32,
            },
            KIND_DRIVER_EVICTED => Record::DriverEvicted { events, block },
            // KIND_FAULT, the only other value `encode` writes.
            _ => Record::Fault {
                va_space,
                events,
                block,
                gpu: (word0 & (1 << 16) != 0)
                    .then(|| FaultGpu::from_words((word0 >> 32) as u32, lo, hi)),
            },
        };
        (r, slot)
    }
}

/// One slot (Vyukov's bounded queue): `seq` says whose turn it is; the other
/// words are a [`Record::encode`]d record.
struct Slot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

#[expect(
    clippy::declare_interior_mutable_const,
    reason = "only the initializer of RING's slots, each a distinct copy"
)]
const EMPTY_SLOT: Slot = Slot {
    seq: AtomicU64::new(0),
    words: [const { AtomicU64::new(0) }; WORDS],
};

/// The ring: `tail` is where producers claim slots, `head` where the single
/// consumer takes them; `drops` counts records lost to a full ring.
pub(crate) struct Ring {
    slots: [Slot; RING_SIZE],
    head: AtomicU64,
    tail: AtomicU64,
    drops: AtomicU64,
}

/// The module's one ring.
pub(crate) static RING: Ring = Ring {
    slots: [EMPTY_SLOT; RING_SIZE],
    head: AtomicU64::new(0),
    tail: AtomicU64::new(0),
    drops: AtomicU64::new(0),
};

impl Ring {
    /// Resets the ring; called before any producer runs.
    pub(crate) fn init(&self) {
        for (i, s) in self.slots.iter().enumerate() {
            s.seq.store(i as u64, Ordering::Relaxed);
        }
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Release);
    }

    /// Queues `r`, charged to attached slot `slot`. Never blocks, never
    /// allocates: a full ring, or a slot over its budget, drops the record
    /// (counted) and returns false.
    pub(crate) fn push(&self, r: Record, slot: usize) -> bool {
        let Some(queued) = ATTACHED.queued.get(slot) else {
            return false;
        };
        if queued.fetch_add(1, Ordering::Relaxed) >= SLOT_BUDGET {
            queued.fetch_sub(1, Ordering::Relaxed);
            self.drops.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if self.push_words(r.encode(slot)) {
            return true;
        }
        queued.fetch_sub(1, Ordering::Relaxed);
        false
    }

    /// Vyukov's enqueue of one encoded record.
    fn push_words(&self, words: [u64; WORDS]) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & RING_MASK) as usize];
            let seq = slot.seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as i64;
            if dif == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        for (w, v) in slot.words.iter().zip(words) {
                            w.store(v, Ordering::Relaxed);
                        }
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                self.drops.fetch_add(1, Ordering::Relaxed);
                return false;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest record. Single consumer: only the worker, under the
    /// State mutex.
    pub(crate) fn pop(&self) -> Option<Record> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(pos & RING_MASK) as usize];
        if slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        let words = core::array::from_fn(|i| slot.words[i].load(Ordering::Relaxed));
        slot.seq
            .store(pos.wrapping_add(RING_SIZE as u64), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        let (r, charged) = Record::decode(words);
        if let Some(q) = ATTACHED.queued.get(charged) {
            q.fetch_sub(1, Ordering::Relaxed);
        }
        Some(r)
    }

    /// True if the consumer would find nothing.
    pub(crate) fn is_empty(&self) -> bool {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(pos & RING_MASK) as usize];
        slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1)
    }

    /// Records dropped because the ring was full, since load.
    pub(crate) fn drops(&self) -> u64 {
        self.drops.load(Ordering::Relaxed)
    }
}

/// The attached slots as the fault path sees them: written under the State
/// mutex (attach, detach), read lock-free by the kprobe.
pub(crate) struct Attached {
    /// The slot's `uvm_va_space_t *`; 0 = free.
    va_space: [AtomicU64; MAX_SPACES],
    /// The slot's perf-events pointer, learnt from its first fault (eviction
    /// events carry only this); 0 = not yet.
    events: [AtomicU64; MAX_SPACES],
    /// Records of the slot in the ring now.
    queued: [AtomicU32; MAX_SPACES],
    /// GPU faults of address spaces in no slot (not queued).
    unattached: AtomicU64,
}

/// The module's one table of attached slots.
pub(crate) static ATTACHED: Attached = Attached {
    va_space: [const { AtomicU64::new(0) }; MAX_SPACES],
    events: [const { AtomicU64::new(0) }; MAX_SPACES],
    queued: [const { AtomicU32::new(0) }; MAX_SPACES],
    unattached: AtomicU64::new(0),
};

impl Attached {
    /// Publishes `va_space` in `slot` (attach, under the State mutex).
    pub(crate) fn set(&self, slot: usize, va_space: u64) {
        if let (Some(e), Some(v)) = (self.events.get(slot), self.va_space.get(slot)) {
            e.store(0, Ordering::Relaxed);
            v.store(va_space, Ordering::Release);
        }
    }

    /// Empties `slot` (detach, under the State mutex), its execution-id
    /// page included.
    pub(crate) fn clear(&self, slot: usize) {
        if let Some(v) = self.va_space.get(slot) {
            v.store(0, Ordering::Release);
        }
        FEEDS.clear(slot);
    }

    /// The `uvm_va_space_t *` attached in `slot`; 0 if none.
    pub(crate) fn va_space_in(&self, slot: usize) -> u64 {
        self.va_space
            .get(slot)
            .map_or(0, |v| v.load(Ordering::Acquire))
    }

    /// The slot of `va_space`, if attached.
    fn slot_of_space(&self, va_space: u64) -> Option<usize> {
        if va_space == 0 {
            return None;
        }
        self.va_space
            .iter()
            .position(|v| v.load(Ordering::Acquire) == va_space)
    }

    /// The slot whose perf-events pointer is `events`, if any.
    fn slot_of_events(&self, events: u64) -> Option<usize> {
        if events == 0 {
            return None;
        }
        self.events
            .iter()
            .position(|e| e.load(Ordering::Relaxed) == events)
    }

    /// GPU faults of address spaces in no slot, since load.
    pub(crate) fn unattached_faults(&self) -> u64 {
        self.unattached.load(Ordering::Relaxed)
    }
}

/// Queues `r` charged to `slot` and wakes the worker. Safe on the fault
/// path: no lock, no allocation.
pub(crate) fn send(r: Record, slot: usize) {
    RING.push(r, slot);
    glue::kick();
}

/// Fault callback (kprobe pre-handler on uvm_perf_event_notify, in the
/// driver's fault-servicing thread, under its locks): copy and return.
/// Faults of unattached spaces are only counted. `gpu_uuid`: the faulting
/// GPU's UUID (16 bytes) as the driver holds it for the space, or NULL
/// if uvm.c could not name it; `proc_id` is its processor id.
#[no_mangle]
extern "C" fn prescient_rs_fault(
    va_space: u64,
    events: u64,
    block_start: u64,
    proc_id: u32,
    gpu_uuid: *const u8,
) {
    let Some(slot) = ATTACHED.slot_of_space(va_space) else {
        ATTACHED.unattached.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if let Some(e) = ATTACHED.events.get(slot) {
        let _ = e.compare_exchange(0, events, Ordering::Relaxed, Ordering::Relaxed);
    }
    // The kernel the runtime's page names now is the one faulting: its
    // start goes first.
    if let Some(exec_id) = FEEDS.on_fault(slot) {
        RING.push(Record::KernelStart { va_space, exec_id }, slot);
    }
    send(
        Record::Fault {
            va_space,
            events,
            block: block_start >> BLOCK_SHIFT,
            gpu: glue::fault_gpu(proc_id, gpu_uuid),
        },
        slot,
    );
}

/// Eviction callback (same kprobe, MIGRATION event with cause EVICTION): the
/// driver took `block_start` off the GPU to make room. Copy and return;
/// evictions of unattached spaces are ignored.
#[no_mangle]
extern "C" fn prescient_rs_evicted(events: u64, block_start: u64) {
    let Some(slot) = ATTACHED.slot_of_events(events) else {
        return;
    };
    send(
        Record::DriverEvicted {
            events,
            block: block_start >> BLOCK_SHIFT,
        },
        slot,
    );
}
