//! Dead and alive marks against the stand-in's 580 discard path: the
//! module discards dead victims (uvm_api_discard), and MARK_ALIVE brings
//! the ones nothing brought back to the GPU before it returns.
use crate::driver::{run_kernels, settle, space, standin_counter, BLOCK};
use crate::{attach, detach, get_params, info, ioc, marker, prescient, set_gpu, set_params, uvm};
use prescient_uapi as u;
use std::os::fd::AsRawFd;

/// In observe mode, MARK_DEAD on the whole managed range, a quarter of a
/// replay under the budget (the worker discards dead victims), MARK_ALIVE
/// on the range: every block the
/// module discarded and nothing faulted or prefetched back since is on the
/// GPU when MARK_ALIVE returns (GET_STATS `populated`, the stand-in's
/// migrations in), so the next replay has no fault on a discarded block,
/// the faults the real driver answers with read-only pages around the
/// discarded ones (kmod/discarded.rs). A second MARK_ALIVE populates
/// nothing more (each block is taken once).
pub(crate) fn alive_populate() -> bool {
    let p = prescient();
    // Observe mode (`enabled` 0): pre-eviction and its discards go on, but
    // no prefetch brings a discarded block back before the alive mark.
    let p0 = get_params(p.as_raw_fd());
    let observe = set_params(p.as_raw_fd(), u::ParamsAbi { enabled: 0, ..p0 });
    let f = uvm();
    let inf = info(&f);
    let k = inf.kernels;
    let h = attach(&p, f.as_raw_fd()).expect("ATTACH");
    set_gpu(&p, h, inf.gpu_uuid).expect("SET_GPU");
    run_kernels(&f, 0..k);
    settle(&p);
    let range = |h, flags| {
        u::RangeAbi {
            handle: h,
            addr: inf.base,
            len: u64::from(inf.blocks) * BLOCK as u64,
            flags,
        }
        .to_bytes()
    };
    let fd = p.as_raw_fd();
    let faults_discarded0 = standin_counter("fault_after_discarded");
    let discarded0 = standin_counter("discarded");
    let dead = ioc(
        fd,
        u::PRESCIENT_IOC_MARK_DEAD as u64,
        range(h, 0).as_mut_ptr(),
    );
    // A quarter of the trace: the blocks it does not use again stay
    // discarded (a whole replay faults nearly all of them back).
    run_kernels(&f, 0..k / 4);
    settle(&p);
    let before = space(&p, h);
    let faults_discarded = standin_counter("fault_after_discarded");
    // Blocks the driver holds as discarded now: each fault on one brought
    // it back (and took it out of the record). The module may count more
    // discards than the driver (a block the driver had evicted on its own
    // before the module learnt it): those stay in the record, stale, and a
    // populate migrates them like any block.
    let discarded = standin_counter("discarded") - discarded0;
    let left = discarded.saturating_sub(faults_discarded - faults_discarded0);
    // A revocation's MARK_ALIVE (MARK_NO_POPULATE) populates nothing and
    // leaves the record to the next MARK_ALIVE; a flag that is none: EINVAL.
    let revived = ioc(
        fd,
        u::PRESCIENT_IOC_MARK_ALIVE as u64,
        range(h, u::MARK_NO_POPULATE).as_mut_ptr(),
    );
    let unpopulated = space(&p, h).populated - before.populated;
    let bad_flag = ioc(
        fd,
        u::PRESCIENT_IOC_MARK_ALIVE as u64,
        range(h, 2).as_mut_ptr(),
    );
    let migrated_in = standin_counter("migrated_in");
    let alive = ioc(
        fd,
        u::PRESCIENT_IOC_MARK_ALIVE as u64,
        range(h, 0).as_mut_ptr(),
    );
    let after = space(&p, h);
    let populated = after.populated - before.populated;
    let moved = standin_counter("migrated_in") - migrated_in;
    let again = ioc(
        fd,
        u::PRESCIENT_IOC_MARK_ALIVE as u64,
        range(h, 0).as_mut_ptr(),
    );
    let twice = space(&p, h).populated - after.populated;
    run_kernels(&f, 0..k);
    settle(&p);
    let refaults = standin_counter("fault_after_discarded") - faults_discarded;
    let end = space(&p, h);
    detach(&p, h);
    let restored = set_params(p.as_raw_fd(), p0);
    let ok = observe.is_ok()
        && revived.is_ok()
        && unpopulated == 0
        && bad_flag == Err(libc::EINVAL)
        && restored.is_ok()
        && dead.is_ok()
        && alive.is_ok()
        && again.is_ok()
        && before.discards > 0
        && left > 0
        && populated >= left
        && populated <= before.discards
        && moved >= populated
        && twice == 0
        && refaults == 0
        && end.migrate_errors == 0;
    marker(
        "alive-populate",
        ok,
        &format!(
            "observe mode, range dead, a quarter of a replay: {} blocks discarded ({discarded} at the driver), {} faulted back, {left} left; MARK_ALIVE with MARK_NO_POPULATE populated {unpopulated} (flag 2: {bad_flag:?}), then MARK_ALIVE populated {populated} (stand-in migrated in {moved} meanwhile), again {twice}; next replay: {refaults} faults on discarded blocks, {} migrate errors",
            before.discards, faults_discarded - faults_discarded0, end.migrate_errors
        ),
    )
}
