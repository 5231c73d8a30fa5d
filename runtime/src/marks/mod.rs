//! Dead and alive marks from PyTorch's caching allocator, for unmodified
//! jobs (DeepUM 5.3.2): a block the allocator has freed holds no live data,
//! so under a residency budget prescientd discards it (UVM_DISCARD, no copy)
//! before it evicts anything live, and brings it back with no copy when it
//! is handed out again.
//!
//! The torch helper (runtime/python/prescient_torch/marks.cpp, built at
//! first use against the installed torch and loaded by the launcher's
//! sitecustomize) attaches a trace tracker to the caching allocator and
//! forwards its ALLOC, FREE_COMPLETED and SEGMENT_* events to
//! [`prescient_allocator_event`]. Marks go to prescientd on the socket
//! `prescientctl run` names (PRESCIENT_MARKS_SOCKET), in the control
//! protocol's `mark` request (link.rs); the daemon's side is
//! daemon/src/userspace/marks.rs.
//!
//! # Why no discard can hit memory that is live again
//! FREE_COMPLETED is the allocator's view, not the GPU's: kernels queued on
//! the block's stream before the free may still read it (the allocator
//! reuses the block at once, but only on that stream, which orders the
//! reuse after them). The daemon's discard is not stream-ordered, so:
//! 1. **Fenced dead marks.** At FREE_COMPLETED a CUDA event is recorded
//!    on the block's stream (fence.rs); the dead mark is sent only once the
//!    event has completed, i.e. once every kernel queued on that stream
//!    before the free has finished. Uses on other streams are covered by
//!    the allocator itself: a block used elsewhere (`record_stream`)
//!    reaches FREE_COMPLETED only after the events it recorded on those
//!    streams have completed (CUDACachingAllocator.cpp, `free` then
//!    `process_events`); a use on another stream without `record_stream`
//!    is a race in the job itself, with or without Prescient.
//! 2. **Synchronous alive marks.** The allocator reports ALLOC before it
//!    returns the block. Blocks whose dead mark is still waiting for its
//!    fence are taken off the list (never sent); blocks whose dead mark
//!    was sent are marked alive and the callback waits for the daemon's
//!    reply, which comes only after the backend thread has applied the
//!    mark; the backend discards only synchronously on that same thread and
//!    only blocks dead in its engine (marks.rs), so after the reply no
//!    discard of them is in flight and none can start. Under prescient.ko
//!    the reply comes after MARK_ALIVE has returned, and the module
//!    discards only under the lock that ioctl takes
//!    (daemon/src/module/marks.rs).
//! 3. **One connection, one lock.** Every mark of the process goes over
//!    one connection, under one lock held across each request and reply,
//!    and the daemon applies one process's marks in order: an alive mark
//!    can never overtake the dead mark it undoes.
//! 4. **Rounding.** Dead marks cover only the 2 MB blocks wholly inside the
//!    freed range; alive marks every block the handed-out range touches.
//!    Every byte the allocator hands out is reported by an ALLOC, so every
//!    live byte's block is alive at the daemon before it can be written.
//! 5. **Memory going back to the driver.** Before the runtime frees a
//!    managed allocation (cuMemFree) its dead blocks are marked alive, so
//!    a later allocation at the same address never starts out dead. That
//!    mark asks for nothing to be brought back (`no_populate`): a populate
//!    would move discarded blocks onto the GPU just before they are freed.
//!    A prescientd that refuses the field gets the plain alive mark.
//! 6. **Failures fall on the safe side.** A dead mark not sent or not
//!    taken (fence not passed, daemon busy, not attached, gone) only means
//!    a block is not discarded. An alive mark is retried while the daemon
//!    answers "busy" or the connection breaks mid-request; it stops only
//!    when the daemon says the process has no backend (nothing discards
//!    for it) or nothing listens on the socket any more (no daemon; one
//!    started again holds no marks).
//!    A forked child sends no marks (its allocator state is a copy).
//! 7. **Dead marks only while wanted.** In auto mode a free is marked dead
//!    only while prescientd asks for ids (page.rs `dead_marks_wanted`):
//!    a free not marked is point 6's safe side, and alive marks for the
//!    dead marks already sent go out as before.
//!
//! race_tests.rs drives this code against a model of streams, of the
//! allocator's documented event order and of the daemon, and checks that
//! no discard ever hits a block in use.

