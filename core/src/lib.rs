//! Prescient's prediction engine, after DeepUM (Jung et al., ASPLOS'23):
//! correlation prefetching of 2 MB Unified Memory blocks with an
//! execution-id table, per-kernel block correlation tables and chaining, and
//! pre-eviction of blocks no predicted kernel needs.
//!
//! The same source runs in the kernel module, the daemon's user-space backend
//! and the simulator. It never allocates: the caller hands in one slice of
//! `Params::storage_words()` words. It has no unsafe code.

#![no_std]
#![forbid(unsafe_code)]

pub mod block_table;
pub mod engine;
pub mod exec_table;
pub mod history;
pub mod ledger;
pub mod params;
pub mod pump;
pub mod sweep;

pub use engine::{
    ChainState, Engine, EngineError, Prefetch, Stats, TransparentPredictor, Victim, VictimOrder,
};
pub use exec_table::NO_EXEC;
pub use params::{Mode, Param, ParamError, Params};
pub use pump::{Admit, Host, Limit, Pump, Pumped, Why, DEFAULT_WATERMARK_PCT};

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
