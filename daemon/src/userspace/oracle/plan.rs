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
//! The fingerprint is the ranges' sizes in address order and the blocks
//! they span: a plan of another workload or size is refused with one line.

use super::maps::Range;
use prescient_core::{BLOCK_BYTES, BLOCK_SHIFT};
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

    /// This plan's blocks in a process whose managed ranges are `now`:
    /// Ok(None) while `now` may still grow into the recorded ranges (some
    /// allocations not made yet), Err (one line) when it cannot: more
    /// ranges or more bytes than the plan. Ranges a job has at some moment
    /// need not be an in-order part of its final ones (run 40: a PyTorch
    /// job's first 23 were not of its 173), so anything smaller waits; the
    /// loop refuses it once the ranges stop changing (oracle/mod.rs).
    pub fn translate(&self, now: &[Range]) -> Result<Option<Translated>, String> {
        let sizes: Vec<u64> = self.ranges.iter().map(|r| r.size).collect();
        let have: Vec<u64> = now.iter().map(Range::size).collect();
        if let Some(map) = same_sizes(&sizes, &have) {
            return Ok(Some(Translated::new(self, now, &map)));
        }
        let bytes: u64 = have.iter().sum();
        if have.len() > sizes.len() || bytes > self.footprint_bytes() {
            return Err(self.mismatch(now));
        }
        Ok(None)
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

/// The recorded ranges (`sizes`, by address) onto the current ones
/// (`have`, by address) when both hold the same sizes: the k-th recorded
/// range of a size is the k-th current one of that size. In the same
/// address order that is the identity; a job that places the same
/// allocations in another order (its allocator's threads, say) still maps.
fn same_sizes(sizes: &[u64], have: &[u64]) -> Option<Vec<usize>> {
    if sizes.len() != have.len() {
        return None;
    }
    let mut by_size: std::collections::HashMap<u64, std::collections::VecDeque<usize>> =
        Default::default();
    for (j, &s) in have.iter().enumerate() {
        by_size.entry(s).or_default().push_back(j);
    }
    sizes
        .iter()
        .map(|s| by_size.get_mut(s).and_then(|q| q.pop_front()))
        .collect()
}

/// A plan mapped onto the current process: each entry's block number, and
/// whether that block lies wholly inside its managed range (only those are
/// ever migrated by the oracle).
#[derive(Clone, Debug)]
pub struct Translated {
    pub blocks: Vec<u64>,
    pub whole: Vec<bool>,
    pub ranges: Vec<Range>,
}

impl Translated {
    /// `map[i]`: the current range of recorded range `i`.
    fn new(plan: &Plan, now: &[Range], map: &[usize]) -> Translated {
        let (blocks, whole) = plan
            .seq
            .iter()
            .map(|&(r, o)| {
                let range = &now[map[r as usize]];
                let b = range.first_block() + o;
                (b, o < range.span_blocks() && range.holds_block(b))
            })
            .unzip();
        Translated {
            blocks,
            whole,
            ranges: now.to_vec(),
        }
    }
}

/// The block offset of `addr` in `range`.
pub fn offset_in(range: &Range, addr: u64) -> u64 {
    (addr >> BLOCK_SHIFT) - range.first_block()
}

#[cfg(test)]
mod tests {
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
        let now = [range(100, 1 << 30), small];
        let t = p.translate(&now).unwrap().unwrap();
        assert_eq!(t.blocks, [103, 104, 105, 900, 105, 100, 101]);
        // The 4 KiB range's block is never whole: never migrated.
        assert_eq!(t.whole, [true, true, true, false, true, true, true]);
    }

    #[test]
    fn ranges_of_one_size_map_in_their_order_whatever_the_others_do() {
        let p = Plan {
            ranges: [4u64, 8, 4]
                .iter()
                .map(|&mb| PlanRange {
                    size: mb << 20,
                    misalign: 0,
                })
                .collect(),
            seq: vec![(0, 0), (1, 0), (2, 1)],
        };
        // The 8 MiB range now comes first by address.
        let now = [range(10, 8 << 20), range(20, 4 << 20), range(30, 4 << 20)];
        let t = p.translate(&now).unwrap().unwrap();
        assert_eq!(t.blocks, [20, 10, 31]);
        assert_eq!(same_sizes(&[1, 2], &[2, 2]), None);
        assert_eq!(same_sizes(&[1, 2, 1], &[1, 1, 2]), Some(vec![0, 2, 1]));
    }

    #[test]
    fn another_workload_is_refused_and_a_growing_one_waits() {
        let p = plan();
        // Not all allocations made yet (or not the same ones yet): wait.
        for now in [vec![range(100, 1 << 30)], vec![], vec![range(100, 1 << 29)]] {
            assert!(p.translate(&now).unwrap().is_none());
        }
        // More ranges or more bytes than the plan: refused, one line.
        for now in [
            vec![range(1, 4096), range(100, 1 << 30), range(900, 4096)],
            vec![range(100, (1 << 30) + (4 << 20))],
        ] {
            let e = p.translate(&now).unwrap_err();
            assert!(e.contains("another workload or size"), "{e}");
            assert!(!e.contains('\n'));
        }
    }
}
