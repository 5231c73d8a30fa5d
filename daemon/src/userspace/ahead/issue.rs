//! The blocks of the launches to come, prefetched in launch order under
//! the lane's limit, ahead of the engine's own predictions.
//!
//! Victims stay the engine's choice (dead blocks first, then the least
//! recently migrated), with one change: before the round every resident
//! block of the window is made the most recently migrated, the ones used
//! soonest last, so that blocks outside the window go first and, among
//! the window's, the one used last goes first (Belady's choice within the
//! window; outside it, the engine's tables decide). order.rs has the
//! passes that order the whole queue (the next-use order, on by default,
//! and research knobs).

use super::queue::Upcoming;
use prescient_core::pump::{self, Admit, Host};
use prescient_core::{Engine, Limit, Prefetch, Room};
use std::collections::HashSet;
use std::ops::DerefMut;

/// Blocks of the window made most recently migrated per turn at most.
const MAX_TOUCH: usize = 512;

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

/// The window of a lane, and whether it is a large one: the first `pct`
/// percent of its limit's blocks of the upcoming ones; with `large_pct`
/// (`--large-window-pct`), when the running launches alone use more
/// blocks than the limit, the first `large_pct` percent of it of
/// `up.running()` instead (their blocks a later launch also uses first,
/// then the rest in order of use).
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
pub(in crate::userspace) fn window(
    up: &Upcoming,
    limit_blocks: u64,
    pct: u32,
    large_pct: u32,
) -> (&[u64], bool) {
    if large_pct > 0 && up.running_exceeds(limit_blocks) {
        let running = up.running();
        return (
            &running[..part(limit_blocks, large_pct).min(running.len())],
            true,
        );
    }
    (
        &up.blocks[..part(limit_blocks, pct).min(up.blocks.len())],
        false,
    )
}

/// `pct` percent (at most 100) of `limit_blocks`: a window's size.
pub(in crate::userspace) fn part(limit_blocks: u64, pct: u32) -> usize {
    (limit_blocks.saturating_mul(u64::from(pct.min(100))) / 100) as usize
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
        let up = Upcoming {
            blocks: (100..120).collect(),
            ..Upcoming::default()
        };
        let mut host = test_host(&mut parts, &mut l, &route, gpu);
        let (w, large) = window(&up, 8, 50, 0);
        assert_eq!((w, large), (&up.blocks[..4], false));
        let (prefetched, _) = until_done(&mut e, limit, &mut host, w);
        assert_eq!(prefetched, 4);
        assert!(l.blocks() <= 8);
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
