//! Binding a socket of the line protocol safely as root: the directory is
//! checked (safe_path.rs), the mode is in place when the file appears (the
//! umask during bind(), not a chmod after it that would follow a symlink),
//! and the group is set on the socket itself (lchown, when the process's own
//! group is not already the one wanted), never through a link.

use crate::safe_path::safe_parent;
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Mutex;
use tokio::net::UnixListener;

/// Who may connect: permission bits, and the owner and group of the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub mode: u32,
    /// The socket's owner (None: prescientd's user).
    pub uid: Option<u32>,
    /// The socket's group (None: prescientd's group).
    pub gid: Option<u32>,
}

/// The umask is per process: binds that set it are serialised.
static UMASK: Mutex<()> = Mutex::new(());

/// Binds a Unix socket of the line protocol (`what` names it in errors:
/// "control.socket", "--marks-socket"): checks (or creates) its directory,
/// refuses if another daemon answers on it or if something other than a
/// socket is there, removes a stale socket, and binds with `access`.
pub fn bind_socket(path: &Path, access: &Access, what: &str) -> Result<UnixListener> {
    safe_parent(path, what)?;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            bail!(
                "{what}: {} exists and is not a socket; refusing to remove it",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "{what}: another prescientd is running (it answers on {})",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("{what}: removing stale {}", path.display()))?;
    }
    let l = {
        let _g = UMASK.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: umask has no memory arguments; restored below.
        let old = unsafe { libc::umask((!access.mode & 0o777) as libc::mode_t) };
        let r = UnixListener::bind(path);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        r.with_context(|| format!("{what}: binding {}", path.display()))?
    };
    if needs_chown(path, access) {
        lchown(path, access.uid, access.gid).map_err(|e| {
            anyhow!(
                "{what}: setting the owner of {}: {e}{}",
                path.display(),
                if e.raw_os_error() == Some(libc::EPERM) {
                    " (without CAP_CHOWN or chown allowed, the socket can only have prescientd's own group: make that the group named here, as the shipped unit's Group= does, or name none, as the Helm chart does)"
                } else {
                    ""
                }
            )
        })?;
    }
    Ok(l)
}

/// Whether the new socket's owner or group differ from `access`'s. The
/// shipped unit runs with Group=prescient, so the socket is created with
/// its group and no chown is made: the unit's system call filter
/// (~@privileged) refuses chown, which keeps its exposure low.
fn needs_chown(path: &Path, access: &Access) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return access.uid.is_some() || access.gid.is_some();
    };
    access.uid.is_some_and(|u| u != m.uid()) || access.gid.is_some_and(|g| g != m.gid())
}

/// lchown(2): the file at `path` itself, never a symlink's target.
fn lchown(path: &Path, uid: Option<u32>, gid: Option<u32>) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path; -1 leaves an id unchanged.
    let r = unsafe { libc::lchown(c.as_ptr(), uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX)) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The gid of group `name` (None if there is no such group).
pub fn group_id(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: an all-zero `group` is a valid value for getgrnam_r to fill.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the sizes given; `out` is set to
    // `&mut grp` or null.
    let r =
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
    (r == 0 && !out.is_null()).then_some(grp.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[tokio::test]
    async fn the_mode_is_set_at_bind_and_a_symlink_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("c.sock");
        let a = Access {
            mode: 0o600,
            ..Default::default()
        };
        let l = bind_socket(&path, &a, "control.socket").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // A live socket is not replaced.
        let e = bind_socket(&path, &a, "control.socket").unwrap_err();
        assert!(e.to_string().contains("another prescientd"), "{e}");
        drop(l);
        // A symlink (or any non-socket) at the path is refused, not removed
        // and not chmod'ed through.
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"x").unwrap();
        let before = std::fs::metadata(&victim).unwrap().mode();
        let link = t.path().join("l.sock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = bind_socket(&link, &a, "--marks-socket").unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::metadata(&victim).unwrap().mode(), before);
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn groups_resolve_by_name() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-prescient-test"), None);
    }
}
