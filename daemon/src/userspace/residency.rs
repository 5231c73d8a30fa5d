//! GPU residency per 2 MB block as the per-process loop sees it, from
//! migration events, GPU faults and our own commands; the engine is told
//! about every block that enters or leaves.

use super::mode::PolicyMode;
use prescient_core::{Engine, BLOCK_BYTES, BLOCK_SHIFT};
use prescient_uvm::ioctl as uvm;
use std::collections::{HashMap, HashSet, VecDeque};

/// Resident bytes per block, their total, and the blocks in arrival order
/// (the driver-like policy evicts the oldest first).
///
/// A block whose eviction we started stays counted ("leaving") until its
/// UVM_MIGRATE to the CPU has returned (`left`): the call returns once the
/// copy is done (uvm_migrate.c maps the CPU pages, which waits for the
/// block's copies), and until then the block's memory is the GPU's. It is
/// no victim any more, and no arrival-order candidate. Counting it gone at
/// the queueing let the budget overshoot (GPU runs 58 and 60).
#[derive(Default)]
pub(super) struct Residency {
    bytes: HashMap<u64, u64>,
    total: u64,
    fifo: VecDeque<u64>,
    leaving: HashSet<u64>,
    /// Resident bytes of the `leaving` blocks.
    leaving_bytes: u64,
}

/// What the end of a block's eviction did to the ledger (`Residency::left`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Left {
    /// The block left: its bytes are free.
    Gone,
    /// The driver refused: the block stays, a victim again.
    Stays,
    /// The block was not leaving any more (the GPU took it back, or the
    /// driver moved it, since): nothing changes.
    Moot,
}

impl Residency {
    /// Counts `b` more bytes of `block`; true when the block became
    /// resident, or came back while leaving (the GPU faulted it back, the
    /// driver moved it in): then it is no longer leaving, and its
    /// eviction's end changes nothing.
    pub(super) fn add(&mut self, block: u64, b: u64) -> bool {
        let back = self.leaving.remove(&block);
        let e = self.bytes.entry(block).or_insert(0);
        let was = *e;
        if back {
            self.leaving_bytes -= was;
        }
        *e = (*e + b).min(BLOCK_BYTES);
        self.total += *e - was;
        if (was == 0 || back) && *e > 0 {
            self.fifo.push_back(block);
            return true;
        }
        false
    }

    /// Counts `b` bytes of `block` gone; true when it stopped being resident.
    pub(super) fn sub(&mut self, block: u64, b: u64) -> bool {
        let Some(e) = self.bytes.get_mut(&block) else {
            return false;
        };
        let was = *e;
        *e = e.saturating_sub(b);
        self.total -= was - *e;
        let leaving = self.leaving.contains(&block);
        if leaving {
            self.leaving_bytes -= was - *e;
        }
        if *e == 0 {
            self.bytes.remove(&block);
            self.leaving.remove(&block);
            return was > 0;
        }
        false
    }

    /// We started `block`'s eviction: it stays counted until `left`. False
    /// if it was not resident or is leaving already.
    pub(super) fn leave(&mut self, block: u64) -> bool {
        let n = self.get(block);
        if n == 0 || !self.leaving.insert(block) {
            return false;
        }
        self.leaving_bytes += n;
        true
    }

    /// `block`'s eviction ended: it `left` the GPU, or the driver refused.
    pub(super) fn left(&mut self, block: u64, left: bool) -> Left {
        if !self.leaving.remove(&block) {
            return Left::Moot;
        }
        let n = self.get(block);
        self.leaving_bytes -= n;
        if left {
            self.bytes.remove(&block);
            self.total -= n;
            Left::Gone
        } else {
            self.fifo.push_back(block);
            Left::Stays
        }
    }

    /// Resident bytes of `block` (leaving or not).
    pub(super) fn get(&self, block: u64) -> u64 {
        self.bytes.get(&block).copied().unwrap_or(0)
    }

