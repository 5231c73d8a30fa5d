//! A run's block sequence (`--record-plan`, replayed by `--mode oracle
//! --plan`): which 2 MB blocks the GPU faulted on, in order, each named by
//! its managed range (by address order) and its block offset inside it, so
//! that the next run of the same workload (other addresses) maps it back.
//!
//! Format (text, version 1):
//! ```text
//! prescient-plan 1
//! ranges N
//! <size in bytes> <start mod 2 MiB>        N lines, by address
//! blocks M
//! <range index> <first offset> <count>     runs of consecutive blocks
//! end
//! ```
//! A plan is bound to a process by the sizes of the ranges its GPU
//! faults on (`Plan::bind`); a plan of another workload or size is
//! refused with one line.

use super::maps::Range;
use prescient_core::{BLOCK_BYTES, BLOCK_SHIFT};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The largest plan accepted (entries, ranges): bounds what a bad file costs.
const MAX_ENTRIES: u64 = 1 << 26;
const MAX_RANGES: usize = 1 << 20;

/// One recorded range: its size and where it starts inside a 2 MB block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanRange {
    pub size: u64,
    pub misalign: u64,
}

impl PlanRange {
    /// 2 MB blocks the range spans.
    pub fn span_blocks(&self) -> u64 {
        (self.misalign + self.size).div_ceil(BLOCK_BYTES)
    }

    /// Whether a whole 2 MB block lies inside the range.
    pub fn holds_whole_block(&self) -> bool {
        let first = self.misalign.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        first + BLOCK_BYTES <= self.misalign + self.size
    }
}

/// A parsed plan: the ranges and the sequence of (range, block offset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub ranges: Vec<PlanRange>,
    pub seq: Vec<(u32, u64)>,
}

impl Plan {
    /// Blocks the ranges span: the footprint a budget is checked against.
    pub fn footprint_blocks(&self) -> u64 {
        self.ranges.iter().map(PlanRange::span_blocks).sum()
    }

