//! A process held by a pidfd: the identity of a socket peer or of an
//! attached target that a reused pid number cannot take over (a pid names
//! whichever process has it now; a pidfd names one process for its life).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One process, by pidfd; `pid` is its number in prescientd's namespace.
#[derive(Debug)]
pub struct Pidfd {
    pub pid: i32,
    fd: OwnedFd,
}

impl Pidfd {
    /// The process that has `pid` now (pidfd_open).
    pub fn open(pid: i32) -> io::Result<Pidfd> {
        // SAFETY: plain syscall with integer arguments.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a fresh fd that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(r as RawFd) };
        Ok(Pidfd { pid, fd })
    }

    /// Wraps a pidfd the kernel gave us (SO_PEERPIDFD, or a dup of one).
    pub fn from_fd(pid: i32, fd: OwnedFd) -> Pidfd {
        Pidfd { pid, fd }
    }

    /// A second handle on the same process.
    pub fn try_clone(&self) -> io::Result<Pidfd> {
        Ok(Pidfd {
            pid: self.pid,
            fd: self.fd.try_clone()?,
        })
    }

    /// Whether the process has not exited (a pidfd polls readable once it has).
    pub fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        !(r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0)
    }

    /// The process's real uid, read from /proc and confirmed to be this
    /// process's (still alive after the read, so the number was not reused).
    pub fn uid(&self) -> Option<u32> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let uid = s
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        self.alive().then_some(uid)
    }

    /// When the process started, in clock ticks after boot (/proc/PID/stat
    /// field 22), confirmed to be this process's as `uid` is.
    pub fn start_ticks(&self) -> Option<u64> {
        let ticks = start_ticks(self.pid)?;
        self.alive().then_some(ticks)
    }
}

/// Field 22 of /proc/PID/stat (after the parenthesised comm, which may
/// hold spaces and parentheses itself).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    // rest starts at field 3 (state); field 22 is the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Clock ticks since boot now (CLOCK_BOOTTIME, the clock of field 22).
pub fn now_ticks() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_sees_its_process_exit_and_a_reused_number_does_not_revive_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let p = Pidfd::open(child.id() as i32).unwrap();
        assert!(p.alive());
        // SAFETY: getuid has no arguments and cannot fail.
        let me = unsafe { libc::getuid() };
        assert_eq!(p.uid(), Some(me));
        let t = p.start_ticks().unwrap();
        assert!(t <= now_ticks() + 1, "{t}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!p.alive());
        // Whatever has the number now, the pidfd answers for the old process.
        assert_eq!(p.uid(), None);
        assert_eq!(p.start_ticks(), None);
    }

    #[test]
    fn start_ticks_reads_past_a_comm_with_spaces_and_parentheses() {
        // Our own comm is plain; the parser is what matters here.
        assert!(start_ticks(std::process::id() as i32).is_some());
        assert_eq!(start_ticks(-1), None);
    }
}
