//! Dead and alive marks for the user-space backend: a process's allocator
//! says which of its ranges hold no live data (DeepUM 5.3.2: the blocks
//! PyTorch's allocator has freed), so that under a residency budget they are
//! discarded (UVM_DISCARD, no copy) before anything live is evicted, and
//! come back to the GPU with no copy either.
//!
//! The marks arrive on a Unix socket, in the control protocol's `mark`
//! request (prescient_uapi::control): on the service's control socket, or on the socket
//! `prescientd attach --pid PID --marks-socket PATH` serves. The peer's pid
//! (SO_PEERCRED) names the process whose ranges they are, so a process can
//! mark only its own memory.
//!
//! # Why a discard never destroys live data
//! The one hazard is a discard landing on memory that is in use again. The
//! protocol rules it out:
//! - a process marks a range dead only once the GPU work that used it has
//!   completed (managed_alloc.cu records an event at each free and sends the
//!   mark after the event);
//! - only the process's backend thread discards, synchronously (UVM_DISCARD
//!   returns after the driver's work is done), and only blocks that are dead
//!   in its engine at that moment;
//! - marking alive is synchronous: the process waits for the reply before
//!   it hands the memory out, and the reply comes once the blocks are in
//!   the process's alive gate (alive.rs), which every discard holds while
//!   it runs and whose blocks it leaves alone. Once the process has the
//!   reply no discard of those blocks is in flight, and none can start
//!   until the backend thread has applied the mark (its engine then has
//!   them alive);
//! - dead marks round inward (only 2 MB blocks wholly inside the range),
//!   alive marks outward (every block the range touches).
//!
//! If the backend thread ends (the process exits, or is detached), pending
//! marks are dropped and later senders get an error: no discard can follow.
//!
//! # Marks belong to their connection
//! A peer is its process by pidfd (socket/peer.rs): a connection that
//! outlives the process that opened it (fork, SCM_RIGHTS) marks nothing,
//! whatever process has its pid number now. Each connection (`Owner`)
//! remembers the dead blocks it marked and has not marked alive again; when
//! it closes they are revoked: put in the alive gate and marked alive on a
//! channel the backend reads before any other mark, and the dead marks of
//! that connection still queued are dropped unapplied. A client that loses
//! its connection can therefore never leave blocks it may hand out again
//! marked dead.
//!
//! # Bounded
//! The queue is non-blocking: a full queue answers "busy" (a dead mark not
//! taken is safe: the block is only not discarded). A request covers at
//! most `MAX_BLOCKS`, a connection tracks at most `MAX_TRACKED` ranges, and
//! an alive mark waits only for a discard in flight (one UVM_DISCARD call,
//! at most `max_coalesce_blocks` blocks: discard.rs), and at most
//! `ALIVE_WAIT` (then "busy", the blocks left dead).

use super::alive::AliveGate;
use super::ranges::RangeSet;
use crate::pidfd::Pidfd;
use crate::socket::{self, Connection, Limits, Peer};
use prescient_core::BLOCK_BYTES;
use prescient_uapi as uapi;
use prescient_uapi::control::{Applied, Request, Response};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, sync_channel, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long an alive mark waits for a discard in flight (one UVM_DISCARD
/// call: microseconds, unless the driver does not return).
pub const ALIVE_WAIT: Duration = Duration::from_secs(30);

/// Ranges in one request: keeps a request line under the control socket's
/// 4 KiB limit.
pub const MAX_RANGES: usize = 128;
/// 2 MB blocks in one request (32 GiB): bounds the backend's work per mark
/// (each dead block off the GPU may cost one UVM_DISCARD).
pub const MAX_BLOCKS: u64 = 1 << 14;
/// Marks queued for one process's backend thread before senders are told "busy".
pub const QUEUE: usize = 256;
/// Dead ranges one connection may hold outstanding (bounds its memory and
/// the revocation's work).
pub const MAX_TRACKED: usize = 1 << 16;

/// One request for the backend thread.
pub struct Mark {
    pub dead: bool,
    /// Block numbers (address >> 21), validated and bounded.
    pub blocks: Vec<Range<u64>>,
    /// Alive marks: its entry in the alive gate, closed by the backend
    /// once the mark is applied.
    pub gate: Option<u64>,
    /// The connection that sent it: a dead mark of a closed one is dropped.
    pub owner: Option<Arc<Owner>>,
    /// Alive marks: its discarded blocks that were brought back to the GPU
    /// before the reply (alive.rs `open_populating`), sorted; the backend
    /// counts them on the GPU at once.
    pub populated: Vec<u64>,
    /// Alive marks: what becomes of its blocks prescientd discarded.
    pub discarded: Discarded,
}

/// What an alive mark does with the blocks prescientd discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discarded {
    /// Brings them back (the allocator hands the memory out): populated
    /// before the reply, or refetched by the backend.
    BringBack,
    /// Leaves them discarded and recorded: a revocation (nobody is about
    /// to use them; the process's own alive mark at their next use brings
    /// them back).
    Keep,
    /// Leaves them discarded and forgets them: a `no_populate` mark, for
    /// memory going back to the driver (no alive mark for it will come).
    Forget,
}

