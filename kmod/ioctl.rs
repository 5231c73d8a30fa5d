// SPDX-License-Identifier: GPL-2.0
//! The /dev/prescient ioctls: one function per command, errors through `?`.
//!
//! The ABI (numbers, layouts, checks) is prescient-uapi's `abi.rs`; the
//! kernel only copies bytes in and out and never casts user pointers.

use core::ffi::{c_long, c_uint, c_ulong};
use core::ops::Range;
use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use crate::abi::{self, Cmd, Error as AbiError, ParamsAbi};
use crate::glue::{self, FileRef, Owner, PinnedPage};
use crate::params::Params;
use crate::ring::{self, Record};
use crate::round::{populate, POPULATE_RUN};
use crate::space::{new_engine, Gpu};
use crate::state::{mode_params, with_state, State};
use crate::BLOCK_BYTES;

/// The largest argument a command reads (SET_PARAMS' is the largest).
const MAX_INPUT: usize = 64;
/// Blocks one MARK_DEAD / MARK_ALIVE handles per hold of the State mutex:
/// a 1 TiB range (524,288 blocks) is 128 holds with a reschedule between.
const MARK_CHUNK: u64 = 4096;

impl From<AbiError> for Error {
    fn from(e: AbiError) -> Self {
        Error::from_errno(-e.errno())
    }
}

/// ioctl on /dev/prescient (glue.c's unlocked_ioctl). Refusals other than
/// EFAULT are logged, rate-limited.
#[no_mangle]
extern "C" fn prescient_rs_ioctl(cmd: c_uint, arg: c_ulong) -> c_long {
    match dispatch(cmd, arg as usize) {
        Ok(r) => r as c_long,
        Err(e) => {
            if e != EFAULT {
                glue::log_rejected(cmd, e);
            }
            c_long::from(e.to_errno())
        }
    }
}

/// Decodes `cmd`, checks the caller's rights, copies the argument in and
/// runs the command.
pub(crate) fn dispatch(cmd: u32, arg: usize) -> Result<isize> {
    let c = Cmd::decode(cmd)?;
    let admin = glue::capable_admin();
    if c.needs_admin() && !admin {
        return Err(EPERM);
    }
    let mut buf = [0u8; MAX_INPUT];
    let input = read_input(arg, c.in_size(), &mut buf)?;
    match c {
        Cmd::GetVersion => get_version(arg),
        Cmd::GetParams => get_params(arg),
        Cmd::GetStats => get_stats(arg),
        Cmd::SetParams => set_params(input),
        Cmd::ResetTables => reset_tables(),
        Cmd::Attach => attach(input, arg),
        Cmd::Detach => detach(input),
        Cmd::SetExecId => set_exec_id(input, admin),
        Cmd::MarkDead => mark(input, admin, true),
        Cmd::MarkAlive => mark(input, admin, false),
        Cmd::SetGpu => set_gpu(input, admin),
        Cmd::SetExecPage => set_exec_page(input, admin),
        Cmd::ClearExecPage => clear_exec_page(input, admin),
    }?;
    Ok(0)
}

/// Copies the command's `size`-byte argument from user memory into `buf`.
fn read_input(arg: usize, size: usize, buf: &mut [u8; MAX_INPUT]) -> Result<&[u8]> {
    let input = buf.get_mut(..size).ok_or(EINVAL)?;
    if size > 0 {
        UserSlice::new(arg, size).reader().read_slice(input)?;
    }
    Ok(input)
}

/// Copies `bytes` out to user memory at `arg`; EFAULT if it is not writable.
fn write_out(arg: usize, bytes: &[u8]) -> Result {
    UserSlice::new(arg, bytes.len()).writer().write_slice(bytes)
}

/// GET_VERSION: the ABI version, flags and the bound driver's version.
fn get_version(arg: usize) -> Result {
    let v = with_state(|s| s.version()).ok_or(ENODEV)?;
    write_out(arg, &v.to_bytes())
}

/// GET_PARAMS: the parameters in force.
fn get_params(arg: usize) -> Result {
    let p = with_state(|s| s.params_abi()).ok_or(ENODEV)?;
    write_out(arg, &p.to_bytes())
}

/// GET_STATS: the counters, overall and per space.
fn get_stats(arg: usize) -> Result {
    let st = with_state(|s| s.stats()).ok_or(ENODEV)?;
    write_out(arg, &st.to_bytes())
}

