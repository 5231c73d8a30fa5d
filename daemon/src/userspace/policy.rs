//! What a process's loop does each turn once its events and marks are in,
//! as the simulator's policies (sim/src/model.rs `Policy`) are written:
//! observe (nothing), driver-like (evict the oldest block over the budget)
//! and prescient (pre-evict, prefetch, discard; the host loop is pump.rs).

use super::discard::discard_blocks;
use super::migrator::Job;
use super::mode::PolicyMode;
use super::oracle::{Oracle, OracleConfig};
use super::pump::{turn, Host};
use super::state::Process;
use prescient_core::{ChainState, Limit, Pump, BLOCK_BYTES, BLOCK_SHIFT, DEFAULT_WATERMARK_PCT};

/// Prefetches one turn issues at most (the engine is asked again next turn).
const PREFETCHES_PER_TURN: usize = 256;
use std::os::fd::AsRawFd;

/// One policy of the per-process loop.
pub(super) trait Policy {
    /// One turn's decisions, after its events and marks; `faulted`: the
    /// engine learnt a fault this turn.
    fn step(&mut self, p: &mut Process, faulted: bool);
}

/// The policy `mode` names; the oracle replays `oracle`'s plan (the
/// command line refuses `--mode oracle` without one).
pub(super) fn for_mode(
    mode: PolicyMode,
    oracle: Option<OracleConfig>,
) -> anyhow::Result<Box<dyn Policy>> {
    Ok(match mode {
        PolicyMode::Observe => Box::new(Observe),
        PolicyMode::DriverLike => Box::new(DriverLike),
        PolicyMode::Prescient => Box::new(Prescient { pump: Pump::new() }),
        PolicyMode::Oracle => match oracle {
            Some(c) => Box::new(Oracle::new(c)),
            None => anyhow::bail!("--mode oracle needs --plan FILE"),
        },
    })
}

/// The budget in 2 MB blocks.
pub(super) fn budget_blocks(p: &Process) -> Option<u64> {
    p.cfg.budget.map(|b| b >> BLOCK_SHIFT)
}

/// Counts events only; issues nothing.
struct Observe;

impl Policy for Observe {
    fn step(&mut self, _p: &mut Process, _faulted: bool) {}
}

/// No prefetch; over the budget, evicts the block resident longest.
pub(super) struct DriverLike;

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
            p.migrator.submit(Job::to_cpu(v, 1));
        }
    }
}

/// Engine-driven prefetch and pre-eviction under the budget, with dead
/// victims discarded.
struct Prescient {
    /// The shared host loop's candidates, kept between turns.
    pump: Pump,
}

impl Policy for Prescient {
    fn step(&mut self, p: &mut Process, faulted: bool) {
        if faulted {
            // A fault started a new window: what was queued is stale.
            self.pump.restart();
        }
        let limit = Limit {
            capacity_blocks: budget_blocks(p).unwrap_or(u64::from(p.cfg.gpu_blocks)),
            watermark_pct: p
                .cfg
                .engine
                .map_or(DEFAULT_WATERMARK_PCT, |e| e.pre_evict_watermark_pct),
        };
        let predicting =
            faulted || self.pump.queued() > 0 || p.engine.chain_state() == ChainState::Running;
        let max_prefetches = if predicting { PREFETCHES_PER_TURN } else { 0 };
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
            route: &p.route,
            max_run,
            issued: Vec::new(),
            mech: &mut p.mech,
        };
        turn(
            &mut self.pump,
            &mut p.engine,
            limit,
            max_prefetches,
            &mut p.refetch,
            &mut host,
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
            p.mech.evicted(v);
        }
        p.leaving.submit_evictions(max_run, &p.migrator);
    }
}
