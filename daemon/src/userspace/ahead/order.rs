//! Victim order over the whole queue of launches to come: passes that
//! make blocks the most recently migrated in an order the engine's victims
//! then follow, at most every `ORDER_EVERY`. The next-use order is on by
//! default; the others are research knobs, off.
//!
//! `--order-queue` (hidden, off) does what issue.rs does for the window
//! over the whole queue (`order_upcoming`; about 90 us at 4096 blocks): blocks no
//! queued launch uses go first. GPU runs 77-83 in BENCHMARKS-gpu.md: the
//! transformer 1.25-1.32x faster and ResNet-50 1.05-1.13x, but the encoder
//! slower in three runs of four (median of 10 repetitions 365 ms against
//! 250; its victims came back by the driver's faults about a step later
//! instead of by prefetch: two to three times the faults) and dnn 1.7-3x
//! slower (the first 64 MB of each buffer, a guessed footprint, kept while
//! its first kernel streamed 1.25 GiB twice). Not understood well enough
//! to ship.
//!
//! `--cyclic-victims` (hidden, off) puts before that order the blocks no
//! queued launch uses, from the one that left the queue last
//! (`order_cyclic`): GPU runs 87-90, stream 1.87x faster and the
//! transformer 1.16x, the 220M LM 1.31-1.52x slower.
//!
//! The next-use order (on; `--no-next-use-victims`, hidden, turns it off)
//! puts before `order_upcoming`'s order the blocks no queued launch uses
//! by their next use predicted from a step ago, the farthest first
//! (`order_next_use`, recur.rs), and runs only when those were computed
//! again (every 256th of a step, queue.rs `NEXT_USE_PASSES`): the block
//! that left last is the one a backward pass needs first. GPU runs 108-113: stream 1.39-1.63x faster,
//! the bench transformer 1.17-1.20x, dnn 1.28-1.48x, the PyTorch jobs as
//! fast or faster with fewer bytes, FDTD-2D 3% slower. No such pass runs
//! while the running launches alone exceed the limit (`may_order`); the
//! sweep order does then (`order_sweep`, sweep.rs: the blocks the GPU has
//! passed go by their next use, the ones ahead of it are kept; on with the
//! next-use order, `--no-sweep-victims`, hidden, turns it off).

use super::queue::{Left, Upcoming};
use super::sweep::Sweep;
use prescient_core::Engine;
use std::ops::DerefMut;
use std::time::{Duration, Instant};

/// How often the whole queue's blocks are ordered
/// for victim choice (`order_upcoming`); between passes, blocks migrated
/// in go to the most recent end, where blocks about to be used belong.
pub(in crate::userspace) const ORDER_EVERY: Duration = Duration::from_millis(1);

/// Now, if a pass may run: none ran (`last`) or the last was
/// [`ORDER_EVERY`] ago or more.
pub(in crate::userspace) fn due(last: Option<Instant>) -> Option<Instant> {
    let now = Instant::now();
    last.is_none_or(|t| now.duration_since(t) >= ORDER_EVERY)
        .then_some(now)
}

/// Makes the resident live blocks of `upcoming` (the launches to come,
/// in order of use) the most recently migrated, the one used soonest
/// last, so that the engine's victims are blocks no queued launch uses
/// first, then queued ones from the one used last on. Returns how many
/// were touched. The window (the first blocks) is ordered again by
/// `issue`. A block declared dead stays dead: the list is computed when
/// the queue changes and can hold a block freed since, and making it
/// most recently migrated would move it to the live list (evicted with a
/// copy instead of discarded).
pub(in crate::userspace) fn order_upcoming<S>(engine: &mut Engine<S>, upcoming: &[u64]) -> u64
where
    S: DerefMut<Target = [u64]>,
{
    touch_live(engine, upcoming.iter().rev().copied())
}

/// Makes the resident live blocks of `blocks` the most recently migrated,
/// in that order (the last touched is the last victim); returns how many.
fn touch_live<S>(engine: &mut Engine<S>, blocks: impl Iterator<Item = u64>) -> u64
where
    S: DerefMut<Target = [u64]>,
{
    let mut touched = 0;
    for b in blocks {
        if engine.is_live(b) {
            engine.migrated_in(b);
            touched += 1;
        }
    }
    touched
}

