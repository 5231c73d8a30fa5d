//! Dead blocks: dead victims and dead data off the GPU discarded
//! (UVM_DISCARD, no copy), and the victims of one turn on their way out
//! (`Leaving`); marks reach the engines through lanes.rs (`apply_mark`).
//! marks.rs says why a discard never destroys live data.

use super::alive::AliveGate;
use super::blocklog::BlockLog;
use super::migrator::{sorted_runs, Job, Migrator};
use super::snapshot::Snapshot;
use prescient_core::BLOCK_SHIFT;
use prescient_uvm::ioctl as uvm;
use std::collections::HashSet;
use std::time::Instant;

/// Victims taken off the ledger in one turn of the loop, waiting to leave
/// the GPU: dead ones (when discarding) for UVM_DISCARD, live ones for
/// eviction by the workers, in runs of consecutive blocks (a 2 MB
/// UVM_MIGRATE to the CPU moves 15 GB/s on the H200; runs amortise its
/// fixed cost, as the prefetches' runs do).
#[derive(Default)]
pub(super) struct Leaving {
    pub(super) dead: Vec<u64>,
    pub(super) evict: Vec<u64>,
}

impl Leaving {
    /// Submits the pending evictions, chosen by the lane of GPU `from`,
    /// as runs of at most `max` blocks.
    pub(super) fn submit_evictions(&mut self, max: u64, migrator: &Migrator, from: [u8; 16]) {
        for (s, l) in sorted_runs(&mut self.evict, max) {
            migrator.submit(Job::to_cpu(s, l, from));
        }
    }
}

/// Discards `blocks` (dead; drained) in runs of consecutive blocks,
/// synchronously on this thread (marks.rs says why), and records them in
/// `discarded` and, each a `D` line, in `log`. Returns the blocks not discarded, run by run: those an
/// alive mark not applied yet holds in `gate`, then those the driver
/// refused.
/// Each run is checked against the gate and discarded with the gate held,
/// so an alive mark that comes meanwhile waits for that one UVM_DISCARD
/// (at most `max_run` blocks) and the next run sees its blocks (alive.rs).
pub(super) fn discard_blocks(
    fd: std::os::fd::RawFd,
    blocks: &mut Vec<u64>,
    max_run: u64,
    discarded: &mut HashSet<u64>,
    snap: &mut Snapshot,
    gate: Option<&AliveGate>,
    log: &mut BlockLog,
) -> Vec<u64> {
    let mut refused = Vec::new();
    if blocks.is_empty() {
        return refused;
    }
    let t = Instant::now();
    for (s, l) in sorted_runs(blocks, max_run) {
        let mut guard = gate.map(AliveGate::guard);
        let mut run: Vec<u64> = (s..s + l).collect();
        if let Some(g) = &guard {
            let held = g.take_held(&mut run);
            snap.discards_held_alive += held.len() as u64;
            refused.extend(held);
        }
        // What is left of the run, in pieces where held blocks cut it.
        for (s, l) in sorted_runs(&mut run, max_run) {
            let failed = discard_run(fd, s, l, snap);
            let gone = (s..s + l).filter(|b| failed.binary_search(b).is_err());
            if let Some(g) = guard.as_mut() {
                // Recorded under the guard: an alive mark sees them (alive.rs).
                g.discarded(gone.clone());
            }
            for b in gone {
                log.discard(b);
                discarded.insert(b);
            }
            refused.extend(failed);
        }
    }
    snap.discard_s += t.elapsed().as_secs_f64();
    refused
}

