//! The recent-victim table: which blocks pre-eviction chose lately, so that a
//! later fault or offer of one of them can be told apart as a regret.
//!
//! Direct mapped over slots of [`RECENT_VICTIM_WORDS`] words,
//! `[block, victim count when it was chosen]`: a later victim in the same
//! slot forgets the earlier one. A slot's block is `NONE` when empty.

use crate::block::{Block, NONE};
use crate::window::hash_block;

/// Words per slot of the recent-victims table: the block, and the engine's
/// victim count when it was chosen.
pub const RECENT_VICTIM_WORDS: usize = 2;

/// The first word of `b`'s slot in `table`.
fn slot(table: &[u64], b: Block) -> usize {
    let n = table.len() / RECENT_VICTIM_WORDS;
    RECENT_VICTIM_WORDS * hash_block(b, n - 1)
}

/// Remembers `b` as the victim chosen after `count` others.
pub fn note(table: &mut [u64], b: Block, count: u64) {
    let i = slot(table, b);
    table[i] = b;
    table[i + 1] = count;
}

/// If `b` is a remembered victim: how many victims were chosen after it,
/// `victims` being the count now.
pub fn age(table: &[u64], b: Block, victims: u64) -> Option<u64> {
    let i = slot(table, b);
    (table[i] == b).then(|| victims.saturating_sub(table[i + 1]))
}

/// [`age`], and forgets `b`.
pub fn take(table: &mut [u64], b: Block, victims: u64) -> Option<u64> {
    let age = age(table, b, victims)?;
    let i = slot(table, b);
    table[i] = NONE;
    Some(age)
}