/// SET_PARAMS: validates the parameters, then gives every space new tables.
/// The tables (up to `max_table_mib` of them) are allocated and zeroed with
/// no lock held, so GET_STATS and the worker do not wait for them.
fn set_params(input: &[u8]) -> Result {
    let (a, p, modes) = with_state(|s| -> Result<(ParamsAbi, Params, KVec<bool>)> {
        let (a, mut p) = ParamsAbi::decode_valid(input, s.params())?;
        // The ledger must hold every block that can be resident.
        let budget_blocks = (a.residency_budget_bytes / BLOCK_BYTES) as u32;
        p.max_resident_blocks = s
            .gpu_blocks()
            .max(budget_blocks)
            .clamp(1, Params::MAX_RESIDENT_BLOCKS);
        p.validate().map_err(AbiError::Param)?;
        let modes = s.engine_modes(&p)?;
        Ok((a, p, modes))
    })
    .unwrap_or(Err(ENODEV))?;
    let mut fresh = KVec::with_capacity(modes.len(), GFP_KERNEL)?;
    for exec in modes {
        fresh.push(Some(new_engine(&mode_params(&p, exec)?)?), GFP_KERNEL)?;
    }
    with_state(|s| s.set_params(&a, p, fresh)).unwrap_or(Err(ENODEV))
}

/// RESET_TABLES: every space's engine forgets what it learnt.
fn reset_tables() -> Result {
    with_state(|s| s.reset_tables()).ok_or(ENODEV)
}

/// ATTACH: by fd (the caller's) or by pid; writes the handle back. A
/// handle that cannot be written back is detached again.
fn attach(input: &[u8], arg: usize) -> Result {
    let mut t = abi::Target::from_bytes(input)?;
    t.check_attach()?;
    let handle = with_state(|s| {
        // check_attach kept fds and pids within i32.
        // The pid is the caller's namespace's number; the owner is kept as
        // a struct pid (FileRef::from_pid checks ptrace access too).
        let (file, owner) = if t.kind == abi::TARGET_FD {
            (FileRef::from_fd(t.id as i32)?, Owner::current()?)
        } else {
            FileRef::from_pid(t.id as i32)?
        };
        s.attach(file, owner)
    })
    .unwrap_or(Err(ENODEV))?;
    t.handle = handle;
    write_out(arg, &t.to_bytes()).inspect_err(|_| {
        with_state(|s| s.detach_where(|sp| sp.handle == handle));
    })
}

/// DETACH: by handle, by pid (the caller's namespace; the process, not the
/// number) or by the caller's fd of the space.
fn detach(input: &[u8]) -> Result {
    let t = abi::Target::from_bytes(input)?;
    t.check_detach()?;
    let who = if t.kind == abi::TARGET_PID {
        Some(Owner::find(t.id as i32).ok_or(ENOENT)?)
    } else {
        None
    };
    with_state(|s| match (t.kind, &who) {
        (abi::TARGET_HANDLE, _) => s.detach_where(|sp| sp.handle == t.handle),
        (abi::TARGET_PID, Some(w)) => s.detach_where(|sp| sp.owner.same(w)),
        _ => {
            let va = FileRef::from_fd(t.id as i32)?.va_space();
            s.detach_where(|sp| sp.va_space() == va)
        }
    })
    .unwrap_or(Err(ENODEV))
}

/// SET_EXEC_ID: the runtime says which kernel starts next in a space.
fn set_exec_id(input: &[u8], admin: bool) -> Result {
    let x = abi::ExecIdAbi::from_bytes(input)?;
    x.check()?;
    with_state(|s| {
        let sp = s.owned_space(x.handle, admin)?;
        // Through the ring, so that the worker sees the kernel start in
        // order with the faults before and after it.
        ring::send(
            Record::KernelStart {
                va_space: sp.va_space(),
                exec_id: x.exec_id,
            },
            sp.slot,
        );
        Ok(())
    })
    .unwrap_or(Err(ENODEV))
}

/// MARK_DEAD / MARK_ALIVE: the runtime says a range's data is dead (may be
/// discarded instead of copied) or live again. Done in chunks of
/// [`MARK_CHUNK`] blocks, the State mutex released and the CPU offered
/// between them; ownership is checked for every chunk (ENOENT if the space
/// went away in between: the blocks already marked stay marked). Blocks
/// the module discarded that come alive are on the GPU when it returns
/// ([`mark_chunk`]).
fn mark(input: &[u8], admin: bool, dead: bool) -> Result {
    let r = abi::RangeAbi::from_bytes(input)?;
    r.check()?;
    // Dead rounds inward, alive outward: a block part of which is live
    // again must not stay dead.
    let blocks = if dead {
        r.whole_blocks()
    } else {
        r.touched_blocks()
    };
    let populating = r.flags & abi::MARK_NO_POPULATE == 0;
    let mut next = blocks.start;
    loop {
        let end = blocks.end.min(next.saturating_add(MARK_CHUNK));
        next = with_state(|s| mark_chunk(s, r.handle, admin, next..end, dead, populating))
            .unwrap_or(Err(ENODEV))?;
        if next >= blocks.end {
            return Ok(());
        }
        glue::cond_resched();
    }
}