    /// Managed bytes of the recorded process.
    pub fn footprint_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.size).sum()
    }

    /// The plan as text.
    pub fn to_text(&self) -> String {
        let mut s = format!("prescient-plan 1\nranges {}\n", self.ranges.len());
        for r in &self.ranges {
            let _ = writeln!(s, "{} {}", r.size, r.misalign);
        }
        let _ = writeln!(s, "blocks {}", self.seq.len());
        let mut i = 0;
        while i < self.seq.len() {
            let (r, o) = self.seq[i];
            let n = self.seq[i..]
                .iter()
                .enumerate()
                .take_while(|(k, e)| **e == (r, o + *k as u64))
                .count();
            let _ = writeln!(s, "{r} {o} {n}");
            i += n;
        }
        s.push_str("end\n");
        s
    }

    /// Parses and checks a plan; the error names the line.
    pub fn parse(text: &str) -> Result<Plan, String> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        let mut next = |what: &str| lines.next().ok_or(format!("ends before {what}"));
        let (n, l) = next("the header")?;
        if l != "prescient-plan 1" {
            return Err(format!("line {n}: not a prescient plan (version 1)"));
        }
        let nr = keyed(next("ranges")?, "ranges")?;
        if nr > MAX_RANGES as u64 {
            return Err(format!("{nr} ranges, at most {MAX_RANGES}"));
        }
        let mut ranges = Vec::with_capacity(nr as usize);
        for _ in 0..nr {
            let (n, l) = next("a range")?;
            let v = numbers::<2>(n, l)?;
            if v[0] == 0 || v[1] >= BLOCK_BYTES || v[0] > u64::MAX / 2 {
                return Err(format!("line {n}: bad range {l:?}"));
            }
            ranges.push(PlanRange {
                size: v[0],
                misalign: v[1],
            });
        }
        let m = keyed(next("blocks")?, "blocks")?;
        if m > MAX_ENTRIES {
            return Err(format!("{m} blocks, at most {MAX_ENTRIES}"));
        }
        let mut seq = Vec::with_capacity(m as usize);
        while (seq.len() as u64) < m {
            let (n, l) = next("the last block")?;
            let [r, o, c] = numbers::<3>(n, l)?;
            let Some(range) = ranges.get(r as usize) else {
                return Err(format!("line {n}: range {r} of {nr}"));
            };
            if c == 0 || o.saturating_add(c) > range.span_blocks() {
                return Err(format!("line {n}: blocks {o}+{c} outside range {r}"));
            }
            if seq.len() as u64 + c > m {
                return Err(format!("line {n}: more than {m} blocks"));
            }
            seq.extend((o..o + c).map(|b| (r as u32, b)));
        }
        match next("end") {
            Ok((_, "end")) if lines.all(|(_, l)| l.is_empty()) => Ok(Plan { ranges, seq }),
            Ok((n, l)) => Err(format!("line {n}: {l:?} where \"end\" was expected")),
            Err(e) => Err(e),
        }
    }

    /// Refuses at once a process that already has more managed ranges or
    /// bytes than the recording ever saw: it cannot be the same workload.
    /// Fewer is no sign (the job is still allocating).
    pub fn check_now(&self, now: &[Range]) -> Result<(), String> {
        let bytes: u64 = now.iter().map(Range::size).sum();
        if now.len() > self.ranges.len() || bytes > self.footprint_bytes() {
            return Err(self.mismatch(now));
        }
        Ok(())
    }

    /// The recorded ranges the plan needs bound before it applies: first
    /// used (faulted on) in the plan's first half, and holding a whole
    /// block (only those ever move), by address. A range first used later
    /// is a job's epilogue (GPU run 53: stream's 2 MB range of its checksum
    /// buffer, first used at 94% of the plan, held the plan back until
    /// then); it is never bound, so its blocks are never prefetched.
    fn needed(&self) -> Vec<bool> {
        let mut early = vec![false; self.ranges.len()];
        for &(r, _) in &self.seq[..self.seq.len() / 2] {
            early[r as usize] = true;
        }
        (early.iter().zip(&self.ranges))
            .map(|(&e, r)| e && r.holds_whole_block())
            .collect()
    }

    /// This plan's blocks in a process whose GPU has faulted on the managed
    /// ranges `faulted` (sorted by address; once the plan applies this is
    /// asked no more): the k-th needed recorded range of a size, by
    /// address, is the k-th faulted range of that size, by address.
    /// Ok(None) while some size has fewer faulted ranges than the plan
    /// needs (the job has not reached them yet); Err (one line) when it
    /// has more, or a size the plan never used: another workload.
    ///
    /// Why these rules (GPU runs 40 and 42, three recordings of one PyTorch
    /// job): the allocator places allocations of different sizes in
    /// another address order in each run, so neither address order nor the
    /// whole set of ranges matches, and ranges never faulted on (a 32 MiB
    /// one) sit at different ranks; ranges of one size keep their address
    /// order, and the first faults on ranges come in another order (GPU
    /// thread blocks race).
    pub fn bind(&self, faulted: &[Range]) -> Result<Option<Translated>, String> {
        let needed = self.needed();
        let mut want: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, r) in self.ranges.iter().enumerate().filter(|(i, _)| needed[*i]) {
            want.entry(r.size).or_default().push(i);
        }
        let mut have: BTreeMap<u64, Vec<Range>> = BTreeMap::new();
        for r in faulted.iter().filter(|r| r.holds_whole_block()) {
            have.entry(r.size()).or_default().push(*r);
        }
        if have
            .iter()
            .any(|(s, h)| h.len() > want.get(s).map_or(0, Vec::len))
        {
            return Err(self.mismatch_faulted(faulted));
        }
        if want
            .iter()
            .any(|(s, w)| have.get(s).map_or(0, Vec::len) < w.len())
        {
            return Ok(None);
        }
        let mut map = vec![None; self.ranges.len()];
        for (s, w) in &want {
            for (&i, r) in w.iter().zip(&have[s]) {
                map[i] = Some(*r);
            }
        }
        Ok(Some(Translated::new(self, &map)))
    }

    /// The one line that refuses a plan whose needed ranges the process's
    /// faulted ranges cannot be.
    pub fn mismatch_faulted(&self, faulted: &[Range]) -> String {
        let needed = self.needed();
        let n = needed.iter().filter(|&&x| x).count();
        let bytes: u64 = (self.ranges.iter().zip(&needed))
            .filter(|(_, &x)| x)
            .map(|(r, _)| r.size)
            .sum();
        let have: Vec<&Range> = faulted.iter().filter(|r| r.holds_whole_block()).collect();
        format!(
            "the plan was recorded from another workload or size: its GPU faulted on {n} ranges of whole blocks ({bytes} bytes) in its first half, this process's on {} ({} bytes), which do not match them size for size",
            have.len(),
            have.iter().map(|r| r.size()).sum::<u64>()
        )
    }

    /// The one line that refuses a plan of another workload or size.
    pub fn mismatch(&self, now: &[Range]) -> String {
        let now_blocks: u64 = now.iter().map(Range::span_blocks).sum();
        let now_bytes: u64 = now.iter().map(Range::size).sum();
        format!(
            "the plan was recorded from another workload or size: {} managed ranges, {} bytes, {} blocks; this process has {} ranges, {} bytes, {} blocks",
            self.ranges.len(),
            self.footprint_bytes(),
            self.footprint_blocks(),
            now.len(),
            now_bytes,
            now_blocks
        )
    }
}

