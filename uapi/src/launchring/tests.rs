//! The ring's protocol: wrap-around, a full ring, torn and never-committed
//! records, a reader that falls behind, and many writers at once.

use super::*;
use proptest::prelude::*;
use std::vec::Vec;

fn ring_words() -> Vec<AtomicU64> {
    (0..RING_WORDS).map(|_| AtomicU64::new(0)).collect()
}

/// The record the test writes for position `k` of its own count: its
/// content names `k`, so a delivered record says which write it was
/// (every other one has guessed ranges, so the flag makes the trip too).
fn record_for(k: u64) -> Record {
    let mut r = Record {
        id: k.wrapping_mul(0x1000_0000_01b3) | 1,
        stream: 0x7000 + (k % 3),
        guessed: k % 2 == 1,
        ..Record::default()
    };
    for i in 0..(k % (MAX_RANGES as u64 + 3)) {
        r.push(k * 64 + i * 2, 1 + i % 5);
    }
    r
}

/// What one step of a test does.
#[derive(Clone, Debug)]
enum Op {
    /// Writers push this many records.
    Push(u16),
    /// A writer claims a position and stops mid-record, for good.
    Stall,
    /// A record is committed, then one of its words is overwritten (a
    /// later writer of the slot, or a stray store).
    Tear(u8),
    /// The reader reads up to this many records.
    Poll(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u16..3000).prop_map(Op::Push),
        1 => Just(Op::Stall),
        1 => (0u8..RECORD_WORDS as u8).prop_map(Op::Tear),
        4 => (1u16..3000).prop_map(Op::Poll),
    ]
}

/// The writers' side of a test: what was pushed at each position.
#[derive(Default)]
struct Written {
    /// Intact records by position.
    intact: std::collections::BTreeMap<u64, Record>,
    by_id: std::collections::HashMap<u64, u64>,
    /// Positions stalled or torn: never to be delivered.
    bad: u64,
    /// Pushes refused on a full ring.
    dropped: u64,
    next: u64,
}

impl Written {
    /// Where `r` was written intact (u64::MAX: nowhere).
    fn position_of(&self, r: &Record) -> u64 {
        match self.by_id.get(&r.id) {
            Some(&p) if self.intact.get(&p) == Some(r) => p,
            _ => u64::MAX,
        }
    }

