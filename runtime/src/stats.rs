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
/// Fresh managed allocations prefetched to the GPU, and their bytes
/// (alloc.rs, without a budget).
pub static PLACED: AtomicU64 = AtomicU64::new(0);
pub static PLACED_BYTES: AtomicU64 = AtomicU64::new(0);
/// CPU time the launch wrapper spent hashing an id, and enqueueing its
/// write, in ns (counted with PRESCIENT_RUNTIME_LOG=1 only).
pub static HASH_NS: AtomicU64 = AtomicU64::new(0);
pub static MARK_NS: AtomicU64 = AtomicU64::new(0);

/// Adds one.
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds a duration in ns.
pub fn add_ns(c: &AtomicU64, d: std::time::Duration) {
    c.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
}

/// The counters as one line.
pub fn line() -> String {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    format!(
        "lookups_wrapped={} managed_allocs={} managed_bytes_live={} launches={} marked={} unmarked={} \
placed={} placed_bytes={} hash_ns={} mark_ns={} param_info_refused={} param_info_first_rc={} param_info_kernel={}",
        g(&WRAPPED_LOOKUPS),
        g(&MANAGED_ALLOCS),
        g(&MANAGED_BYTES),
        g(&LAUNCHES),
        g(&MARKED),
        g(&UNMARKED),
        g(&PLACED),
        g(&PLACED_BYTES),
        g(&HASH_NS),
        g(&MARK_NS),
        g(&crate::params::REFUSED),
        g(&crate::params::FIRST_REFUSAL),
        g(&crate::params::KERNEL_ANSWERED)
    )
}

/// Ids kept for PRESCIENT_ID_LOG at most (32 MB).
pub const MAX_LOGGED_IDS: usize = 1 << 22;

static ID_LOG: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// Keeps a launch's id for the id log.
#[cold]
pub fn log_id(id: u64) {
    let mut v = ID_LOG.lock().unwrap_or_else(|e| e.into_inner());
    if v.len() < MAX_LOGGED_IDS {
        v.push(id & prescient_uapi::execpage::ID_MASK);
    }
}

/// Says once what is in force (with PRESCIENT_RUNTIME_LOG=1) and arranges
/// for the counters to be printed at exit.
#[cold]
pub fn announce() {
    let c = crate::config::get();
    if !c.log && c.id_log.is_none() {
        return;
    }
    if c.log {
        eprintln!(
            "prescient-runtime: pid {}: device allocations managed; budget {}; execution ids {}",
            std::process::id(),
            c.budget
                .map_or("none".to_string(), |b| format!("{b} bytes")),
            if c.marks { "on" } else { "off" }
        );
    }
    extern "C" fn at_exit() {
        print();
    }
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(at_exit) };
}

/// Prints the counters on stderr (with PRESCIENT_RUNTIME_LOG=1) and writes
/// the id log (with PRESCIENT_ID_LOG=PATH; PATH.PID).
#[cold]
pub fn print() {
    let c = crate::config::get();
    if c.log {
        eprintln!("prescient-runtime: pid {}: {}", std::process::id(), line());
        if let Some(m) = crate::marks::line() {
            eprintln!("prescient-runtime: pid {}: {m}", std::process::id());
        }
        if let Some(f) = crate::footprint::line() {
            eprintln!("prescient-runtime: pid {}: {f}", std::process::id());
        }
    }
    if let Some(path) = &c.id_log {
        let v = ID_LOG.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = v.iter().flat_map(|id| id.to_le_bytes()).collect();
        let path = format!("{path}.{}", std::process::id());
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("prescient-runtime: {path}: {e}");
        }
    }
}