pub mod blocks;
pub mod fence;
pub mod link;
pub mod pause;
pub mod protocol;
#[cfg(test)]
mod race_tests;

use fence::{CudaFence, Relaxed};
use link::SocketLink;
use protocol::Marks;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The socket marks go to; unset: no marks.
pub const ENV_SOCKET: &str = "PRESCIENT_MARKS_SOCKET";
/// "0": no flusher thread; dead marks go out at allocator calls only.
pub const ENV_FLUSHER: &str = "PRESCIENT_MARKS_FLUSHER";
/// Milliseconds a freed block stays free before its dead mark is sent
/// (protocol.rs `with_hold`); unset: `DEFAULT_HOLD`.
pub const ENV_HOLD_MS: &str = "PRESCIENT_MARKS_HOLD_MS";
/// The hold when ENV_HOLD_MS is unset: GPU run 164, the 374M LM 1.13x
/// faster with it (alive-mark requests halved, discards as many), the 220M
/// LM level (0.98x, within its spread); 10 ms is where run 163's block
/// logs stop gaining requests faster than they lose discards.
const DEFAULT_HOLD: Duration = Duration::from_millis(10);
/// The longest hold taken (a longer one is clamped: the pending list is
/// bounded, MAX_PENDING frees, and a long hold only loses discards).
const MAX_HOLD: Duration = Duration::from_secs(10);
/// Allocator events, as the torch helper numbers them.
pub const EV_ALLOC: c_int = 1;
pub const EV_FREE_COMPLETED: c_int = 2;
pub const EV_SEGMENT_ALLOC: c_int = 3;
pub const EV_SEGMENT_FREE: c_int = 4;
/// How often dead marks whose fence passed are sent at most: batches
/// them, and bounds the event queries per allocator call.
const FLUSH_EVERY: Duration = Duration::from_millis(2);
/// How often the flusher thread looks for dead marks whose fence passed.
const FLUSHER_EVERY: Duration = Duration::from_millis(1);

struct State {
    marks: Marks<SocketLink, CudaFence>,
    last_flush: Instant,
    said_off: bool,
    /// Pauses (pause.rs) said so far: the first pause and the first
    /// resumption are said, not each one of a long outage.
    said_pause: bool,
    said_resume: bool,
    /// Time the allocator's ALLOC events waited for this lock (held by the
    /// flusher thread sending dead marks, or by another allocator call), ns.
    alloc_lock_wait_ns: u64,
}

static STATE: OnceLock<Option<Mutex<State>>> = OnceLock::new();
/// Set in a forked child: the parent's marks are not its own.
static CHILD: AtomicBool = AtomicBool::new(false);

/// The process's marks, made on first use; None when they are off.
fn state() -> Option<&'static Mutex<State>> {
    if CHILD.load(Ordering::Relaxed) {
        return None;
    }
    STATE
        .get_or_init(|| {
            let path = std::env::var_os(ENV_SOCKET).filter(|p| !p.is_empty())?;
            let calls = fence::calls()?;
            start_flusher(calls);
            Some(Mutex::new(State {
                marks: Marks::new(SocketLink::new(path.into()), CudaFence::new(calls))
                    .with_hold(hold_from_env()),
                last_flush: Instant::now(),
                said_off: false,
                said_pause: false,
                said_resume: false,
                alloc_lock_wait_ns: 0,
            }))
        })
        .as_ref()
}

