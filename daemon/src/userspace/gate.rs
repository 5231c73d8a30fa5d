//! The tracker gate: the tools events are turned off while the process is
//! in a CPU phase, because the tracker itself slows the CPU's faults.
//!
//! Why: in the 580 driver, `uvm_va_space_cpu_fault` ends with
//! `if (tools_enabled) uvm_tools_flush_events();` (uvm_va_space.c). While any
//! tools event is enabled on a VA space, every CPU fault on its managed memory
//! waits for the driver's global tools queue to be flushed (a round trip
//! through a kernel thread), whichever events are enabled. On the H200 that
//! cost the CPU-side rewrite of a 1 GiB input 125-180 ms per iteration
//! (BENCHMARKS-gpu.md run 5), as much as prefetching saved on the GPU side.
//! Prefetching needs only the GPU's faults, so the backend closes the gate
//! (disables every event) while the CPU is the one faulting, and opens it
//! again when the CPU stops.
//!
//! States (all decisions here; the backend does the ioctls):
//!
//! * **Open** (events on). Each fault-driven migration to the CPU (the CPU's
//!   own fault took a block back) adds 1 to a run; a GPU fault resets it.
//!   A run of `close_after` -> **Closed**.
//! * **Closed** (no events, so no cost to the CPU's faults). The process's
//!   major-fault counter (/proc/PID/stat: a CPU fault that migrated data is a
//!   major fault) is polled; once it has not moved for `settle`, or after
//!   `max_closed` in any case -> **Open**.
//!
//! While closed, nothing is seen: not the GPU's faults (if the GPU faults
//! while the CPU still does) and not the migrations. The residency the
//! backend knows is stale after a closed period, so it forgets it on
//! opening (a prefetch of a block that is in fact resident copies nothing).
//! For that reason the gate is not used under a residency budget, which
//! needs every migration.

use serde::Serialize;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Fault-driven migrations to the CPU in a row (no GPU fault between)
    /// that close the gate.
    pub close_after: u32,
    /// Closed: open once the major-fault counter is unchanged for this long.
    pub settle: Duration,
    /// Closed: open after this long whatever the counter does.
    pub max_closed: Duration,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            close_after: 16,
            // The GPU's faults in this blind spot are not seen: keep it short
            // (with 2 ms, the engine missed the start of a GPU phase in 3 of
            // 11 iterations on the H200; the CPU's faults come microseconds apart).
            settle: Duration::from_micros(500),
            max_closed: Duration::from_millis(1000),
        }
    }
}

