//! Launch footprints: before each kernel launch, while prescientd asks
//! for them, the runtime publishes the launch's execution id, its stream
//! and the managed memory its pointer arguments point into, in launch
//! order, into the launch ring (prescient_uapi::launchring). The GPU runs
//! the launches later (the CPU of a job slowed by paging runs far ahead),
//! so the daemon knows the kernels to come and their blocks, and which of
//! them the GPU is on (the execution-id page).
//!
//! Cost and safety: nothing is scanned while no reader asks (one load of
//! the ring's control word per launch); a launch never waits: the
//! extents are read with a try-lock (an allocation under way: no
//! footprint) and a full ring drops the record (counted in the ring).
//! The arguments are only read, never changed.
//!
//! - scan.rs: the argument words (struct parameters included);
//! - extents.rs: which managed bytes a word points into;
//! - ring.rs: the memfd.

pub mod extents;
pub mod ring;
pub mod scan;

use crate::marks::blocks::BLOCK_SHIFT;
use prescient_uapi::launchring::{Record, Ring};
use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinct extents a launch records at most before merging (bounds the
/// work per launch; a foreach launch past it is truncated): Adam's foreach
/// launches point at four lists of up to 110 tensors, 440 pointers.
const MAX_EXTENTS: usize = 1024;

/// The blocks of the extents in `words`, merged where they touch, as
/// `r`'s ranges (`r.truncated` when some were left out, `r.guessed` when
/// some pointer's extent is a capped guess: extents.rs).
pub fn blocks_of(ex: &extents::Extents, words: &[u64], unknown_cap: u64, r: &mut Record) {
    let mut spans: Vec<Range<u64>> = Vec::with_capacity(words.len().min(MAX_EXTENTS));
    for &w in words {
        if spans.len() == MAX_EXTENTS {
            r.truncated = true;
            break;
        }
        if let Some((e, basis)) = ex.extent(w, unknown_cap) {
            let counter = match basis {
                extents::Basis::Live => &PTRS_LIVE,
                extents::Basis::Own => &PTRS_OWN,
                extents::Basis::Guess => &PTRS_UNKNOWN,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            r.guessed |= basis == extents::Basis::Guess;
            spans.push(e.start >> BLOCK_SHIFT..((e.end - 1) >> BLOCK_SHIFT) + 1);
        }
    }
    spans.sort_unstable_by_key(|s| s.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(spans.len());
    for s in spans {
        match merged.last_mut() {
            Some(m) if s.start <= m.end => m.end = m.end.max(s.end),
            _ => merged.push(s),
        }
    }
    for m in merged {
        r.push(m.start, m.end - m.start);
    }
}

/// A launch's argument words that may point into managed memory (read
/// once per launch: the id in pointer mode and the footprint share them).
#[derive(Default)]
pub struct PointerWords {
    pub words: Vec<u64>,
    /// Words were left out (scan.rs's cap, or sizes the driver refused).
    pub cut: bool,
}

/// The argument words of a launch within the managed range; `sizes`: its
/// function's parameter sizes ([`crate::params::with_param_sizes`], which
/// the caller looks up once for the id and the footprint).
///
/// # Safety
/// `params` and `extra` are the launch's own, valid as the driver requires.
pub unsafe fn pointer_words(
    sizes: Option<&[u32]>,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> PointerWords {
    let mut words = Vec::new();
    // SAFETY: the caller's promise.
    let cut = unsafe {
        scan::words(sizes, params, extra, |w| {
            if extents::maybe_managed(w) {
                words.push(w);
            }
        })
    };
    PointerWords { words, cut }
}

/// The ring, while a reader asks for footprints (one load when none does).
pub fn asked() -> Option<Ring<'static>> {
    ring::ring().filter(|r| r.wanted())
}

/// Publishes one launch into `ring` (one [`asked`] gave): its encoded id,
/// its stream's slot key and its footprint, from its pointer words.
pub fn publish(ring: &Ring<'_>, id: u64, stream_key: u64, ptrs: &PointerWords) {
    // The job's host advice first: the daemon reads it before it places
    // this launch's blocks.
    crate::advice::publish(ring);
    let mut r = Record {
        id: prescient_uapi::execpage::encode(id),
        stream: stream_key,
        ..Record::default()
    };
    r.truncated = ptrs.cut;
    let cap = crate::config::get().footprint_unknown_cap;
    let words = &ptrs.words;
    if !words.is_empty() && extents::with(|ex| blocks_of(ex, words, cap, &mut r)).is_none() {
        r.truncated = true;
    }
    let blocks: u64 = r.blocks().map(|(_, n)| n).sum();
    BLOCKS.fetch_add(blocks, Ordering::Relaxed);
    (if ring.push(&r) { &RECORDS } else { &DROPPED }).fetch_add(1, Ordering::Relaxed);
}

/// Records written and dropped (full ring), pointer words that fell in a
/// live block, in the job's own allocation, or only in a managed
/// allocation (a guess), and blocks recorded.
pub static RECORDS: AtomicU64 = AtomicU64::new(0);
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
pub static PTRS_LIVE: AtomicU64 = AtomicU64::new(0);
pub static PTRS_OWN: AtomicU64 = AtomicU64::new(0);
pub static PTRS_UNKNOWN: AtomicU64 = AtomicU64::new(0);
pub static BLOCKS: AtomicU64 = AtomicU64::new(0);

/// The counters, for the runtime's exit line (None: nothing recorded).
pub fn line() -> Option<String> {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    (g(&RECORDS) + g(&DROPPED) > 0).then(|| {
        format!(
            "footprints: records={} dropped={} ptrs_live={} ptrs_own={} ptrs_unknown={} blocks={}",
            g(&RECORDS),
            g(&DROPPED),
            g(&PTRS_LIVE),
            g(&PTRS_OWN),
            g(&PTRS_UNKNOWN),
            g(&BLOCKS)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launchs_extents_become_merged_block_ranges() {
        let mut ex = extents::Extents::default();
        let base = 0x7f00_0000_0000u64;
        ex.managed.insert(base, 512 << 20);
        // Two tensors in one 2 MB block, one spanning two blocks, one far.
        ex.live.insert(base, 4096);
        ex.live.insert(base + 8192, 4096);
        ex.live.insert(base + (3 << 20), 2 << 20);
        ex.live.insert(base + (100 << 20), 1 << 20);
        let words = [
            base + 8192,
            base,
            base + (3 << 20) + 16,
            base + (100 << 20),
            7,
        ];
        let mut r = Record::default();
        blocks_of(&ex, &words, extents::UNKNOWN_CAP, &mut r);
        let b0 = base >> BLOCK_SHIFT;
        let got: Vec<(u64, u64)> = r.blocks().collect();
        // Blocks 0 and 1-2 touch: one range.
        assert_eq!(got, [(b0, 3), (b0 + 50, 1)]);
        assert!(!r.truncated);
    }
}
