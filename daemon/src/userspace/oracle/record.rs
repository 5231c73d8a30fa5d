//! `--record-plan FILE`: the run's fault sequence as a plan (plan.rs). Each
//! change of faulted 2 MB block is one entry, named by its managed range
//! and offset; the ranges are read from /proc/PID/maps when a fault lands
//! outside every range known (a job allocates as it goes), at most once
//! per `REREAD` so that a fault outside them all costs little. Such a
//! fault keeps its place and is named at that read: a range whose faults
//! all came between two reads is still in the plan (the oracle waits for
//! every range the plan uses, bind.rs).

use super::maps::{self, Range};
use super::plan::{offset_in, Plan, PlanRange};
use prescient_core::BLOCK_BYTES;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const REREAD: Duration = Duration::from_millis(20);

/// The recording of one run.
pub struct Recorder {
    pid: i32,
    path: PathBuf,
    /// Every managed range seen so far, by address.
    ranges: Vec<Range>,
    /// (range start address, block offset), one per fault block change;
    /// (`PENDING`, address) until the next read names it.
    seq: Vec<(u64, u64)>,
    /// Indices in `seq` of entries not named yet.
    pending: Vec<usize>,
    last_read: Option<Instant>,
    /// Faults outside every managed range (not recorded).
    pub unmapped: u64,
    /// The processor index of the GPU recorded: the first that faulted.
    gpu: Option<u16>,
    /// Other GPUs that faulted. A plan is one GPU's fault sequence (the
    /// oracle replays it on one lane), so then none is written.
    others: Vec<u16>,
}

impl Recorder {
    pub fn new(pid: i32, path: PathBuf) -> Recorder {
        Recorder {
            pid,
            path,
            ranges: Vec::new(),
            seq: Vec::new(),
            pending: Vec::new(),
            last_read: None,
            unmapped: 0,
            gpu: None,
            others: Vec::new(),
        }
    }

    /// A fault of the GPU at processor index `gpu` at byte address `addr`
    /// (the first of a run on its block): recorded when it is the first
    /// GPU's; another GPU's is said once, and no plan will be written.
    pub fn fault_from(&mut self, gpu: u16, addr: u64) {
        match self.gpu {
            Some(g) if g != gpu => {
                if !self.others.contains(&gpu) {
                    self.others.push(gpu);
                    tracing::warn!(pid = self.pid, recorded = g, other = gpu,
                        "--record-plan: the process computes on more than one GPU; a plan is one GPU's faults: none will be written");
                }
                return;
            }
            Some(_) => {}
            None => self.gpu = Some(gpu),
        }
        self.fault(addr);
    }

    /// A fault at byte address `addr` (the first of a run on its block).
    pub fn fault(&mut self, addr: u64) {
        let i = match maps::find(&self.ranges, addr) {
            Some(i) => Some(i),
            None if self.last_read.is_none_or(|t| t.elapsed() >= REREAD) => {
                self.reread();
                maps::find(&self.ranges, addr)
            }
            None => None,
        };
        match i {
            Some(i) => {
                let r = self.ranges[i];
                self.seq.push((r.start, offset_in(&r, addr)));
            }
            None => {
                self.pending.push(self.seq.len());
                self.seq.push((PENDING, addr));
            }
        }
    }

    /// Adds the ranges the process has now to those seen, and names the
    /// entries that waited for them (or counts them unmapped).
    fn reread(&mut self) {
        self.last_read = Some(Instant::now());
        match maps::read(self.pid) {
            Ok(now) => merge(&mut self.ranges, now),
            Err(e) => tracing::debug!(pid = self.pid, "record plan: /proc maps: {e}"),
        }
        self.name_pending();
    }

    /// Names each waiting entry by the range that holds it now.
    fn name_pending(&mut self) {
        for i in std::mem::take(&mut self.pending) {
            let addr = self.seq[i].1;
            match maps::find(&self.ranges, addr) {
                Some(k) => {
                    let r = self.ranges[k];
                    self.seq[i] = (r.start, offset_in(&r, addr));
                }
                None => self.unmapped += 1,
            }
        }
    }

    pub fn entries(&self) -> usize {
        self.seq.len()
    }

    /// The plan recorded so far.
    pub fn plan(&self) -> Plan {
        plan_of(&self.ranges, &self.seq)
    }

    /// Writes the plan (never through a symlink).
    pub fn write(&mut self) -> anyhow::Result<()> {
        if !self.others.is_empty() {
            anyhow::bail!(
                "the process computed on more than one GPU (processor indices {:?} and {:?}): a plan is one GPU's faults, none written",
                self.gpu.unwrap_or_default(),
                self.others
            );
        }
        // The last allocations may have come after the last fault.
        self.reread();
        let text = self.plan().to_text();
        use std::io::Write;
        crate::safe_path::create_output(&self.path, "--record-plan")?.write_all(text.as_bytes())?;
        tracing::info!(
            path = %self.path.display(),
            entries = self.seq.len(),
            ranges = self.ranges.len(),
            "plan recorded"
        );
        Ok(())
    }
}

/// Adds to `seen` the ranges of `now` it lacks; a range that overlaps one
/// seen (the memory was freed and mapped again) replaces it.
fn merge(seen: &mut Vec<Range>, now: Vec<Range>) {
    for r in now {
        if seen.contains(&r) {
            continue;
        }
        seen.retain(|s| s.end <= r.start || s.start >= r.end);
        seen.push(r);
    }
    seen.sort_unstable();
}

