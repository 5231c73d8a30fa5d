//! The exclusive right to act for one process, so that two backends never
//! migrate one process's memory against each other.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::os::fd::AsRawFd;

/// Where acting backends claim the processes they serve.
pub const CLAIM_DIR: &str = "/run/prescient/attach";

/// The exclusive right to act for one process (prefetch, pre-evict):
/// an flock on `<dir>/<pid>.lock`, held while the claim lives. Two daemons
/// migrating for one process would fight over its memory, so the second
/// one is refused and told who holds it. The kernel drops the lock when
/// the holder exits, however it exits; the file itself stays (a few bytes
/// in /run) so that no two holders can ever lock two different inodes.
/// Observers (`prescientctl record`) take no claim.
pub struct Claim {
    _file: File,
}

impl Claim {
    /// Claims `pid` in [`CLAIM_DIR`].
    pub fn take(pid: i32) -> Result<Claim> {
        Claim::take_in(std::path::Path::new(CLAIM_DIR), pid)
    }

    /// Claims `pid` in `dir`; refused while another holder lives.
    pub fn take_in(dir: &std::path::Path, pid: i32) -> Result<Claim> {
        use std::io::{Read, Seek, Write};
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{pid}.lock"));
        let mut f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            // The usual cause: not root. Say what is needed, not just which
            // file failed (seen on the H200 with `setpriv --reuid 65534`).
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot take the claim {} for pid {pid}: acting for another process needs root \
                     (this claim directory, and pidfd_getfd with a ptrace right over the target); \
                     running as uid {}",
                    path.display(),
                    // SAFETY: geteuid has no preconditions and cannot fail.
                    unsafe { libc::geteuid() }
                )));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("opening {}", path.display())))
            }
        };
        // SAFETY: flock on an fd we own; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = f.read_to_string(&mut holder);
                bail!(
                    "pid {pid} is already served by another prescientd (pid {}, {}): one backend per process",
                    holder.trim(),
                    path.display()
                );
            }
            return Err(anyhow::Error::new(e).context(format!("locking {}", path.display())));
        }
        f.set_len(0)?;
        f.seek(std::io::SeekFrom::Start(0))?;
        writeln!(f, "{}", std::process::id())?;
        Ok(Claim { _file: f })
    }
}

#[cfg(test)]
mod claim_tests {
    use super::Claim;

    #[test]
    fn a_second_claim_on_one_process_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().unwrap();
        let first = Claim::take_in(dir.path(), 4242).unwrap();
        let e = Claim::take_in(dir.path(), 4242).err().unwrap().to_string();
        assert!(e.contains("already served by another prescientd"), "{e}");
        assert!(e.contains(&std::process::id().to_string()), "{e}");
        // Another process is free; the first claim's end frees its process.
        let _other = Claim::take_in(dir.path(), 4243).unwrap();
        drop(first);
        let _again = Claim::take_in(dir.path(), 4242).unwrap();
    }
}
