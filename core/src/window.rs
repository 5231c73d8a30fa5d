//! The prediction window's storage: the window set of claimed blocks and the
//! frontier ring.
//!
//! The window set is an open-addressing hash set (linear probing) over
//! `window_slots` slots of [`WINDOW_SLOT_WORDS`] words:
//! `[block, generation, sequence, position]`. A slot belongs to the current
//! window only if its generation is the window's, so starting a new window
//! empties the set in O(1). `sequence` is the kernel a block was last
//! predicted for (in transparent mode: the block's offset in the history);
//! `position` is the history entry where it is first needed, with
//! [`PROBE_FLAG`] on a block left to fault.
//!
//! The frontier is a ring of words: blocks still to expand (execution-id
//! mode) or the history offsets of blocks in flight (transparent mode).

use crate::block::Block;

/// Words per window-set slot: block, generation, kernel sequence (in
/// transparent mode: the block's offset in the history), history position.
pub const WINDOW_SLOT_WORDS: usize = 4;
/// Marks a probe in a window slot's position word.
pub const PROBE_FLAG: u64 = 1 << 63;

/// The home slot of `b` in a table of `mask + 1` slots (Fibonacci hashing).
pub fn hash_block(b: Block, mask: usize) -> usize {
    (b.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24) as usize & mask
}

/// What the window does with a block it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// New to this window (or last predicted for a kernel that has run).
    Emit,
    /// Already predicted for an earlier kernel still to come (the old
    /// sequence number): now protected until this later one too; expand it,
    /// do not emit it again.
    Expand(u64),
    /// Already predicted for this kernel or a later one.
    Skip,
}

/// The slot of `b` in window generation `gen`, if the window reached it.
pub fn window_slot(win: &[u64], gen: u64, b: Block) -> Option<&[u64]> {
    let mask = win.len() / WINDOW_SLOT_WORDS - 1;
    let mut i = hash_block(b, mask);
    loop {
        let w = &win[i * WINDOW_SLOT_WORDS..(i + 1) * WINDOW_SLOT_WORDS];
        if w[1] != gen {
            return None;
        }
        if w[0] == b {
            return Some(w);
        }
        i = (i + 1) & mask;
    }
}

/// The kernel sequence number `b` was last predicted for in window
/// generation `gen`, if the window reached it.
pub fn window_seq(win: &[u64], gen: u64, b: Block) -> Option<u64> {
    window_slot(win, gen, b).map(|w| w[2])
}

/// Claims `b` for kernel `seq` in generation `gen` (remembering history
/// position `pos` with it) and says what the window does with it; `now` is
/// the running kernel.
pub fn claim_at(win: &mut [u64], gen: u64, now: u64, b: Block, seq: u64, pos: u64) -> Visit {
    let mask = win.len() / WINDOW_SLOT_WORDS - 1;
    let mut i = hash_block(b, mask);
    loop {
        let w = &mut win[i * WINDOW_SLOT_WORDS..(i + 1) * WINDOW_SLOT_WORDS];
        if w[1] != gen {
            // Empty in this generation: claim it.
            w[0] = b;
            w[1] = gen;
            w[2] = seq;
            w[3] = pos;
            return Visit::Emit;
        }
        if w[0] == b {
            let old = w[2];
            if old >= seq {
                return Visit::Skip;
            }
            w[2] = seq;
            // Emitted for a kernel that has already run: it may have been
            // evicted since, emit it again. Emitted for a kernel still to
            // come: it is on its way, only extend its protection (and
            // keep the place where it is needed first).
            return if old < now {
                w[3] = pos;
                Visit::Emit
            } else {
                Visit::Expand(old)
            };
        }
        i = (i + 1) & mask;
    }
}

/// Flags `b`'s slot in generation `gen` as a probe, if the window has it.
pub fn mark_probe(win: &mut [u64], gen: u64, b: Block) {
    let mask = win.len() / WINDOW_SLOT_WORDS - 1;
    let mut i = hash_block(b, mask);
    loop {
        let w = &mut win[i * WINDOW_SLOT_WORDS..(i + 1) * WINDOW_SLOT_WORDS];
        if w[1] != gen {
            return;
        }
        if w[0] == b {
            w[3] |= PROBE_FLAG;
            return;
        }
        i = (i + 1) & mask;
    }
}

/// A bounded FIFO of words over a ring the caller stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    head: u32,
    len: u32,
}

impl Frontier {
    /// An empty frontier.
    pub const fn new() -> Self {
        Frontier { head: 0, len: 0 }
    }

    /// Words queued.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets everything queued.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Queues `v` at the back; drops it when `ring` is full.
    pub fn push(&mut self, ring: &mut [u64], v: u64) {
        let cap = ring.len() as u32;
        if self.len >= cap {
            return;
        }
        let at = (self.head + self.len) % cap;
        ring[at as usize] = v;
        self.len += 1;
    }

    /// Takes the word at the front.
    pub fn pop(&mut self, ring: &[u64]) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let cap = ring.len() as u32;
        let v = ring[self.head as usize];
        self.head = (self.head + 1) % cap;
        self.len -= 1;
        Some(v)
    }

    /// Drops words from the front while they are below `bound`.
    pub fn drop_below(&mut self, ring: &[u64], bound: u64) {
        let cap = ring.len() as u32;
        while self.len > 0 {
            if ring[self.head as usize] >= bound {
                break;
            }
            // No `%`: a division the compiler cannot prove safe leaves a
            // panic call that objtool flags in the kernel build.
            self.head += 1;
            if self.head >= cap {
                self.head = 0;
            }
            self.len -= 1;
        }
    }
}

/// The current prediction window's bookkeeping outside the storage.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    /// The window set's current generation (slots of others are empty).
    pub generation: u64,
    /// Blocks claimed in this generation.
    pub claimed: u32,
    /// The frontier ring's queue.
    pub frontier: Frontier,
}

impl Window {
    /// A new generation: the set and the frontier are empty.
    pub fn restart(&mut self) {
        self.generation += 1;
        self.claimed = 0;
        self.frontier.clear();
    }
}