    fn apply(&mut self, ring: &Ring<'_>, w: &[AtomicU64], op: &Op) {
        match *op {
            Op::Push(n) => {
                for _ in 0..n {
                    let r = record_for(self.next);
                    self.next += 1;
                    match ring.claim() {
                        Some(pos) => {
                            ring.write(pos, &r);
                            self.intact.insert(pos, r);
                            self.by_id.insert(r.id, pos);
                        }
                        None => self.dropped += 1,
                    }
                }
            }
            Op::Stall => {
                if let Some(pos) = ring.claim() {
                    // What `write` does before its commit, then nothing.
                    w[record_word(pos)].store(2 * pos + 1, Ordering::Relaxed);
                    w[record_word(pos) + 2].store(0xdead, Ordering::Relaxed);
                    self.bad += 1;
                } else {
                    self.dropped += 1;
                }
            }
            Op::Tear(word) => {
                if let Some(pos) = ring.claim() {
                    let r = record_for(self.next);
                    self.next += 1;
                    ring.write(pos, &r);
                    // Any word the record uses but the sequence (a changed
                    // sequence reads as not committed: the stall case).
                    let used = RECORD_HEAD - 1 + r.n;
                    let i = record_word(pos) + 1 + usize::from(word) % used;
                    w[i].fetch_xor(1 << (word % 64), Ordering::Relaxed);
                    self.bad += 1;
                } else {
                    self.dropped += 1;
                }
            }
            Op::Poll(_) => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the writers and the reader do, in any interleaving of
    /// whole operations: the reader delivers only intact records, each
    /// once, in position order; a push is refused only on a full ring;
    /// and once the reader has drained, every intact record was delivered
    /// and every bad position skipped.
    #[test]
    fn the_reader_gets_every_intact_record_once_in_order(ops in proptest::collection::vec(op(), 1..60)) {
        let w = ring_words();
        let ring = Ring::new(&w).unwrap();
        ring.init(42);
        let mut reader = Reader::attach(&ring);
        let mut written = Written::default();
        let mut got: Vec<(u64, Record)> = Vec::new();
        for op in &ops {
            let before = written.dropped;
            let backlog = reader.behind(&ring);
            written.apply(&ring, &w, op);
            if written.dropped > before {
                // Refused only when the writer found CAPACITY unread.
                prop_assert!(backlog + 3000 >= CAPACITY as u64);
                prop_assert_eq!(reader.behind(&ring), CAPACITY as u64);
            }
            if let Op::Poll(n) = *op {
                reader.poll(&ring, usize::from(n), |r| {
                    got.push((written.position_of(&r), r));
                });
            }
            // Positions are delivered in order; records as they were written.
            for (p, r) in &got {
                prop_assert!(*p != u64::MAX, "a record nobody wrote: {:?}", r);
            }
            prop_assert!(got.windows(2).all(|x| x[0].0 < x[1].0), "out of order or twice");
            prop_assert!(reader.behind(&ring) <= CAPACITY as u64);
        }
        // Drain: enough polls to give up on every stalled position.
        for _ in 0..(STUCK_POLLS as u64 + 1) * (written.bad + 1) {
            reader.poll(&ring, CAPACITY, |r| {
                got.push((written.position_of(&r), r));
            });
            if reader.behind(&ring) == 0 {
                break;
            }
        }
        prop_assert_eq!(reader.behind(&ring), 0);
        prop_assert!(got.iter().all(|(p, _)| *p != u64::MAX), "a torn record delivered");
        prop_assert!(got.windows(2).all(|x| x[0].0 < x[1].0));
        prop_assert_eq!(got.len() as u64, written.intact.len() as u64);
        prop_assert_eq!(reader.skipped, written.bad);
        prop_assert_eq!(reader.read + reader.skipped, written.intact.len() as u64 + written.bad);
        prop_assert_eq!(ring.counts().0, written.dropped);
    }

    /// Ranges pack and unpack, and a record refuses what does not fit.
    #[test]
    fn ranges_round_trip(first in 0u64..=u32::MAX as u64, count in 1u64..=u32::MAX as u64) {
        prop_assert_eq!(pack(first, count).map(unpack), Some((first, count)));
        prop_assert_eq!(pack(first + (1 << 32), count), None);
        prop_assert_eq!(pack(first, 0), None);
    }
}

#[test]
fn a_full_record_is_truncated_and_the_format_is_checked() {
    let mut r = Record::default();
    for i in 0..MAX_RANGES as u64 {
        assert!(r.push(i * 10, 1));
    }
    assert!(!r.truncated);
    assert!(!r.push(1000, 1));
    assert!(r.truncated);
    assert_eq!(r.blocks().count(), MAX_RANGES);
    let w = ring_words();
    let ring = Ring::new(&w).unwrap();
    assert!(!ring.is_valid(), "not initialised");
    ring.init(9);
    assert!(ring.is_valid());
    assert_eq!(ring.writer_pid(), 9);
    assert!(!ring.wanted());
    ring.want(true);
    assert!(ring.wanted());
    w[W_RECORD_WORDS].store(16, Ordering::Relaxed);
    assert!(!ring.is_valid(), "another record size");
    assert!(Ring::new(&w[1..]).is_none());
}

/// A reader that attaches late starts at the head: what was written for a
/// reader before it is not the GPU's future.
#[test]
fn a_late_reader_starts_at_the_head() {
    let w = ring_words();
    let ring = Ring::new(&w).unwrap();
    ring.init(1);
    for k in 0..10 {
        assert!(ring.push(&record_for(k)));
    }
    let mut r = Reader::attach(&ring);
    assert_eq!(r.poll(&ring, 100, |_| panic!("old record")), 0);
    ring.push(&record_for(10));
    let mut got = Vec::new();
    assert_eq!(r.poll(&ring, 100, |x| got.push(x)), 1);
    assert_eq!(got, [record_for(10)]);
}

/// Four threads launch at once while the reader reads (and sometimes
/// falls behind): each thread's records arrive intact and in its order,
/// and every record is read or counted as dropped.
#[test]
fn many_writers_one_reader() {
    const PER: u64 = 20_000;
    let w = ring_words();
    let ring = Ring::new(&w).unwrap();
    ring.init(1);
    let mut reader = Reader::attach(&ring);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut got: Vec<Record> = Vec::new();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (ring, done) = (&ring, &done);
            s.spawn(move || {
                for k in 0..PER {
                    let mut r = record_for(k);
                    r.stream = t;
                    r.id = k;
                    ring.push(&r);
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
        let mut polls = 0u64;
        loop {
            let finished = done.load(Ordering::Acquire) == 4;
            polls += 1;
            // Now and then the reader is late.
            let max = if polls.is_multiple_of(7) { 1 } else { 512 };
            reader.poll(&ring, max, |r| got.push(r));
            if finished && reader.behind(&ring) == 0 {
                break;
            }
        }
    });
    let mut last = [None::<u64>; 4];
    for r in &got {
        let t = r.stream as usize;
        let want = {
            let mut x = record_for(r.id);
            x.stream = r.stream;
            x.id = r.id;
            x
        };
        assert_eq!(*r, want, "a record changed on its way");
        assert!(last[t].is_none_or(|l| l < r.id), "thread {t} out of order");
        last[t] = Some(r.id);
    }
    // A writer preempted between its claim and its commit for longer than
    // the reader's patience is skipped (its record is lost, counted).
    let (dropped, committed) = ring.counts();
    assert_eq!(committed, got.len() as u64 + reader.skipped);
    assert_eq!(committed + dropped, 4 * PER);
}

/// A first word names a launch ring of some format, or nothing.
#[test]
fn the_format_is_read_from_the_magic() {
    assert_eq!(format_of(MAGIC), Some(3));
    assert_eq!(FORMAT, 3);
    assert_eq!(format_of(MAGIC_NAME | 2), Some(2));
    assert_eq!(format_of(0), None, "not initialised");
    assert_eq!(format_of(crate::execpage::MAGIC), None, "the page's");
}
