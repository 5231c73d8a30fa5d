//! One connection to prescientd's control socket (one JSON request per line,
//! one response per line; see `prescient_uapi::control`), and the errors
//! prescientctl exits with.

use prescient_uapi::control::{ErrorReply, Reply, Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub const EXIT_REFUSED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_UNREACHABLE: i32 = 69;
pub const EXIT_NOPERM: i32 = 77;

/// An error with the exit status it maps to.
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub type Res<T> = Result<T, Failure>;

/// A [`Failure`] with exit status `code`.
pub fn fail(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// Why the socket could not be reached, with the hint that fits: on
/// EACCES the daemon is running and the group is the way in.
#[cold]
fn connect_error(path: &Path, e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        return fail(
            EXIT_NOPERM,
            format!(
                "cannot connect to prescientd at {}: {e}. The socket is for root and the group `prescient` \
(control.socket_group): `sudo usermod -aG prescient $USER` and log in again, or use sudo",
                path.display()
            ),
        );
    }
    fail(
        EXIT_UNREACHABLE,
        format!(
            "cannot reach prescientd at {}: {e} (is prescientd running? --socket or PRESCIENT_SOCKET name another socket)",
            path.display()
        ),
    )
}

/// One connection to the daemon.
pub struct Client {
    rd: BufReader<UnixStream>,
    wr: UnixStream,
}

impl Client {
    /// Connects to the control socket at `path`.
    pub fn connect(path: &Path) -> Res<Client> {
        let s = UnixStream::connect(path).map_err(|e| connect_error(path, &e))?;
        let t = Some(Duration::from_secs(30));
        let _ = s.set_read_timeout(t);
        let _ = s.set_write_timeout(t);
        let wr = s
            .try_clone()
            .map_err(|e| fail(EXIT_UNREACHABLE, e.to_string()))?;
        Ok(Client {
            rd: BufReader::new(s),
            wr,
        })
    }

    /// Sends one request and reads its reply; a refusal becomes a [`Failure`]
    /// with the exit status of its kind.
    pub fn call(&mut self, req: &Request) -> Res<Reply> {
        let mut line = serde_json::to_string(req).map_err(|e| fail(EXIT_REFUSED, e.to_string()))?;
        line.push('\n');
        self.wr
            .write_all(line.as_bytes())
            .map_err(|e| fail(EXIT_UNREACHABLE, format!("sending to prescientd: {e}")))?;
        let mut resp = String::new();
        match self.rd.read_line(&mut resp) {
            Ok(0) => return Err(fail(EXIT_UNREACHABLE, "prescientd closed the connection")),
            Ok(_) => {}
            Err(e) => {
                return Err(fail(
                    EXIT_UNREACHABLE,
                    format!("reading from prescientd: {e}"),
                ))
            }
        }
        match serde_json::from_str::<Response>(&resp) {
            Ok(Response::Ok(r)) => Ok(r),
            Ok(Response::Error(ErrorReply { kind, message })) => Err(fail(
                if kind == "permission" {
                    EXIT_NOPERM
                } else if kind == "unavailable" {
                    EXIT_UNREACHABLE
                } else {
                    EXIT_REFUSED
                },
                message,
            )),
            Err(e) => Err(fail(
                EXIT_REFUSED,
                format!("unexpected reply from prescientd ({e}): {}", resp.trim()),
            )),
        }
    }
}

/// Prints `v` as pretty JSON.
pub fn json<T: serde::Serialize>(v: &T) -> Res<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| fail(EXIT_REFUSED, e.to_string()))?;
    println!("{s}");
    Ok(())
}

/// Prints the message of a `done` reply.
pub fn done(r: Reply) -> Res<()> {
    match r {
        Reply::Done { message } => {
            println!("{message}");
            Ok(())
        }
        _ => Err(fail(EXIT_REFUSED, "unexpected reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// EACCES means the daemon runs and the caller lacks the group: the
    /// hint names the group, not "is prescientd running?".
    #[test]
    fn permission_denied_names_the_group_and_exits_77() {
        let e = std::io::Error::from_raw_os_error(libc::EACCES);
        let f = connect_error(Path::new("/run/prescient/control.sock"), &e);
        assert_eq!(f.code, EXIT_NOPERM);
        assert!(f.message.contains("group `prescient`"), "{}", f.message);
        assert!(
            !f.message.contains("is prescientd running"),
            "{}",
            f.message
        );
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        let f = connect_error(Path::new("/x.sock"), &e);
        assert_eq!(f.code, EXIT_UNREACHABLE);
        assert!(f.message.contains("is prescientd running"));
    }
}
