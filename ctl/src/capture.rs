//! `prescientctl record`'s live capture: a running CUDA process's GPU
//! faults and migrations, read through prescient-uvm (the same attach and
//! tools tracker as prescientd's user-space backend) and made into a native
//! trace by `prescient_sim::native::recording` (the format's owner; see its
//! module doc for how iterations and pseudo-kernels are reconstructed).

use anyhow::{Context, Result};
use prescient_core::BLOCK_SHIFT;
use prescient_sim::native::recording::{build, Built, Ev, Shape};
use prescient_sim::workload::Workload;
use prescient_uvm::ioctl as uvm;
use prescient_uvm::{Ended, Event, Pace, Session, Turn, DRAIN_BATCH};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Most events kept in memory (24 B each): about 1.5 GB. Recording stops
/// there, and says so in the trace's name.
const MAX_EVENTS: usize = 64 << 20;

/// How often the target is looked at, and the nap on an empty ring.
const PACE: Pace = Pace {
    alive_every: Duration::from_millis(50),
    idle_sleep: Duration::from_micros(200),
};

/// The events of `ev` that the trace uses, or None.
pub fn reduce(ev: &Event) -> Option<Ev> {
    match ev {
        Event::Fault(f) => Some(Ev::Fault {
            addr: f.address,
            // UvmEventMemoryAccessType: 1 read, 2 write, 3 atomic, 4 prefetch.
            write: matches!(f.access_type, 2 | 3),
            t: f.time_stamp,
        }),
        Event::Migration(m)
            if m.dst_index == uvm::CPU_INDEX
                && m.src_index != uvm::CPU_INDEX
                && m.migration_cause == uvm::CAUSE_COHERENCE =>
        {
            Some(Ev::CpuTookBack { addr: m.address })
        }
        _ => None,
    }
}

/// Why recording stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stop {
    TargetExited,
    Duration,
    Signal,
    EventLimit,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub out: String,
    pub pid: i32,
    pub command: String,
    pub driver_version: String,
    pub stopped_by: Stop,
    pub elapsed_s: f64,
    pub events: u64,
    pub fault_events: u64,
    /// Changes of faulted 2 MB block in the stream (prescientd's "fault blocks").
    pub fault_blocks: u64,
    pub migration_events: u64,
    pub cpu_took_back_events: u64,
    pub dropped_events: u64,
    #[serde(flatten)]
    pub built: Built,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // sigaction is given a zeroed, then filled, struct of the right type.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// What to record and how to shape the trace.
pub struct Request<'a> {
    pub pid: i32,
    pub out: &'a Path,
    pub duration: Option<Duration>,
    pub shape: Shape,
    pub queue_entries: u32,
    pub attach_wait: Duration,
    pub ready_file: Option<&'a Path>,
}

/// What the pump counted, and the reduced events it kept.
struct Tally {
    events: Vec<Ev>,
    events_seen: u64,
    faults: u64,
    /// Changes of faulted 2 MB block in the stream.
    fault_blocks: u64,
    migrations: u64,
    took_back: u64,
    last_block: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            events: Vec::new(),
            events_seen: 0,
            faults: 0,
            fault_blocks: 0,
            migrations: 0,
            took_back: 0,
            last_block: u64::MAX,
        }
    }

    fn take(&mut self, ev: Event) {
        self.events_seen += 1;
        match ev {
            Event::Fault(f) => {
                self.faults += 1;
                if f.address >> BLOCK_SHIFT != self.last_block {
                    self.last_block = f.address >> BLOCK_SHIFT;
                    self.fault_blocks += 1;
                }
            }
            Event::Migration(_) => self.migrations += 1,
            // The recorder enables faults and migrations only.
            Event::Thrashing(_) | Event::Throttling(..) | Event::Other => {}
        }
        if let Some(e) = reduce(&ev) {
            if matches!(e, Ev::CpuTookBack { .. }) {
                self.took_back += 1;
            }
            if self.events.len() < MAX_EVENTS {
                self.events.push(e);
            }
        }
    }
}

/// A finished recording, before it is made into a trace.
struct Recorded {
    command: String,
    driver_version: String,
    stop: Stop,
    elapsed_s: f64,
    dropped: u64,
    tally: Tally,
}

/// Records until the target exits, the duration passes or a signal comes,
/// then writes the trace (always a complete, valid file).
pub fn record(req: &Request) -> Result<Summary> {
    let mask = (1 << uvm::EVENT_GPU_FAULT) | (1 << uvm::EVENT_MIGRATION);
    let session = Session::open(req.pid, req.attach_wait, req.queue_entries, mask, |_| {})?;
    let command = std::fs::read_to_string(format!("/proc/{}/cmdline", req.pid))
        .map(|c| c.replace('\0', " ").trim().to_string())
        .unwrap_or_default();
    catch_signals();
    if let Some(f) = req.ready_file {
        std::fs::write(f, b"recording\n").with_context(|| format!("writing {}", f.display()))?;
    }
    let start = Instant::now();
    let mut tally = Tally::new();
    let ended = session.pump(&STOP, req.duration, PACE, |tracker| {
        if tally.events.len() >= MAX_EVENTS {
            return Turn::Stop;
        }
        match tracker.drain(DRAIN_BATCH, |ev| tally.take(ev)) {
            0 => Turn::Idle,
            _ => Turn::Busy,
        }
    });
    session.drain_rest(|ev| tally.take(ev));
    let dropped = session.tracker.dropped();
    let elapsed_s = start.elapsed().as_secs_f64();
    // Let the target's VA space go as soon as possible.
    let driver_version = session.driver_version.clone();
    drop(session);
    let stop = match ended {
        Ended::TargetExited => Stop::TargetExited,
        Ended::Duration => Stop::Duration,
        Ended::Stopped => Stop::Signal,
        Ended::Turn => Stop::EventLimit,
    };
    let recorded = Recorded {
        command,
        driver_version,
        stop,
        elapsed_s,
        dropped,
        tally,
    };
    write_trace(req, recorded)
}

