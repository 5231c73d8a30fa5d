//! The line-protocol server of prescientd's Unix sockets (the control
//! socket, and `prescientd attach`'s marks socket): one JSON request per
//! line, one JSON response line each, the peer known by SO_PEERCRED and by
//! pidfd (peer.rs).
//!
//! Every resource a peer can make the daemon spend is bounded: connections
//! per socket and per uid (`Limits`; root has only the per-uid cap, so
//! prescientctl still answers under a flood of others), a request line's
//! length, and the time a connection may sit idle or leave a reply unread.
//! A connection is a `Connection` object: it answers requests in order and
//! is told when the peer goes away (marks.rs revokes its dead marks then).

mod bind;
mod limits;
mod peer;

pub use bind::{bind_socket, group_id, Access};
pub use limits::Limits;
pub use peer::Peer;

use limits::Slots;
use prescient_uapi::control::{ErrorReply, Request, Response};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::timeout;

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 4096;

/// One client connection's server side.
pub trait Connection: Send + Sync + 'static {
    /// Answers one request (on a blocking thread; requests of one
    /// connection are answered one at a time, in order).
    fn handle(&self, req: Request) -> Response;
    /// Whether the peer may stay quiet for longer than `Limits::idle` now,
    /// whatever the socket allows: a job's connection to the control
    /// socket while it holds dead marks, which closing would revoke.
    fn may_stay_quiet(&self) -> bool {
        false
    }
    /// The peer has gone (or was cut off): called once, after the last
    /// `handle` has returned.
    fn closed(&self) {}
}