impl Mark {
    /// Whether the backend must drop it unapplied: a dead mark whose
    /// connection has closed (its blocks were revoked already).
    pub fn revoked(&self) -> bool {
        self.dead && self.owner.as_ref().is_some_and(|o| o.is_closed())
    }
}

/// The sending side of one process's marks (cloned by every connection).
#[derive(Clone)]
pub struct Sender {
    marks: SyncSender<Mark>,
    /// Revocations: one per closed connection, so the number of connections
    /// bounds them; each with its alive gate entry.
    revokes: mpsc::Sender<(Vec<Range<u64>>, u64)>,
    gate: AliveGate,
    /// Tells two processes' channels apart (a re-attach makes a new one).
    id: Arc<()>,
}

/// The backend thread's side: revocations first, then marks in order.
pub struct Receiver {
    marks: mpsc::Receiver<Mark>,
    revokes: mpsc::Receiver<(Vec<Range<u64>>, u64)>,
    gate: AliveGate,
}

pub fn channel() -> (Sender, Receiver) {
    let (tx, rx) = sync_channel(QUEUE);
    let (rtx, rrx) = mpsc::channel();
    let gate = AliveGate::default();
    (
        Sender {
            marks: tx,
            revokes: rtx,
            gate: gate.clone(),
            id: Arc::new(()),
        },
        Receiver {
            marks: rx,
            revokes: rrx,
            gate,
        },
    )
}

impl Receiver {
    /// The process's alive gate: every discard holds it (alive.rs).
    pub fn gate(&self) -> &AliveGate {
        &self.gate
    }

    /// The next mark to apply, without waiting: a revocation (as an alive
    /// mark nobody waits for) before anything queued; dead marks of closed
    /// connections are skipped. None when nothing is pending.
    pub fn next(&self) -> Option<Mark> {
        if let Ok((blocks, id)) = self.revokes.try_recv() {
            return Some(Mark {
                dead: false,
                blocks,
                gate: Some(id),
                owner: None,
                populated: Vec::new(),
                discarded: Discarded::Keep,
            });
        }
        loop {
            match self.marks.try_recv() {
                Ok(m) if m.revoked() => continue,
                Ok(m) => return Some(m),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return None,
            }
        }
    }
}

