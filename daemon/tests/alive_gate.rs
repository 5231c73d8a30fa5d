//! The alive gate under concurrency: clients that mark blocks dead and
//! alive as an allocator does, and a backend that applies the marks and
//! "discards" every block its engine has dead whenever it likes, through
//! the gate as discard.rs does. The protocol's promise (marks.rs): once an
//! alive mark is answered, no discard of its blocks is in flight or
//! starts, so a block a client uses is never discarded.
#![allow(clippy::single_range_in_vec_init)] // one block per mark

use prescientd::userspace::marks::{self, Owner};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENTS: u64 = 4;
const BLOCKS_EACH: u64 = 8;

/// One client: each of its blocks in turn is used (after its alive mark's
/// answer) and freed (its use over before the dead mark goes out).
fn client(
    i: u64,
    tx: marks::Sender,
    in_use: Arc<Vec<AtomicBool>>,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
) {
    let owner = Arc::new(Owner::default());
    let blocks = i * BLOCKS_EACH..(i + 1) * BLOCKS_EACH;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let b = blocks.start + n % BLOCKS_EACH;
        n += 1;
        // Hand the block out: only once the daemon answered. Every third
        // alive mark brings nothing back (`no_populate`): it must hold the
        // block out of discards all the same.
        let populate = !n.is_multiple_of(3);
        loop {
            match marks::send(&tx, &owner, false, vec![b..b + 1], populate) {
                Ok(_) => break,
                Err(marks::SendError::Busy(_)) => std::thread::yield_now(),
                Err(marks::SendError::Gone) => return,
            }
        }
        in_use[b as usize].store(true, Ordering::SeqCst);
        std::thread::yield_now();
        // Free it: the use is over before the dead mark is sent.
        in_use[b as usize].store(false, Ordering::SeqCst);
        while let Err(marks::SendError::Busy(_)) =
            marks::send(&tx, &owner, true, vec![b..b + 1], true)
        {
            std::thread::yield_now();
        }
        rounds.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn no_block_in_use_is_ever_discarded() {
    let (tx, rx) = marks::channel();
    let total = (CLIENTS * BLOCKS_EACH) as usize;
    let in_use: Arc<Vec<AtomicBool>> =
        Arc::new((0..total).map(|_| AtomicBool::new(false)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (tx, u, s, r) = (tx.clone(), in_use.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || client(i, tx, u, s, r))
        })
        .collect();
    drop(tx);
    // The backend: the engine's dead set, marks applied in order, and
    // discards of whatever is dead and not held, under the gate.
    let mut dead: HashSet<u64> = HashSet::new();
    let (mut discarded, mut held) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_millis(700);
    while Instant::now() < end {
        for _ in 0..4 {
            let Some(m) = rx.next() else { break };
            for r in &m.blocks {
                for b in r.clone() {
                    if m.dead {
                        dead.insert(b);
                    } else {
                        dead.remove(&b);
                    }
                }
            }
            if let Some(id) = m.gate {
                rx.gate().close(id);
            }
        }
        let guard = rx.gate().guard();
        for &b in &dead {
            if guard.holds(b) {
                held += 1;
                continue;
            }
            // The "UVM_DISCARD": the block must not be in use.
            assert!(
                !in_use[b as usize].load(Ordering::SeqCst),
                "block {b} discarded while in use"
            );
            discarded += 1;
        }
        drop(guard);
    }
    stop.store(true, Ordering::SeqCst);
    // Drain so that no client waits on a full queue, then let them end.
    let drain_until = Instant::now() + Duration::from_secs(5);
    while clients.iter().any(|c| !c.is_finished()) && Instant::now() < drain_until {
        while let Some(m) = rx.next() {
            if let Some(id) = m.gate {
                rx.gate().close(id);
            }
        }
        std::thread::yield_now();
    }
    for c in clients {
        c.join().unwrap();
    }
    let rounds = rounds.load(Ordering::Relaxed);
    assert!(rounds > 100, "the clients made progress: {rounds} rounds");
    assert!(discarded > 0, "the backend discarded dead blocks");
    eprintln!("{rounds} rounds, {discarded} discards, {held} blocks held by the gate");
}
