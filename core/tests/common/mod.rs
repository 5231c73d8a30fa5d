//! Fixtures the engine's integration tests share.

use prescient_core::{ChainState, Engine, Mode, Params, Prefetch};

/// Small tables in `mode`: 64 rows, a 256-block ledger, a 128-block window.
pub fn small(mode: Mode) -> Params {
    Params {
        rows: 64,
        assoc: 2,
        succs: 4,
        lookahead: 2,
        max_tables: 16,
        exec_ids: 64,
        exec_records: 4,
        max_resident_blocks: 256,
        window_blocks: 128,
        free_min: 0,
        free_max: 64,
        mode,
    }
}

/// Drains the chain: every prefetch until it stops running.
pub fn drain(e: &mut Engine<Vec<u64>>) -> Vec<Prefetch> {
    let mut all = Vec::new();
    let mut buf = [Prefetch::default(); 8];
    for _ in 0..10_000 {
        let n = e.prefetches(&mut buf);
        all.extend_from_slice(&buf[..n]);
        if n == 0 && e.chain_state() != ChainState::Running {
            return all;
        }
    }
    panic!("chain did not stop");
}
