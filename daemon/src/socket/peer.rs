//! Who is on the other end of a connection: SO_PEERCRED's uid and pid, and
//! the peer process itself by pidfd (SO_PEERPIDFD where the kernel has it,
//! Linux 6.5; otherwise pidfd_open at accept, refused if the process with
//! that number started after the connection was accepted: see
//! `fallback_pidfd` for what that leaves).

use crate::pidfd::{now_ticks, Pidfd};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// SO_PEERPIDFD (asm-generic/socket.h), newer than the libc crate's list.
const SO_PEERPIDFD: libc::c_int = 77;

/// Who is on the other end of a connection.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    pub uid: Option<u32>,
    pub pid: Option<i32>,
    /// The peer process, for as long as it lives: a pid number reused by
    /// another process after the peer exits does not match it.
    pub process: Option<Arc<Pidfd>>,
}

impl Peer {
    /// The peer of `stream`, or a peer with no identity if the kernel gives none.
    pub fn of(stream: &tokio::net::UnixStream) -> Peer {
        let Ok(c) = stream.peer_cred() else {
            return Peer::default();
        };
        let pid = c.pid().filter(|p| *p > 0);
        let process = pid.and_then(|pid| peer_pidfd(stream, pid)).map(Arc::new);
        Peer {
            uid: Some(c.uid()),
            pid,
            process,
        }
    }

    /// The peer process while it still runs: None once it has exited (its
    /// connection may live on in a child or in another process's hands).
    pub fn live_process(&self) -> Option<&Pidfd> {
        self.process.as_deref().filter(|p| p.alive())
    }
}

/// The peer's pidfd: SO_PEERPIDFD, else `fallback_pidfd`.
fn peer_pidfd(stream: &tokio::net::UnixStream, pid: i32) -> Option<Pidfd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 && fd >= 0 {
        // SAFETY: the kernel returned a fresh pidfd that we own.
        return Some(Pidfd::from_fd(pid, unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    fallback_pidfd(pid, now_ticks())
}

/// pidfd_open(pid), kept only if that process started no later than
/// `accepted` (clock ticks after boot, taken at accept): a process younger
/// than the accepted connection cannot be its peer, so a number reused
/// between accept() and pidfd_open() is refused. A reuse between connect()
/// and accept() (the daemon accepts at once; a reuse needs a full wrap of
/// the pid space) is not detected here: that residue is what SO_PEERPIDFD
/// (Linux 6.5) closes, and it is used wherever the kernel has it.
pub(crate) fn fallback_pidfd(pid: i32, accepted: u64) -> Option<Pidfd> {
    let p = Pidfd::open(pid).ok()?;
    match p.start_ticks() {
        Some(t) if t <= accepted => Some(p),
        _ => {
            tracing::warn!(
                pid,
                "socket peer: the process with this pid started after the connection was made (pid reused); the connection has no identity"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_peer_is_its_process_and_stops_matching_once_that_exits() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let p = Peer::of(&a);
        assert_eq!(p.pid, Some(std::process::id() as i32));
        assert!(p.live_process().is_some());
        drop(b);
        // A child's exit is seen by its pidfd.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let q = fallback_pidfd(pid, now_ticks()).unwrap();
        assert!(q.alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!q.alive());
    }

    #[test]
    fn the_fallback_refuses_a_process_younger_than_the_connection() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let started = crate::pidfd::start_ticks(pid).unwrap();
        assert!(fallback_pidfd(pid, started.saturating_sub(1)).is_none());
        assert!(fallback_pidfd(pid, started).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
