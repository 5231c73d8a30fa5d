//! Block and execution-id types, the block size and the block rounding of
//! address ranges: the vocabulary every other part of the engine shares.

/// A 2 MB UM block number: a virtual address shifted right by [`BLOCK_SHIFT`].
pub type Block = u64;
/// An execution id: the DeepUM runtime's hash of a kernel launch.
pub type ExecId = u32;

/// log2 of the UM block size (2 MB), the driver's va_block granularity.
pub const BLOCK_SHIFT: u32 = 21;
/// Bytes per UM block.
pub const BLOCK_BYTES: u64 = 1 << BLOCK_SHIFT;
/// "No block" in tables and storage.
pub const NONE: u64 = u64::MAX;

/// log2 of the longest run of consecutive blocks that one block-table or
/// history entry describes: 16 blocks (32 MB).
pub const RUN_SHIFT: u32 = 4;
/// Blocks per run chunk: a run never crosses a multiple of this.
pub const RUN_BLOCKS: u64 = 1 << RUN_SHIFT;

/// The blocks wholly inside `[addr, addr + len)`: rounds inward, because a
/// block that is partly outside may hold other live data. Empty if the range
/// covers no whole block or overflows.
pub fn whole_blocks(addr: u64, len: u64) -> core::ops::Range<Block> {
    let Some(end) = addr.checked_add(len) else {
        return 0..0;
    };
    let first = addr.div_ceil(BLOCK_BYTES);
    let last = end >> BLOCK_SHIFT;
    if first >= last {
        0..0
    } else {
        first..last
    }
}

/// The blocks that `[addr, addr + len)` touches at all: rounds outward.
pub fn touched_blocks(addr: u64, len: u64) -> core::ops::Range<Block> {
    if len == 0 {
        return 0..0;
    }
    let end = addr.saturating_add(len - 1);
    (addr >> BLOCK_SHIFT)..(end >> BLOCK_SHIFT) + 1
}
