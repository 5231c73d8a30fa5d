//! The runtime's counters: what it changed and what it marked, printed at
//! exit with PRESCIENT_RUNTIME_LOG=1 (the GPU measurements read them).

use std::sync::atomic::{AtomicU64, Ordering};

pub static WRAPPED_LOOKUPS: AtomicU64 = AtomicU64::new(0);
pub static MANAGED_ALLOCS: AtomicU64 = AtomicU64::new(0);
pub static MANAGED_BYTES: AtomicU64 = AtomicU64::new(0);
pub static LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub static MARKED: AtomicU64 = AtomicU64::new(0);
/// Launches not marked: the stream was capturing before the page was
/// registered, or the driver refused the write.
pub static UNMARKED: AtomicU64 = AtomicU64::new(0);

/// Adds one.
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The counters as one line.
pub fn line() -> String {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    format!(
        "lookups_wrapped={} managed_allocs={} managed_bytes_live={} launches={} marked={} unmarked={}",
        g(&WRAPPED_LOOKUPS),
        g(&MANAGED_ALLOCS),
        g(&MANAGED_BYTES),
        g(&LAUNCHES),
        g(&MARKED),
        g(&UNMARKED)
    )
}

/// Prints the counters on stderr.
#[cold]
pub fn print() {
    eprintln!("prescient-runtime: pid {}: {}", std::process::id(), line());
}