/// `--cyclic-victims`: [`order_upcoming`], after making the resident live
/// blocks no queued launch uses the most recently migrated in the order
/// they left the queue, the one that left last first: victims are those
/// blocks from the one that left last (used again last, in a program
/// that repeats itself), then the queued ones from the one used last.
/// Returns how many blocks were touched.
pub(in crate::userspace) fn order_cyclic<S>(
    engine: &mut Engine<S>,
    left: &Left,
    upcoming: &[u64],
) -> u64
where
    S: DerefMut<Target = [u64]>,
{
    let mut gone: Vec<(u64, u64)> = (left.at.iter())
        .filter(|(&b, _)| engine.is_live(b))
        .map(|(&b, &seq)| (seq, b))
        .collect();
    // Last left, and within one list the higher block, touched first.
    gone.sort_unstable_by(|x, y| y.cmp(x));
    for &(_, b) in &gone {
        engine.migrated_in(b);
    }
    gone.len() as u64 + order_upcoming(engine, upcoming)
}

/// The next-use order: [`order_upcoming`], after making the resident
/// live blocks of `farthest_first` (`(next use, block)` of blocks no
/// queued launch uses, recur.rs) the most recently migrated in that
/// order: victims are the blocks no launch is known to use, then those
/// expected back last, then the queued ones from the one used last.
/// Returns how many blocks were touched.
pub(in crate::userspace) fn order_next_use<S>(
    engine: &mut Engine<S>,
    farthest_first: &[(u64, u64)],
    upcoming: &[u64],
) -> u64
where
    S: DerefMut<Target = [u64]>,
{
    touch_live(engine, farthest_first.iter().map(|&(_, b)| b)) + order_upcoming(engine, upcoming)
}

/// The sweep order, for running launches larger than the limit (where
/// [`may_order`] keeps the other passes out): the resident live blocks of
/// `farthest_first` but the running ones the GPU has not passed yet, in
/// that order (a passed one is next used after its launch, which recur.rs
/// gives), then the running blocks not passed from the one reached last:
/// victims are blocks used again last, and of the sweep's, the ones behind
/// it. Without next uses (no step known yet), the passed blocks go first,
/// the one passed last first. Returns how many blocks were touched.
///
/// Why not the plain next-use order: it keeps every block of the running
/// launches, so their victims are blocks later launches need first; see
/// sweep.rs for the counts.
pub(in crate::userspace) fn order_sweep<S>(
    engine: &mut Engine<S>,
    farthest_first: &[(u64, u64)],
    sweep: &mut Sweep,
    running: &[u64],
) -> u64
where
    S: DerefMut<Target = [u64]>,
{
    let not_ahead = |b: &u64| !matches!(sweep.place(*b), Some((_, false)));
    let mut touched = if farthest_first.is_empty() {
        touch_live(engine, sweep.passed(running).into_iter())
    } else {
        touch_live(
            engine,
            farthest_first.iter().map(|&(_, b)| b).filter(not_ahead),
        )
    };
    let ahead = sweep.window(running, running.len());
    touched += touch_live(engine, ahead.iter().rev().copied());
    touched
}