/// Marks `blocks` of the space `handle` under one hold of the State mutex
/// and returns where it stopped: at the end, or earlier once
/// [`POPULATE_RUN`] blocks the module had discarded came alive (unless
/// `populating` is off: MARK_NO_POPULATE). Those are
/// populated on the GPU before the mutex is released, so before MARK_ALIVE
/// returns and the job can write them (discarded.rs says why).
fn mark_chunk(
    s: &mut State,
    handle: u64,
    admin: bool,
    blocks: Range<u64>,
    dead: bool,
    populating: bool,
) -> Result<u64> {
    let sp = s.owned_space(handle, admin)?;
    if dead {
        for b in blocks.clone() {
            sp.engine.mark_dead(b);
        }
        return Ok(blocks.end);
    }
    let mut back = [0u64; POPULATE_RUN];
    let mut n = 0;
    let mut stop = blocks.end;
    for b in blocks {
        sp.engine.mark_alive(b);
        // MARK_NO_POPULATE (a revocation): the record keeps the block for
        // the MARK_ALIVE of its next use.
        if populating && sp.discarded.take(b) {
            back[n] = b;
            n += 1;
            if n == POPULATE_RUN {
                stop = b + 1;
                break;
            }
        }
    }
    let head = populate(sp, &back[..n]);
    s.count_populate(head);
    Ok(stop)
}

/// SET_GPU: the GPU (the driver's processor UUID) that the space's
/// prefetches go to, from its owner or an administrator. The driver is
/// the judge: a UUID that is not one of the space's GPUs makes the first
/// prefetch fail with NV_ERR_INVALID_DEVICE, and prefetching stops
/// (GET_STATS says `GPU_REJECTED`).
fn set_gpu(input: &[u8], admin: bool) -> Result {
    let g = abi::GpuAbi::from_bytes(input)?;
    g.check()?;
    with_state(|s| {
        let sp = s.owned_space(g.handle, admin)?;
        sp.gpu = Gpu::Set(g.uuid());
        Ok(())
    })
    .unwrap_or(Err(ENODEV))
}

/// SET_EXEC_PAGE: the runtime's execution-id page of an attached space, as
/// the caller's descriptor of its memfd, from the space's owner or an
/// administrator. The page is pinned and checked (EBADF, EINVAL) and the
/// engine for execution-id mode built before the State mutex is taken;
/// ENOENT / EPERM for the handle, EEXIST if the space has a page, ENOMEM if
/// its tables would exceed `max_table_mib`. From then on each of the
/// space's faults reads the page ([`crate::feed`]).
fn set_exec_page(input: &[u8], admin: bool) -> Result {
    let x = abi::ExecPageAbi::from_bytes(input)?;
    x.check()?;
    // check() kept the descriptor within i32.
    let page = PinnedPage::from_fd(x.fd as i32)?;
    let want = with_state(|s| -> Result<Option<Params>> {
        if !s.tables_fit(s.params(), Some(x.handle), 0)? {
            return Err(ENOMEM);
        }
        engine_to_build(s, x.handle, admin, true)
    })
    .unwrap_or(Err(ENODEV))?;
    let engine = want.map(|p| new_engine(&p)).transpose()?;
    with_state(|s| s.set_exec_page(x.handle, admin, page, engine)).unwrap_or(Err(ENODEV))
}

/// CLEAR_EXEC_PAGE: the space stops reading its page (ENOENT if it has
/// none: a second CLEAR) and goes back to the parameters' mode; the page
/// is unpinned after the State mutex is released (it waits for a grace
/// period). Detach, the owner's exit and unload release it too.
fn clear_exec_page(input: &[u8], admin: bool) -> Result {
    let h = abi::HandleAbi::from_bytes(input)?;
    h.check()?;
    let want = with_state(|s| engine_to_build(s, h.handle, admin, false)).unwrap_or(Err(ENODEV))?;
    let engine = want.map(|p| new_engine(&p)).transpose()?;
    let page = with_state(|s| s.clear_exec_page(h.handle, admin, engine)).unwrap_or(Err(ENODEV))?;
    drop(page);
    Ok(())
}

/// The parameters of the engine the space `handle` needs in mode `exec`,
/// if it does not have that engine already (ENOENT / EPERM: not the
/// caller's space).
fn engine_to_build(
    s: &mut crate::state::State,
    handle: u64,
    admin: bool,
    exec: bool,
) -> Result<Option<Params>> {
    let want = s.space_params(exec)?;
    let sp = s.owned_space(handle, admin)?;
    Ok((sp.engine.params() != &want).then_some(want))
}
