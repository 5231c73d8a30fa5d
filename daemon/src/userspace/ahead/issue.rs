//! The blocks of the launches to come, prefetched in launch order under
//! the lane's limit, ahead of the engine's own predictions.
//!
//! Victims stay the engine's choice (dead blocks first, then the least
//! recently migrated), with one change: the resident blocks of the
//! launches to come are made the most recently migrated, the ones used
//! soonest last, so that blocks no queued launch uses go first and, among
//! the queued ones, the one used last goes first: Belady's choice within
//! the known queue (outside it, the engine's tables decide). The window
//! is ordered every turn; the whole queue every `ORDER_EVERY`
//! (`order_upcoming`), since a pass over it costs about 90 us at 4096
//! blocks.
//!
//! Why the whole queue and not only the window: with the window alone,
//! a block the next launch uses and a block no launch uses were equal
//! victims. GPU run 76, dnn (a 1 GiB input and four 256 MB layers under a
//! 1 GiB budget, each kernel reading its input twice): 2,269 victims an
//! iteration, 1,171 of them back on the GPU in the same iteration, 4.9 GB
//! to the GPU a step where Belady's choice needs 2.2.

use super::queue::Listed;
use prescient_core::pump::{self, Admit, Host};
use prescient_core::{Engine, Limit, Prefetch, Room};
use std::ops::DerefMut;
use std::time::Duration;

/// Blocks of the window made most recently migrated per turn at most.
const MAX_TOUCH: usize = 512;
/// How often the whole queue's blocks are ordered for victim choice
/// (`order_upcoming`); between passes, blocks migrated in go to the
/// most recent end, which is where blocks about to be used belong.
pub(in crate::userspace) const ORDER_EVERY: Duration = Duration::from_millis(1);

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
pub(in crate::userspace) fn issue<S, H>(
    engine: &mut Engine<S>,
    limit: Limit,
    host: &mut H,
    window: &[u64],
    max: usize,
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
            }
            Admit::Declined | Admit::Failed => done.declined += 1,
        }
    }
    done
}

/// Makes the resident blocks of `upcoming` (the launches to come, in
/// order of use) the most recently migrated, the one used soonest last,
/// so that the engine's victims are blocks no queued launch uses first,
/// then queued ones from the one used last on. Returns how many were
/// resident. The window (the first blocks) is ordered again by `issue`.
pub(in crate::userspace) fn order_upcoming<S>(engine: &mut Engine<S>, upcoming: &[u64]) -> u64
where
    S: DerefMut<Target = [u64]>,
{
    let mut resident = 0;
    for &b in upcoming.iter().rev() {
        if engine.is_resident(b) {
            engine.migrated_in(b);
            resident += 1;
        }
    }
    resident
}

/// Whether the whole queue is ordered for victim choice: only while every
/// listed launch's blocks are known (no guessed range) and the running
/// launches' fit in half the lane's capacity.
///
/// Why: the order claims each listed block is used by its launch. A
/// guessed range (a pointer into an allocation with no allocator's block
/// known: the first 64 MB from the pointer) is where a launch starts, not
/// what it uses: GPU runs 77-78, dnn (plain cudaMallocManaged buffers, a
/// 1 GiB input and four 256 MB layers under a 1 GiB budget) kept the first
/// 32 blocks of all five buffers at the most recent end, a third of the
/// budget, while its first kernel streamed 640 blocks twice: 4,350 faults
/// an iteration against 1,420, 434-586 ms a step against 191-262. And a
/// running launch larger than the memory thrashes within itself in an
/// order nobody knows; its blocks are left to the engine (least recently
/// migrated first), as before. Launches known exactly gained: the
/// transformer 150.8 -> 120.2 ms a step (run 77), 172.5 -> 130.3 (run 78).
pub(in crate::userspace) fn orders_queue(listed: Listed, capacity_blocks: u64) -> bool {
    !listed.guessed && (listed.running as u64).saturating_mul(2) <= capacity_blocks
}

/// The window of a lane: the first `pct` percent of its limit's blocks
/// of the upcoming ones.
pub(in crate::userspace) fn window(upcoming: &[u64], limit_blocks: u64, pct: u32) -> &[u64] {
    let n = (limit_blocks.saturating_mul(u64::from(pct.min(100))) / 100) as usize;
    &upcoming[..n.min(upcoming.len())]
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
        let w = window(&up, 8, 50);
        assert_eq!(w, &up[..4]);
        let (prefetched, _) = until_done(&mut e, limit, &mut host, w);
        assert_eq!(prefetched, 4);
        assert!(l.blocks() <= 8);
    }

    /// With 0-7 resident (migrated in that order) and launches to come
    /// that use 3, 20 (not resident), 1 and 5, in that order: the victims
    /// are the blocks no launch uses, least recently migrated first, then
    /// the queued ones from the one used last (5) to the one used first
    /// (3). Without the ordering the engine would give 0-7 in order.
    #[test]
    fn victims_are_blocks_no_launch_uses_then_the_queued_one_used_last() {
        let p = base_params(Some(8 * BLOCK_BYTES), 1024);
        let mut e = prescient_core::Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut l = Residency::default();
        for b in 0..8 {
            fault_in(&mut l, &mut e, b);
        }
        assert_eq!(order_upcoming(&mut e, &[3, 20, 1, 5]), 3);
        let mut out = [prescient_core::Victim::default(); 8];
        assert_eq!(e.victims(&mut out), 8);
        let got: Vec<u64> = out.iter().map(|v| v.block).collect();
        assert_eq!(got, [0, 2, 4, 6, 7, 5, 1, 3]);
    }

    /// The queue is ordered only when no listed launch has a guessed
    /// range and the running launches fit in half the capacity: a launch
    /// of 640 blocks under 512 is left to the engine, 512 under 2048 and
    /// small launches are ordered, guesses never.
    #[test]
    fn only_known_launches_that_fit_in_half_the_memory_order_the_queue() {
        let known = |running| Listed {
            running,
            guessed: false,
        };
        assert!(!orders_queue(known(640), 512));
        assert!(orders_queue(known(512), 2048));
        assert!(orders_queue(known(256), 512));
        assert!(!orders_queue(known(257), 512));
        assert!(orders_queue(known(0), 0));
        assert!(!orders_queue(known(usize::MAX), u64::MAX - 1));
        let guessed = Listed {
            running: 64,
            guessed: true,
        };
        assert!(!orders_queue(guessed, 512));
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
            let done = issue(e, limit, host, window, 256);
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