/// UVM_DISCARD (with unmap) of blocks `s..s + l`; returns the blocks that
/// could not be discarded, in order. A run that spans two allocations is
/// refused by the driver (one managed range per call): then block by block.
pub(super) fn discard_run(fd: std::os::fd::RawFd, s: u64, l: u64, snap: &mut Snapshot) -> Vec<u64> {
    let one = |b: u64, n: u64, snap: &mut Snapshot| {
        let r = uvm::discard(
            fd,
            b << BLOCK_SHIFT,
            n << BLOCK_SHIFT,
            uvm::DISCARD_FLAG_UNMAP,
        );
        match r {
            Ok(()) => {
                snap.discard_ops += 1;
                snap.discarded_blocks += n;
            }
            Err(e) if n == 1 => {
                snap.discard_errors += 1;
                if snap.discard_errors <= 5 {
                    tracing::warn!(
                        pid = snap.pid,
                        base = format!("{:#x}", b << BLOCK_SHIFT),
                        "UVM_DISCARD failed: {e}"
                    );
                }
            }
            Err(_) => {}
        }
        r.is_ok()
    };
    if one(s, l, snap) {
        return Vec::new();
    }
    (s..s + l).filter(|&b| l == 1 || !one(b, 1, snap)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::lanes::tests::one_lane;
    use crate::userspace::lanes::{apply_mark, Lanes};
    use crate::userspace::marks::{Discarded, Mark};
    use crate::userspace::mode::PolicyMode;
    use crate::userspace::residency::tests::GPU;
    use crate::userspace::residency::Residency;
    use prescient_core::{Engine, Victim, BLOCK_BYTES};
    use prescient_uapi::control::Applied;

    fn eng(l: &mut Lanes) -> &mut Engine<Vec<u64>> {
        &mut l.at(GPU).unwrap().engine
    }

    fn refetch(l: &mut Lanes) -> Vec<u64> {
        l.at(GPU).unwrap().refetch.clone()
    }

    fn resident(l: &mut Residency, e: &mut Engine<Vec<u64>>, blocks: std::ops::Range<u64>) {
        for b in blocks {
            if l.add(b, BLOCK_BYTES) {
                e.migrated_in(b);
            }
        }
    }

    /// `apply_mark` in prescient mode, with one GPU and no owner lookup.
    fn apply(
        lanes: &mut Lanes,
        discarded: &mut HashSet<u64>,
        m: &Mark,
        host_dead: &mut Vec<u64>,
    ) -> Applied {
        apply_mark(
            lanes,
            |_| None,
            discarded,
            PolicyMode::Prescient,
            m,
            host_dead,
        )
    }

    fn mark(dead: bool, blocks: std::ops::Range<u64>) -> Mark {
        Mark {
            dead,
            blocks: vec![blocks],
            gate: None,
            owner: None,
            populated: Vec::new(),
            discarded: Discarded::BringBack,
        }
    }

    #[test]
    fn dead_blocks_are_the_first_victims_and_discarded() {
        let (mut l, mut lanes) = (Residency::default(), one_lane());
        let mut discarded = HashSet::new();
        let mut host_dead = Vec::new();
        resident(&mut l, eng(&mut lanes), 10..20);
        let a = apply_mark(
            &mut lanes,
            |_| None,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(true, 15..18),
            &mut host_dead,
        );
        assert_eq!((a.blocks, a.resident, a.ignored), (3, 3, false));
        let mut vic = vec![Victim::default(); 4];
        let k = eng(&mut lanes).victims(&mut vic);
        assert_eq!(k, 4);
        let dead: Vec<u64> = vic[..3].iter().map(|v| v.block).collect();
        assert_eq!(dead, [15, 16, 17]);
        assert!(vic[..3].iter().all(|v| v.discard));
        assert!(!vic[3].discard, "a live block is evicted, not discarded");
        assert!(refetch(&mut lanes).is_empty());
    }

    #[test]
    fn a_discarded_block_marked_alive_comes_back_and_a_live_one_stays() {
        let (mut l, mut lanes) = (Residency::default(), one_lane());
        let mut discarded = HashSet::new();
        let mut host_dead = Vec::new();
        resident(&mut l, eng(&mut lanes), 10..14);
        apply_mark(
            &mut lanes,
            |_| None,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(true, 10..14),
            &mut host_dead,
        );
        // The backend discarded 10 and 11 (as its pre-eviction does).
        for b in [10, 11] {
            l.sub(b, BLOCK_BYTES);
            eng(&mut lanes).evicted(b);
            discarded.insert(b);
        }
        let a = apply_mark(
            &mut lanes,
            |_| None,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(false, 9..13),
            &mut host_dead,
        );
        // Of 9..13 only 12 was resident; 10 and 11 come back.
        assert_eq!((a.blocks, a.resident, a.refetched), (4, 1, 2));
        assert_eq!(refetch(&mut lanes), [10, 11]);
        assert!(discarded.is_empty());
        assert_eq!(
            l.blocks(),
            2,
            "the caller counts refetches once it has room"
        );
        // 13 was not in the alive range: it is the one dead victim left.
        let mut vic = vec![Victim::default(); 8];
        let k = eng(&mut lanes).victims(&mut vic);
        assert_eq!((vic[0].block, vic[0].discard), (13, true));
        assert!(vic[1..k].iter().all(|v| !v.discard));
    }

    /// Blocks an alive mark brought back before its reply are counted by
    /// the next turn, not migrated again; the others still come back
    /// through the refetch; a populated block the backend no longer had as
    /// discarded is counted too (it is on the GPU now).
    #[test]
    fn populated_blocks_are_counted_not_refetched() {
        let (mut l, mut lanes) = (Residency::default(), one_lane());
        let mut discarded = HashSet::from([20, 21, 22]);
        let mut host_dead = Vec::new();
        resident(&mut l, eng(&mut lanes), 0..1);
        let mut m = mark(false, 20..24);
        m.populated = vec![20, 22, 23];
        let a = apply(&mut lanes, &mut discarded, &m, &mut host_dead);
        assert_eq!(a.refetched, 3, "20-22 were discarded");
        assert!(discarded.is_empty());
        let lane = lanes.iter_mut().next().unwrap();
        assert_eq!(lane.populated, [20, 22, 23]);
        assert_eq!(lane.refetch, [21]);
    }

    /// An alive mark that brings nothing back makes the blocks alive in
    /// the engine and leaves discarded ones discarded: a revocation keeps
    /// them recorded (the alive mark of their next use brings them back),
    /// a `no_populate` mark (memory going back to the driver) forgets them.
    #[test]
    fn an_alive_mark_that_brings_nothing_back_leaves_discarded_blocks() {
        let (mut l, mut lanes) = (Residency::default(), one_lane());
        let mut discarded = HashSet::from([21, 22, 30]);
        let mut host_dead = Vec::new();
        resident(&mut l, eng(&mut lanes), 20..21);
        let dead = mark(true, 20..21);
        apply(&mut lanes, &mut discarded, &dead, &mut host_dead);
        let mut m = mark(false, 20..23);
        m.discarded = Discarded::Keep;
        let a = apply(&mut lanes, &mut discarded, &m, &mut host_dead);
        assert_eq!((a.blocks, a.resident, a.refetched), (3, 1, 0));
        assert_eq!(discarded, HashSet::from([21, 22, 30]));
        assert!(refetch(&mut lanes).is_empty());
        // The block's next use brings them back.
        let a = apply(
            &mut lanes,
            &mut discarded,
            &mark(false, 21..23),
            &mut host_dead,
        );
        assert_eq!(a.refetched, 2);
        assert_eq!(refetch(&mut lanes), [21, 22]);
        // Released: forgotten, so a later dead mark of the address is
        // discarded where it is.
        let mut m = mark(false, 30..31);
        m.discarded = Discarded::Forget;
        let a = apply(&mut lanes, &mut discarded, &m, &mut host_dead);
        assert_eq!(a.refetched, 0);
        assert!(discarded.is_empty());
        assert_eq!(refetch(&mut lanes), [21, 22], "nothing more to refetch");
        apply(
            &mut lanes,
            &mut discarded,
            &mark(true, 30..31),
            &mut host_dead,
        );
        assert_eq!(host_dead, [30]);
    }

    #[test]
    fn dead_blocks_off_the_gpu_are_listed_for_a_discard_where_they_are() {
        let (mut l, mut lanes) = (Residency::default(), one_lane());
        let mut discarded = HashSet::from([32]);
        let mut host_dead = Vec::new();
        resident(&mut l, eng(&mut lanes), 30..31);
        let a = apply_mark(
            &mut lanes,
            |_| None,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(true, 30..34),
            &mut host_dead,
        );
        // 30 is resident (a victim later), 32 was discarded already.
        assert_eq!((a.blocks, a.resident), (4, 1));
        assert_eq!(host_dead, [31, 33]);
        // Once discarded, an alive mark brings them back like any other.
        discarded.extend([31, 33]);
        host_dead.clear();
        let a = apply_mark(
            &mut lanes,
            |_| None,
            &mut discarded,
            PolicyMode::Prescient,
            &mark(false, 30..34),
            &mut host_dead,
        );
        assert_eq!(a.refetched, 3);
        assert_eq!(refetch(&mut lanes), [31, 32, 33]);
        assert!(host_dead.is_empty());
    }

    #[test]
    fn marks_are_ignored_where_the_driver_is_emulated_or_only_watched() {
        for mode in [PolicyMode::DriverLike, PolicyMode::Observe] {
            let (mut l, mut lanes) = (Residency::default(), one_lane());
            let mut discarded = HashSet::new();
            let mut host_dead = Vec::new();
            resident(&mut l, eng(&mut lanes), 0..4);
            let a = apply_mark(
                &mut lanes,
                |_| None,
                &mut discarded,
                mode,
                &mark(true, 0..4),
                &mut host_dead,
            );
            assert!(a.ignored);
            let mut vic = vec![Victim::default(); 4];
            let k = eng(&mut lanes).victims(&mut vic);
            assert!(vic[..k].iter().all(|v| !v.discard), "{mode:?}");
        }
    }

    #[test]
    fn refused_discards_are_returned_once_and_not_recorded() {
        let mut snap = Snapshot::default();
        let mut discarded = HashSet::new();
        let mut dead = vec![42, 40, 41, 42, 60];
        let refused = discard_invalid(&mut dead, &mut discarded, &mut snap, None);
        assert_eq!(refused, [40, 41, 42, 60]);
        assert!(dead.is_empty() && discarded.is_empty());
        assert_eq!(snap.discard_errors, 4);
    }

    /// `discard_blocks` on an invalid fd (every UVM_DISCARD fails), in
    /// runs of 16, with no block log.
    fn discard_invalid(
        dead: &mut Vec<u64>,
        discarded: &mut HashSet<u64>,
        snap: &mut Snapshot,
        gate: Option<&AliveGate>,
    ) -> Vec<u64> {
        discard_blocks(-1, dead, 16, discarded, snap, gate, &mut BlockLog::off())
    }

    /// Blocks an answered alive mark holds are never given to UVM_DISCARD
    /// (here no call is made for them: the fd is invalid, so a call would
    /// count an error) and come back first, for eviction.
    #[test]
    fn blocks_held_alive_are_not_discarded() {
        let mut snap = Snapshot::default();
        let mut discarded = HashSet::new();
        let gate = AliveGate::default();
        let id = gate.open((40..43).map(|b| b..b + 1).collect());
        let mut dead = vec![40, 41, 42];
        let refused = discard_invalid(&mut dead, &mut discarded, &mut snap, Some(&gate));
        assert_eq!(refused, [40, 41, 42]);
        assert_eq!(
            (
                snap.discard_errors,
                snap.discard_ops,
                snap.discards_held_alive
            ),
            (0, 0, 3)
        );
        // Some held, some not: only the others reach the driver.
        let mut dead = vec![39, 40, 60];
        let refused = discard_invalid(&mut dead, &mut discarded, &mut snap, Some(&gate));
        assert_eq!(refused, [40, 39, 60]);
        assert_eq!(snap.discard_errors, 2);
        // Once the mark is applied the gate lets them go again.
        gate.close(id);
        let mut dead = vec![40];
        discard_invalid(&mut dead, &mut discarded, &mut snap, Some(&gate));
        assert_eq!((snap.discard_errors, snap.discards_held_alive), (3, 4));
    }

    #[test]
    fn a_failed_discard_hands_every_block_back_for_eviction() {
        let mut snap = Snapshot::default();
        // No such fd: the run fails, then each block; all are returned.
        assert_eq!(discard_run(-1, 40, 3, &mut snap), [40, 41, 42]);
        assert_eq!((snap.discard_errors, snap.discarded_blocks), (3, 0));
        assert_eq!(discard_run(-1, 50, 1, &mut snap), [50]);
        assert_eq!(snap.discard_errors, 4);
    }
}
