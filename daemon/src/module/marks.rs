//! A process's own dead and alive marks, applied to prescient.ko.
//!
//! The runtime (`prescientctl run`) sends its allocator's marks to
//! prescientd on the control socket (runtime/src/marks). Under prescient.ko
//! they used to be refused ("a process marks its ranges itself"), which the
//! runtime's allocator hook does not do, so no job had its dead blocks
//! discarded under the module. prescientd, which holds CAP_SYS_ADMIN,
//! applies them to the process's space with MARK_DEAD / MARK_ALIVE.
//!
//! # Why no discard can hit memory that is live again
//! - prescient.ko discards only under its State mutex, and MARK_ALIVE takes
//!   it: once the ioctl returns, the blocks are alive in the space's engine,
//!   no discard of them is in flight, and the ones it had discarded are on
//!   the GPU again (kmod/discarded.rs). The reply goes out after the ioctl.
//! - The sender is the space's process: its SO_PEERCRED pid, held by pidfd
//!   and alive, is the pid GET_STATS gives the space (both in prescientd's
//!   pid namespace), and two live processes never share a pid.
//! - A connection that closes holding dead marks has them marked alive
//!   (`Owner::close`): its process can no longer say they live again.
//! - A dead mark is all or nothing: if the module refuses one of its
//!   ranges, the ranges applied before are marked alive again before the
//!   refusal is answered (the runtime takes a refused dead mark as never
//!   made, and never marks its blocks alive).

use super::Module;
use crate::backend::{refused, DevError, MarkFrom};
use crate::userspace::marks::{no_process, Revive};
use prescient_uapi as uapi;
use prescient_uapi::control::Applied;
use std::ops::Range;
use std::sync::Arc;

/// Applies `m` to the sender's own space (module comment).
pub(super) fn apply(module: &Module, m: MarkFrom<'_>) -> Result<Applied, DevError> {
    let Some(p) = m.peer.live_process() else {
        return Err(refused("MARK", libc::EPERM, no_process(m.peer)));
    };
    let handle = space_of(module, p.pid)?;
    if !p.alive() {
        return Err(refused(
            "MARK",
            libc::EPERM,
            format!("pid {} has exited", p.pid),
        ));
    }
    let Some(mut held) = m.owner.direct() else {
        return Err(refused(
            "MARK",
            libc::EPERM,
            "the connection has closed".into(),
        ));
    };
    if m.dead {
        held.room_for(m.blocks.len())
            .map_err(|e| refused("MARK", libc::EBUSY, e))?;
    }
    let revive = reviver(module, handle);
    let kind = match (m.dead, m.populate) {
        (true, _) => Kind::Dead,
        (false, true) => Kind::Alive,
        (false, false) => Kind::Revive,
    };
    for (i, r) in m.blocks.iter().enumerate() {
        if let Err(e) = mark_range(module, handle, kind, r.clone()) {
            if m.dead {
                // All or nothing: the runtime takes a refused dead mark as
                // never made and will not mark its blocks alive again.
                revive(&m.blocks[..i]);
                for r in &m.blocks[..i] {
                    held.alive(r.clone());
                }
            }
            return Err(e);
        }
        if m.dead {
            held.dead(r.clone(), &revive);
        } else {
            held.alive(r.clone());
        }
    }
    Ok(Applied {
        blocks: m.blocks.iter().map(|r| r.end - r.start).sum(),
        ..Default::default()
    })
}

/// The module's handle of the space `pid` owns; ENOENT if none.
fn space_of(module: &Module, pid: i32) -> Result<u64, DevError> {
    use crate::backend::Backend;
    let s = module.stats()?;
    s.spaces
        .iter()
        .take((s.head.n_spaces as usize).min(uapi::MAX_SPACES))
        .find(|sp| sp.handle != 0 && sp.pid == pid as u64)
        .map(|sp| sp.handle)
        .ok_or_else(|| {
            refused(
                "MARK",
                libc::ENOENT,
                format!("pid {pid} is not attached (attach it first: its marks go to its space)"),
            )
        })
}

/// What a mark asks of the module.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dead,
    /// The process hands the blocks out again: the module populates the
    /// ones it discarded before it returns.
    Alive,
    /// Alive, nobody about to use them (a revocation, an undo, a
    /// `no_populate` mark): MARK_NO_POPULATE.
    Revive,
}

/// MARK_DEAD / MARK_ALIVE of the blocks `r` of space `handle`. The device
/// opened, an ioctl's ENOENT / ENODEV / ENXIO means the space (or the
/// module) went away meanwhile: "not-found" (the mark is dropped), not
/// "unavailable" (which pauses the runtime's dead marks: runtime/src/marks/pause.rs).
fn mark_range(module: &Module, handle: u64, kind: Kind, r: Range<u64>) -> Result<(), DevError> {
    let shift = prescient_core::BLOCK_SHIFT;
    let mut b = uapi::RangeAbi {
        handle,
        addr: r.start << shift,
        len: (r.end - r.start) << shift,
        flags: if kind == Kind::Revive {
            uapi::MARK_NO_POPULATE
        } else {
            0
        },
    }
    .to_bytes();
    let done = if kind == Kind::Dead {
        module.ioctl("MARK_DEAD", uapi::PRESCIENT_IOC_MARK_DEAD, &mut b)
    } else {
        module.ioctl("MARK_ALIVE", uapi::PRESCIENT_IOC_MARK_ALIVE, &mut b)
    };
    done.map_err(|e| gone(handle, e))
}

/// An error of a MARK ioctl on space `handle`, as the reply says it: the
/// device answered ENOENT / ENODEV / ENXIO, so the space or the module went
/// away after the lookup.
fn gone(handle: u64, e: DevError) -> DevError {
    match e {
        DevError::Missing { err, .. } => refused(
            "MARK",
            libc::ENOENT,
            format!("space {handle} is gone (detached, or the module is unloading): {err}"),
        ),
        e => e,
    }
}

/// Marks a closed connection's dead blocks (or an undone dead mark's)
/// alive in space `handle`, without populating them: nobody is about to
/// use them. A space gone since (ENOENT) has nothing left to discard;
/// other failures are logged (the blocks stay dead until the process marks
/// them alive).
fn reviver(module: &Module, handle: u64) -> Revive {
    let module = module.clone();
    Arc::new(move |ranges: &[Range<u64>]| {
        for r in ranges {
            if let Err(e) = mark_range(&module, handle, Kind::Revive, r.clone()) {
                if e.errno() != Some(libc::ENOENT) {
                    tracing::warn!(handle, "revoking a closed connection's dead marks: {e}");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A space detached between the lookup and the ioctl answers
    /// "not-found" (the runtime drops that mark), never "unavailable"
    /// (which pauses the runtime's dead marks for a second or more).
    #[test]
    fn a_space_gone_after_the_lookup_is_not_found() {
        for errno in [libc::ENOENT, libc::ENODEV, libc::ENXIO] {
            let e = DevError::from_io("MARK_ALIVE", io::Error::from_raw_os_error(errno));
            assert!(matches!(e, DevError::Missing { .. }));
            let e = gone(7, e);
            assert_eq!(e.errno(), Some(libc::ENOENT));
            assert!(e.to_string().contains("space 7 is gone"), "{e}");
        }
        let e = gone(
            7,
            DevError::from_io("MARK_ALIVE", io::Error::from_raw_os_error(libc::EINVAL)),
        );
        assert!(matches!(e, DevError::Refused { .. }));
    }
}