impl Receiver {
    /// `next`, waiting up to `d` for a mark (None on timeout, or once every
    /// sender is gone).
    pub fn wait(&self, d: Duration) -> Option<Mark> {
        let end = std::time::Instant::now() + d;
        loop {
            if let Some(m) = self.next() {
                return Some(m);
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.marks.recv_timeout(left.min(Duration::from_millis(10))) {
                Ok(m) if m.revoked() => continue,
                Ok(m) => return Some(m),
                Err(mpsc::RecvTimeoutError::Disconnected) => return self.next(),
                Err(mpsc::RecvTimeoutError::Timeout) if left.is_zero() => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

/// One connection's marks: the dead blocks it has marked and not marked
/// alive since, on the process channel it sent them to.
#[derive(Default)]
pub struct Owner {
    closed: AtomicBool,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    to: Option<Sender>,
    /// A backend that applies marks itself (prescient.ko): how the
    /// connection's dead blocks are marked alive when it closes.
    direct: Option<Revive>,
    dead: RangeSet,
}

/// Marks blocks alive at a backend that applies marks itself
/// (prescient.ko's MARK_ALIVE on the process's space), for [`Owner::close`].
pub type Revive = Arc<dyn Fn(&[Range<u64>]) + Send + Sync>;

/// A connection's dead blocks at a backend that applies marks itself,
/// under the lock [`Owner::close`] takes: a close either sees a dead mark's
/// blocks or comes before the mark is applied.
pub struct Direct<'a>(std::sync::MutexGuard<'a, Held>);

impl Direct<'_> {
    /// Whether `ranges` more dead ranges may be held (at most
    /// `MAX_TRACKED`); the reply's sentence if not.
    pub fn room_for(&self, ranges: usize) -> Result<(), String> {
        if self.0.dead.len() + ranges > MAX_TRACKED {
            return Err(format!(
                "this connection holds {} dead ranges (at most {MAX_TRACKED}); mark some alive first",
                self.0.dead.len()
            ));
        }
        Ok(())
    }

    /// `r` was marked dead at the backend: marked alive with `revive`
    /// should the connection close first.
    pub fn dead(&mut self, r: Range<u64>, revive: &Revive) {
        self.0.direct = Some(revive.clone());
        self.0.dead.insert(r);
    }

    /// `r` was marked alive at the backend: no longer held.
    pub fn alive(&mut self, r: Range<u64>) {
        self.0.dead.remove(r);
    }
}

impl Owner {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the connection holds dead ranges (closing it would mark
    /// them alive, and prescientd would discard none of them any more).
    pub fn holds_dead(&self) -> bool {
        !self.held().dead.is_empty()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection's dead blocks at a backend that applies marks itself;
    /// None once the connection has closed (nothing more may be held).
    pub fn direct(&self) -> Option<Direct<'_>> {
        let h = self.held();
        (!self.is_closed()).then_some(Direct(h))
    }

    /// The connection has closed: its dead blocks are revoked (marked
    /// alive ahead of every queued mark) and its queued dead marks dropped.
    /// Returns how many ranges were revoked.
    pub fn close(&self) -> usize {
        let mut h = self.held();
        self.closed.store(true, Ordering::SeqCst);
        let n = h.dead.len();
        if let Some(revive) = h.direct.take().filter(|_| !h.dead.is_empty()) {
            // Applied by the backend itself: marked alive there now.
            revive(&h.dead.take());
            return n;
        }
        let to = h.to.take();
        if let Some(to) = to.filter(|_| !h.dead.is_empty()) {
            // The receiver gone means the backend thread has ended:
            // nothing can be discarded any more.
            let blocks = h.dead.take();
            let id = to.gate.open(blocks.clone());
            if to.revokes.send((blocks, id)).is_err() {
                to.gate.close(id);
            }
        }
        n
    }
}

/// A mark request as the service hands it to a backend: from `peer`, on
/// the connection `owner`, of `blocks` (validated by `block_ranges`).
pub struct MarkFrom<'a> {
    pub peer: &'a Peer,
    pub owner: &'a Arc<Owner>,
    pub dead: bool,
    pub blocks: Vec<Range<u64>>,
    /// Alive marks: bring discarded blocks back (the request's
    /// `no_populate` unset).
    pub populate: bool,
}

/// Why a mark was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// The queue is full, or the connection holds too many dead ranges:
    /// nothing was applied; try again.
    Busy(String),
    /// The backend thread has ended (the process exited, or was detached).
    Gone,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Busy(m) => f.write_str(m),
            SendError::Gone => {
                f.write_str("the process's backend has stopped (exited or detached)")
            }
        }
    }
}

/// Validates `[addr, len]` pairs as MARK_DEAD / MARK_ALIVE do
/// (page-aligned, non-empty, inside user space) and turns them into block
/// ranges: inward for dead marks, outward for alive ones.
pub fn block_ranges(dead: bool, ranges: &[[u64; 2]]) -> Result<Vec<Range<u64>>, String> {
    if ranges.is_empty() {
        return Err("no ranges".into());
    }
    if ranges.len() > MAX_RANGES {
        return Err(format!(
            "{} ranges: at most {MAX_RANGES} per request",
            ranges.len()
        ));
    }
    let mut out = Vec::with_capacity(ranges.len());
    let mut total = 0u64;
    for &[addr, len] in ranges {
        let r = uapi::RangeAbi {
            handle: 1,
            addr,
            len,
            flags: 0,
        };
        r.check().map_err(|_| {
            format!(
                "range {addr:#x}+{len:#x}: must be non-empty, {}-byte aligned, at most {} GiB and below {:#x}",
                uapi::RANGE_ALIGN,
                uapi::MAX_RANGE_LEN >> 30,
                uapi::USER_ADDR_END
            )
        })?;
        let b = if dead {
            r.whole_blocks()
        } else {
            r.touched_blocks()
        };
        total += b.end - b.start;
        if total > MAX_BLOCKS {
            return Err(format!(
                "more than {MAX_BLOCKS} blocks ({} GiB) in one request",
                (MAX_BLOCKS * BLOCK_BYTES) >> 30
            ));
        }
        if !b.is_empty() {
            out.push(b);
        }
    }
    Ok(out)
}

