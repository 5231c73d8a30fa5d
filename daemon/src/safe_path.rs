//! Paths prescientd creates as root: sockets and output files may only sit
//! in directories no other user can change (otherwise a user could swap in
//! a symlink between our check and our use), and files are opened without
//! following a symlink at their last component.

use anyhow::{anyhow, bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Refuses `dir` unless it and every directory above it are owned by root
/// (or by prescientd's own user) and not writable by anyone else; a sticky
/// directory above it (/tmp) is accepted, since nobody else can rename or
/// remove what is in it. `what` names the option in the error.
pub fn check_dir(dir: &Path, what: &str) -> Result<()> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("{what}: {}", dir.display()))?;
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut first = true;
    for d in dir.ancestors() {
        let m = std::fs::metadata(d).with_context(|| format!("{what}: {}", d.display()))?;
        if m.uid() != 0 && m.uid() != me {
            bail!(
                "{what}: {} is owned by uid {}, not by root: another user could replace what prescientd creates in it; use a root-owned directory such as /run/prescient",
                d.display(),
                m.uid()
            );
        }
        let others_write = m.mode() & 0o022 != 0;
        let sticky = m.mode() & 0o1000 != 0;
        if others_write && (first || !sticky) {
            bail!(
                "{what}: {} is writable by group or others (mode {:o}): another user could replace what prescientd creates in it; use a root-owned directory such as /run/prescient",
                d.display(),
                m.mode() & 0o7777
            );
        }
        first = false;
    }
    Ok(())
}

/// The parent of `path` (created with mode 0755 if missing), checked with
/// `check_dir`.
pub fn safe_parent(path: &Path, what: &str) -> Result<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        if let Some(up) = dir.parent().filter(|u| u.exists()) {
            check_dir(up, what)?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .with_context(|| format!("{what}: creating {}", dir.display()))?;
    }
    check_dir(&dir, what)?;
    Ok(dir)
}

use std::os::unix::fs::DirBuilderExt;

/// Creates (or truncates) `path` for writing, refusing a symlink there
/// (O_NOFOLLOW) and a directory that is not safe (`safe_parent`).
pub fn create_output(path: &Path, what: &str) -> Result<File> {
    safe_parent(path, what)?;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                anyhow!(
                    "{what}: {} is a symlink; refusing to write through it",
                    path.display()
                )
            } else {
                anyhow!("{what}: {}: {e}", path.display())
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_group_or_world_writable_directory_is_refused_by_name() {
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = safe_parent(&open.join("x.sock"), "control.socket").unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("control.socket") && e.contains("open") && e.contains("writable"),
            "{e}"
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        safe_parent(&open.join("x.sock"), "control.socket").unwrap();
    }

    #[test]
    fn outputs_are_not_written_through_a_symlink() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = t.path().join("stats.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = create_output(&link, "--stats-json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("symlink"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let f = t.path().join("ok.json");
        create_output(&f, "--stats-json").unwrap();
        assert!(f.exists());
    }
}
