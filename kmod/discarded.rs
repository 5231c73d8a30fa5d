// SPDX-License-Identifier: GPL-2.0
//! The blocks of one space that the module discarded and nothing has
//! brought back since: MARK_ALIVE populates them on the GPU before it
//! returns.
//!
//! Why: the module discards dead victims with UVM_DISCARD_FLAGS_UNMAP.
//! When the job writes such a block again, the driver brings the faulting
//! pages in but maps the pages around them that are still discarded
//! read-only ("discarded pages are only mapped as RO on read faults",
//! uvm_va_block.c), so each of those pages then takes a write fault of its
//! own, one replay at a time: 19-35k faults a repetition and 1.23x slower
//! steps for a 220M-parameter LM on an H100 (BENCHMARKS-gpu.md, runs
//! 155-160, measured with prescientd's user-space backend, which has the
//! same populate). UVM_MIGRATE of a discarded block to the GPU instead
//! allocates its pages there writable, with no copy.
//!
//! The record is advice, never needed for correctness: a block missing
//! from it (the record was full, or the memory for its node was not there)
//! only faults as before; a stale entry (a block the job wrote on the CPU
//! since) costs one migration of live data, which UVM_MIGRATE never loses.
//! It is bounded ([`MAX_BLOCKS`] per space) and lives under the State mutex
//! with its space.

use kernel::prelude::*;
use kernel::rbtree::RBTree;

use crate::Block;

/// Blocks recorded per space at most (32 GiB of discarded memory): a node
/// is a small allocation, so a space costs at most about 1 MiB.
const MAX_BLOCKS: usize = 16384;

/// The discarded blocks of one space, in address order.
pub(crate) struct Discarded {
    blocks: RBTree<Block, ()>,
    len: usize,
}

impl Discarded {
    /// An empty record.
    pub(crate) fn new() -> Self {
        Discarded {
            blocks: RBTree::new(),
            len: 0,
        }
    }

    /// Records that `block` was discarded. Not recorded when the record is
    /// full or no memory is there for the node (the block then faults as
    /// it did before the record existed).
    pub(crate) fn insert(&mut self, block: Block) {
        if self.len >= MAX_BLOCKS || self.blocks.get(&block).is_some() {
            return;
        }
        if let Ok(None) = self.blocks.try_create_and_insert(block, (), GFP_KERNEL) {
            self.len += 1;
        }
    }

    /// Takes `block` out of the record; true if it was there.
    pub(crate) fn take(&mut self, block: Block) -> bool {
        let found = self.blocks.remove(&block).is_some();
        if found {
            self.len -= 1;
        }
        found
    }
}