/// Serves `listener` until the task is dropped: each connection on its own
/// task, `open` making its `Connection`; `what` names the socket in logs.
pub async fn serve<C, F>(listener: UnixListener, what: &'static str, limits: Limits, open: F)
where
    C: Connection,
    F: Fn(Peer) -> Arc<C> + Send + Sync + 'static,
{
    let slots = Slots::new(limits);
    // Refusals are logged at 1, 2, 4, 8 ... so that a flood cannot flood the log.
    let mut refused = 0u64;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let peer = Peer::of(&stream);
                let Some(slot) = slots.take(peer.uid) else {
                    refused += 1;
                    if refused.is_power_of_two() {
                        tracing::warn!(uid = ?peer.uid, pid = ?peer.pid, refused, "{what}: connection refused: {}", slots.why(peer.uid));
                    }
                    tokio::spawn(refuse(stream, slots.why(peer.uid)));
                    continue;
                };
                let conn = open(peer);
                tokio::spawn(async move {
                    serve_connection(stream, conn.clone(), limits).await;
                    // Off the async workers: under prescient.ko a close marks
                    // the connection's dead ranges alive with one ioctl each.
                    let closing = conn.clone();
                    let _ = tokio::task::spawn_blocking(move || closing.closed()).await;
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!("{what}: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Answers one "busy" line to a connection over its caps, and closes it.
#[cold]
async fn refuse(mut stream: UnixStream, why: String) {
    let line = reply_line(&error("busy", why));
    let _ = timeout(
        std::time::Duration::from_secs(1),
        stream.write_all(line.as_bytes()),
    )
    .await;
}

/// Serves one connection: a JSON request per line, a JSON response line
/// each, until the peer closes, sends a line over `MAX_REQUEST`, or is
/// idle for `limits.idle` (a reply not taken; no full line read, unless
/// `limits.quiet_allowed` or the connection `may_stay_quiet`).
pub async fn serve_connection<C: Connection>(stream: UnixStream, conn: Arc<C>, limits: Limits) {
    let idle = limits.idle;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // At most MAX_REQUEST + 1 bytes per line: a longer one is refused
        // and the connection closed (memory stays bounded).
        let mut line = (&mut rd).take(MAX_REQUEST as u64 + 1);
        let read = line.read_until(b'\n', &mut buf);
        let got = if limits.quiet_allowed || conn.may_stay_quiet() {
            Ok(read.await)
        } else {
            timeout(idle, read).await
        };
        let n = match got {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Err(_) => {
                tracing::debug!("connection idle for {idle:?}: closed");
                break;
            }
            Ok(Ok(n)) => n,
        };
        let too_long = n > MAX_REQUEST && buf.last() != Some(&b'\n');
        let resp = if too_long {
            error(
                "invalid",
                format!("request longer than {MAX_REQUEST} bytes"),
            )
        } else {
            match serde_json::from_slice::<Request>(&buf) {
                Ok(req) => {
                    let c = conn.clone();
                    tokio::task::spawn_blocking(move || c.handle(req))
                        .await
                        .unwrap_or_else(|e| error("internal", e.to_string()))
                }
                Err(e) => error("invalid", format!("bad request: {e}")),
            }
        };
        let out = reply_line(&resp);
        match timeout(idle, wr.write_all(out.as_bytes())).await {
            Ok(Ok(())) if !too_long => {}
            _ => break,
        }
    }
}

/// `resp` as one line.
fn reply_line(resp: &Response) -> String {
    let mut out = serde_json::to_string(resp)
        .unwrap_or_else(|e| format!("{{\"error\":{{\"kind\":\"internal\",\"message\":\"{e}\"}}}}"));
    out.push('\n');
    out
}

/// An error reply of class `kind` (see `ErrorReply`).
pub fn error(kind: &str, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply {
        kind: kind.into(),
        message: message.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncBufReadExt;

    /// Answers every request with an error line, so a reply is visible.
    struct Echo;
    impl Connection for Echo {
        fn handle(&self, _req: Request) -> Response {
            error("test", "answered")
        }
    }

    /// Stays quiet for three idle periods, then asks once: the answer, or
    /// None when the server had closed the connection.
    async fn ask_after_quiet(quiet_allowed: bool) -> Option<String> {
        ask_after_quiet_on(Echo, quiet_allowed).await
    }

    /// `ask_after_quiet` on a connection `conn`.
    async fn ask_after_quiet_on<C: Connection>(conn: C, quiet_allowed: bool) -> Option<String> {
        let idle = Duration::from_millis(100);
        let limits = Limits {
            idle,
            quiet_allowed,
            ..Limits::default()
        };
        let (client, server) = UnixStream::pair().unwrap();
        tokio::spawn(serve_connection(server, Arc::new(conn), limits));
        tokio::time::sleep(idle * 3).await;
        let (rd, mut wr) = client.into_split();
        let req = serde_json::to_string(&Request::Version).unwrap() + "\n";
        let _ = wr.write_all(req.as_bytes()).await;
        let mut line = String::new();
        let n = BufReader::new(rd).read_line(&mut line).await.unwrap_or(0);
        (n > 0).then_some(line)
    }

    #[tokio::test]
    async fn a_quiet_control_client_is_closed_and_a_quiet_marks_peer_is_not() {
        assert_eq!(
            ask_after_quiet(false).await,
            None,
            "quiet control client kept"
        );
        let answer = ask_after_quiet(true)
            .await
            .expect("quiet marks peer closed");
        assert!(answer.contains("answered"), "{answer}");
    }

    /// Quiet only while it says so (a job's control connection holding
    /// dead marks).
    struct Holding(bool);
    impl Connection for Holding {
        fn handle(&self, _req: Request) -> Response {
            error("test", "answered")
        }
        fn may_stay_quiet(&self) -> bool {
            self.0
        }
    }

    /// On a socket that closes quiet peers, a connection that may stay
    /// quiet is kept past three idle periods, and one that may not is not.
    #[tokio::test]
    async fn a_connection_holding_marks_may_stay_quiet_on_any_socket() {
        assert!(ask_after_quiet_on(Holding(true), false).await.is_some());
        assert_eq!(ask_after_quiet_on(Holding(false), false).await, None);
    }
}
