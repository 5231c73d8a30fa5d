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

pub mod block;
pub mod block_table;
pub mod engine;
pub mod exec_table;
pub mod history;
pub mod layout;
pub mod ledger;
pub mod params;
pub mod pump;
pub mod recent;
pub mod window;

pub use block::{
    touched_blocks, whole_blocks, Block, ExecId, BLOCK_BYTES, BLOCK_SHIFT, NONE, RUN_BLOCKS,
    RUN_SHIFT,
};
pub use engine::{ChainState, Engine, EngineError, Prefetch, Stats, Victim};
pub use exec_table::NO_EXEC;
pub use params::{Mode, Param, ParamError, Params};
pub use pump::{Admit, Host, Limit, Pump, Pumped, Room, Why, DEFAULT_WATERMARK_PCT};
