//! Partial residency of a 2 MB block, as the driver migrates it (the GPU
//! model of `prescient-sim check-gpu`; docs/cost-model.md, "GPU mode").
//!
//! The driver services a fault by migrating the faulted 64 KiB granules,
//! grown by its in-block prefetcher (uvm_perf_prefetch.c): a block one wave
//! of thread blocks half touched is half on the GPU, and the next wave
//! faults on the other half. A fault batch services `fault_batch` granule
//! faults; the kernel's warps fault on every block still missing data, so
//! a batch holds faults of each of them.

use super::{room_for_demand, Loc, Policy, State, GRANULE_BYTES};
use crate::plan::Plan;
use prescient_core::Block;

/// Every granule of a block.
pub const FULL: u32 = u32::MAX;
/// Granules in a 2 MB block.
const GRANULES: u32 = 32;
/// `uvm_perf_prefetch_threshold`'s default (UVM_PREFETCH_THRESHOLD_DEFAULT):
/// a region comes whole once more than 51% of it is resident or faulted.
const DENSITY_PCT: u32 = 51;

/// The driver's in-block prefetch (`compute_prefetch_region`) on 64 KiB
/// leaves: around each faulted granule, every aligned region more than 51%
/// of which is resident or faulted comes whole, up to `largest` granules.
/// The counters are taken before any filling, as the driver's bitmap tree
/// is.
pub fn density_fill(resident: u32, faulted: u32, largest: u32) -> u32 {
    let bits = resident | faulted;
    let mut out = bits;
    let mut size = 2;
    while size <= largest.min(GRANULES) {
        let region = if size == GRANULES {
            FULL
        } else {
            (1u32 << size) - 1
        };
        for lo in (0..GRANULES).step_by(size as usize) {
            let r = region << lo;
            if faulted & r != 0 && (bits & r).count_ones() * 100 > size * DENSITY_PCT {
                out |= r;
            }
        }
        size *= 2;
    }
    out
}

/// Takes a chunk on the GPU for each demanded block not yet there (evicting
/// on the fault path when the GPU is full); returns when room was made and
/// the blocks that became resident.
fn allocate(
    st: &mut State,
    t: f64,
    demand: &[(Block, u32)],
    policy: &mut dyn Policy,
) -> (f64, Vec<Block>) {
    let mut tc = t;
    let mut newly = Vec::new();
    for &(b, _) in demand {
        let i = b as usize;
        if st.loc[i] == Loc::Gpu {
            continue;
        }
        tc = room_for_demand(st, tc, policy);
        if st.loc[i] == Loc::Host {
            st.copy_rest[i] = true;
            st.it.demand_copies += 1;
        } else {
            st.copy_rest[i] = false;
            st.it.demand_populates += 1;
        }
        st.loc[i] = Loc::Gpu;
        st.present[i] = 0;
        st.dirty[i] = false;
        st.used += 1;
        newly.push(b);
    }
    (tc, newly)
}

