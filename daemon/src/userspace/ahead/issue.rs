//! The blocks of the launches to come, prefetched in launch order under
//! the lane's limit, ahead of the engine's own predictions.
//!
//! Victims stay the engine's choice (dead blocks first, then the least
//! recently migrated), with one change: before the round every resident
//! block of the window is made the most recently migrated, the ones used
//! soonest last, so that blocks outside the window go first and, among
//! the window's, the one used last goes first (Belady's choice within the
//! known queue; outside it, the engine's tables decide).

use prescient_core::pump::{self, Admit, Host};
use prescient_core::{Engine, Limit, Prefetch, Room};
use std::ops::DerefMut;

/// Blocks of the window made most recently migrated per turn at most.
const MAX_TOUCH: usize = 512;

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