/// May the whole-queue passes run? Not while the running launches alone
/// use more blocks than the limit: victims stay the engine's (least
/// recently migrated, the window's blocks last) until they end.
///
/// Why: a static order of a kernel larger than memory makes its blocks
/// used last the first victims, and those are the ones its sweep is about
/// to reach, and the engine's prefetches of them went out before use,
/// every turn (GPU run 87: dnn, whose first kernel reads 1 GiB twice under
/// a 1 GiB budget, moved 41-52 GB a step instead of 3 with either pass;
/// with this rule, run 88, 3.3). Leaving only its blocks out of the order
/// would protect the later launches' above them, the same mistake.
pub(in crate::userspace) fn may_order(up: &Upcoming, limit_blocks: u64) -> bool {
    !up.running_exceeds(limit_blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::config::base_params;
    use crate::userspace::residency::{fault_in, Residency};
    use prescient_core::BLOCK_BYTES;

    /// With 0-7 resident (migrated in that order) and launches to come
    /// that use 3, 20 (not resident), 1, 6 (declared dead since the list
    /// was made) and 5, in that order: the dead block is still discarded
    /// first, then the victims are the blocks no launch uses, least
    /// recently migrated first, then the queued ones from the one used
    /// last (5) to the one used first (3). Without the ordering the engine
    /// would give 6, then 0-7 in order.
    #[test]
    fn victims_are_blocks_no_launch_uses_then_the_queued_one_used_last() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = prescient_core::Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Residency::default();
        for b in 0..8 {
            fault_in(&mut l, &mut e, b);
        }
        assert!(e.mark_dead(6));
        assert_eq!(order_upcoming(&mut e, &[3, 20, 1, 6, 5]), 3);
        let mut out = [prescient_core::Victim::default(); 8];
        assert_eq!(e.victims(&mut out), 8);
        let got: Vec<(u64, bool)> = out.iter().map(|v| (v.block, v.discard)).collect();
        let want: Vec<(u64, bool)> = [6, 0, 2, 4, 7, 5, 1, 3]
            .iter()
            .map(|&b| (b, b == 6))
            .collect();
        assert_eq!(got, want);
    }

    /// `--cyclic-victims`: with 0-7 resident and the launches to come
    /// using 3 then 5, blocks 0-1 left the queue with list 1, 6-7 with
    /// list 2 and 2 with list 3 (4 never queued): victims are 4 (never
    /// ordered), then 2, 7, 6, 1, 0 (the one that left last first, the
    /// higher block first within a list), then 5 and 3 (the queued one
    /// used last first).
    #[test]
    fn cyclic_victims_go_from_the_block_that_left_the_queue_last() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = prescient_core::Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Residency::default();
        for b in 0..8 {
            fault_in(&mut l, &mut e, b);
        }
        let mut left = Left::default();
        left.at
            .extend([(0, 1), (1, 1), (6, 2), (7, 2), (2, 3), (99, 3)]);
        assert_eq!(
            order_cyclic(&mut e, &left, &[3, 5]),
            7,
            "99 is not resident"
        );
        let mut out = [prescient_core::Victim::default(); 8];
        assert_eq!(e.victims(&mut out), 8);
        let got: Vec<u64> = out.iter().map(|v| v.block).collect();
        assert_eq!(got, [4, 2, 7, 6, 1, 0, 5, 3]);
    }

    /// The next-use order through the queue: four training steps of six
    /// launches (forward 1-3 writes activations 10-12, backward 4-6
    /// reads them in reverse), then the fifth's forward pass, which the GPU
    /// has run (the page shows its last launch, which uses 12). Blocks
    /// 10-12 and 30 (no launch uses it) are resident: the victims are 30,
    /// then 10 (read last by the coming backward pass), 11, 12. The block
    /// that left the queue last, 11, is the one it reads second.
    #[test]
    fn next_use_victims_go_by_the_last_steps_order() {
        use super::super::queue::Queue;
        use prescient_uapi::execpage::encode;
        use prescient_uapi::launchring::Record;
        let mut q = Queue::default();
        q.recur = Some(Default::default());
        let order = [(1, 10), (2, 11), (3, 12), (4, 12), (5, 11), (6, 10)];
        let launches: Vec<_> = (0..4)
            .flat_map(|_| order)
            .chain(order.into_iter().take(3))
            .collect();
        for &(id, block) in &launches {
            let mut r = Record {
                id: encode(id),
                stream: 0x7000,
                ..Record::default()
            };
            r.push(block, 1);
            q.push(&r);
        }
        for &(id, _) in &launches {
            q.started(0x7000, id);
        }
        let mut up = Upcoming {
            next_use: Some(Default::default()),
            ..Upcoming::default()
        };
        q.upcoming(MAX_UPCOMING_TEST, &mut up);
        assert_eq!(up.blocks, [12], "the running launch");
        let next = up.next_use.clone().unwrap().farthest_first;
        assert_eq!(next, [(30, 10), (29, 11), (28, 12)]);

        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = prescient_core::Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Residency::default();
        for b in [12, 11, 10, 30] {
            fault_in(&mut l, &mut e, b);
        }
        assert_eq!(order_next_use(&mut e, &next, &up.blocks), 4, "12 twice");
        let mut out = [prescient_core::Victim::default(); 4];
        assert_eq!(e.victims(&mut out), 4);
        let got: Vec<u64> = out.iter().map(|v| v.block).collect();
        assert_eq!(got, [30, 10, 11, 12]);
    }

    /// The list bound for the test above: the whole queue.
    const MAX_UPCOMING_TEST: usize = 64;

    /// The passes run unless the running launches are larger than the
    /// limit.
    #[test]
    fn no_pass_while_a_running_launch_is_larger_than_the_limit() {
        let running = |n: u64| Upcoming {
            running: Some((0..n).collect()),
            ..Upcoming::default()
        };
        assert!(may_order(&running(3), 8));
        assert!(may_order(&running(8), 8));
        assert!(!may_order(&running(9), 8));
    }
}
