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
//! - marking alive is synchronous: the backend thread replies after it has
//!   applied the mark, and the process waits for that reply before it hands
//!   the memory out. Once it has the reply no discard of those blocks is in
//!   flight, and none can start;
//! - dead marks round inward (only 2 MB blocks wholly inside the range),
//!   alive marks outward (every block the range touches).
//!
//! If the backend thread ends (the process exits, or is detached), pending
//! marks are dropped and their senders get an error: no discard can follow.

use crate::socket::{self, Peer};
use prescient_core::BLOCK_BYTES;
use prescient_uapi as uapi;
use prescient_uapi::control::Applied;
use std::ops::Range;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Ranges in one request: keeps a request line under the control socket's
/// 4 KiB limit.
pub const MAX_RANGES: usize = 128;
/// 2 MB blocks in one request (256 GiB): bounds the backend's work per mark.
pub const MAX_BLOCKS: u64 = 1 << 17;
/// Marks queued for one process's backend thread before senders wait.
pub const QUEUE: usize = 256;

/// One request for the backend thread.
pub struct Mark {
    pub dead: bool,
    /// Block numbers (address >> 21), validated and bounded.
    pub blocks: Vec<Range<u64>>,
    /// Where the backend thread reports what it did (alive marks wait for it).
    pub done: Option<SyncSender<Applied>>,
}

pub type Sender = SyncSender<Mark>;

pub fn channel() -> (Sender, Receiver<Mark>) {
    sync_channel(QUEUE)
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

/// Hands a mark to a backend thread. Alive marks wait until it has been
/// applied (see the module comment); dead marks return once queued.
pub fn send(tx: &Sender, dead: bool, blocks: Vec<Range<u64>>) -> Result<Applied, String> {
    let gone = || "the process's backend has stopped (exited or detached)".to_string();
    let n: u64 = blocks.iter().map(|b| b.end - b.start).sum();
    if dead {
        tx.send(Mark {
            dead,
            blocks,
            done: None,
        })
        .map_err(|_| gone())?;
        return Ok(Applied {
            blocks: n,
            ..Default::default()
        });
    }
    let (done_tx, done_rx) = sync_channel(1);
    tx.send(Mark {
        dead,
        blocks,
        done: Some(done_tx),
    })
    .map_err(|_| gone())?;
    done_rx.recv().map_err(|_| gone())
}

/// The reply to one request on a socket that takes only marks, from
/// `target` (the process `prescientd attach` acts for).
pub fn handle_on_marks_socket(
    req: prescient_uapi::control::Request,
    peer: Peer,
    target: i32,
    tx: &Sender,
) -> prescient_uapi::control::Response {
    use prescient_uapi::control::{Reply, Request, Response};
    use socket::error as err;
    let Request::Mark { dead, ranges } = req else {
        return err(
            "invalid",
            "this socket takes only \"mark\" requests (prescientctl talks to the service's control socket)",
        );
    };
    if peer.pid != Some(target) {
        return err(
            "permission",
            format!(
                "mark: only pid {target} may mark its ranges here (the sender is pid {})",
                peer.pid.map_or("unknown".into(), |p| p.to_string())
            ),
        );
    }
    match block_ranges(dead, &ranges).and_then(|b| send(tx, dead, b)) {
        Ok(a) => Response::Ok(Reply::Marked(a)),
        Err(m) => err("invalid", format!("mark: {m}")),
    }
}

/// Serves `listener` (a socket that takes only marks) until the task is
/// dropped.
pub async fn serve(listener: tokio::net::UnixListener, target: i32, tx: Sender) {
    socket::serve(listener, "marks socket", move |req, peer| {
        handle_on_marks_socket(req, peer, target, &tx)
    })
    .await
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range per mark reads best in tests
mod tests {
    use super::*;

    const MB2: u64 = BLOCK_BYTES;

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
    fn alive_waits_for_the_backend_and_fails_once_it_is_gone() {
        let (tx, rx) = channel();
        let backend = std::thread::spawn(move || {
            let m = rx.recv().unwrap();
            assert!(m.dead);
            assert!(m.done.is_none());
            let m = rx.recv().unwrap();
            assert!(!m.dead);
            m.done
                .unwrap()
                .send(Applied {
                    blocks: 2,
                    resident: 1,
                    refetched: 1,
                    ignored: false,
                })
                .unwrap();
            // The next alive mark is dropped unanswered: the thread ends.
            drop(rx.recv().unwrap());
        });
        assert_eq!(send(&tx, true, vec![3..5]).unwrap().blocks, 2);
        assert_eq!(send(&tx, false, vec![3..5]).unwrap().refetched, 1);
        assert!(send(&tx, false, vec![3..5])
            .unwrap_err()
            .contains("stopped"));
        backend.join().unwrap();
        assert!(send(&tx, true, vec![3..5]).is_err());
    }

    #[test]
    fn an_alive_mark_queued_when_the_backend_ends_fails() {
        let (tx, rx) = channel();
        let backend = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(rx);
        });
        assert!(send(&tx, false, vec![1..2]).is_err());
        backend.join().unwrap();
    }

    #[test]
    fn the_marks_socket_takes_only_marks_from_its_process() {
        use prescient_uapi::control::{Reply, Request, Response};
        let (tx, rx) = channel();
        let me = Peer {
            uid: Some(1000),
            pid: Some(42),
        };
        let r = handle_on_marks_socket(Request::Status, me, 42, &tx);
        assert!(matches!(r, Response::Error(e) if e.kind == "invalid"));
        let mark = Request::Mark {
            dead: true,
            ranges: vec![[0x20_0000, 0x40_0000]],
        };
        let other = Peer {
            pid: Some(43),
            ..me
        };
        let r = handle_on_marks_socket(mark.clone(), other, 42, &tx);
        assert!(matches!(r, Response::Error(e) if e.kind == "permission"));
        let r = handle_on_marks_socket(mark, me, 42, &tx);
        assert!(matches!(r, Response::Ok(Reply::Marked(a)) if a.blocks == 2));
        let m = rx.try_recv().unwrap();
        assert_eq!(m.blocks, vec![1..3]);
        let bad = Request::Mark {
            dead: false,
            ranges: vec![[1, 4096]],
        };
        let r = handle_on_marks_socket(bad, me, 42, &tx);
        assert!(matches!(r, Response::Error(e) if e.kind == "invalid"));
    }
}
