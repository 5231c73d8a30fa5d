//! Blocks the CPU and the GPU take from each other every step: kept in
//! host memory, where the GPU reads and writes them over the link, instead
//! of migrating in and being evicted again each time.
//!
//! Why: a block the CPU rewrites every step (a program's input, written on
//! the CPU and read by its first kernel) goes to the GPU and back once a
//! step whatever the policy does, and the way back is the slow direction
//! (UVM_MIGRATE to the CPU tops out near 20 GB/s, BENCHMARKS-gpu.md run
//! 57, against 48 GB/s in). In host memory with the GPU mapped to it, the
//! GPU reads it once over the link and nothing is evicted: GPU run 93,
//! dnn's 1 GiB input advised so by hand, 34 ms a step against 169 ms.
//!
//! Which blocks: one the CPU's own fault took back from the GPU (a
//! migration to the CPU for coherence) in `TAKES_TO_ADVISE` separate
//! rounds, the GPU having had it again in between. Each such block gets
//! the driver's preferred location "CPU" and "accessed by" each GPU of the
//! process (the same advice as `cudaMemAdvise`), and is never prefetched
//! again. If the GPU still faults on it (the allocation was freed and
//! made again, or the driver refused the mapping), the advice is
//! forgotten after `FAULTS_TO_FORGET` faults and the block is an ordinary
//! one. The work is bounded: at most `MAX_TRACKED` blocks are followed and
//! `MAX_HOST` advised, a few ioctls per advised block, once.
//!
//! Off by default (`--host-shared`): the advice pays only where the GPU
//! reads the block about once per CPU write; a block the GPU reads many
//! times in between (umbench random: random reads of every block, a
//! quarter of them rewritten by the CPU each iteration) would cross the
//! link at every read, and faults do not tell the two apart.

use serde::Serialize;
use std::collections::HashMap;

/// Rounds of the CPU taking a block back that make it a host block.
pub const TAKES_TO_ADVISE: u8 = 2;
/// Bytes of a block the CPU must take back in one round for the round to
/// count: half the block. A buffer the CPU rewrites comes back whole; a
/// result the CPU reads (a checksum, a loss) comes back a page at a time,
/// and in host memory every GPU atomic on it would cross the link (GPU run
/// 94: umbench random, whose kernel adds into a 4 KB result the CPU reads
/// each iteration, went from 9 ms to 275 ms an iteration once that block
/// was advised).
pub const TAKE_BYTES: u64 = 1 << 20;
/// GPU faults on a host block that say its advice is not in effect.
pub const FAULTS_TO_FORGET: u8 = 2;
/// Blocks followed at most (128 GB); more are not followed.
pub const MAX_TRACKED: usize = 1 << 16;
/// Blocks advised at most (64 GB).
pub const MAX_HOST: usize = 1 << 15;

/// What the shared-block tracker did (`host_shared` in the stats JSON).
#[derive(Serialize, Default, Clone, Debug, PartialEq, Eq)]
pub struct SharedStats {
    /// Rounds in which the CPU's fault took a block back from the GPU.
    pub cpu_takes: u64,
    /// Blocks advised to stay in host memory, and advice the driver
    /// refused (the block stays an ordinary one).
    pub advised_blocks: u64,
    pub advise_errors: u64,
    /// Host blocks the GPU kept faulting on: their advice was forgotten.
    pub forgotten: u64,
    /// Prefetches declined because the block lives in host memory.
    pub prefetches_declined: u64,
}

/// One followed block: the rounds the CPU took it back, whether this
/// round counted already, and the bytes taken back in this round.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    takes: u8,
    on_cpu: bool,
    round_bytes: u64,
}

/// The blocks followed, those advised, and those waiting for advice.
#[derive(Default)]
pub struct SharedBlocks {
    followed: HashMap<u64, Entry>,
    /// Host blocks, with the GPU's faults on each since its advice.
    host: HashMap<u64, u8>,
    pending: Vec<u64>,
    pub stats: SharedStats,
}

impl SharedBlocks {
    /// The CPU's fault took `bytes` of `b` back from the GPU.
    pub fn cpu_took(&mut self, b: u64, bytes: u64) {
        if self.host.contains_key(&b) {
            return;
        }
        if !self.followed.contains_key(&b) && self.followed.len() >= MAX_TRACKED {
            return;
        }
        let e = self.followed.entry(b).or_default();
        if e.on_cpu {
            return;
        }
        e.round_bytes = e.round_bytes.saturating_add(bytes);
        if e.round_bytes < TAKE_BYTES {
            return;
        }
        e.on_cpu = true;
        e.takes = e.takes.saturating_add(1);
        self.stats.cpu_takes += 1;
        if e.takes == TAKES_TO_ADVISE && self.host.len() + self.pending.len() < MAX_HOST {
            self.pending.push(b);
        }
    }

