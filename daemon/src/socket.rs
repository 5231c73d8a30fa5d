//! The line-protocol server of prescientd's Unix sockets (the control
//! socket, and `prescientd attach`'s marks socket): one JSON request per
//! line, one JSON response line each, the peer known by SO_PEERCRED.

use anyhow::{anyhow, Context};
use prescient_uapi::control::{ErrorReply, Request, Response};
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Longest request line accepted.
const MAX_REQUEST: usize = 4096;

/// Binds a Unix socket of the line protocol (`what` names it in errors:
/// "control.socket", "--marks-socket"): creates a missing parent directory,
/// refuses if another daemon answers on it, removes a stale file otherwise,
/// and sets `mode`.
pub fn bind_socket(path: &Path, mode: u32, what: &str) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("{what}: creating {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(anyhow!(
                "{what}: another prescientd is running (it answers on {})",
                path.display()
            ));
        }
        std::fs::remove_file(path)
            .with_context(|| format!("{what}: removing stale {}", path.display()))?;
    }
    let l =
        UnixListener::bind(path).with_context(|| format!("{what}: binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("{what}: chmod {}", path.display()))?;
    Ok(l)
}

/// Who is on the other end of a control connection (SO_PEERCRED).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    pub uid: Option<u32>,
    pub pid: Option<i32>,
}

/// Serves `listener` until the task is dropped: each connection on its
/// own task (`serve_connection`); `what` names the socket in warnings.
pub async fn serve<H>(listener: UnixListener, what: &'static str, handler: H)
where
    H: Fn(Request, Peer) -> Response + Clone + Send + Sync + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, handler.clone()));
            }
            Err(e) => {
                tracing::warn!("{what}: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves one connection of the line protocol: a JSON request per line, a
/// JSON response line each; `handler` runs on a blocking thread.
pub async fn serve_connection<H>(stream: UnixStream, handler: H)
where
    H: Fn(Request, Peer) -> Response + Clone + Send + Sync + 'static,
{
    let peer = stream
        .peer_cred()
        .ok()
        .map(|c| Peer {
            uid: Some(c.uid()),
            pid: c.pid(),
        })
        .unwrap_or_default();
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // At most MAX_REQUEST + 1 bytes per line: a longer one is refused
        // and the connection closed (memory stays bounded).
        let n = match (&mut rd)
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
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
                    let h = handler.clone();
                    tokio::task::spawn_blocking(move || h(req, peer))
                        .await
                        .unwrap_or_else(|e| error("internal", e.to_string()))
                }
                Err(e) => error("invalid", format!("bad request: {e}")),
            }
        };
        let mut out = serde_json::to_string(&resp).unwrap_or_else(|e| {
            format!("{{\"error\":{{\"kind\":\"internal\",\"message\":\"{e}\"}}}}")
        });
        out.push('\n');
        if wr.write_all(out.as_bytes()).await.is_err() || too_long {
            break;
        }
    }
}

/// An error reply of class `kind` (see `ErrorReply`).
pub fn error(kind: &str, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply {
        kind: kind.into(),
        message: message.into(),
    })
}