    /// Blocks with any resident bytes, leaving ones included.
    pub(super) fn blocks(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Of `blocks`, those leaving.
    pub(super) fn leaving_blocks(&self) -> u64 {
        self.leaving.len() as u64
    }

    /// Blocks that stay: resident and not leaving.
    pub(super) fn staying_blocks(&self) -> u64 {
        self.blocks() - self.leaving_blocks()
    }

    /// Resident bytes in all, leaving ones included: what the GPU holds
    /// for the process as far as we know (the budget's measure).
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Resident bytes of the blocks that stay (what this ledger counted
    /// before evictions were followed to their end).
    pub(super) fn staying_total(&self) -> u64 {
        self.total - self.leaving_bytes
    }

    /// Resident bytes of the leaving blocks.
    pub(super) fn leaving_total(&self) -> u64 {
        self.leaving_bytes
    }

    /// The block that became resident longest ago and stays (maybe gone
    /// since: the caller checks `get`).
    pub(super) fn pop_oldest(&mut self) -> Option<u64> {
        while let Some(b) = self.fifo.pop_front() {
            if !self.leaving.contains(&b) {
                return Some(b);
            }
        }
        None
    }

    /// Queues every block that stays in the arrival order again (in no
    /// particular order).
    pub(super) fn requeue(&mut self) {
        self.fifo.clear();
        let staying = self.bytes.keys().filter(|b| !self.leaving.contains(b));
        self.fifo.extend(staying);
    }

    /// The blocks that stay (resident, not leaving), in no order.
    pub(super) fn resident(&self) -> impl Iterator<Item = u64> + '_ {
        self.bytes
            .keys()
            .copied()
            .filter(|b| !self.leaving.contains(b))
    }

    /// Forgets everything; returns the blocks that were resident.
    pub(super) fn clear(&mut self) -> impl Iterator<Item = u64> {
        std::mem::take(self).bytes.into_keys()
    }
}

/// Applies one migration event to the residency ledger and tells the engine
/// about blocks that entered or left the GPU. Returns true for a block the
/// driver evicted on its fault path.
///
/// Our own migrations (cause "user"; we issue only those) entered the
/// ledger when we issued them, and leave it when the worker's UVM_MIGRATE
/// to the CPU returns (`Residency::left`), so their events are not applied
/// again.
/// They come late: the driver records them on copy completion, through a
/// queue. By then we may have pre-evicted a block we prefetched, or the GPU
/// may have faulted back a block we evicted. Applying them then made the
/// ledger drift from the truth, in both directions (daemon/README.md,
/// "Measured history", has the runs):
/// - adding a late prefetch made it count blocks that were gone; the budget
///   looked full and prefetching starved;
/// - subtracting a late eviction lost real residency, and the budget stopped
///   being kept.
///
/// In observe mode we issue nothing, so "user" migrations are the process's
/// own and are applied. In driver-like mode we only evict, so only the
/// evictions are skipped. A process's own cudaMemPrefetchAsync has the same
/// cause: in prescient mode it is not counted.
pub(super) fn apply_migration(
    ledger: &mut Residency,
    engine: &mut Engine<Vec<u64>>,
    mode: PolicyMode,
    m: &uvm::MigrationV2,
) -> bool {
    let b = m.address >> BLOCK_SHIFT;
    let user = m.migration_cause == uvm::CAUSE_USER;
    if m.dst_index != uvm::CPU_INDEX {
        let ours = user && mode.prefetches();
        if !ours && ledger.add(b, m.migrated_bytes) {
            engine.migrated_in(b);
        }
        false
    } else if m.src_index != uvm::CPU_INDEX {
        let ours = user && mode.evicts();
        if ours || !ledger.sub(b, m.migrated_bytes) {
            return false;
        }
        if m.migration_cause == uvm::CAUSE_EVICTION {
            engine.demand_evicted(b);
            true
        } else {
            engine.evicted(b);
            false
        }
    } else {
        false
    }
}

/// A GPU fault on `block`: the driver is about to make it resident, by a
/// migration or, for memory first touched by the GPU (a PyTorch job's
/// weights and activations) or discarded, by populating it on the GPU with
/// no migration at all and so no migration event. Counting it here is what
/// lets a residency budget see that memory (counted from migration events
/// alone, a PyTorch loop's budget was never enforced: daemon/README.md,
/// "Measured history"). The block's later migration event adds nothing
/// more (a block counts at most 2 MB).
pub(super) fn fault_in(ledger: &mut Residency, engine: &mut Engine<Vec<u64>>, block: u64) {
    if ledger.add(block, BLOCK_BYTES) {
        engine.migrated_in(block);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use prescient_core::{Mode, Params, Victim};

    pub(in crate::userspace) const GPU: u16 = 1;
    pub(in crate::userspace) const B: u64 = 7; // a 2 MB block number

    pub(in crate::userspace) fn engine() -> Engine<Vec<u64>> {
        let p = Params {
            mode: Mode::Transparent,
            ..Params::for_gpu(64)
        };
        Engine::new(p, vec![0u64; p.storage_words()]).unwrap()
    }

    fn mig(cause: u8, to_gpu: bool, bytes: u64) -> uvm::MigrationV2 {
        let (src, dst) = if to_gpu {
            (uvm::CPU_INDEX, GPU)
        } else {
            (GPU, uvm::CPU_INDEX)
        };
        uvm::MigrationV2 {
            event_type: uvm::EVENT_MIGRATION,
            migration_cause: cause,
            src_index: src,
            dst_index: dst,
            address: B << BLOCK_SHIFT,
            migrated_bytes: bytes,
            ..Default::default()
        }
    }

    #[test]
    fn a_late_event_of_our_own_prefetch_does_not_bring_back_a_block_we_evicted() {
        let (mut l, mut e) = (Residency::default(), engine());
        // Prefetch issued (the ledger counts it), then pre-evicted again
        // before the prefetch's own event arrived.
        l.add(B, BLOCK_BYTES);
        l.sub(B, BLOCK_BYTES);
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::Prescient,
            &mig(uvm::CAUSE_USER, true, BLOCK_BYTES),
        );
        assert_eq!(l.get(B), 0, "the late prefetch event re-entered the ledger");
        assert_eq!(l.blocks(), 0);
        // The eviction's own late event changes nothing either.
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::Prescient,
            &mig(uvm::CAUSE_USER, false, BLOCK_BYTES),
        );
        assert_eq!(l.blocks(), 0);
    }

