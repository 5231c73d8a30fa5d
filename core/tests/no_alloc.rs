//! The engine's event and command paths never allocate: a counting global
//! allocator sees zero allocations while faults, kernel starts, prefetch
//! and victim requests run on storage allocated beforehand.

use prescient_core::{Engine, Mode, Params, Prefetch, Victim};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn exercise(mode: Mode, gpu_blocks: u32) -> u64 {
    let p = Params {
        mode,
        ..Params::for_gpu(gpu_blocks)
    };
    let mut e = Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
    let mut pf = [Prefetch::default(); 64];
    let mut victims = [Victim::default(); 16];
    let before = ALLOCS.load(Ordering::SeqCst);
    for iter in 0..3u64 {
        for k in 0..200u32 {
            e.kernel_start(k);
            for b in 0..40u64 {
                let block = (k as u64) * 64 + b + iter % 2;
                e.fault(block);
                e.migrated_in(block);
                if b % 8 == 0 {
                    e.mark_dead(block);
                }
            }
            while e.prefetches(&mut pf) > 0 {}
            let n = e.victims(&mut victims);
            for v in &victims[..n] {
                e.evicted(v.block);
            }
            e.demand_evicted(k as u64);
        }
    }
    ALLOCS.load(Ordering::SeqCst) - before
}

#[test]
fn engine_paths_do_not_allocate() {
    // The counter works: a Vec allocates.
    let before = ALLOCS.load(Ordering::SeqCst);
    let v = std::hint::black_box(vec![1u8; 16]);
    assert!(ALLOCS.load(Ordering::SeqCst) > before);
    drop(v);
    assert_eq!(exercise(Mode::ExecId, 4096), 0);
    assert_eq!(exercise(Mode::Transparent, 4096), 0);
    // A memory small enough for transparent mode's plan follower.
    assert_eq!(exercise(Mode::Transparent, 24), 0);
}