/// Builds the trace of a recording, writes it and sums it up.
fn write_trace(req: &Request, r: Recorded) -> Result<Summary> {
    let how = match r.stop {
        Stop::TargetExited => "until the target exited",
        Stop::Duration => "for the requested duration",
        Stop::Signal => "until stopped by a signal",
        Stop::EventLimit => "until the in-memory event limit (the trace is cut short)",
    };
    let shown = if r.command.len() > 512 {
        &r.command[..r.command.floor_char_boundary(512)]
    } else {
        &r.command
    };
    let (elapsed, t, dropped) = (r.elapsed_s, &r.tally, r.dropped);
    let name = format!(
        "prescientctl record of pid {} ({shown}): recorded {elapsed:.1} s {how}; {} events ({} GPU faults, {} migrations, {dropped} dropped); nvidia_uvm {}; addresses compacted",
        req.pid, t.events_seen, t.faults, t.migrations, r.driver_version
    );
    let mut built = build(&t.events, &name, req.shape).with_context(|| {
        format!(
            "pid {}: recorded {elapsed:.1} s {how}, {} GPU faults; no trace written",
            req.pid, t.faults
        )
    })?;
    let which = match built.iteration_written {
        Some(i) => format!("; iteration {i} of {} found", built.iterations_found),
        None => format!(
            "; whole recording as one iteration ({} found)",
            built.iterations_found
        ),
    };
    built.workload.name.push_str(&which);
    write_atomically(req.out, &built.workload)?;
    Ok(Summary {
        out: req.out.display().to_string(),
        pid: req.pid,
        command: r.command,
        driver_version: r.driver_version,
        stopped_by: r.stop,
        elapsed_s: r.elapsed_s,
        events: t.events_seen,
        fault_events: t.faults,
        fault_blocks: t.fault_blocks,
        migration_events: t.migrations,
        cpu_took_back_events: t.took_back,
        dropped_events: r.dropped,
        built,
    })
}

/// Writes next to `out` and renames, so `out` is never a partial file.
fn write_atomically(out: &Path, w: &Workload) -> Result<()> {
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(".partial");
    // Keep the ".gz" decision of the final name.
    let tmp = if out.extension().is_some_and(|e| e == "gz") {
        let mut t = out.as_os_str().to_owned();
        t.push(".partial.gz");
        std::path::PathBuf::from(t)
    } else {
        std::path::PathBuf::from(tmp)
    };
    prescient_sim::native::write_file(&tmp, w)?;
    std::fs::rename(&tmp, out)
        .with_context(|| format!("renaming {} to {}", tmp.display(), out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_sim::native;
    use prescient_sim::native::recording::Iteration;

    const MB2: u64 = 2 << 20;

    fn f(block: u64, off: u64, write: bool, t: u64) -> Ev {
        Ev::Fault {
            addr: block * MB2 + off,
            write,
            t,
        }
    }

    #[test]
    fn written_files_are_valid_and_gz_aware() {
        let dir = tempfile::tempdir().unwrap();
        let events = [f(0, 0, false, 0), f(1, 3 << 16, true, 100)];
        let shape = Shape {
            iteration: Iteration::Whole,
            gap_ns: 200_000,
            max_blocks: 32,
        };
        let w = build(&events, "dnn", shape).unwrap().workload;
        for name in ["t.trace", "t.trace.gz"] {
            let p = dir.path().join(name);
            write_atomically(&p, &w).unwrap();
            assert_eq!(native::read_file(&p).unwrap(), w);
            assert!(!dir.path().join(format!("{name}.partial")).exists());
        }
    }

    #[test]
    fn reduce_keeps_faults_and_cpu_take_backs_only() {
        let mut fault = uvm::GpuFaultV2 {
            event_type: uvm::EVENT_GPU_FAULT,
            address: 0x1234_5000,
            time_stamp: 77,
            access_type: 3,
            ..Default::default()
        };
        assert_eq!(
            reduce(&Event::Fault(fault)),
            Some(Ev::Fault {
                addr: 0x1234_5000,
                write: true,
                t: 77
            })
        );
        fault.access_type = 1;
        assert!(matches!(
            reduce(&Event::Fault(fault)),
            Some(Ev::Fault { write: false, .. })
        ));
        let mut m = uvm::MigrationV2 {
            event_type: uvm::EVENT_MIGRATION,
            migration_cause: uvm::CAUSE_COHERENCE,
            src_index: 1,
            dst_index: uvm::CPU_INDEX,
            address: MB2,
            ..Default::default()
        };
        assert_eq!(
            reduce(&Event::Migration(m)),
            Some(Ev::CpuTookBack { addr: MB2 })
        );
        m.migration_cause = uvm::CAUSE_EVICTION;
        assert_eq!(reduce(&Event::Migration(m)), None);
        m.migration_cause = uvm::CAUSE_COHERENCE;
        (m.src_index, m.dst_index) = (uvm::CPU_INDEX, 1);
        assert_eq!(reduce(&Event::Migration(m)), None);
        assert_eq!(reduce(&Event::Other), None);
    }
}
