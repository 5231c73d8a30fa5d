//! The blocks of the launches to come, prefetched in launch order under
//! the lane's limit, ahead of the engine's own predictions.
//!
//! Victims stay the engine's choice (dead blocks first, then the least
//! recently migrated), with one change: before the round every resident
//! block of the window is made the most recently migrated, the ones used
//! soonest last, so that blocks outside the window go first and, among
//! the window's, the one used last goes first (Belady's choice within the
//! window; outside it, the engine's tables decide).
//!
//! `--order-queue` (hidden, off) does the same over the whole queue every
//! `ORDER_EVERY` (`order_upcoming`; about 90 us at 4096 blocks): blocks no
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
//! transformer 1.16x, the 220M LM 1.31-1.52x slower. Neither pass runs
//! while the running launches alone exceed the limit (`may_order`).

use super::queue::Left;
use prescient_core::pump::{self, Admit, Host};
use prescient_core::{Engine, Limit, Prefetch, Room};
use std::collections::HashSet;
use std::ops::DerefMut;
use std::time::Duration;

/// Blocks of the window made most recently migrated per turn at most.
const MAX_TOUCH: usize = 512;
/// With `--order-queue`: how often the whole queue's blocks are ordered
/// for victim choice (`order_upcoming`); between passes, blocks migrated
/// in go to the most recent end, where blocks about to be used belong.
pub(in crate::userspace) const ORDER_EVERY: Duration = Duration::from_millis(1);

/// The blocks of a large window (running launches larger than the
/// limit: `window`) prefetched since those launches started: each is
/// prefetched once per start.
///
/// Why: such a window plus the engine's own predictions can leave no
/// victim but the window's blocks; prefetching the one evicted last turn
/// evicts another, every turn (GPU run 84: dnn moved 54 GB a step instead
/// of 3). Once is enough: an evicted block comes back by the engine's
/// prediction or the GPU's fault.
#[derive(Debug, Default)]
pub(in crate::userspace) struct Once {
    /// The launch queue's front generation the blocks belong to.
    generation: Option<u64>,
    blocks: HashSet<u64>,
}

impl Once {
    /// The set for the running launches of front generation `generation`:
    /// emptied when they changed.
    pub(in crate::userspace) fn at(&mut self, generation: u64) -> &mut Once {
        if self.generation != Some(generation) {
            self.generation = Some(generation);
            self.blocks.clear();
        }
        self
    }
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::userspace) struct Issued {
    pub(in crate::userspace) prefetched: u64,
    pub(in crate::userspace) resident: u64,
    pub(in crate::userspace) declined: u64,
    /// The round stopped: no victim was left outside the engine's own
    /// predictions.
    pub(in crate::userspace) no_room: bool,
    /// The round stopped: the room made for the next block was still
    /// leaving the GPU (its evictions had not completed).
    pub(in crate::userspace) waiting: bool,
}