impl Params {
    pub fn validate(&self) -> Result<(), String> {
        if self.close_after == 0 {
            return Err("--gate-close-after must be at least 1".into());
        }
        if self.settle.is_zero() || self.max_closed < self.settle {
            return Err(format!(
                "tracker gate times must satisfy 0 < settle ({:?}) <= max closed ({:?})",
                self.settle, self.max_closed
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    #[default]
    Open,
    Closed,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Stats {
    pub state: State,
    /// Open -> Closed transitions.
    pub closes: u64,
    /// Closed -> Open because the CPU stopped faulting / because of `max_closed`.
    pub opens_settled: u64,
    pub opens_timeout: u64,
    /// Seconds spent closed (events off).
    pub closed_s: f64,
    /// Enabling or disabling the events failed (the gate then stays open).
    pub errors: u64,
}

/// What the backend must do after feeding the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    /// Drain what is queued, then disable every event.
    Close,
    /// Enable the events again and forget the residency ledger.
    Open,
}

pub struct Gate {
    p: Params,
    st: Stats,
    run: u32,
    since: Instant,
    majflt: u64,
    majflt_moved: Instant,
}

impl Gate {
    pub fn new(p: Params, now: Instant) -> Gate {
        Gate {
            p,
            st: Stats::default(),
            run: 0,
            since: now,
            majflt: 0,
            majflt_moved: now,
        }
    }

    pub fn state(&self) -> State {
        self.st.state
    }

    pub fn stats(&self, now: Instant) -> Stats {
        let mut s = self.st;
        if s.state == State::Closed {
            s.closed_s += now.duration_since(self.since).as_secs_f64();
        }
        s
    }

    /// A GPU fault event (gate open).
    pub fn gpu_fault(&mut self) {
        self.run = 0;
    }

    /// A migration to the CPU caused by the CPU's own fault (gate open).
    pub fn cpu_fault_migration(&mut self) {
        self.run = self.run.saturating_add(1);
    }

    /// After a batch of events with the gate open: Close when the CPU has
    /// been the only one faulting for long enough. `majflt` reads the
    /// process's major-fault counter (only when closing).
    pub fn after_events(&mut self, majflt: impl FnOnce() -> u64, now: Instant) -> Action {
        if self.st.state != State::Open || self.run < self.p.close_after {
            return Action::None;
        }
        let majflt = majflt();
        self.run = 0;
        self.st.state = State::Closed;
        self.st.closes += 1;
        self.since = now;
        self.majflt = majflt;
        self.majflt_moved = now;
        Action::Close
    }

    /// Polled with the gate closed.
    pub fn poll_closed(&mut self, majflt: u64, now: Instant) -> Action {
        if self.st.state != State::Closed {
            return Action::None;
        }
        if majflt != self.majflt {
            self.majflt = majflt;
            self.majflt_moved = now;
        }
        let settled = now.duration_since(self.majflt_moved) >= self.p.settle;
        let timeout = now.duration_since(self.since) >= self.p.max_closed;
        if !settled && !timeout {
            return Action::None;
        }
        if settled {
            self.st.opens_settled += 1;
        } else {
            self.st.opens_timeout += 1;
        }
        self.open(now);
        Action::Open
    }

    /// Closed, and the counter cannot be read: open at once (counted as a
    /// timeout).
    pub fn open_now(&mut self, now: Instant) -> Action {
        if self.st.state != State::Closed {
            return Action::None;
        }
        self.st.opens_timeout += 1;
        self.open(now);
        Action::Open
    }

    fn open(&mut self, now: Instant) {
        self.st.closed_s += now.duration_since(self.since).as_secs_f64();
        self.st.state = State::Open;
        self.since = now;
        self.run = 0;
    }

    /// The ioctl behind the last Close or Open failed: the events are (or
    /// stay) on, so the gate counts as open.
    pub fn failed(&mut self, now: Instant) {
        self.st.errors += 1;
        if self.st.state == State::Closed {
            self.open(now);
        }
    }
}

/// Reads a process's major-fault count from /proc/PID/stat, re-reading one
/// open file (a /proc stat file is regenerated on every read from offset 0).
pub struct MajorFaults {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl MajorFaults {
    pub fn open(pid: i32) -> io::Result<MajorFaults> {
        Ok(MajorFaults {
            file: std::fs::File::open(format!("/proc/{pid}/stat"))?,
            buf: vec![0; 1024],
        })
    }

    pub fn read(&mut self) -> io::Result<u64> {
        let n = self.file.read_at(&mut self.buf, 0)?;
        parse_majflt(&self.buf[..n])
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/PID/stat"))
    }
}

/// Field 12 of /proc/PID/stat, counted after the command name's closing
/// parenthesis (the name itself may hold spaces and parentheses).
fn parse_majflt(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&c| c == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    rest.split_ascii_whitespace().nth(9)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Params {
        Params {
            close_after: 3,
            settle: Duration::from_millis(2),
            max_closed: Duration::from_millis(100),
        }
    }

    /// `close_after` (3) CPU-fault migrations with no GPU fault between.
    fn run_of_cpu_faults(g: &mut Gate) {
        for _ in 0..3 {
            g.cpu_fault_migration();
        }
    }

    #[test]
    fn a_run_of_cpu_faults_closes_and_a_gpu_fault_breaks_the_run() {
        let t0 = Instant::now();
        let mut g = Gate::new(p(), t0);
        g.cpu_fault_migration();
        g.cpu_fault_migration();
        g.gpu_fault();
        g.cpu_fault_migration();
        g.cpu_fault_migration();
        assert_eq!(g.after_events(|| 7, t0), Action::None);
        g.cpu_fault_migration();
        assert_eq!(g.after_events(|| 7, t0), Action::Close);
        assert_eq!(g.state(), State::Closed);
        // Closed: events are no longer fed; another check does nothing.
        assert_eq!(g.after_events(|| 7, t0), Action::None);
    }

    #[test]
    fn closed_opens_when_the_cpu_stops_faulting() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = Gate::new(p(), t0);
        run_of_cpu_faults(&mut g);
        assert_eq!(g.after_events(|| 10, t0), Action::Close);
        // The counter keeps moving: stay closed.
        assert_eq!(g.poll_closed(11, t0 + ms(1)), Action::None);
        assert_eq!(g.poll_closed(12, t0 + ms(2)), Action::None);
        assert_eq!(g.poll_closed(13, t0 + ms(3)), Action::None);
        // Unchanged for less than `settle`.
        assert_eq!(g.poll_closed(13, t0 + ms(4)), Action::None);
        assert_eq!(g.poll_closed(13, t0 + ms(5)), Action::Open);
        let s = g.stats(t0 + ms(6));
        assert_eq!(
            (s.state, s.closes, s.opens_settled, s.opens_timeout),
            (State::Open, 1, 1, 0)
        );
        assert!((s.closed_s - 0.005).abs() < 1e-9, "{}", s.closed_s);
        // Open again: polling as if closed does nothing.
        assert_eq!(g.poll_closed(13, t0 + ms(7)), Action::None);
    }

    #[test]
    fn closed_opens_after_max_closed_even_if_the_cpu_never_stops() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = Gate::new(p(), t0);
        run_of_cpu_faults(&mut g);
        assert_eq!(g.after_events(|| 0, t0), Action::Close);
        let mut t = t0;
        let mut n = 0;
        loop {
            t += ms(1);
            n += 1;
            if g.poll_closed(n, t) == Action::Open {
                break;
            }
        }
        assert_eq!(t - t0, ms(100));
        assert_eq!(g.stats(t).opens_timeout, 1);
    }

    #[test]
    fn a_failed_ioctl_leaves_the_gate_open() {
        let t0 = Instant::now();
        let mut g = Gate::new(p(), t0);
        run_of_cpu_faults(&mut g);
        assert_eq!(g.after_events(|| 0, t0), Action::Close);
        g.failed(t0);
        assert_eq!(g.state(), State::Open);
        assert_eq!(g.stats(t0).errors, 1);
    }

    #[test]
    fn majflt_is_field_12_even_with_odd_command_names() {
        let s = b"4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 77 0 5 6 0 0 20 0 1 0\n";
        assert_eq!(parse_majflt(s), Some(77));
        assert_eq!(parse_majflt(b"4242 (x"), None);
        assert_eq!(parse_majflt(b"4242 (x) S 1 2"), None);
    }

    #[test]
    fn reads_this_process() {
        let mut m = MajorFaults::open(std::process::id() as i32).unwrap();
        let a = m.read().unwrap();
        let b = m.read().unwrap();
        assert!(b >= a);
    }
}