/// The hold ENV_HOLD_MS asks for; a value that is no number of
/// milliseconds is said once and the default taken.
fn hold_from_env() -> Duration {
    let Some(v) = std::env::var_os(ENV_HOLD_MS) else {
        return DEFAULT_HOLD;
    };
    match parse_hold(&v.to_string_lossy()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("prescient-runtime: {ENV_HOLD_MS}: {e}; holding dead marks {DEFAULT_HOLD:?}");
            DEFAULT_HOLD
        }
    }
}

/// Milliseconds, at most MAX_HOLD.
fn parse_hold(v: &str) -> Result<Duration, String> {
    let ms: u64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a whole number of milliseconds"))?;
    Ok(Duration::from_millis(ms).min(MAX_HOLD))
}

/// Starts the thread that sends dead marks while the job makes no
/// allocator call.
///
/// Fences are queried at allocator calls, but a training step's CPU thread
/// queues the whole step and then waits (a synchronize, `loss.item()`):
/// the frees of the step's end pass their fences on the GPU while nothing
/// queries them, and their blocks reached the daemon only with the next
/// step's first allocations. Under a budget the daemon had evicted many of
/// them by then, a copy to the host of memory already dead (BENCHMARKS-gpu.md
/// run 101). The thread takes the same lock as the allocator's callback,
/// so the protocol's order (points 2-3 above) is unchanged; it never calls
/// into PyTorch. The driver's event calls act in the calling thread's
/// current context, and this thread starts with none: it makes each
/// event's own context current first (fence.rs `enter`; the job's threads
/// keep theirs). `PRESCIENT_MARKS_FLUSHER=0` turns it off.
fn start_flusher(calls: &'static fence::EventCalls) {
    if std::env::var_os(ENV_FLUSHER).is_some_and(|v| v == "0") {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("prescient-marks".into())
        .spawn(move || {
            fence::become_flusher();
            loop {
                std::thread::sleep(FLUSHER_EVERY);
                if CHILD.load(Ordering::Relaxed) {
                    return;
                }
                let Some(mut s) = lock() else { return };
                // Nothing whose hold is over: no driver calls, lock let go.
                if !s.marks.ready_at(Instant::now()) {
                    continue;
                }
                let _r = Relaxed::new(calls);
                let sent = s.marks.flush();
                s.marks.counters.flusher_blocks += sent;
                // `last_flush` stays the allocator calls' own: should this
                // thread's queries fail, those calls still flush as before.
            }
        });
    if let Err(e) = spawned {
        // The allocator calls still flush, later.
        eprintln!("prescient-runtime: no marks flusher thread: {e}");
    }
}

fn lock() -> Option<std::sync::MutexGuard<'static, State>> {
    state().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
}

/// One allocator event from the torch helper: `action` (EV_*), the
/// allocator's device index, the range, and the block's stream handle.
/// Called under the allocator's lock; never calls into PyTorch.
#[no_mangle]
pub extern "C" fn prescient_allocator_event(
    action: c_int,
    device: c_int,
    addr: u64,
    size: u64,
    stream: *mut c_void,
) {
    // The live blocks launch footprints stand for (footprint/extents.rs),
    // with or without marks.
    match action {
        EV_ALLOC => crate::footprint::extents::block_allocated(addr, size),
        EV_FREE_COMPLETED | EV_SEGMENT_FREE => crate::footprint::extents::block_freed(addr, size),
        _ => {}
    }
    let t = Instant::now();
    let Some(mut s) = lock() else { return };
    if action == EV_ALLOC {
        s.alloc_lock_wait_ns += t.elapsed().as_nanos() as u64;
    }
    let Some(calls) = fence::calls() else { return };
    match action {
        EV_ALLOC | EV_SEGMENT_ALLOC => s.marks.allocated(addr, size),
        EV_SEGMENT_FREE => s.marks.released(addr, size),
        EV_FREE_COMPLETED => {
            let _r = Relaxed::new(calls);
            // Handle 0 is the current context's default stream: a fence
            // there covers the block only if that is the block's device.
            if fence::current_device_is(calls, device) && crate::page::dead_marks_wanted() {
                s.marks.freed(addr, size, stream as u64);
            }
        }
        _ => {}
    }
    let now = Instant::now();
    if now.duration_since(s.last_flush) >= FLUSH_EVERY && s.marks.ready_at(now) {
        let _r = Relaxed::new(calls);
        s.marks.flush_at(now);
        s.last_flush = Instant::now();
    }
    say_changes(&mut s);
}