/// A `seq` entry not named yet: no range starts at the top address.
const PENDING: u64 = u64::MAX;

/// The plan of ranges `ranges` (by address) and entries `seq`; entries of
/// ranges no longer in `ranges` (or not named) are left out.
fn plan_of(ranges: &[Range], seq: &[(u64, u64)]) -> Plan {
    let index = |start: u64| ranges.binary_search_by_key(&start, |r| r.start).ok();
    Plan {
        ranges: ranges
            .iter()
            .map(|r| PlanRange {
                size: r.size(),
                misalign: r.start % BLOCK_BYTES,
            })
            .collect(),
        seq: seq
            .iter()
            .filter_map(|&(s, o)| index(s).map(|i| (i as u32, o)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_core::BLOCK_SHIFT;

    fn r(start: u64, end: u64) -> Range {
        Range { start, end }
    }

    #[test]
    fn ranges_merge_and_replace_what_they_overlap() {
        let mut seen = vec![r(100, 200)];
        merge(&mut seen, vec![r(0, 50), r(100, 200)]);
        assert_eq!(seen, [r(0, 50), r(100, 200)]);
        merge(&mut seen, vec![r(150, 400)]);
        assert_eq!(seen, [r(0, 50), r(150, 400)]);
    }

    #[test]
    fn a_recording_names_blocks_by_range_and_offset() {
        let a = r(10 << BLOCK_SHIFT, 20 << BLOCK_SHIFT);
        let b = r(3 << BLOCK_SHIFT, (3 << BLOCK_SHIFT) + 4096);
        let mut rec = Recorder::new(0, PathBuf::from("/nonexistent"));
        rec.ranges = vec![b, a];
        rec.last_read = Some(Instant::now());
        for addr in [12 << BLOCK_SHIFT, (13 << BLOCK_SHIFT) + 5, b.start + 8] {
            rec.fault(addr);
        }
        // Outside every range, and no reread yet: it waits, and is left
        // out until named.
        rec.fault(30 << BLOCK_SHIFT);
        assert_eq!(rec.plan().seq, [(1, 2), (1, 3), (0, 0)]);
        // pid 0's maps cannot be read: still outside every range.
        rec.reread();
        assert_eq!(rec.unmapped, 1);
        let p = rec.plan();
        assert_eq!(p.seq, [(1, 2), (1, 3), (0, 0)]);
        assert_eq!(p.ranges[0].size, 4096);
        assert_eq!(p.ranges[1].span_blocks(), 10);
        // Replayed where both ranges moved, the blocks follow them.
        let now = [
            r(50 << BLOCK_SHIFT, (50 << BLOCK_SHIFT) + 4096),
            r(70 << BLOCK_SHIFT, 80 << BLOCK_SHIFT),
        ];
        let t = p.bind(&now).unwrap().unwrap();
        assert_eq!(t.blocks[..2], [72, 73]);
        // The 4 KiB range holds no whole block: never bound or moved.
        assert_eq!(t.whole, [true, true, false]);
    }

    #[test]
    fn a_fault_before_its_range_is_read_keeps_its_place() {
        let a = r(10 << BLOCK_SHIFT, 20 << BLOCK_SHIFT);
        let b = r(40 << BLOCK_SHIFT, 44 << BLOCK_SHIFT);
        let mut rec = Recorder::new(0, PathBuf::from("/nonexistent"));
        rec.ranges = vec![a];
        rec.last_read = Some(Instant::now());
        rec.fault(11 << BLOCK_SHIFT);
        // b is allocated, but the maps were read less than REREAD ago.
        rec.fault(42 << BLOCK_SHIFT);
        rec.fault(12 << BLOCK_SHIFT);
        // The next read finds b: its entry is named where it happened.
        merge(&mut rec.ranges, vec![a, b]);
        rec.name_pending();
        assert_eq!(rec.plan().seq, [(0, 1), (1, 2), (0, 2)]);
        assert_eq!(rec.unmapped, 0);
    }

    #[test]
    fn a_plan_is_one_gpus_faults_a_second_gpu_means_none_is_written() {
        let a = r(10 << BLOCK_SHIFT, 20 << BLOCK_SHIFT);
        let dir = std::env::temp_dir().join(format!("prescient-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("one.plan");
        let mut rec = Recorder::new(0, path.clone());
        rec.ranges = vec![a];
        rec.last_read = Some(Instant::now());
        rec.fault_from(3, 12 << BLOCK_SHIFT);
        rec.fault_from(3, 13 << BLOCK_SHIFT);
        assert_eq!(rec.plan().seq, [(0, 2), (0, 3)]);
        // pid 0's maps cannot be read: the ranges stay those seen.
        rec.write().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(Plan::parse(&text).unwrap().seq, [(0, 2), (0, 3)]);
        // A second GPU's fault is not recorded, and no plan is written.
        let two = dir.join("two.plan");
        let mut rec = Recorder::new(0, two.clone());
        rec.ranges = vec![a];
        rec.last_read = Some(Instant::now());
        rec.fault_from(3, 12 << BLOCK_SHIFT);
        rec.fault_from(5, 14 << BLOCK_SHIFT);
        rec.fault_from(3, 13 << BLOCK_SHIFT);
        assert_eq!(rec.plan().seq, [(0, 2), (0, 3)]);
        let e = format!("{:#}", rec.write().unwrap_err());
        assert!(
            e.contains("more than one GPU") && e.contains("none written"),
            "{e}"
        );
        assert!(!two.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