/// One fault batch over `need` (block, granules still missing): up to
/// `fault_batch` granule faults taken from the blocks in turn, each block's
/// lowest first. Applies the in-block prefetch; returns the bytes to copy
/// and the blocks in the batch.
fn one_batch(st: &mut State, need: &mut [(Block, u32)]) -> (u64, u64) {
    let mut left = st.m.fault_batch;
    let mut faulted = vec![0u32; need.len()];
    while left > 0 {
        let before = left;
        for (j, (_, n)) in need.iter().enumerate() {
            let open = *n & !faulted[j];
            if left > 0 && open != 0 {
                faulted[j] |= open & open.wrapping_neg();
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    let (mut bytes, mut blocks) = (0u64, 0u64);
    for (j, (b, n)) in need.iter_mut().enumerate() {
        if faulted[j] == 0 {
            continue;
        }
        blocks += 1;
        let i = *b as usize;
        let fill = density_fill(st.present[i], faulted[j], st.m.fill_max);
        let new = fill & !st.present[i];
        st.present[i] |= fill;
        *n &= !st.present[i];
        st.it.faults += faulted[j].count_ones() as u64;
        if st.copy_rest[i] {
            bytes += new.count_ones() as u64 * GRANULE_BYTES;
        }
        if st.present[i] == FULL {
            st.copy_rest[i] = false;
        }
    }
    (bytes, blocks)
}

/// What the thread blocks that run ahead of kernel `k` fault on: the
/// granules the next `wave_skew` kernels touch that are not on the GPU,
/// for blocks not in `demand` already.
pub(super) fn ahead(
    st: &State,
    plan: &Plan,
    k: usize,
    demand: &[(Block, u32)],
) -> Vec<(Block, u32)> {
    let mut out: Vec<(Block, u32)> = Vec::new();
    let last = (k + st.m.wave_skew as usize).min(plan.kernels.len() - 1);
    for kp in &plan.kernels[k + 1..=last] {
        for bt in &kp.touches {
            let i = bt.block as usize;
            let present = if st.loc[i] == Loc::Gpu {
                st.present[i]
            } else {
                0
            };
            let need = bt.granules & !present;
            let known = demand.iter().chain(out.iter()).any(|&(b, _)| b == bt.block);
            if need != 0 && !known {
                out.push((bt.block, need));
            }
        }
    }
    out
}

/// Services one kernel's demand (block, granules touched but not on the
/// GPU) from time `t` in batches, with the faults of the thread blocks
/// that ran `ahead` in the same batches; returns when the kernel's last
/// granule arrived.
pub(super) fn serve(
    st: &mut State,
    t: f64,
    demand: &[(Block, u32)],
    ahead: &[(Block, u32)],
    policy: &mut dyn Policy,
) -> f64 {
    debug_assert!(!demand.is_empty(), "a kernel with no demand is not served");
    let mut need: Vec<(Block, u32)> = demand.iter().chain(ahead).copied().collect();
    let (mut tc, newly) = allocate(st, t, &need, policy);
    for &(b, _) in ahead {
        policy.fault(st, b);
    }
    let m = st.m;
    while need[..demand.len()].iter().any(|&(_, n)| n != 0) {
        let (bytes, blocks) = one_batch(st, &mut need);
        st.it.fault_batches += 1;
        st.it.fault_blocks += blocks;
        tc += m.fault_latency_s;
        if bytes > 0 {
            // The driver's own copies share the link with the workers'.
            tc += bytes as f64 / st.demand_h2d_bps(tc);
            st.it.bytes_h2d += bytes;
        }
    }
    for &(b, _) in demand.iter().chain(ahead) {
        st.arrival[b as usize] = tc;
    }
    for b in newly {
        policy.demand_arrived(st, b);
    }
    tc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_half_of_a_block_brings_the_rest() {
        // 17 of 32 granules (53%) resident or faulted: the whole block.
        assert_eq!(density_fill(0xffff, 1 << 16, 32), FULL);
        // Unless regions are capped at half a block.
        assert_eq!(density_fill(0xffff, 1 << 16, 16), 0x1ffff);
        // 16 of 32 (50%) is not more than 51%: only what was faulted,
        // though each half-aligned region that is full stays full.
        assert_eq!(density_fill(0xff, 0xff00, 32), 0xffff);
    }

    /// Two 2 MB blocks on the host, in the GPU model with batches of 12
    /// granule faults and regions up to half a block.
    fn two_blocks_on_the_host() -> (State, crate::policy::Driver) {
        use crate::workload::{Kernel, Range, Touch, Workload};
        let w = Workload {
            name: "w".into(),
            kernels: vec![Kernel {
                name: "k".into(),
                exec_id: 0,
                duration_ns: 1,
                touches: vec![Touch {
                    range: Range {
                        addr: 0,
                        len: 4 << 20,
                    },
                    write: false,
                }],
                dead_after: vec![],
            }],
        };
        let plan = Plan::new(&w).unwrap();
        let m = super::super::CostModel {
            partial: true,
            fault_batch: 12,
            fill_max: 16,
            ..super::super::CostModel::g10()
        };
        let mut st = State::new(m, &plan);
        st.loc[0] = Loc::Host;
        st.loc[1] = Loc::Host;
        (st, crate::policy::Driver::new(plan.blocks))
    }

    #[test]
    fn two_waves_over_a_block_fault_on_it_in_three_batches() {
        let (mut st, mut driver) = two_blocks_on_the_host();
        // Wave 1 touches granules 0..=16 (51.6% of the block): 12 faults,
        // which fill granules 0..16 (12 of 16 resident), then granule 16.
        let t1 = serve(&mut st, 0.0, &[(0, 0x1ffff)], &[], &mut driver);
        assert_eq!(st.present[0], 0x1ffff);
        assert_eq!(st.it.fault_batches, 2);
        assert_eq!(st.it.fault_blocks, 2);
        assert_eq!(st.it.bytes_h2d, 17 * GRANULE_BYTES);
        assert!(t1 >= 2.0 * st.m.fault_latency_s);
        // Wave 2 needs granules 17..32: one batch of 12 fills the half.
        serve(&mut st, t1, &[(0, !0x1ffff)], &[], &mut driver);
        assert_eq!(st.present[0], FULL);
        assert_eq!(st.it.fault_batches, 3);
        assert_eq!(st.it.bytes_h2d, 32 * GRANULE_BYTES);
    }

    #[test]
    fn faults_of_thread_blocks_ahead_share_the_batches() {
        let (mut st, mut driver) = two_blocks_on_the_host();
        // The kernel needs one granule of block 0; thread blocks ahead
        // fault on 8 of block 1: one batch serves both and counts both.
        serve(&mut st, 0.0, &[(0, 1)], &[(1, 0xff)], &mut driver);
        assert_eq!(st.it.fault_batches, 1);
        assert_eq!(st.it.fault_blocks, 2);
        assert_eq!(st.present[0], 1);
        assert_eq!(st.present[1], 0xff);
        assert_eq!(st.it.bytes_h2d, 9 * GRANULE_BYTES);
    }

    #[test]
    fn a_dense_sub_region_comes_whole() {
        // 3 of the 4 granules 0..4 faulted (75%): the fourth comes too;
        // nothing beyond that region (3 of 8 is 37%).
        assert_eq!(density_fill(0, 0b1011, 32), 0b1111);
        // One faulted granule alone stays alone (1 of 2 is 50%).
        assert_eq!(density_fill(0, 1 << 5, 32), 1 << 5);
    }
}
