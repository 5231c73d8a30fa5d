//! One attached process with its event tracker, and the loop that reads it.
//!
//! prescientd (`prescientd attach` and the service's user-space backend) and
//! `prescientctl record` both attach with a retry while CUDA has not opened
//! its UVM fds yet, and both read the ring in turns until a stop flag, a
//! duration or the target's exit; those two loops live here once.

use crate::attach::{self, Gpu, Target};
use crate::tracker::{Event, Tracker};
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Most events one turn should read, so that other work gets its turn.
pub const DRAIN_BATCH: usize = 1 << 16;

/// An attached process: its VA space, its first GPU and a tracker over it.
pub struct Session {
    /// Declared first so that it drops first: the tools fd is closed (the
    /// driver tears the tracker down) before the VA-space fd goes.
    pub tracker: Tracker,
    pub target: Target,
    pub gpu: Gpu,
    /// The nvidia_uvm version, checked to be an ABI this crate knows.
    pub driver_version: String,
}

/// How often [`Session::pump`] looks at the target, and how long it naps
/// after a turn that found nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    pub alive_every: Duration,
    pub idle_sleep: Duration,
}

/// What one turn of [`Session::pump`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Work was done: the next turn comes at once.
    Busy,
    /// Nothing was there: the pump naps for [`Pace::idle_sleep`].
    Idle,
    /// The caller is done: the pump returns [`Ended::Turn`].
    Stop,
}

/// Why [`Session::pump`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The stop flag was set (a signal, a detach).
    Stopped,
    /// The duration passed.
    Duration,
    /// The target process exited.
    TargetExited,
    /// A turn returned [`Turn::Stop`].
    Turn,
}

impl Session {
    /// Attaches to `pid` and creates a tracker of `entries` with the events
    /// of `mask` (bits `1 << EVENT_*`).
    ///
    /// Attaching is retried every 20 ms for `wait` (CUDA opens its UVM fds
    /// and registers its GPU only when it initialises), each failure handed
    /// to `on_retry`; a refused permission is never retried. The driver's
    /// ABI is checked before the tracker ioctl, which depends on it.
    pub fn open(
        pid: i32,
        wait: Duration,
        entries: u32,
        mask: u64,
        on_retry: impl FnMut(&anyhow::Error),
    ) -> Result<Session> {
        let (target, gpu) = attach_with_wait(pid, wait, on_retry)?;
        let driver_version = attach::driver_version()?;
        let tracker =
            Tracker::new(&target, entries, mask).context("creating the tools event tracker")?;
        Ok(Session {
            tracker,
            target,
            gpu,
            driver_version,
        })
    }

    /// Runs `turn` over the tracker until `stop` is set, `duration` passes,
    /// the target exits or a turn says [`Turn::Stop`].
    ///
    /// A turn typically drains up to [`DRAIN_BATCH`] events and does its
    /// own work around them; events left in the ring when the pump returns
    /// are read by [`Session::drain_rest`].
    pub fn pump(
        &self,
        stop: &AtomicBool,
        duration: Option<Duration>,
        pace: Pace,
        mut turn: impl FnMut(&Tracker) -> Turn,
    ) -> Ended {
        run_turns(
            stop,
            duration,
            pace,
            || self.target.alive(),
            || turn(&self.tracker),
        )
    }

    /// Has the driver push the events it still holds, then reads every
    /// event in the ring: the end of a recording or of a backend loop.
    pub fn drain_rest(&self, f: impl FnMut(Event)) -> usize {
        self.tracker.flush();
        self.tracker.drain(usize::MAX, f)
    }
}

/// Attaches to `pid` and finds its GPU, retrying every 20 ms for `wait`.
fn attach_with_wait(
    pid: i32,
    wait: Duration,
    mut on_retry: impl FnMut(&anyhow::Error),
) -> Result<(Target, Gpu)> {
    let deadline = Instant::now() + wait;
    loop {
        let r = Target::attach(pid).and_then(|t| {
            let g = t.first_gpu()?;
            Ok((t, g))
        });
        match r {
            Ok(x) => return Ok(x),
            Err(e) if Instant::now() < deadline && !is_permission(&e) => {
                on_retry(&e);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error comes from a refused permission (callers map it to
/// exit status 77, and it is not worth retrying).
pub fn is_permission(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    })
}

/// The pump's loop, apart from the tracker so that it can be tested.
fn run_turns(
    stop: &AtomicBool,
    duration: Option<Duration>,
    pace: Pace,
    mut alive: impl FnMut() -> bool,
    mut turn: impl FnMut() -> Turn,
) -> Ended {
    let start = Instant::now();
    let mut alive_check = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ended::Stopped;
        }
        if duration.is_some_and(|d| start.elapsed() >= d) {
            return Ended::Duration;
        }
        if alive_check.elapsed() > pace.alive_every {
            alive_check = Instant::now();
            if !alive() {
                return Ended::TargetExited;
            }
        }
        match turn() {
            Turn::Busy => {}
            Turn::Idle => std::thread::sleep(pace.idle_sleep),
            Turn::Stop => return Ended::Turn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACE: Pace = Pace {
        alive_every: Duration::from_millis(1),
        idle_sleep: Duration::from_micros(50),
    };

    #[test]
    fn a_set_stop_flag_ends_the_pump_before_any_turn() {
        let stop = AtomicBool::new(true);
        let mut turns = 0;
        let end = run_turns(
            &stop,
            None,
            PACE,
            || true,
            || {
                turns += 1;
                Turn::Busy
            },
        );
        assert_eq!((end, turns), (Ended::Stopped, 0));
    }

    #[test]
    fn the_pump_ends_on_a_turns_stop_the_duration_or_the_targets_exit() {
        let stop = AtomicBool::new(false);
        let mut turns = 0;
        let end = run_turns(
            &stop,
            None,
            PACE,
            || true,
            || {
                turns += 1;
                if turns == 3 {
                    Turn::Stop
                } else {
                    Turn::Idle
                }
            },
        );
        assert_eq!((end, turns), (Ended::Turn, 3));

        let t = Instant::now();
        let d = Duration::from_millis(20);
        let end = run_turns(&stop, Some(d), PACE, || true, || Turn::Idle);
        assert_eq!(end, Ended::Duration);
        assert!(t.elapsed() >= d);

        let end = run_turns(&stop, None, PACE, || false, || Turn::Busy);
        assert_eq!(end, Ended::TargetExited);
    }

    #[test]
    fn a_stop_flag_set_by_a_turn_is_seen_before_the_next() {
        let stop = AtomicBool::new(false);
        let mut turns = 0;
        let end = run_turns(
            &stop,
            None,
            PACE,
            || true,
            || {
                turns += 1;
                stop.store(true, Ordering::Relaxed);
                Turn::Busy
            },
        );
        assert_eq!((end, turns), (Ended::Stopped, 1));
    }

    #[test]
    fn permission_errors_are_recognised_through_context() {
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = anyhow::Error::new(io).context("pidfd_getfd");
        assert!(is_permission(&e));
        assert!(!is_permission(&anyhow::anyhow!("no such process")));
    }
}
