//! The process's execution-id page as the host sees it: its mapping's
//! address, set once marker.rs has made it, and its words. A module of its
//! own so that the marks (marks/) can read what the daemon asks for
//! without depending on the launch path (marker.rs).

use prescient_uapi::execpage::{Page, PAGE_WORDS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Host address of the mapping (0: none yet).
pub(crate) static HOST: AtomicU64 = AtomicU64::new(0);

/// The page as atomic words, once mapped.
pub(crate) fn page() -> Option<Page<'static>> {
    let host = HOST.load(Ordering::Acquire);
    if host == 0 {
        return None;
    }
    // SAFETY: HOST is a live MAP_SHARED mapping of PAGE_BYTES, page-aligned,
    // never unmapped; AtomicU64 has u64's layout.
    let words = unsafe { std::slice::from_raw_parts(host as *const AtomicU64, PAGE_WORDS) };
    Page::new(words)
}

/// Should freed memory be marked dead? In auto mode only while a reader
/// asks for ids: prescientd asks while the job faults, and a job that has
/// stopped faulting (no pressure) gains nothing from dead marks but pays
/// a round trip for each alive mark that undoes one (a ResNet-50 step
/// under no budget went from 43 to 85 ms: BENCHMARKS-gpu.md run 55). In
/// exec-id mode always. Not sending a dead mark is always safe (marks/mod.rs
/// point 6); alive marks for dead marks already sent still go out.
pub(crate) fn dead_marks_wanted() -> bool {
    if !crate::config::get().marks_on_request {
        return true;
    }
    page().is_some_and(|p| p.ids_wanted())
}
