//! systemd's readiness protocol (sd_notify(3)): one datagram to
//! $NOTIFY_SOCKET, so that `Type=notify` units are "started" only once the
//! control socket and /metrics answer.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. "READY=1") to $NOTIFY_SOCKET if systemd set it;
/// returns whether a message was sent. An abstract socket is written "@name".
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return false;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = &sent {
        tracing::warn!("sd_notify({state}) to {}: {e}", path.to_string_lossy());
    }
    sent.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reaches_the_notify_socket() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("notify");
        let rx = UnixDatagram::bind(&p).unwrap();
        // The only test that sets NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &p);
        assert!(notify("READY=1"));
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        assert!(!notify("READY=1"));
    }
}
