//! A workload turned into 2 MB blocks: what each kernel touches, which
//! blocks die after it and which come back to life at it. Computed once per
//! trace; every policy replays the same plan.

use crate::workload::{Range, Touch, Workload};
use prescient_core::{touched_blocks, Block, BLOCK_BYTES, BLOCK_SHIFT};
use std::collections::{HashMap, HashSet};

/// The driver's migration granule (its big page): 64 KiB.
pub const GRANULE_BYTES: u64 = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTouch {
    pub block: Block,
    /// Bytes of the block the kernel touches (all its operands together).
    pub bytes: u32,
    /// Which 64 KiB granules of the block it touches (bit i: bytes
    /// [i * 64 KiB, (i + 1) * 64 KiB)); the driver migrates in these.
    pub granules: u32,
    pub write: bool,
}

#[derive(Clone, Debug)]
pub struct KernelPlan {
    pub name: String,
    pub exec_id: u32,
    pub duration_s: f64,
    /// In access order, each block once.
    pub touches: Vec<BlockTouch>,
    /// Blocks whose every byte is dead after this kernel.
    pub dead_after: Vec<Block>,
    /// Blocks that were dead (or never used) and hold live data again from
    /// this kernel on.
    pub born: Vec<Block>,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub name: String,
    pub kernels: Vec<KernelPlan>,
    /// Blocks numbers are below this.
    pub blocks: usize,
    /// Blocks the CPU provides before each iteration (read before any kernel
    /// writes them, and not live across iterations: the input batch).
    pub host_inputs: Vec<Block>,
    /// Blocks read before written in the first iteration: populated on the
    /// host at the start (weights, inputs).
    pub host_initial: Vec<Block>,
    /// Distinct blocks touched in one iteration (the footprint).
    pub footprint_blocks: usize,
}

/// Highest address a trace may use: block state is kept in dense arrays.
pub const MAX_ADDRESS: u64 = 1 << 44;

impl Plan {
    /// Turns `w` into blocks, or refuses addresses beyond [`MAX_ADDRESS`].
    pub fn new(w: &Workload) -> anyhow::Result<Plan> {
        let limit = w.address_limit();
        if limit > MAX_ADDRESS {
            anyhow::bail!(
                "{}: addresses reach {limit:#x}, beyond the simulator's limit of {MAX_ADDRESS:#x} (16 TiB)",
                w.name
            );
        }
        let blocks = (limit >> BLOCK_SHIFT) as usize + 1;
        let mut life = BlockLife::new(blocks);
        let kernels = w
            .kernels
            .iter()
            .map(|k| {
                let (touches, born) = life.touch(&k.touches);
                KernelPlan {
                    name: k.name.clone(),
                    exec_id: k.exec_id,
                    duration_s: k.duration_ns as f64 * 1e-9,
                    touches,
                    dead_after: life.kill(&k.dead_after),
                    born,
                }
            })
            .collect();
        // Blocks still live at the end persist into the next iteration.
        let host_inputs = life
            .first_access_read
            .iter()
            .copied()
            .filter(|&b| life.live_bytes[b as usize] == 0)
            .collect();
        let footprint_blocks = life.seen.iter().filter(|&&s| s).count();
        Ok(Plan {
            name: w.name.clone(),
            kernels,
            blocks,
            host_inputs,
            host_initial: life.first_access_read,
            footprint_blocks,
        })
    }

    pub fn ideal_s(&self) -> f64 {
        self.kernels.iter().map(|k| k.duration_s).sum()
    }
}

/// Which bytes of each block are live while the plan walks the iteration.
struct BlockLife {
    /// Live bytes per block, from the ranges currently live.
    live_bytes: Vec<u64>,
    live: HashSet<Range>,
    /// Blocks touched so far.
    seen: Vec<bool>,
    /// Blocks whose first access is a read, in first-access order.
    first_access_read: Vec<Block>,
}

impl BlockLife {
    fn new(blocks: usize) -> Self {
        BlockLife {
            live_bytes: vec![0u64; blocks],
            live: HashSet::new(),
            seen: vec![false; blocks],
            first_access_read: Vec::new(),
        }
    }

