//! `prescientd attach --block-log FILE`: every decision and every movement of a
//! 2 MB block, one line each, for finding where migrated bytes go.
//!
//! Counters say how many bytes moved; they cannot say which of them were
//! wasted (a prefetch evicted again before its use, a victim needed again a
//! moment later). This log can: bench/gpu/blocklog.py follows each block
//! through an iteration.
//!
//! Format (tab-separated, one header line `# prescientd block log v1
//! unix_s=<start>`), then `t_us kind block [detail]`, `t_us` in
//! microseconds since the start:
//! - `F block h|m|j|r page access type`: a GPU fault the engine saw
//!   (history hit, miss, jump to another place, or a refault of a block
//!   pre-evicted shortly before; `-` where the mode does not learn), the 4 KB
//!   page within the block (0-511), the access (`r`ead, `w`rite, `a`tomic,
//!   `p`refetch, `?` other) and the driver's fault type number
//!   (UvmEventFaultType: what about the page made the GPU fault);
//! - `G block cause` / `C block cause`: a migration to the GPU / to the CPU
//!   (the driver's cause number), once per run of events on one block;
//! - `P block`: a prefetch queued; `V block`: a victim queued for eviction;
//!   `D block`: a dead block discarded (UVM_DISCARD returned), a victim or
//!   dead data on the host;
//! - `M block count d|a|r p`: a dead / alive mark of `count` blocks from
//!   `block` applied by the backend (its time is the apply, a turn at most
//!   after the process sent it), `p` of them populated before the reply;
//!   `r`: alive, bringing nothing back (a revocation, memory going back to
//!   the driver), not a reuse;
//! - `J block count g|c call_us status`: a worker's UVM_MIGRATE of `count`
//!   blocks from `block` to the GPU / CPU returned after `call_us` (the
//!   line's time is its return), status 0, the driver's RM status, or a
//!   negated errno; written when the loop next takes the workers' records,
//!   so these lines can be out of time order by a turn;
//! - `L block id flags ranges`: a launch read from the runtime's launch
//!   ring (launch footprints), in launch order, before the GPU runs it:
//!   its execution id (as the page encodes it), `g` if a range is a guess,
//!   `t` if the record is truncated, `-` otherwise, and its blocks as
//!   `first:count` ranges joined by `,` (`block` is the first range's
//!   first block, 0 with none);
//! - `K number`: the execution-id page showed the GPU starting the
//!   launch of that number in the launch queue (launch footprints with
//!   the next-use order: the `L` lines counted from 1), when the queue's
//!   front moved;
//! - `T block bytes`: the driver's thrashing detection flagged a region;
//!   `H block s|e`: it began / ended throttling a page's fault servicing.
//!
//! Lines are buffered; a write error turns the log off (with one warning)
//! and never stops the backend.

use prescient_core::{Stats, BLOCK_BYTES, BLOCK_SHIFT};
use prescient_uvm::ioctl::GpuFaultV2;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub struct BlockLog {
    out: Option<BufWriter<File>>,
    start: Instant,
    /// The last migration line (direction, block): runs of events on one
    /// block make one line.
    last_move: (bool, u64),
}

/// What the engine made of a fault, from its counters before and after.
pub fn fault_kind(before: &Stats, after: &Stats) -> char {
    if after.refaults > before.refaults {
        'r'
    } else if after.history_jumps > before.history_jumps {
        'j'
    } else if after.history_hits > before.history_hits {
        'h'
    } else {
        'm'
    }
}

impl BlockLog {
    /// A log that writes nothing.
    pub fn off() -> Self {
        BlockLog {
            out: None,
            start: Instant::now(),
            last_move: (false, u64::MAX),
        }
    }

    pub fn create(path: &Path) -> std::io::Result<Self> {
        // Never through a symlink, nor in a directory others can change.
        let f = crate::safe_path::create_output(path, "--block-log")
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        writeln!(out, "# prescientd block log v1 unix_s={unix:.6}")?;
        Ok(BlockLog {
            out: Some(out),
            start: Instant::now(),
            last_move: (false, u64::MAX),
        })
    }

    pub fn on(&self) -> bool {
        self.out.is_some()
    }