/// Whether marks are on in this process (1) or off (0): the helper says
/// which once.
#[no_mangle]
pub extern "C" fn prescient_marks_enabled() -> c_int {
    c_int::from(lock().is_some_and(|s| s.marks.off().is_none()))
}

/// Says once, on stderr, that marks stopped and why; and that dead marks
/// paused (the first time) and were taken again (the first time).
fn say_changes(s: &mut State) {
    let p = &s.marks.pause;
    if p.count > 0 && !s.said_pause {
        eprintln!(
            "prescient-runtime: pid {}: dead marks paused: {}; sent again once prescientd's backend is back (tried after {:?}, then less often, at least every {:?})",
            std::process::id(),
            p.why.as_deref().unwrap_or("?"),
            pause::FIRST,
            pause::MAX
        );
        s.said_pause = true;
    }
    if p.resumed > 0 && !s.said_resume {
        eprintln!(
            "prescient-runtime: pid {}: dead marks taken again after {} pause(s)",
            std::process::id(),
            p.count
        );
        s.said_resume = true;
    }
    if s.said_off {
        return;
    }
    if let Some(why) = s.marks.off() {
        eprintln!(
            "prescient-runtime: pid {}: dead/alive marks off: {why}; the job goes on without them",
            std::process::id()
        );
        s.said_off = true;
    }
}

/// A managed allocation was made at `[addr, addr + len)` (the runtime's
/// cuMemAlloc): none of it may be dead at the daemon.
pub fn allocated(addr: u64, len: u64) {
    // Also when nothing is dead yet: a free still waiting for its fence
    // must not be marked once this address belongs to someone else.
    if let Some(mut s) = lock() {
        s.marks.allocated(addr, len);
    }
}

/// `[addr, addr + len)` is about to go back to the driver: its blocks are
/// marked alive first (point 5 above), with nothing brought back.
pub fn before_free(addr: u64, len: u64) {
    if let Some(mut s) = lock() {
        s.marks.released(addr, len);
    }
}

/// The counters, for the runtime's exit line (None: marks off).
pub fn line() -> Option<String> {
    let s = lock()?;
    let c = s.marks.counters;
    Some(format!(
        "marks: frees={} dead_blocks={} flusher_blocks={} alive_blocks={} cancelled_blocks={} dropped_blocks={} requests={} alive_wait_ms={:.1} alloc_lock_wait_ms={:.1} hold_ms={} paused={}{}",
        c.frees,
        c.dead_blocks,
        c.flusher_blocks,
        c.alive_blocks,
        c.cancelled_blocks,
        c.dropped_blocks,
        c.requests,
        c.alive_wait_ns as f64 / 1e6,
        s.alloc_lock_wait_ns as f64 / 1e6,
        s.marks.hold.as_millis(),
        s.marks.pause.count,
        s.marks.off().map(|w| format!(" off=({w})")).unwrap_or_default()
    ))
}

/// In a forked child: no marks (pthread_atfork, marker.rs installs it).
pub fn after_fork_in_child() {
    CHILD.store(true, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_is_whole_milliseconds_and_bounded() {
        assert_eq!(parse_hold("10"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_hold(" 0 "), Ok(Duration::ZERO));
        assert_eq!(parse_hold("999999999"), Ok(MAX_HOLD));
        assert!(parse_hold("1.5").unwrap_err().contains("milliseconds"));
        assert!(parse_hold("-3").is_err());
        assert!(parse_hold("").is_err());
    }
}