    /// The GPU had `b` again (its fault, or a migration to it). Returns
    /// true if `b` was a host block whose advice is now forgotten.
    pub fn gpu_had(&mut self, b: u64, faulted: bool) -> bool {
        if let Some(e) = self.followed.get_mut(&b) {
            e.on_cpu = false;
            e.round_bytes = 0;
        }
        let Some(faults) = self.host.get_mut(&b) else {
            return false;
        };
        if !faulted {
            return false;
        }
        *faults += 1;
        if *faults < FAULTS_TO_FORGET {
            return false;
        }
        self.host.remove(&b);
        self.followed.remove(&b);
        self.stats.forgotten += 1;
        true
    }

    /// The blocks waiting for advice, handed out once.
    pub fn take_pending(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.pending)
    }

    /// The driver took the advice for `b` (`ok`), or refused it.
    pub fn advised(&mut self, b: u64, ok: bool) {
        if ok {
            self.host.insert(b, 0);
            self.stats.advised_blocks += 1;
        } else {
            self.stats.advise_errors += 1;
        }
    }

    /// Does `b` live in host memory (never prefetched)?
    pub fn is_host(&self, b: u64) -> bool {
        self.host.contains_key(&b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dnn's input: the CPU takes a block back in a step, the GPU has it
    /// again, the CPU takes it back in the next step: advised once. Many
    /// migration events of one take count once.
    #[test]
    fn a_block_taken_back_in_two_rounds_is_advised_once() {
        let mut s = SharedBlocks::default();
        s.cpu_took(7, 1 << 21);
        s.cpu_took(7, 1 << 21);
        s.cpu_took(7, 1 << 21);
        assert_eq!(s.stats.cpu_takes, 1, "one round, three events");
        assert!(s.take_pending().is_empty());
        s.gpu_had(7, true);
        s.cpu_took(7, 1 << 21);
        assert_eq!(s.take_pending(), [7]);
        assert!(s.take_pending().is_empty(), "handed out once");
        s.advised(7, true);
        assert!(s.is_host(7));
        s.gpu_had(7, false);
        s.cpu_took(7, 1 << 21);
        assert!(
            s.take_pending().is_empty(),
            "a host block is not advised again"
        );
        assert_eq!(s.stats.advised_blocks, 1);
    }

    /// A block the GPU keeps faulting on after its advice is an ordinary
    /// one again, and starts its count afresh; a refusal is counted and
    /// leaves the block ordinary.
    #[test]
    fn faults_after_the_advice_forget_it_and_refusals_leave_it_ordinary() {
        let mut s = SharedBlocks::default();
        for _ in 0..2 {
            s.cpu_took(3, 1 << 21);
            s.gpu_had(3, true);
        }
        assert_eq!(s.take_pending(), [3]);
        s.advised(3, true);
        assert!(!s.gpu_had(3, true));
        assert!(s.gpu_had(3, true));
        assert!(!s.is_host(3));
        assert_eq!(s.stats.forgotten, 1);
        s.cpu_took(3, 1 << 21);
        assert!(s.take_pending().is_empty(), "counted afresh");
        s.gpu_had(3, true);
        s.cpu_took(3, 1 << 21);
        assert_eq!(s.take_pending(), [3]);
        s.advised(3, false);
        assert!(!s.is_host(3));
        assert_eq!(s.stats.advise_errors, 1);
    }

    /// Blocks past `MAX_TRACKED` are not followed.
    #[test]
    fn the_followed_set_is_bounded() {
        let mut s = SharedBlocks::default();
        for b in 0..MAX_TRACKED as u64 + 10 {
            s.cpu_took(b, 1 << 21);
        }
        assert_eq!(s.followed.len(), MAX_TRACKED);
        assert_eq!(s.stats.cpu_takes, MAX_TRACKED as u64);
    }

    /// A block the CPU takes back a page at a time (a result it reads)
    /// never counts; one it takes back in 64 KB pieces counts once half of
    /// it is back.
    #[test]
    fn only_rounds_that_take_most_of_the_block_count() {
        let mut s = SharedBlocks::default();
        for _ in 0..5 {
            s.cpu_took(9, 4096);
            s.gpu_had(9, true);
        }
        assert_eq!(s.stats.cpu_takes, 0);
        for _ in 0..2 {
            for _ in 0..16 {
                s.cpu_took(5, 64 << 10);
            }
            s.gpu_had(5, true);
        }
        assert_eq!(s.stats.cpu_takes, 2);
        assert_eq!(s.take_pending(), [5]);
    }
}