    fn line(&mut self, kind: char, block: u64, detail: Option<&dyn std::fmt::Display>) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let t = self.start.elapsed().as_micros();
        let r = match detail {
            Some(d) => writeln!(out, "{t}\t{kind}\t{block}\t{d}"),
            None => writeln!(out, "{t}\t{kind}\t{block}"),
        };
        if let Err(e) = r {
            tracing::warn!("block log: {e}; no more lines are written");
            self.out = None;
        }
    }

    pub fn fault(&mut self, f: &GpuFaultV2, kind: char) {
        if !self.on() {
            return;
        }
        let page = (f.address & (BLOCK_BYTES - 1)) >> 12;
        let access = match f.access_type {
            1 => 'r',
            2 => 'w',
            3 => 'a',
            4 => 'p',
            _ => '?',
        };
        let detail = format!("{kind}\t{page}\t{access}\t{}", f.fault_type);
        self.line('F', f.address >> BLOCK_SHIFT, Some(&detail));
    }

    pub fn migration(&mut self, block: u64, to_gpu: bool, cause: u8) {
        if self.last_move == (to_gpu, block) {
            return;
        }
        self.last_move = (to_gpu, block);
        self.line(if to_gpu { 'G' } else { 'C' }, block, Some(&cause));
    }

    pub fn prefetch(&mut self, block: u64) {
        self.line('P', block, None);
    }

    pub fn victim(&mut self, block: u64) {
        self.line('V', block, None);
    }

    pub fn discard(&mut self, block: u64) {
        self.line('D', block, None);
    }

    /// One range of a mark the backend applied (`kind` d, a or r, as the
    /// format says), with how many of its blocks were populated before
    /// the reply (alive marks only).
    pub fn mark(&mut self, range: &std::ops::Range<u64>, kind: char, populated: usize) {
        if !self.on() {
            return;
        }
        let detail = format!("{}\t{kind}\t{populated}", range.end - range.start);
        self.line('M', range.start, Some(&detail));
    }

    /// A worker's job that returned (migrator.rs `Ran`), at its own time.
    pub(super) fn job(&mut self, r: &super::migrator::Ran) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let t = r.end.saturating_duration_since(self.start).as_micros();
        let call = r.end.saturating_duration_since(r.start).as_micros();
        let dir = if r.job.goes_to_gpu() { 'g' } else { 'c' };
        let (first, n) = (r.job.first(), r.job.blocks());
        if let Err(e) = writeln!(out, "{t}\tJ\t{first}\t{n}\t{dir}\t{call}\t{}", r.status) {
            tracing::warn!("block log: {e}; no more lines are written");
            self.out = None;
        }
    }

    /// A launch record read from the ring (the format's `L` line).
    pub fn launch(&mut self, r: &prescient_uapi::launchring::Record) {
        if !self.on() {
            return;
        }
        use std::fmt::Write as _;
        let flags = match (r.guessed, r.truncated) {
            (false, false) => "-",
            (true, false) => "g",
            (false, true) => "t",
            (true, true) => "gt",
        };
        let mut detail = format!("{}\t{flags}\t", r.id);
        for (i, (first, n)) in r.blocks().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(detail, "{sep}{first}:{n}");
        }
        let first = r.blocks().next().map_or(0, |(b, _)| b);
        self.line('L', first, Some(&detail));
    }

    /// The execution-id page showed the GPU starting launch `number` (the
    /// launch queue's count, from 1, of the records it took: with no bad
    /// ids, the number of the `L` line).
    pub fn kernel(&mut self, number: u64) {
        self.line('K', number, None);
    }

    /// The driver's thrashing detection flagged `bytes` from `block` on.
    pub fn thrashing(&mut self, block: u64, bytes: u64) {
        self.line('T', block, Some(&bytes));
    }

    /// The driver began (`s`) or ended (`e`) throttling a page of `block`.
    pub fn throttling(&mut self, block: u64, start: bool) {
        self.line('H', block, Some(&if start { 's' } else { 'e' }));
    }

    pub fn flush(&mut self) {
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.flush() {
                tracing::warn!("block log: {e}");
                self.out = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_format_and_runs_collapse() {
        let dir = std::env::temp_dir().join(format!("blocklog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.tsv");
        let mut log = BlockLog::create(&path).unwrap();
        let fault = GpuFaultV2 {
            address: (7 << BLOCK_SHIFT) + 5 * 4096 + 12,
            access_type: 2,
            fault_type: 1,
            ..Default::default()
        };
        log.fault(&fault, 'm');
        log.migration(7, true, 2);
        log.migration(7, true, 2);
        log.migration(7, false, 0);
        log.prefetch(8);
        log.victim(7);
        log.discard(7);
        log.mark(&(10..14), 'd', 0);
        log.mark(&(10..12), 'a', 1);
        let mut rec = prescient_uapi::launchring::Record {
            id: 42,
            ..Default::default()
        };
        rec.push(100, 3);
        rec.push(7, 1);
        log.launch(&rec);
        (rec.id, rec.guessed) = (43, true);
        log.launch(&rec);
        log.launch(&prescient_uapi::launchring::Record {
            id: 44,
            ..Default::default()
        });
        log.kernel(2);
        log.thrashing(9, 2 << 20);
        log.throttling(9, true);
        log.throttling(9, false);
        let start = log.start + std::time::Duration::from_millis(5);
        log.job(&super::super::migrator::Ran {
            job: super::super::migrator::Job::to_cpu(3, 2, [0; 16]),
            start,
            end: start + std::time::Duration::from_micros(1500),
            status: 0x1e,
        });
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("# prescientd block log v1 unix_s="));
        // A job's line carries its own time (its return), not the write's.
        assert_eq!(lines.last().unwrap().split('\t').next(), Some("6500"));
        let kinds: Vec<Vec<&str>> = lines[1..]
            .iter()
            .map(|l| l.split('\t').skip(1).collect())
            .collect();
        assert_eq!(
            kinds,
            [
                vec!["F", "7", "m", "5", "w", "1"],
                vec!["G", "7", "2"],
                vec!["C", "7", "0"],
                vec!["P", "8"],
                vec!["V", "7"],
                vec!["D", "7"],
                vec!["M", "10", "4", "d", "0"],
                vec!["M", "10", "2", "a", "1"],
                vec!["L", "100", "42", "-", "100:3,7:1"],
                vec!["L", "100", "43", "g", "100:3,7:1"],
                vec!["L", "0", "44", "-", ""],
                vec!["K", "2"],
                vec!["T", "9", "2097152"],
                vec!["H", "9", "s"],
                vec!["H", "9", "e"],
                vec!["J", "3", "2", "c", "1500", "30"],
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_fault_kind_comes_from_the_counters() {
        let a = Stats::default();
        let mut b = a;
        b.history_hits += 1;
        assert_eq!(fault_kind(&a, &b), 'h');
        b.history_jumps += 1;
        assert_eq!(fault_kind(&a, &b), 'j');
        b.refaults += 1;
        assert_eq!(fault_kind(&a, &b), 'r');
        assert_eq!(fault_kind(&a, &a), 'm');
    }
}