/// Hands `owner`'s mark to a backend thread without blocking. Dead marks
/// return once queued (and are remembered for revocation); alive marks
/// once their blocks are in the alive gate and the mark is queued (see the
/// module comment), then are forgotten. Either reply says only how many
/// blocks the mark covers: what the backend did goes to its counters.
pub fn send(
    tx: &Sender,
    owner: &Arc<Owner>,
    dead: bool,
    blocks: Vec<Range<u64>>,
    populate: bool,
) -> Result<Applied, SendError> {
    let n: u64 = blocks.iter().map(|b| b.end - b.start).sum();
    if dead {
        return send_dead(tx, owner, blocks).map(|()| Applied {
            blocks: n,
            ..Default::default()
        });
    }
    // In the gate before it is queued: from here on no discard of the
    // blocks is in flight or can start, and its discarded blocks are back
    // on the GPU (alive.rs), unless the sender asked for none.
    let opened = if populate {
        tx.gate.open_populating(blocks.clone(), ALIVE_WAIT)
    } else {
        tx.gate
            .open_forgetting(blocks.clone(), ALIVE_WAIT)
            .map(|id| (id, Vec::new()))
    };
    let Some((id, populated)) = opened else {
        return Err(SendError::Busy(format!(
            "a discard held the process's alive gate for {ALIVE_WAIT:?}; nothing was applied, the blocks stay dead"
        )));
    };
    let queued = try_send(
        tx,
        Mark {
            dead,
            blocks: blocks.clone(),
            gate: Some(id),
            owner: Some(owner.clone()),
            populated,
            discarded: if populate {
                Discarded::BringBack
            } else {
                Discarded::Forget
            },
        },
    );
    if let Err(e) = queued {
        tx.gate.close(id);
        return Err(e);
    }
    let mut h = owner.held();
    for b in blocks {
        h.dead.remove(b);
    }
    Ok(Applied {
        blocks: n,
        ..Default::default()
    })
}

/// Queues a dead mark and remembers it for revocation; never blocks.
fn send_dead(tx: &Sender, owner: &Arc<Owner>, blocks: Vec<Range<u64>>) -> Result<(), SendError> {
    let mut h = owner.held();
    if h.dead.len() + blocks.len() > MAX_TRACKED {
        return Err(SendError::Busy(format!(
            "this connection holds {} dead ranges (at most {MAX_TRACKED}); mark some alive first",
            h.dead.len()
        )));
    }
    if h.to.as_ref().is_some_and(|t| !Arc::ptr_eq(&t.id, &tx.id)) {
        // The process was attached again: the old backend has ended.
        h.dead = RangeSet::default();
    }
    try_send(
        tx,
        Mark {
            dead: true,
            blocks: blocks.clone(),
            gate: None,
            owner: Some(owner.clone()),
            populated: Vec::new(),
            discarded: Discarded::Keep,
        },
    )?;
    h.to = Some(tx.clone());
    for b in blocks {
        h.dead.insert(b);
    }
    Ok(())
}

/// `try_send`, as a `SendError`.
fn try_send(tx: &Sender, m: Mark) -> Result<(), SendError> {
    tx.marks.try_send(m).map_err(|e| match e {
        TrySendError::Full(_) => SendError::Busy(format!(
            "the process's mark queue is full ({QUEUE} marks); nothing was applied, try again"
        )),
        TrySendError::Disconnected(_) => SendError::Gone,
    })
}

