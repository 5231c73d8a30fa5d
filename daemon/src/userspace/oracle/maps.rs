//! A process's managed ranges, from /proc/PID/maps: every managed
//! allocation (cudaMallocManaged) is an mmap of the process's
//! /dev/nvidia-uvm VA-space fd (the driver's `uvm_mmap` creates the managed
//! va_range there), so its VMA names that device. The driver marks these
//! VMAs VM_MIXEDMAP | VM_DONTEXPAND, which the kernel never merges: one
//! line per allocation.

use prescient_core::BLOCK_SHIFT;
use std::io;

/// One managed range: `[start, end)` in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the byte address `addr` lies in the range.
    pub fn holds(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }

    /// The first 2 MB block the range touches.
    pub fn first_block(&self) -> u64 {
        self.start >> BLOCK_SHIFT
    }

    /// 2 MB blocks the range touches (partly or wholly).
    pub fn span_blocks(&self) -> u64 {
        ((self.end - 1) >> BLOCK_SHIFT) - self.first_block() + 1
    }

    /// Bytes the range has in common with `other` (0: none).
    pub fn overlap(&self, other: &Range) -> u64 {
        self.end
            .min(other.end)
            .saturating_sub(self.start.max(other.start))
    }

    /// Whether the whole 2 MB block `b` lies inside the range: only such
    /// blocks are migrated whole, so nothing outside the range moves.
    pub fn holds_block(&self, b: u64) -> bool {
        (b << BLOCK_SHIFT) >= self.start && ((b + 1) << BLOCK_SHIFT) <= self.end
    }

    /// Whether any whole 2 MB block lies inside the range.
    pub fn holds_whole_block(&self) -> bool {
        self.holds_block(self.start.div_ceil(1 << BLOCK_SHIFT))
    }
}

/// The managed ranges in the text of a /proc/PID/maps, by address.
pub fn parse(text: &str) -> Vec<Range> {
    let mut out: Vec<Range> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let span = f.next()?;
            // perms, offset, dev, inode, then the path.
            let path = f.nth(4)?;
            if path != "/dev/nvidia-uvm" {
                return None;
            }
            let (a, b) = span.split_once('-')?;
            let start = u64::from_str_radix(a, 16).ok()?;
            let end = u64::from_str_radix(b, 16).ok()?;
            (end > start).then_some(Range { start, end })
        })
        .collect();
    out.sort_unstable();
    out
}

/// The managed ranges of process `pid` now.
pub fn read(pid: i32) -> io::Result<Vec<Range>> {
    Ok(parse(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

/// The range of `ranges` (sorted) holding byte address `addr`.
pub fn find(ranges: &[Range], addr: u64) -> Option<usize> {
    let i = ranges.partition_point(|r| r.start <= addr);
    (i > 0 && ranges[i - 1].holds(addr)).then(|| i - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines in the form fs/proc/task_mmu.c prints them (show_map_vma):
    // start-end perms pgoff major:minor inode, then the path.
    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/umbench
7f0000000000-7f0040000000 rw-s 7f0000000000 00:05 1042                       /dev/nvidia-uvm
7f0040000000-7f0040200000 rw-s 7f0040000000 00:05 1042                       /dev/nvidia-uvm
7f0100000000-7f0100001000 rw-s 00000000 00:05 1040                       /dev/nvidiactl
7eff00000000-7eff10000000 rw-s 7eff00000000 00:05 1042                       /dev/nvidia-uvm
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7f0200000000-7f0200001000 rw-p 00000000 00:00 0
";

    #[test]
    fn only_nvidia_uvm_mappings_by_address() {
        let r = parse(MAPS);
        let starts: Vec<u64> = r.iter().map(|r| r.start).collect();
        assert_eq!(starts, [0x7eff00000000, 0x7f0000000000, 0x7f0040000000]);
        assert_eq!(r[1].size(), 1 << 30);
        assert_eq!(r[1].span_blocks(), 512);
        assert_eq!(find(&r, 0x7f0040000000 + 5), Some(2));
        assert_eq!(find(&r, 0x7f0040200000), None);
        assert_eq!(find(&r, 0x7eff00000000 - 1), None);
    }

    #[test]
    fn blocks_partly_outside_a_range_are_not_whole() {
        // 4 KiB at an odd place, and 3 MiB from a 1 MiB offset.
        let small = Range {
            start: 0x7f00_0020_1000,
            end: 0x7f00_0020_2000,
        };
        assert_eq!(small.span_blocks(), 1);
        assert!(!small.holds_block(small.first_block()));
        let r = Range {
            start: (10 << BLOCK_SHIFT) + (1 << 20),
            end: (10 << BLOCK_SHIFT) + (4 << 20),
        };
        assert_eq!(r.span_blocks(), 2);
        assert!(!r.holds_block(10));
        assert!(r.holds_block(11));
        assert!(!r.holds_block(12));
    }

    /// The bytes two ranges share: a part, all of the smaller, none when
    /// they only touch or lie apart.
    #[test]
    fn overlap_counts_the_bytes_in_common() {
        let r = |start, end| Range { start, end };
        assert_eq!(r(100, 200).overlap(&r(150, 400)), 50);
        assert_eq!(r(150, 400).overlap(&r(100, 200)), 50);
        assert_eq!(r(100, 200).overlap(&r(120, 130)), 10);
        assert_eq!(r(100, 200).overlap(&r(200, 300)), 0);
        assert_eq!(r(100, 200).overlap(&r(300, 400)), 0);
    }
}