/// Prefetches the blocks of `window` (in order of use) that are not
/// resident, at most `max`, making room for each under `limit`; stops at
/// the first whose room is not free yet (its victims are still leaving).
/// With `once`, a block in it is not prefetched again, and each one
/// prefetched goes in: see [`Once`].
pub(in crate::userspace) fn issue<S, H>(
    engine: &mut Engine<S>,
    limit: Limit,
    host: &mut H,
    window: &[u64],
    max: usize,
    mut once: Option<&mut Once>,
) -> Issued
where
    S: DerefMut<Target = [u64]>,
    H: Host + ?Sized,
{
    let mut done = Issued::default();
    if window.is_empty() {
        return done;
    }
    // The soonest used ones only: the touch is paid every turn.
    for &b in window.iter().take(MAX_TOUCH).rev() {
        if engine.is_resident(b) {
            engine.migrated_in(b);
        }
    }
    for &b in window {
        if done.prefetched as usize >= max {
            break;
        }
        let engine_says = engine.is_resident(b);
        if host.is_resident(b, engine_says) {
            done.resident += 1;
            continue;
        }
        if once.as_ref().is_some_and(|o| o.blocks.contains(&b)) {
            continue;
        }
        match pump::make_room(engine, limit, host) {
            Room::Free => {}
            Room::Leaving => {
                done.waiting = true;
                break;
            }
            Room::None => {
                done.no_room = true;
                break;
            }
        }
        match host.prefetch(Prefetch { block: b, ahead: 0 }) {
            Admit::Issued => {
                engine.migrated_in(b);
                done.prefetched += 1;
                if let Some(o) = once.as_deref_mut() {
                    o.blocks.insert(b);
                }
            }
            Admit::Declined | Admit::Failed => done.declined += 1,
        }
    }
    done
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
    let mut resident = 0;
    for &b in upcoming.iter().rev() {
        if engine.is_live(b) {
            engine.migrated_in(b);
            resident += 1;
        }
    }
    resident
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

/// May the whole-queue passes run? Not while the running launches alone
/// use more blocks than the limit: victims stay the engine's (least
/// recently migrated, the window's blocks last) until they end.
///
/// Why: a static order of a kernel larger than memory makes its blocks
/// used last the first victims, and those are the ones its sweep is about
/// to reach; leaving its blocks out of the order protects the later
/// launches' and the ones that left the queue above them instead. Either
/// way the engine's prefetches went out before use, every turn (GPU run
/// 87: dnn, whose first kernel reads 1 GiB twice under a 1 GiB budget,
/// moved 41-52 GB a step instead of 3 with either pass).
pub(in crate::userspace) fn may_order(running: &[u64], limit_blocks: u64) -> bool {
    running.len() as u64 <= limit_blocks
}

/// The window of a lane: the first `pct` percent of its limit's blocks
/// of the upcoming ones; with `large_pct` (`--large-window-pct`), when
/// the running launches alone use more blocks than the limit, the first
/// `large_pct` percent of it of `running` instead (their blocks a later
/// launch also uses first, then the rest in order of use).
///
/// Why: a kernel larger than the budget that sweeps its input more than
/// once (dnn's layers are grid-stride loops with two waves of thread
/// blocks) loses every block to least-recently-migrated victims before
/// its next sweep comes back for it. Keeping most of it, and what the
/// next kernels read, lets the rest stream through what is left: a replay
/// of dnn's pattern (bench/gpu/dnn_replay.py) moves 1,208 blocks an
/// iteration with 75%, against 1,600 with the plain window and Belady's
/// 1,056. Off by default: on the GPU (run 84) 75% left the engine's own
/// prefetches too little room, and dnn thrashed.
pub(in crate::userspace) fn window<'a>(
    upcoming: &'a [u64],
    running: &'a [u64],
    limit_blocks: u64,
    pct: u32,
    large_pct: u32,
) -> &'a [u64] {
    let part = |pct: u32| (limit_blocks.saturating_mul(u64::from(pct.min(100))) / 100) as usize;
    if is_large(running, limit_blocks, large_pct) {
        return &running[..part(large_pct).min(running.len())];
    }
    &upcoming[..part(pct).min(upcoming.len())]
}