/// A "KEY N" line's N.
fn keyed((n, l): (usize, &str), key: &str) -> Result<u64, String> {
    l.strip_prefix(key)
        .and_then(|v| v.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(format!("line {n}: expected \"{key} N\", got {l:?}"))
}

/// Exactly `K` unsigned numbers of line `n`.
fn numbers<const K: usize>(n: usize, l: &str) -> Result<[u64; K], String> {
    let mut out = [0; K];
    let mut f = l.split_ascii_whitespace();
    for v in out.iter_mut() {
        *v = f
            .next()
            .and_then(|x| x.parse().ok())
            .ok_or(format!("line {n}: expected {K} numbers, got {l:?}"))?;
    }
    if f.next().is_some() {
        return Err(format!("line {n}: expected {K} numbers, got {l:?}"));
    }
    Ok(out)
}

/// A plan mapped onto the current process: each entry's block number, and
/// whether that block lies wholly inside its managed range (only those are
/// ever migrated by the oracle); the ranges bound; and the position where
/// the job is when the last needed range first faults (the cursor's start).
#[derive(Clone, Debug)]
pub struct Translated {
    pub blocks: Vec<u64>,
    pub whole: Vec<bool>,
    pub ranges: Vec<Range>,
    pub start: u32,
}

/// Entries of ranges not bound get block numbers past any address (bit 62
/// and up: user addresses stay below 2^57), distinct per entry's block,
/// never whole: never migrated, and no fault lands there.
const UNBOUND: u64 = 1 << 62;

impl Translated {
    /// `map[i]`: the current range of recorded range `i`, if bound.
    fn new(plan: &Plan, map: &[Option<Range>]) -> Translated {
        let mut start = 0;
        let (blocks, whole) = (plan.seq.iter())
            .map(|&(r, o)| match map[r as usize] {
                Some(range) => {
                    let b = range.first_block() + o;
                    (b, o < range.span_blocks() && range.holds_block(b))
                }
                None => (UNBOUND + (u64::from(r) << 32) + o, false),
            })
            .unzip();
        let mut seen = vec![false; map.len()];
        for (p, &(r, _)) in plan.seq.iter().enumerate() {
            if map[r as usize].is_some() && !std::mem::replace(&mut seen[r as usize], true) {
                start = p as u32;
            }
        }
        let mut ranges: Vec<Range> = map.iter().flatten().copied().collect();
        ranges.sort_unstable();
        Translated {
            blocks,
            whole,
            ranges,
            start,
        }
    }
}

/// The block offset of `addr` in `range`.
pub fn offset_in(range: &Range, addr: u64) -> u64 {
    (addr >> BLOCK_SHIFT) - range.first_block()
}

#[cfg(test)]
mod tests {
    use super::super::maps;
    use super::*;

    fn plan() -> Plan {
        Plan {
            ranges: vec![
                PlanRange {
                    size: 1 << 30,
                    misalign: 0,
                },
                PlanRange {
                    size: 4096,
                    misalign: 0x1000,
                },
            ],
            seq: vec![(0, 3), (0, 4), (0, 5), (1, 0), (0, 5), (0, 0), (0, 1)],
        }
    }

    #[test]
    fn text_round_trips_and_runs_compress() {
        let p = plan();
        let t = p.to_text();
        assert_eq!(
            t,
            "prescient-plan 1\nranges 2\n1073741824 0\n4096 4096\nblocks 7\n0 3 3\n1 0 1\n0 5 1\n0 0 2\nend\n"
        );
        assert_eq!(Plan::parse(&t).unwrap(), p);
        assert_eq!(p.footprint_blocks(), 513);
    }

    #[test]
    fn bad_plans_are_refused_with_the_line() {
        let good = plan().to_text();
        let cases = [
            (
                good.replace("prescient-plan 1", "prescient-plan 2"),
                "line 1",
            ),
            (good.replace("ranges 2", "ranges x"), "line 2"),
            (good.replace("4096 4096", "4096 2097152"), "line 4"),
            (good.replace("0 3 3", "2 3 3"), "range 2 of 2"),
            (good.replace("0 3 3", "0 511 3"), "outside range 0"),
            (good.replace("1 0 1", "1 0 1 9"), "expected 3 numbers"),
            (good.replace("blocks 7", "blocks 6"), "more than 6"),
            (good.replace("blocks 7", "blocks 8"), "got \"end\""),
            (good.replace("end\n", "end\nmore\n"), "expected"),
            (good.replace("end\n", ""), "before end"),
            (String::new(), "before the header"),
        ];
        for (text, want) in cases {
            let e = Plan::parse(&text).unwrap_err();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
    }

    fn range(start_block: u64, size: u64) -> Range {
        let start = start_block << BLOCK_SHIFT;
        Range {
            start,
            end: start + size,
        }
    }

    #[test]
    fn a_plan_maps_onto_other_addresses_of_the_same_sizes() {
        let p = plan();
        let small = Range {
            start: (900 << BLOCK_SHIFT) + 0x1000,
            end: (900 << BLOCK_SHIFT) + 0x2000,
        };
        let t = p.bind(&[range(100, 1 << 30), small]).unwrap().unwrap();
        // The 4 KiB range holds no whole block: never needed, never bound,
        // never migrated.
        let unbound = UNBOUND + (1 << 32);
        assert_eq!(t.blocks, [103, 104, 105, unbound, 105, 100, 101]);
        assert_eq!(t.whole, [true, true, true, false, true, true, true]);
        assert_eq!(t.ranges, [range(100, 1 << 30)]);
        assert_eq!(t.start, 0);
    }

    fn sized(mbs: &[u64]) -> Plan {
        Plan {
            ranges: mbs
                .iter()
                .map(|&mb| PlanRange {
                    size: mb << 20,
                    misalign: 0,
                })
                .collect(),
            // Two passes: every range is used in the plan's first half.
            seq: (0..2 * mbs.len() as u32)
                .map(|i| (i % mbs.len() as u32, 0))
                .collect(),
        }
    }

    #[test]
    fn ranges_of_one_size_map_in_their_order_whatever_the_others_do() {
        let mut p = sized(&[4, 8, 4]);
        p.seq = [(0, 0), (1, 0), (2, 1)].repeat(2);
        // The 8 MiB range now comes first by address.
        let now = [range(10, 8 << 20), range(20, 4 << 20), range(30, 4 << 20)];
        let t = p.bind(&now).unwrap().unwrap();
        assert_eq!(t.blocks, [20, 10, 31].repeat(2));
        // The job is at the last needed range's first use.
        assert_eq!(t.start, 2);
    }

    #[test]
    fn ranges_never_faulted_on_are_not_waited_for_nor_ranked() {
        // Recorded: 4 MiB, a 32 MiB one never faulted on, 4 MiB.
        let mut p = sized(&[4, 32, 4]);
        p.seq = [(0, 1), (2, 0)].repeat(2);
        // Here the unused 32 MiB sits first, and is not faulted either.
        let t = p
            .bind(&[range(50, 4 << 20), range(60, 4 << 20)])
            .unwrap()
            .unwrap();
        assert_eq!(t.blocks, [51, 60, 51, 60]);
    }

    #[test]
    fn a_range_first_used_in_the_plans_second_half_is_not_waited_for() {
        // Two 8 MiB ranges used throughout, a 2 MiB one only at the end
        // (a checksum buffer): the plan applies without it.
        let mut p = sized(&[8, 8, 2]);
        p.seq = [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (2, 0)].to_vec();
        let t = p
            .bind(&[range(10, 8 << 20), range(20, 8 << 20)])
            .unwrap()
            .unwrap();
        assert_eq!(t.blocks[..5], [10, 20, 11, 21, 12]);
        assert!(!t.whole[5], "never bound, never moved");
        assert_eq!(t.start, 1);
    }

    #[test]
    fn another_workload_is_refused_and_a_growing_one_waits() {
        let p = sized(&[4, 4, 8]);
        // Not every needed range faulted on yet: wait.
        for f in [
            vec![],
            vec![range(1, 4 << 20)],
            vec![range(1, 4 << 20), range(9, 8 << 20)],
        ] {
            assert!(p.bind(&f).unwrap().is_none(), "{f:?}");
        }
        // A size the plan never used, or more of one than it used: refused.
        for f in [
            vec![range(1, 16 << 20)],
            vec![range(1, 8 << 20), range(9, 8 << 20)],
        ] {
            let e = p.bind(&f).unwrap_err();
            assert!(e.contains("another workload or size"), "{e}");
            assert!(!e.contains('\n'));
        }
        // More ranges or more bytes than ever recorded: refused at attach.
        assert!(p.check_now(&[range(1, 16 << 20)]).is_ok());
        for now in [
            vec![
                range(1, 4 << 20),
                range(9, 4 << 20),
                range(20, 4 << 20),
                range(30, 4 << 20),
            ],
            vec![range(1, 18 << 20)],
        ] {
            let e = p.check_now(&now).unwrap_err();
            assert!(e.contains("another workload or size"), "{e}");
        }
    }

    /// A recorded plan of GPU run 40 (bench/gpu/torch/train.py's
    /// transformer under driver-like eviction, 8 iterations).
    fn run40_xf(rep: u32) -> Plan {
        use std::io::Read;
        let gz: &[u8] = match rep {
            1 => include_bytes!("testdata/run40-xf-1.plan.gz"),
            _ => include_bytes!("testdata/run40-xf-2.plan.gz"),
        };
        let mut text = String::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_string(&mut text)
            .unwrap();
        Plan::parse(&text).unwrap()
    }

    /// A process with `p`'s ranges in `p`'s address order, 2 MB apart.
    fn laid_out(p: &Plan) -> Vec<Range> {
        let mut at = 0x7f00_0000_0000u64;
        (p.ranges.iter())
            .map(|r| {
                let start = at + r.misalign;
                at += (r.span_blocks() + 1) << BLOCK_SHIFT;
                Range {
                    start,
                    end: start + r.size,
                }
            })
            .collect()
    }

    /// The share of `real`'s steps from one range to another that the
    /// translated plan `t` also takes: a wrongly bound range breaks them.
    fn crossings_kept(t: &[u64], real: &[u64], ranges: &[Range]) -> f64 {
        let of = |b: u64| maps::find(ranges, b << BLOCK_SHIFT);
        let planned: std::collections::HashSet<(u64, u64)> =
            t.windows(2).map(|w| (w[0], w[1])).collect();
        let cross: Vec<(u64, u64)> = (real.windows(2))
            .filter(|w| of(w[0]) != of(w[1]))
            .map(|w| (w[0], w[1]))
            .collect();
        cross.iter().filter(|c| planned.contains(c)).count() as f64 / cross.len() as f64
    }

    /// Run 42's failure, on two real recordings of one PyTorch job: the
    /// ranges' sizes in address order differ between runs, and a range
    /// never faulted on has another rank. Replaying run 40's second
    /// recording as the "GPU" against its first as the plan: the plan
    /// waits until the job has faulted on every needed range, then binds
    /// them so that the translated plan keeps half of the job's steps from
    /// range to range (0.50 when written; with each size's ranks
    /// reversed, 0.07).
    #[test]
    fn a_recorded_pytorch_plan_binds_onto_another_run_of_the_job() {
        let (plan, job) = (run40_xf(1), run40_xf(2));
        let sizes = |p: &Plan| p.ranges.iter().map(|r| r.size).collect::<Vec<_>>();
        assert_ne!(sizes(&plan), sizes(&job), "the runs' address orders differ");
        let ranges = laid_out(&job);
        let real: Vec<u64> = (job.seq.iter())
            .map(|&(r, o)| ranges[r as usize].first_block() + o)
            .collect();
        let mut faulted: Vec<Range> = Vec::new();
        let mut bound = None;
        for (pos, &(r, _)) in job.seq.iter().enumerate() {
            let range = ranges[r as usize];
            if faulted.contains(&range) {
                continue;
            }
            faulted.push(range);
            faulted.sort_unstable();
            if let Some(t) = plan.bind(&faulted).unwrap() {
                bound = Some((pos, t));
                break;
            }
        }
        let (pos, t) = bound.expect("the plan applies");
        // It applies within the first iteration (of 8), where the plan says.
        assert!(pos < job.seq.len() / 8, "{pos}");
        assert!(t.start.abs_diff(pos as u32) < 500, "{} vs {pos}", t.start);
        let kept = crossings_kept(&t.blocks, &real, &ranges);
        assert!(kept > 0.4, "{kept}");
        // The check can fail: ranks of each size reversed break it.
        let mut flipped = faulted.clone();
        flipped.sort_by_key(|r| (r.size(), std::cmp::Reverse(r.start)));
        let mut by_size: BTreeMap<u64, Vec<Range>> = BTreeMap::new();
        for r in &flipped {
            by_size.entry(r.size()).or_default().push(*r);
        }
        let wrong: Vec<u64> = (plan.seq.iter())
            .map(|&(r, o)| {
                let s = plan.ranges[r as usize].size;
                let rank = (plan.ranges[..r as usize].iter())
                    .filter(|x| x.size == s)
                    .count();
                by_size
                    .get(&s)
                    .and_then(|v| v.get(rank))
                    .map_or(UNBOUND, |x| x.first_block() + o)
            })
            .collect();
        let wrong = crossings_kept(&wrong, &real, &ranges);
        assert!(wrong < 0.2, "{wrong}");
    }
}