    #[test]
    fn a_late_event_of_our_own_eviction_does_not_remove_what_the_gpu_faulted_back() {
        for mode in [PolicyMode::Prescient, PolicyMode::DriverLike] {
            let (mut l, mut e) = (Residency::default(), engine());
            l.add(B, BLOCK_BYTES);
            l.sub(B, BLOCK_BYTES); // eviction issued
                                   // The GPU faults part of the block back before the eviction's event.
            apply_migration(
                &mut l,
                &mut e,
                mode,
                &mig(uvm::CAUSE_COHERENCE, true, 64 << 10),
            );
            apply_migration(
                &mut l,
                &mut e,
                mode,
                &mig(uvm::CAUSE_USER, false, BLOCK_BYTES),
            );
            assert_eq!(
                l.get(B),
                64 << 10,
                "{mode:?}: residency lost to a late event"
            );
        }
    }

    #[test]
    fn the_drivers_own_migrations_are_applied_and_its_evictions_reported() {
        let (mut l, mut e) = (Residency::default(), engine());
        let m = PolicyMode::Prescient;
        assert!(!apply_migration(
            &mut l,
            &mut e,
            m,
            &mig(uvm::CAUSE_PREFETCH, true, BLOCK_BYTES)
        ));
        assert_eq!(l.get(B), BLOCK_BYTES);
        assert!(apply_migration(
            &mut l,
            &mut e,
            m,
            &mig(uvm::CAUSE_EVICTION, false, BLOCK_BYTES)
        ));
        assert_eq!(l.blocks(), 0);
        assert_eq!(e.stats().demand_evictions, 1);
    }

    #[test]
    fn observing_counts_the_processs_own_user_migrations() {
        let (mut l, mut e) = (Residency::default(), engine());
        let m = PolicyMode::Observe;
        apply_migration(&mut l, &mut e, m, &mig(uvm::CAUSE_USER, true, BLOCK_BYTES));
        assert_eq!(l.get(B), BLOCK_BYTES);
        apply_migration(&mut l, &mut e, m, &mig(uvm::CAUSE_USER, false, BLOCK_BYTES));
        assert_eq!(l.blocks(), 0);
    }