/// A `SendError` as the reply the client reads.
pub fn send_error_reply(e: &SendError) -> Response {
    match e {
        SendError::Busy(m) => socket::error("busy", format!("mark: {m}")),
        SendError::Gone => socket::error("not-found", format!("mark: {e}")),
    }
}

/// Checks that `peer` is the target process itself (by pidfd: alive, the
/// same pid as `target`, which is alive too) and owns it; the error is the
/// reply's sentence.
pub fn check_peer(peer: &Peer, target: &Pidfd) -> Result<(), String> {
    let Some(p) = peer.live_process() else {
        return Err(no_process(peer));
    };
    if p.pid != target.pid {
        return Err(format!(
            "mark: only pid {} may mark its ranges here (the sender is pid {})",
            target.pid, p.pid
        ));
    }
    let owner = target.uid();
    if peer.uid != Some(0) && (owner.is_none() || peer.uid != owner) {
        return Err(format!(
            "mark: uid {:?} does not own pid {} (its uid is {owner:?})",
            peer.uid, target.pid
        ));
    }
    // Both alive at once with the same number: one process.
    if !target.alive() || peer.live_process().is_none() {
        return Err(format!("mark: pid {} has exited", target.pid));
    }
    Ok(())
}

/// Why a peer with no live process marks nothing, as the reply says it.
#[cold]
pub fn no_process(peer: &Peer) -> String {
    match peer.pid {
        Some(pid) => format!(
            "mark: the process that opened this connection (pid {pid}) has exited (or was gone before it could be held by pidfd); a connection that outlives its process marks nothing, whichever process has pid {pid} now"
        ),
        None => "mark: the sender's process is unknown (no SO_PEERCRED pid); marks are taken only from the process they are about".into(),
    }
}

/// A connection to the socket that takes only marks, from `target` (the
/// process `prescientd attach` acts for).
pub struct MarksConnection {
    peer: Peer,
    target: Arc<Pidfd>,
    tx: Sender,
    owner: Arc<Owner>,
}

impl MarksConnection {
    pub fn new(peer: Peer, target: Arc<Pidfd>, tx: Sender) -> MarksConnection {
        MarksConnection {
            peer,
            target,
            tx,
            owner: Arc::default(),
        }
    }
}

impl Connection for MarksConnection {
    fn handle(&self, req: Request) -> Response {
        use prescient_uapi::control::Reply;
        let Request::Mark {
            dead,
            ranges,
            no_populate,
        } = req
        else {
            return socket::error(
                "invalid",
                "this socket takes only \"mark\" requests (prescientctl talks to the service's control socket)",
            );
        };
        if let Err(m) = check_peer(&self.peer, &self.target) {
            tracing::warn!(pid = ?self.peer.pid, uid = ?self.peer.uid, "{m}");
            return socket::error("permission", m);
        }
        let blocks = match block_ranges(dead, &ranges) {
            Ok(b) => b,
            Err(m) => return socket::error("invalid", format!("mark: {m}")),
        };
        match send(&self.tx, &self.owner, dead, blocks, !no_populate) {
            Ok(a) => Response::Ok(Reply::Marked(a)),
            Err(e) => send_error_reply(&e),
        }
    }

    fn closed(&self) {
        let n = self.owner.close();
        if n > 0 {
            tracing::info!(pid = ?self.peer.pid, ranges = n, "marks connection closed: its dead ranges are alive again");
        }
    }
}