    /// Records one kernel's operand touches; returns its block touches in
    /// access order (each block once) and the blocks that come to life.
    fn touch(&mut self, operands: &[Touch]) -> (Vec<BlockTouch>, Vec<Block>) {
        let mut touches: Vec<BlockTouch> = Vec::new();
        // Where each block already sits in `touches`: operands can share one.
        let mut index: HashMap<Block, usize> = HashMap::new();
        let mut born = Vec::new();
        for t in operands {
            let r = t.range;
            let newly_live = self.live.insert(r);
            for b in touched_blocks(r.addr, r.len) {
                let overlap = overlap(r, b);
                if newly_live {
                    if self.live_bytes[b as usize] == 0 {
                        born.push(b);
                    }
                    self.live_bytes[b as usize] += overlap;
                }
                if !self.seen[b as usize] {
                    self.seen[b as usize] = true;
                    if !t.write {
                        self.first_access_read.push(b);
                    }
                }
                match index.get(&b) {
                    Some(&i) => {
                        let x = &mut touches[i];
                        x.bytes = (x.bytes as u64 + overlap).min(BLOCK_BYTES) as u32;
                        x.granules |= granule_mask(r, b);
                        x.write |= t.write;
                    }
                    None => {
                        index.insert(b, touches.len());
                        touches.push(BlockTouch {
                            block: b,
                            bytes: overlap as u32,
                            granules: granule_mask(r, b),
                            write: t.write,
                        });
                    }
                }
            }
        }
        (touches, born)
    }

    /// Ends the life of `ranges`; returns the blocks left with no live byte.
    fn kill(&mut self, ranges: &[Range]) -> Vec<Block> {
        let mut dead_after = Vec::new();
        for r in ranges {
            if !self.live.remove(r) {
                continue;
            }
            for b in touched_blocks(r.addr, r.len) {
                let lb = &mut self.live_bytes[b as usize];
                *lb = lb.saturating_sub(overlap(*r, b));
                if *lb == 0 {
                    dead_after.push(b);
                }
            }
        }
        dead_after
    }
}

/// Bytes of block `b` inside range `r`.
fn overlap(r: Range, b: Block) -> u64 {
    let start = b << BLOCK_SHIFT;
    let end = start + BLOCK_BYTES;
    r.end().min(end).saturating_sub(r.addr.max(start))
}

/// The 64 KiB granules of block `b` that range `r` overlaps.
fn granule_mask(r: Range, b: Block) -> u32 {
    let start = b << BLOCK_SHIFT;
    let lo = r.addr.max(start) - start;
    let hi = r.end().min(start + BLOCK_BYTES).saturating_sub(start);
    if hi <= lo {
        return 0;
    }
    let (g0, g1) = (lo / GRANULE_BYTES, (hi - 1) / GRANULE_BYTES);
    // Bits g0..=g1; g1 - g0 is at most 31.
    (u32::MAX >> (31 - (g1 - g0))) << g0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Kernel, Touch};

    const MB: u64 = 1 << 20;

    fn k(touches: &[(u64, u64, bool)], dead: &[(u64, u64)]) -> Kernel {
        Kernel {
            name: "k".into(),
            exec_id: 0,
            duration_ns: 1000,
            touches: touches
                .iter()
                .map(|&(addr, len, write)| Touch {
                    range: Range { addr, len },
                    write,
                })
                .collect(),
            dead_after: dead
                .iter()
                .map(|&(addr, len)| Range { addr, len })
                .collect(),
        }
    }

    #[test]
    fn a_block_dies_only_when_all_its_tensors_do() {
        // Two 1 MB tensors share block 0; a 4 MB one spans blocks 1 and 2.
        let w = Workload {
            name: "w".into(),
            kernels: vec![
                k(
                    &[(0, MB, false), (MB, MB, true), (2 * MB, 4 * MB, true)],
                    &[(0, MB)],
                ),
                k(&[(MB, MB, false)], &[(MB, MB), (2 * MB, 4 * MB)]),
                k(&[(0, MB, true)], &[]),
            ],
        };
        let p = Plan::new(&w).unwrap();
        assert_eq!(p.kernels[0].touches.len(), 3);
        assert_eq!(p.kernels[0].touches[0].bytes as u64, 2 * MB);
        assert!(p.kernels[0].touches[0].write);
        assert_eq!(p.kernels[0].touches[0].granules, u32::MAX);
        // 1 MB of block 0 is its first 16 granules.
        assert_eq!(p.kernels[1].touches[0].granules, 0xffff_0000);
        assert!(p.kernels[0].dead_after.is_empty());
        assert_eq!(p.kernels[1].dead_after, vec![0, 1, 2]);
        assert_eq!(p.kernels[2].born, vec![0]);
        assert_eq!(p.host_initial, vec![0]);
        assert_eq!(p.footprint_blocks, 3);
    }
}