    #[test]
    fn driver_like_counts_the_processs_own_prefetches_to_the_gpu() {
        let (mut l, mut e) = (Residency::default(), engine());
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::DriverLike,
            &mig(uvm::CAUSE_USER, true, BLOCK_BYTES),
        );
        assert_eq!(l.get(B), BLOCK_BYTES);
    }

    /// Our eviction counts its block until the worker's UVM_MIGRATE to
    /// the CPU returned; the eviction's own event (ours, cause "user")
    /// takes nothing off before that.
    #[test]
    fn a_block_counts_until_its_eviction_returns() {
        let (mut l, mut e) = (Residency::default(), engine());
        fault_in(&mut l, &mut e, B);
        assert!(l.leave(B));
        assert!(!l.leave(B), "leaving once");
        assert_eq!(
            (l.blocks(), l.leaving_blocks(), l.staying_blocks()),
            (1, 1, 0)
        );
        assert_eq!((l.total(), l.staying_total()), (BLOCK_BYTES, 0));
        assert_eq!(l.pop_oldest(), None, "no arrival-order candidate");
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::Prescient,
            &mig(uvm::CAUSE_USER, false, BLOCK_BYTES),
        );
        assert_eq!(l.total(), BLOCK_BYTES, "the event of our own eviction");
        assert_eq!(l.left(B, true), Left::Gone);
        assert_eq!((l.blocks(), l.total(), l.leaving_total()), (0, 0, 0));
        assert_eq!(l.left(B, true), Left::Moot);
    }

    /// The driver refused the eviction: the block stays, counted, and is
    /// an arrival-order candidate (a victim) again.
    #[test]
    fn a_refused_eviction_leaves_the_block_resident() {
        let mut l = Residency::default();
        l.add(B, BLOCK_BYTES);
        assert_eq!(l.pop_oldest(), Some(B));
        l.leave(B);
        assert_eq!(l.left(B, false), Left::Stays);
        assert_eq!(
            (l.blocks(), l.leaving_blocks(), l.total()),
            (1, 0, BLOCK_BYTES)
        );
        assert_eq!(l.pop_oldest(), Some(B));
    }

    /// While its eviction runs, the GPU faults the block back (or the
    /// driver moves part of it in): it is resident again and stays
    /// counted when the eviction returns, the engine holding it again; the
    /// driver evicting it meanwhile takes it off at once.
    #[test]
    fn arrivals_and_driver_evictions_while_leaving_win_over_the_end() {
        let (mut l, mut e) = (Residency::default(), engine());
        fault_in(&mut l, &mut e, B);
        e.evicted(B); // the victim, as the shared loop takes it
        l.leave(B);
        fault_in(&mut l, &mut e, B);
        assert!(e.is_resident(B), "the engine holds it again");
        assert_eq!((l.leaving_blocks(), l.leaving_total()), (0, 0));
        assert_eq!(l.left(B, true), Left::Moot);
        assert_eq!(l.total(), BLOCK_BYTES);
        l.leave(B);
        assert!(apply_migration(
            &mut l,
            &mut e,
            PolicyMode::Prescient,
            &mig(uvm::CAUSE_EVICTION, false, BLOCK_BYTES)
        ));
        assert_eq!(
            (l.blocks(), l.leaving_blocks(), l.leaving_total()),
            (0, 0, 0)
        );
        assert_eq!(l.left(B, true), Left::Moot);
    }

    #[test]
    fn a_gpu_fault_counts_against_the_budget_once() {
        let (mut l, mut e) = (Residency::default(), engine());
        // First touch by the GPU: a fault, no migration event.
        fault_in(&mut l, &mut e, B);
        assert_eq!((l.blocks(), l.get(B)), (1, BLOCK_BYTES));
        // A migration event for the same block (a CPU-first block) adds nothing.
        apply_migration(
            &mut l,
            &mut e,
            PolicyMode::DriverLike,
            &mig(uvm::CAUSE_COHERENCE, true, BLOCK_BYTES),
        );
        fault_in(&mut l, &mut e, B);
        assert_eq!((l.blocks(), l.total), (1, BLOCK_BYTES));
        // It is a victim like any resident block.
        let mut vic = vec![Victim::default(); 2];
        assert_eq!(e.victims(&mut vic), 1);
        assert_eq!(vic[0].block, B);
    }
}