/// Do the running launches alone use more blocks than the limit, with
/// a large window asked for?
pub(in crate::userspace) fn is_large(running: &[u64], limit_blocks: u64, large_pct: u32) -> bool {
    large_pct > 0 && running.len() as u64 > limit_blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::config::base_params;
    use crate::userspace::pump::tests::{host as test_host, parts};
    use crate::userspace::pump::Host as DaemonHost;
    use crate::userspace::residency::{fault_in, Residency};
    use crate::userspace::route::tests::{index, table};
    use crate::userspace::route::Route;
    use prescient_core::BLOCK_BYTES;

    /// Under a budget of 8 blocks with 0-7 resident (7 migrated last), the
    /// launches to come use 20, 3, 21, 0, 22: the three new blocks come in
    /// that order, and the victims are blocks no upcoming launch uses, the
    /// daemon's ledger and the engine's agreeing throughout.
    #[test]
    fn upcoming_blocks_come_in_order_and_push_out_only_blocks_outside_the_window() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = prescient_core::Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Residency::default();
        for b in 0..8 {
            fault_in(&mut l, &mut e, b);
        }
        let mut route = Route::new(table(&[0]));
        route.fault(index(0), 0, || anyhow::bail!("known"));
        let gpu = route.table().gpu(index(0)).unwrap();
        let mut parts = parts();
        let mut host = test_host(&mut parts, &mut l, &route, gpu);
        let limit = Limit {
            capacity_blocks: 8,
            watermark_pct: 100,
        };
        let upcoming = [20, 3, 21, 0, 22];
        // Each victim's room is free once its eviction completes: one
        // block per turn here (a budget of 8 has no reserve to pipeline).
        let (prefetched, turns) = until_done(&mut e, limit, &mut host, &upcoming);
        assert_eq!(host.issued, [20, 21, 22]);
        assert_eq!((prefetched, turns), (3, 4));
        let out: Vec<u64> = host.leaving.evict.clone();
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|v| !upcoming.contains(v)), "victims {out:?}");
        for b in upcoming {
            assert!(l.get(b) == BLOCK_BYTES && e.is_resident(b), "{b} resident");
        }
        assert_eq!((l.blocks(), e.resident_blocks()), (8, 8));
        // A window as large as the budget: nothing outside it to evict
        // once the window is all there is.
        let up: Vec<u64> = (100..120).collect();
        let mut host = test_host(&mut parts, &mut l, &route, gpu);
        let w = window(&up, &[], 8, 50, 0);
        assert_eq!(w, &up[..4]);
        let (prefetched, _) = until_done(&mut e, limit, &mut host, w);
        assert_eq!(prefetched, 4);
        assert!(l.blocks() <= 8);
    }

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

    /// A window holding every resident block and one more (0-8 under a
    /// budget of 8): each turn the missing one is prefetched and the
    /// window's block used last evicted for it, without end; with `Once`
    /// a block prefetched once is not prefetched again: 20 turns send 19
    /// blocks without, 3 with.
    #[test]
    fn a_window_larger_than_the_room_does_not_rotate_with_once() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let limit = Limit {
            capacity_blocks: 8,
            watermark_pct: 100,
        };
        let w: Vec<u64> = (0..9).collect();
        let route = {
            let mut r = Route::new(table(&[0]));
            r.fault(index(0), 0, || anyhow::bail!("known"));
            r
        };
        let gpu = route.table().gpu(index(0)).unwrap();
        let mut parts = parts();
        let mut prefetched = [0u64; 2];
        for (with_once, sent) in prefetched.iter_mut().enumerate() {
            let mut e = prescient_core::Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
            let mut l = Residency::default();
            for b in 0..8 {
                fault_in(&mut l, &mut e, b);
            }
            let mut once = Once::default();
            let mut host = test_host(&mut parts, &mut l, &route, gpu);
            let mut ended = 0;
            for _ in 0..20 {
                let o = (with_once == 1).then(|| once.at(7));
                *sent += issue(&mut e, limit, &mut host, &w, 256, o).prefetched;
                for &b in &host.leaving.evict[ended..] {
                    host.residency.left(b, true);
                }
                ended = host.leaving.evict.len();
            }
        }
        assert!(prefetched[0] >= 10, "rotates: {prefetched:?}");
        // Each block at most once (here 8, then 7 and 6 evicted for it).
        assert!(prefetched[1] <= 3, "stops: {prefetched:?}");
        // A new start of the running launches empties the set.
        let mut once = Once::default();
        once.at(1).blocks.insert(5);
        assert!(once.at(1).blocks.contains(&5));
        assert!(once.at(2).blocks.is_empty());
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

    /// The passes run unless the running launches are larger than the
    /// limit.
    #[test]
    fn no_pass_while_a_running_launch_is_larger_than_the_limit() {
        assert!(may_order(&[1, 0, 2], 8));
        assert!(may_order(&[0; 8], 8));
        assert!(!may_order(&[0; 9], 8));
    }

    /// Issues `window` turn after turn, the turn's evictions completing
    /// after it, until a turn stops for no eviction; the ledger, blocks
    /// still leaving included, stays within the limit's capacity at every
    /// turn. Returns the blocks prefetched and the turns.
    fn until_done(
        e: &mut prescient_core::Engine<Vec<u64>>,
        limit: Limit,
        host: &mut DaemonHost,
        window: &[u64],
    ) -> (u64, u32) {
        let (mut prefetched, mut turns, mut ended) = (0, 0, host.leaving.evict.len());
        loop {
            let done = issue(e, limit, host, window, 256, None);
            turns += 1;
            prefetched += done.prefetched;
            assert!(host.residency.blocks() <= limit.capacity_blocks);
            for &b in &host.leaving.evict[ended..] {
                host.residency.left(b, true);
            }
            ended = host.leaving.evict.len();
            if !done.waiting || turns > 64 {
                return (prefetched, turns);
            }
        }
    }
}