/// Serves `listener` (a socket that takes only marks) until the task is
/// dropped.
pub async fn serve(listener: tokio::net::UnixListener, target: Arc<Pidfd>, tx: Sender) {
    // A job's marks connection lives as long as the job: it may be quiet.
    let limits = Limits {
        quiet_allowed: true,
        ..Limits::default()
    };
    socket::serve(listener, "marks socket", limits, move |peer| {
        Arc::new(MarksConnection::new(peer, target.clone(), tx.clone()))
    })
    .await
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range per mark reads best in tests
mod tests {
    use super::*;

    const MB2: u64 = BLOCK_BYTES;

    fn owner() -> Arc<Owner> {
        Arc::default()
    }

    #[test]
    fn dead_rounds_inward_and_alive_outward() {
        // 1 MB into block 1 .. 1 MB into block 4.
        let r = [[MB2 + (1 << 20), 3 * MB2]];
        assert_eq!(block_ranges(true, &r).unwrap(), vec![2..4]);
        assert_eq!(block_ranges(false, &r).unwrap(), vec![1..5]);
        // Less than a block: nothing is dead, one block comes alive.
        let small = [[MB2 + 4096, 8192]];
        assert_eq!(block_ranges(true, &small).unwrap(), vec![]);
        assert_eq!(block_ranges(false, &small).unwrap(), vec![1..2]);
    }

    #[test]
    fn bad_ranges_are_refused_with_a_reason() {
        for bad in [
            vec![],
            vec![[0, 0]],
            vec![[4095, 4096]],
            vec![[u64::MAX - 4095, 4096]],
            vec![[1 << 56, 4096]],
            vec![[0, (1 << 40) + 4096]],
            vec![[0, 4096]; MAX_RANGES + 1],
        ] {
            assert!(block_ranges(true, &bad).is_err(), "{bad:?}");
            assert!(block_ranges(false, &bad).is_err(), "{bad:?}");
        }
        // Each range is within limits, the sum is not.
        let many = vec![[0, 1 << 40]; 2];
        assert!(block_ranges(true, &many).unwrap_err().contains("blocks"));
    }

    #[test]
    fn one_request_is_bounded_work() {
        // Review finding 9: 256 GiB (131,072 discards) in one request.
        let r = [[0, 256 << 30]];
        assert!(block_ranges(true, &r).unwrap_err().contains("blocks"));
        assert!(block_ranges(true, &[[0, 32 << 30]]).is_ok());
    }

    /// A `no_populate` alive mark (memory going back to the driver) is held
    /// out of discards like any other, migrates nothing before its reply,
    /// asks the backend for no refetch and forgets its discarded blocks: a
    /// later alive mark there brings nothing back.
    #[test]
    fn a_no_populate_alive_mark_is_gated_and_brings_nothing_back() {
        let (tx, rx) = channel();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = calls.clone();
        rx.gate().set_populate(Some(Arc::new(move |first, count| {
            c.lock().unwrap().push((first, count));
            true
        })));
        rx.gate().guard().discarded([3, 4]);
        let o = owner();
        send(&tx, &o, true, vec![3..5], true).unwrap();
        assert_eq!(send(&tx, &o, false, vec![3..5], false).unwrap().blocks, 2);
        assert!(rx.gate().guard().holds(3), "held before the backend saw it");
        assert!(calls.lock().unwrap().is_empty(), "nothing migrated");
        rx.next().unwrap();
        let m = rx.next().unwrap();
        assert!(!m.dead && m.discarded == Discarded::Forget && m.populated.is_empty());
        rx.gate().close(m.gate.unwrap());
        // Forgotten: a later alive mark of the blocks migrates nothing.
        send(&tx, &o, false, vec![3..5], true).unwrap();
        assert!(calls.lock().unwrap().is_empty());
        let m = rx.next().unwrap();
        assert!(m.discarded == Discarded::BringBack && m.populated.is_empty());
    }

    /// An alive mark is answered once its blocks are in the gate and it is
    /// queued, without waiting for the backend; the gate holds them until
    /// the backend has applied it. Once the backend is gone, marks fail.
    #[test]
    fn alive_is_answered_once_gated_and_fails_once_the_backend_is_gone() {
        let (tx, rx) = channel();
        let o = owner();
        assert!(!o.holds_dead());
        assert_eq!(send(&tx, &o, true, vec![3..5], true).unwrap().blocks, 2);
        assert!(o.holds_dead(), "the connection may now stay quiet");
        assert_eq!(send(&tx, &o, false, vec![3..5], true).unwrap().blocks, 2);
        assert!(!o.holds_dead());
        assert!(rx.gate().guard().holds(4), "held before the backend saw it");
        let m = rx.next().unwrap();
        assert!(m.dead && m.gate.is_none());
        let m = rx.next().unwrap();
        assert!(!m.dead);
        assert!(rx.gate().guard().holds(3));
        rx.gate().close(m.gate.unwrap());
        assert!(!rx.gate().guard().holds(3));
        drop(rx);
        assert_eq!(send(&tx, &o, false, vec![3..5], true), Err(SendError::Gone));
        assert!(SendError::Gone.to_string().contains("stopped"));
        assert!(send(&tx, &o, true, vec![3..5], true).is_err());
        assert_eq!(tx.gate.pending(), 0, "a mark not queued leaves no entry");
    }

    /// A discard in flight (the gate held) holds an alive mark's answer
    /// back until it has returned.
    #[test]
    fn an_alive_mark_is_answered_only_after_a_discard_in_flight() {
        let (tx, rx) = channel();
        let o = owner();
        let guard = rx.gate().guard();
        let answered = Arc::new(AtomicBool::new(false));
        let t = {
            let (tx, o, answered) = (tx.clone(), o.clone(), answered.clone());
            std::thread::spawn(move || {
                send(&tx, &o, false, vec![7..8], true).unwrap();
                answered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!answered.load(Ordering::SeqCst));
        drop(guard);
        t.join().unwrap();
        assert!(rx.gate().guard().holds(7));
    }

    #[test]
    fn a_full_queue_answers_busy_without_blocking() {
        // Review finding 9: `tx.send` blocked a tokio blocking thread.
        let (tx, _rx) = channel();
        let o = owner();
        for i in 0..QUEUE as u64 {
            send(&tx, &o, true, vec![i..i + 1], true).unwrap();
        }
        let t = std::time::Instant::now();
        let e = send(&tx, &o, true, vec![9999..10000], true).unwrap_err();
        assert!(
            matches!(e, SendError::Busy(ref m) if m.contains("full")),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        let r = send_error_reply(&e);
        assert!(
            matches!(r, Response::Error(ref x) if x.kind == "busy"),
            "{r:?}"
        );
    }

    #[test]
    fn a_closed_connection_revokes_its_dead_marks_before_anything_else() {
        // Review finding 4: a Mark had no owner; nothing undid a closed
        // connection's dead marks.
        let (tx, rx) = channel();
        let (a, b) = (owner(), owner());
        send(&tx, &a, true, vec![10..20], true).unwrap();
        send(&tx, &b, true, vec![30..31], true).unwrap();
        send(&tx, &a, true, vec![40..42], true).unwrap();
        // Applied: a's first mark.
        let m = rx.next().unwrap();
        assert_eq!((m.dead, m.blocks.clone()), (true, vec![10..20]));
        // a goes away with 10..20 applied and 40..42 still queued.
        assert_eq!(a.close(), 2);
        let r = rx.next().unwrap();
        assert!(!r.dead, "the revocation comes first");
        assert_eq!(r.blocks, vec![10..20, 40..42]);
        // b's mark is applied; a's queued dead mark is dropped unapplied.
        let m = rx.next().unwrap();
        assert_eq!(m.blocks, vec![30..31]);
        assert!(rx.next().is_none());
        // b's connection is unaffected; closing it revokes only its own.
        assert_eq!(b.close(), 1);
        assert_eq!(rx.next().unwrap().blocks, vec![30..31]);
    }

    #[test]
    fn a_closed_connection_revives_what_a_backend_applied_itself() {
        // prescient.ko applies marks at once (module/marks.rs): a close
        // must mark alive there what the connection still holds dead.
        let revived: Arc<Mutex<Vec<Range<u64>>>> = Arc::default();
        let r2 = revived.clone();
        let revive: Revive =
            Arc::new(move |rs: &[Range<u64>]| r2.lock().unwrap().extend_from_slice(rs));
        let o = owner();
        {
            let mut d = o.direct().unwrap();
            d.room_for(2).unwrap();
            d.dead(10..20, &revive);
            d.dead(40..42, &revive);
            d.alive(12..14);
        }
        assert_eq!(o.close(), 3);
        assert_eq!(*revived.lock().unwrap(), vec![10..12, 14..20, 40..42]);
        // Closed: nothing more may be held, and a second close revives nothing.
        assert!(o.direct().is_none());
        assert_eq!(o.close(), 0);
        assert_eq!(revived.lock().unwrap().len(), 3);
        // A connection whose dead blocks all came alive revives nothing.
        let o = owner();
        o.direct().unwrap().dead(0..4, &revive);
        o.direct().unwrap().alive(0..4);
        o.close();
        assert_eq!(revived.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_connection_holds_at_most_max_tracked_dead_ranges() {
        let revive: Revive = Arc::new(|_: &[Range<u64>]| {});
        let o = owner();
        let mut d = o.direct().unwrap();
        for i in 0..MAX_TRACKED as u64 {
            d.dead(i * 2..i * 2 + 1, &revive);
        }
        assert!(d.room_for(0).is_ok());
        let e = d.room_for(1).unwrap_err();
        assert!(e.contains("mark some alive first"), "{e}");
    }

    #[test]
    fn blocks_marked_alive_again_are_not_revoked_twice() {
        let (tx, rx) = channel();
        let o = owner();
        send(&tx, &o, true, vec![0..8], true).unwrap();
        rx.next().unwrap();
        send(&tx, &o, false, vec![2..4], true).unwrap();
        let m = rx.next().unwrap();
        rx.gate().close(m.gate.unwrap());
        o.close();
        let r = rx.next().unwrap();
        assert_eq!(r.blocks, vec![0..2, 4..8]);
        // The revocation is held in the gate until it is applied.
        assert!(rx.gate().guard().holds(5) && !rx.gate().guard().holds(2));
        rx.gate().close(r.gate.unwrap());
        assert_eq!(rx.gate().pending(), 0);
    }

    #[test]
    fn a_connection_holds_a_bounded_number_of_dead_ranges() {
        let (tx, rx) = channel();
        let o = owner();
        let mut sent = 0;
        for i in 0..(MAX_TRACKED as u64 + 1) {
            // Apart, so that they do not merge.
            match send(&tx, &o, true, vec![2 * i..2 * i + 1], true) {
                Ok(_) => sent += 1,
                Err(SendError::Busy(m)) if m.contains("dead ranges") => break,
                Err(SendError::Busy(_)) => {
                    while rx.next().is_some() {}
                    send(&tx, &o, true, vec![2 * i..2 * i + 1], true).unwrap();
                    sent += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(sent, MAX_TRACKED);
    }

    fn me() -> Peer {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let _g = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _e = _g.enter();
        Peer::of(&tokio::net::UnixStream::from_std(a).unwrap())
    }

    #[test]
    fn the_marks_socket_takes_only_marks_from_its_process() {
        use prescient_uapi::control::Reply;
        let (tx, rx) = channel();
        let peer = me();
        let target = Arc::new(Pidfd::open(std::process::id() as i32).unwrap());
        let c = MarksConnection::new(peer.clone(), target.clone(), tx.clone());
        let r = c.handle(Request::Status);
        assert!(matches!(r, Response::Error(e) if e.kind == "invalid"));
        let mark = Request::Mark {
            dead: true,
            ranges: vec![[0x20_0000, 0x40_0000]],
            no_populate: false,
        };
        // Another process (a child of ours, alive) may not mark for us.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let other_target = Arc::new(Pidfd::open(child.id() as i32).unwrap());
        let other = MarksConnection::new(peer.clone(), other_target, tx.clone());
        let r = other.handle(mark.clone());
        assert!(matches!(r, Response::Error(e) if e.kind == "permission"));
        child.kill().unwrap();
        child.wait().unwrap();
        let r = c.handle(mark);
        assert!(matches!(r, Response::Ok(Reply::Marked(a)) if a.blocks == 2));
        let m = rx.next().unwrap();
        assert_eq!(m.blocks, vec![1..3]);
        let bad = Request::Mark {
            dead: false,
            ranges: vec![[1, 4096]],
            no_populate: false,
        };
        let r = c.handle(bad);
        assert!(matches!(r, Response::Error(e) if e.kind == "invalid"));
        // Closing the connection revokes the dead mark.
        c.closed();
        assert_eq!(rx.next().unwrap().blocks, vec![1..3]);
    }

    #[test]
    fn a_connection_whose_process_has_exited_marks_nothing() {
        // Review finding 3: the pid number, fixed at connect(), was the only
        // identity; a reused number passed.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let p = crate::pidfd::Pidfd::open(pid).unwrap();
        child.wait().unwrap();
        let peer = Peer {
            uid: Some(0),
            pid: Some(pid),
            process: Some(Arc::new(p)),
        };
        // Whatever process holds `pid` now (the target), the dead peer is refused.
        let target = Pidfd::open(std::process::id() as i32).unwrap();
        let e = check_peer(&peer, &target).unwrap_err();
        assert!(e.contains("has exited"), "{e}");
        // A peer known by number only is refused too.
        let e = check_peer(&Peer::default(), &target).unwrap_err();
        assert!(e.contains("unknown"), "{e}");
    }
}
