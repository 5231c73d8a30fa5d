//! The link to prescientd: the control protocol's `mark` request
//! (prescient_uapi::control), one JSON line each way on a Unix socket: the
//! service's control socket, or the one `prescientd attach --marks-socket`
//! serves. The daemon knows the sender by SO_PEERCRED: a process marks only
//! its own memory.

use super::protocol::{Kind, Link, Reply};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// How long a reply may take: more than the daemon's own wait for its
/// backend thread (marks.rs `ALIVE_WAIT`, 30 s), after which it answers.
const REPLY_WAIT: Duration = Duration::from_secs(45);
/// A reply line's length at most (the daemon's are far shorter).
const MAX_REPLY: usize = 4096;

/// A lazily (re)connected socket.
pub struct SocketLink {
    path: PathBuf,
    conn: Option<UnixStream>,
}

impl SocketLink {
    pub fn new(path: PathBuf) -> SocketLink {
        SocketLink { path, conn: None }
    }

    /// One request and its reply on the current connection (made first
    /// if there is none): the reply, or why there is none.
    fn exchange(&mut self, line: &[u8]) -> Result<String, Reply> {
        if self.conn.is_none() {
            // Nobody listening: no daemon (a restarted one holds no marks).
            let s = UnixStream::connect(&self.path).map_err(|_| Reply::NoDaemon)?;
            s.set_read_timeout(Some(REPLY_WAIT))
                .map_err(|_| Reply::Closed)?;
            self.conn = Some(s);
        }
        let s = self.conn.as_mut().ok_or(Reply::Closed)?;
        send_all(s, line).ok_or(Reply::Closed)?;
        read_line(s).ok_or(Reply::Closed)
    }
}

/// send(2) of all of `buf` with MSG_NOSIGNAL: a closed socket must not
/// raise SIGPIPE in a job that does not ignore it.
fn send_all(s: &UnixStream, mut buf: &[u8]) -> Option<()> {
    while !buf.is_empty() {
        // SAFETY: sending from a live buffer of buf.len() bytes on our socket.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return None;
        }
        buf = &buf[n as usize..];
    }
    Some(())
}

/// One reply line (requests and replies alternate, so nothing follows it).
fn read_line(mut s: &UnixStream) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        out.extend_from_slice(&buf[..n]);
        if let Some(end) = out.iter().position(|&c| c == b'\n') {
            out.truncate(end);
            return String::from_utf8(out).ok();
        }
        if out.len() > MAX_REPLY {
            return None;
        }
    }
}

/// The request line: `{"cmd":"mark","dead":D,"ranges":[[A,L],...]}`, and
/// `"no_populate":true` for a release.
pub fn request_line(kind: Kind, ranges: &[[u64; 2]]) -> Vec<u8> {
    use std::fmt::Write;
    let dead = kind == Kind::Dead;
    let mut s = String::with_capacity(72 + ranges.len() * 32);
    let _ = write!(s, "{{\"cmd\":\"mark\",\"dead\":{dead},\"ranges\":[");
    for (i, [a, l]) in ranges.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(s, "{sep}[{a},{l}]");
    }
    s.push(']');
    if kind == Kind::Released {
        s.push_str(",\"no_populate\":true");
    }
    s.push_str("}\n");
    s.into_bytes()
}

/// The reply line as a [`Reply`]: `{"ok":...}`, or `{"error":{"kind":K,...}}`.
pub fn parse_reply(line: &str) -> Reply {
    let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.starts_with("{\"ok\"") {
        return Reply::Ok;
    }
    let kind = compact
        .split_once("\"kind\":\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(k, _)| k);
    let excerpt = || line.chars().take(300).collect();
    match kind {
        Some("busy") => Reply::Busy,
        Some("not-found") => Reply::NotAttached,
        Some("unavailable") => Reply::Unavailable(excerpt()),
        _ => Reply::Refused(excerpt()),
    }
}

impl Link for SocketLink {
    fn call(&mut self, kind: Kind, ranges: &[[u64; 2]]) -> Reply {
        let line = request_line(kind, ranges);
        // A broken connection is made again once: resending a mark is
        // harmless (marking a block dead or alive twice changes nothing).
        let mut why = Reply::Closed;
        for _ in 0..2 {
            match self.exchange(&line) {
                Ok(reply) => return parse_reply(&reply),
                Err(e) => why = e,
            }
            self.conn = None;
        }
        why
    }

    fn pause(&mut self, attempt: u32) {
        let ms = (1u64 << attempt.min(10)).min(1000);
        std::thread::sleep(Duration::from_millis(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_the_control_protocols_mark() {
        // uapi control.rs's own test decodes exactly this shape.
        let l = request_line(Kind::Alive, &[[4096, 8192]]);
        assert_eq!(
            l,
            b"{\"cmd\":\"mark\",\"dead\":false,\"ranges\":[[4096,8192]]}\n"
        );
        let l = request_line(Kind::Released, &[[4096, 8192]]);
        assert_eq!(
            std::str::from_utf8(&l).unwrap(),
            "{\"cmd\":\"mark\",\"dead\":false,\"ranges\":[[4096,8192]],\"no_populate\":true}\n"
        );
        let l = request_line(Kind::Dead, &[[0, 2 << 20], [8 << 20, 4 << 20]]);
        assert_eq!(
            std::str::from_utf8(&l).unwrap(),
            "{\"cmd\":\"mark\",\"dead\":true,\"ranges\":[[0,2097152],[8388608,4194304]]}\n"
        );
    }

    #[test]
    fn replies_are_told_apart() {
        let ok = r#"{"ok":{"marked":{"blocks":2,"resident":1,"refetched":0,"ignored":false}}}"#;
        assert_eq!(parse_reply(ok), Reply::Ok);
        let e = |k: &str| format!(r#"{{"error":{{"kind":"{k}","message":"m"}}}}"#);
        assert_eq!(parse_reply(&e("busy")), Reply::Busy);
        assert_eq!(parse_reply(&e("not-found")), Reply::NotAttached);
        assert!(
            matches!(parse_reply(&e("permission")), Reply::Refused(m) if m.contains("permission"))
        );
        assert!(matches!(parse_reply("garbage"), Reply::Refused(_)));
    }

    #[test]
    fn a_daemon_that_closes_is_closed_and_one_that_answers_is_heard() {
        let dir = std::env::temp_dir().join(format!("prescient-link-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let mut link = SocketLink::new(path.clone());
        assert_eq!(link.call(Kind::Dead, &[[0, 2 << 20]]), Reply::NoDaemon);
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let srv = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let got = read_line(&c).unwrap();
            use std::io::Write;
            c.write_all(b"{\"error\":{\"kind\":\"busy\",\"message\":\"full\"}}\n")
                .unwrap();
            got
        });
        assert_eq!(link.call(Kind::Alive, &[[2 << 20, 2 << 20]]), Reply::Busy);
        let got = srv.join().unwrap();
        assert!(got.contains("\"dead\":false"), "{got}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
