//! What a process's loop does each turn once its events and marks are in,
//! as the simulator's policies (sim/src/model.rs `Policy`) are written:
//! observe (nothing), driver-like (evict the oldest block over the budget)
//! and prescient (pre-evict, prefetch, discard; the host loop is pump.rs).

use super::discard::discard_blocks;
use super::migrator::Job;
use super::mode::PolicyMode;
use super::pump::{pump, Host};
use super::state::Process;
use prescient_core::{Prefetch, Victim, BLOCK_BYTES, BLOCK_SHIFT};
use std::os::fd::AsRawFd;

/// One policy of the per-process loop.
pub(super) trait Policy {
    /// One turn's decisions, after its events and marks; `faulted`: the
    /// engine learnt a fault this turn.
    fn step(&mut self, p: &mut Process, faulted: bool);
}

/// The policy `mode` names.
pub(super) fn for_mode(mode: PolicyMode) -> Box<dyn Policy> {
    match mode {
        PolicyMode::Observe => Box::new(Observe),
        PolicyMode::DriverLike => Box::new(DriverLike),
        PolicyMode::Prescient => Box::new(Prescient {
            prefetches: vec![Prefetch::default(); 256],
            victims: vec![Victim::default(); 64],
        }),
    }
}

/// The budget in 2 MB blocks.
fn budget_blocks(p: &Process) -> Option<u64> {
    p.cfg.budget.map(|b| b >> BLOCK_SHIFT)
}

/// Counts events only; issues nothing.
struct Observe;

impl Policy for Observe {
    fn step(&mut self, _p: &mut Process, _faulted: bool) {}
}

/// No prefetch; over the budget, evicts the block resident longest.
struct DriverLike;

impl Policy for DriverLike {
    fn step(&mut self, p: &mut Process, _faulted: bool) {
        let Some(bb) = budget_blocks(p) else { return };
        while p.residency.blocks() > bb {
            let Some(v) = p.residency.pop_oldest() else {
                break;
            };
            if p.residency.get(v) == 0 {
                continue;
            }
            p.residency.sub(v, BLOCK_BYTES);
            p.log.victim(v);
            p.migrator.submit(Job::blocks(v, 1, false));
        }
    }
}

/// Engine-driven prefetch and pre-eviction under the budget, with dead
/// victims discarded.
struct Prescient {
    prefetches: Vec<Prefetch>,
    victims: Vec<Victim>,
}

impl Policy for Prescient {
    fn step(&mut self, p: &mut Process, faulted: bool) {
        // Pre-evict down to the budget less the engine's free target.
        let limit = budget_blocks(p).map(|bb| bb.saturating_sub(p.engine.free_target() as u64));
        let max_run = p.cfg.max_coalesce_blocks;
        let mut host = Host {
            residency: &mut p.residency,
            leaving: &mut p.leaving,
            discard: p.discard_ok,
            uncertain: &mut p.uncertain,
            discarded: &mut p.discarded,
            backoff: p.backoff.as_mut(),
            log: &mut p.log,
            snap: &mut p.snap,
            migrator: &p.migrator,
            max_run,
        };
        pump(
            &mut p.engine,
            limit,
            faulted,
            &mut p.refetch,
            &mut host,
            &mut self.victims,
            &mut self.prefetches,
        );
        // A victim the driver refuses to discard is evicted.
        let refused = discard_blocks(
            p.fd.as_raw_fd(),
            &mut p.leaving.dead,
            max_run,
            &mut p.discarded,
            &mut p.snap,
        );
        p.leaving.evict.extend(refused);
        for &v in &p.leaving.evict {
            p.log.victim(v);
        }
        p.leaving.submit_evictions(max_run, &p.migrator);
    }
}
