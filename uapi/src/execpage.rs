//! The execution-id page: one 4 KiB page of shared memory in which a CUDA
//! process's runtime (prescient-runtime) publishes, per stream, the
//! execution id of the kernel that stream runs now, and from which the
//! backends (the daemon's user-space loop, or prescient.ko) attribute GPU
//! faults to kernels.
//!
//! The runtime creates the page (a memfd named [`MEMFD_NAME`], one per
//! process), maps it, registers it with the driver, and before every kernel launch enqueues a
//! stream-ordered 64-bit write (`cuStreamWriteValue64`) of the kernel's
//! encoded id into its stream's slot: the GPU writes the value when the
//! stream reaches the kernel, so the slot names the running kernel, not
//! the last one launched. The daemon finds the memfd among the process's
//! file descriptors by its name, takes a copy (pidfd_getfd), maps it and
//! reads it; with prescient.ko it hands that descriptor to the module
//! (SET_EXEC_PAGE), which pins the page and reads it at each fault of the
//! process's space and between faults.
//!
//! # Layout (64-bit little-endian words)
//! - word 0: [`MAGIC`] (the format version is part of it);
//! - word 1: the number of slots ([`SLOTS`]);
//! - word 2: the writer's pid (the runtime stores it when it maps the page);
//! - word 3: launches marked so far (host-side counter: wraps, only its
//!   change matters);
//! - word 4: control, written by the reader: bit 0 ([`WANT_IDS`]) asks
//!   the runtime for ids (in its `auto` mode it writes none without it, so
//!   a job nobody predicts for pays nothing for them);
//! - words 5..8: reserved, zero;
//! - then [`SLOTS`] slots of two words: `[owner, value]`. `owner` is the
//!   stream key the host claimed the slot for (0: free); `value` is written
//!   by the GPU only, an [`encode`]d id.
//!
//! # Why a reader never takes a torn or stale value for an id
//! A value is `check << 48 | id` with a 16-bit check derived from the
//! 48-bit id ([`check_of`]); [`decode`] refuses a value whose check does not
//! match, so a value assembled from halves of two writes (a torn read over
//! a bus that splits 8 bytes) is refused except with probability 2^-16, and
//! 0 (never written) is refused always (id 0 is mapped to 1 on encoding).
//!
//! # Many streams
//! Streams claim slots by hashing their key and probing linearly
//! ([`probe`]); when every slot is owned, a stream shares the slot its hash
//! names ([`Claim::Shared`]): its ids then overwrite another stream's,
//! which costs the reader attribution precision, never correctness.
//!
//! This file is `no_std` and free of unsafe code: prescient.ko includes it
//! by path and reads the page at each fault with [`SharedReader`].

use core::sync::atomic::{AtomicU64, Ordering};

/// The memfd's name (`/proc/PID/fd/N` links to `/memfd:NAME (deleted)`).
pub const MEMFD_NAME: &str = "prescient-exec-page";
/// Bytes in the page.
pub const PAGE_BYTES: usize = 4096;
/// 64-bit words in the page.
pub const PAGE_WORDS: usize = PAGE_BYTES / 8;
/// "PRSCXID" and format version 1 in the low byte.
pub const MAGIC: u64 = 0x5052_5343_5849_4401;
/// Header words before the first slot.
pub const HEADER_WORDS: usize = 8;
/// Slots in the page: what is left after the header, two words each.
pub const SLOTS: usize = (PAGE_WORDS - HEADER_WORDS) / 2;
/// Word index of the slot count.
pub const W_SLOTS: usize = 1;
/// Word index of the writer's pid.
pub const W_PID: usize = 2;
/// Word index of the launch counter.
pub const W_LAUNCHES: usize = 3;
/// Word index of the control word.
pub const W_CONTROL: usize = 4;
/// Control bit: a reader wants execution ids.
pub const WANT_IDS: u64 = 1;
/// Bits of the id proper.
pub const ID_BITS: u32 = 48;
/// Mask of the id bits.
pub const ID_MASK: u64 = (1 << ID_BITS) - 1;

/// Word index of slot `i`'s owner word (its value word follows).
pub const fn owner_word(i: usize) -> usize {
    HEADER_WORDS + 2 * i
}

/// Byte offset of slot `i`'s value word: where the GPU writes.
pub const fn value_offset(i: usize) -> usize {
    (owner_word(i) + 1) * 8
}

/// The 16-bit check of a 48-bit id: a multiplicative hash of all its bits,
/// so that any change of the id changes the check with probability
/// 1 - 2^-16.
pub const fn check_of(id48: u64) -> u64 {
    (id48.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) ^ 0xA5A5
}

/// The value the GPU writes for `id` (any 64-bit hash): its low 48 bits
/// (0 becomes 1, so that a written slot is never zero) under their check.
pub const fn encode(id: u64) -> u64 {
    let mut id48 = id & ID_MASK;
    if id48 == 0 {
        id48 = 1;
    }
    (check_of(id48) << ID_BITS) | id48
}

/// The 48-bit id in `value`, or None when the value was never written or
/// is not one [`encode`] produced (torn).
pub const fn decode(value: u64) -> Option<u64> {
    let id48 = value & ID_MASK;
    if id48 == 0 || value >> ID_BITS != check_of(id48) {
        return None;
    }
    Some(id48)
}

/// The engine's 32-bit execution id for a page's 48-bit id: folded, and
/// never `u32::MAX` (the engine's "no id", `NO_EXEC`). Both backends use it.
pub const fn engine_id(id48: u64) -> u32 {
    let v = (id48 ^ (id48 >> 32)) as u32;
    if v == u32::MAX {
        0
    } else {
        v
    }
}

/// A stream key's home slot.
pub const fn home_slot(key: u64) -> usize {
    ((key.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 32) % SLOTS as u64) as usize
}

/// The slots a key probes, home slot first, every slot once.
pub fn probe(key: u64) -> impl Iterator<Item = usize> {
    let home = home_slot(key);
    (0..SLOTS).map(move |k| (home + k) % SLOTS)
}

/// Which slot a stream got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The slot is the stream's alone.
    Own(usize),
    /// Every slot was owned: the stream shares its home slot.
    Shared(usize),
}

impl Claim {
    /// The slot index.
    pub fn slot(self) -> usize {
        match self {
            Claim::Own(i) | Claim::Shared(i) => i,
        }
    }
}

/// A view of the page as atomic words (the runtime's mapping, or the
/// daemon's mapping of the same memfd).
pub struct Page<'a> {
    words: &'a [AtomicU64],
}

impl<'a> Page<'a> {
    /// Wraps `words`, which must be the page's [`PAGE_WORDS`] words.
    pub fn new(words: &'a [AtomicU64]) -> Option<Page<'a>> {
        (words.len() == PAGE_WORDS).then_some(Page { words })
    }

    /// Writes the header (writer side, once, before any slot is claimed).
    pub fn init(&self, pid: u32) {
        self.words[W_SLOTS].store(SLOTS as u64, Ordering::Relaxed);
        self.words[W_PID].store(u64::from(pid), Ordering::Relaxed);
        self.words[0].store(MAGIC, Ordering::Release);
    }

    /// True once a writer has initialised the page with this format.
    pub fn is_valid(&self) -> bool {
        self.words[0].load(Ordering::Acquire) == MAGIC
            && self.words[W_SLOTS].load(Ordering::Relaxed) == SLOTS as u64
    }

    /// The writer's pid, as it stored it.
    pub fn writer_pid(&self) -> u64 {
        self.words[W_PID].load(Ordering::Relaxed)
    }

    /// Claims a slot for the stream `key` (not 0): the one it owns already,
    /// else the first free one it probes, else its home slot, shared.
    pub fn claim(&self, key: u64) -> Claim {
        debug_assert!(key != 0, "stream key 0 marks a free slot");
        let home = &self.words[owner_word(home_slot(key))];
        if home.load(Ordering::Acquire) == key {
            return Claim::Own(home_slot(key));
        }
        for i in probe(key) {
            let owner = &self.words[owner_word(i)];
            match owner.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Claim::Own(i),
                Err(k) if k == key => return Claim::Own(i),
                Err(_) => {}
            }
        }
        Claim::Shared(home_slot(key))
    }

    /// True when a reader asked for ids.
    pub fn ids_wanted(&self) -> bool {
        self.words[W_CONTROL].load(Ordering::Relaxed) & WANT_IDS != 0
    }

    /// Asks for ids, or stops asking (reader side).
    pub fn want_ids(&self, on: bool) {
        if on {
            self.words[W_CONTROL].fetch_or(WANT_IDS, Ordering::Relaxed);
        } else {
            self.words[W_CONTROL].fetch_and(!WANT_IDS, Ordering::Relaxed);
        }
    }

    /// Counts one marked launch.
    pub fn count_launch(&self) {
        self.words[W_LAUNCHES].fetch_add(1, Ordering::Relaxed);
    }

    /// Launches marked so far (wraps).
    pub fn launches(&self) -> u64 {
        self.words[W_LAUNCHES].load(Ordering::Relaxed)
    }

    /// Stores `id`'s encoding in slot `i` from the host: what the GPU's
    /// write does (tests, and writers without a GPU).
    pub fn write_slot(&self, i: usize, id: u64) {
        self.words[owner_word(i) + 1].store(encode(id), Ordering::Release);
    }

    /// Slot `i`'s owner key and raw value.
    pub fn slot(&self, i: usize) -> (u64, u64) {
        let w = owner_word(i);
        (
            self.words[w].load(Ordering::Acquire),
            self.words[w + 1].load(Ordering::Acquire),
        )
    }
}

/// What a reader keeps between two scans of the page: the raw value it saw
/// last in each slot, to find which slots moved.
pub struct Reader {
    last: [u64; SLOTS],
    /// Values refused as torn since the reader was made.
    pub torn: u64,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            last: [0; SLOTS],
            torn: 0,
        }
    }
}

impl Reader {
    /// Scans the page: calls `f(slot, id)` for every slot whose value
    /// changed since the last scan and decodes; returns how many changed.
    pub fn scan(&mut self, page: &Page<'_>, mut f: impl FnMut(usize, u64)) -> usize {
        let mut changed = 0;
        for i in 0..SLOTS {
            let (_, v) = page.slot(i);
            if v == self.last[i] {
                continue;
            }
            self.last[i] = v;
            match decode(v) {
                Some(id) => {
                    changed += 1;
                    f(i, id)
                }
                None => self.torn += 1,
            }
        }
        changed
    }

    /// The id slot `i` held at the last scan, if valid.
    pub fn current(&self, i: usize) -> Option<u64> {
        decode(self.last[i])
    }
}

/// What a reader keeps between scans when many threads scan at once (the
/// kernel's fault path: faults of one address space may be serviced on
/// several CPUs): the last raw value of each slot, as atomics. Each change
/// of a slot is claimed by exactly one scanner (an atomic swap), so it is
/// reported once whoever sees it first.
pub struct SharedReader {
    last: [AtomicU64; SLOTS],
}

impl Default for SharedReader {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedReader {
    /// A reader that has seen nothing (every written slot reads as changed).
    pub const fn new() -> Self {
        SharedReader {
            last: [const { AtomicU64::new(0) }; SLOTS],
        }
    }

    /// Forgets what was seen (a new page is registered).
    pub fn reset(&self) {
        for l in &self.last {
            l.store(0, Ordering::Relaxed);
        }
    }

    /// Scans every slot once (bounded: [`SLOTS`] loads): the id of the
    /// highest-numbered slot whose value changed since the last scan, by
    /// anyone, to a valid id; None if none did. A torn or unwritten value
    /// is never taken for an id. With several streams the attribution is
    /// the id last seen changing, as the daemon's reader does.
    pub fn scan(&self, page: &Page<'_>) -> Option<u64> {
        let mut got = None;
        for (i, l) in self.last.iter().enumerate() {
            // `last` before the slot: a value read after another scanner's
            // claim is at least as new as the one it claimed, so a claim
            // never moves `last` back to an older value (which would
            // report the newer one twice).
            let prev = l.load(Ordering::Acquire);
            let v = page.words[owner_word(i) + 1].load(Ordering::Acquire);
            if v == prev
                || l.compare_exchange(prev, v, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if let Some(id) = decode(v) {
                got = Some(id);
            }
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;

    fn page_words() -> [AtomicU64; PAGE_WORDS] {
        core::array::from_fn(|_| AtomicU64::new(0))
    }

    #[test]
    fn layout_fits_one_page() {
        assert_eq!(SLOTS, 252);
        assert_eq!(value_offset(SLOTS - 1), PAGE_BYTES - 8);
        assert_eq!(value_offset(0) % 8, 0);
    }

    #[test]
    fn engine_ids_fold_and_avoid_no_exec() {
        assert_eq!(engine_id(5), 5);
        assert_ne!(engine_id(1 << 40), engine_id(1 << 41));
        assert_ne!(engine_id(0xFFFF_FFFF), u32::MAX);
        assert_eq!(engine_id(0xFFFF_FFFF), 0);
    }

    #[test]
    fn the_shared_reader_reports_each_change_once_and_refuses_torn_values() {
        let w = page_words();
        let p = Page::new(&w).unwrap();
        p.init(3);
        let r = SharedReader::new();
        assert_eq!(r.scan(&p), None, "nothing written");
        let (a, b) = (p.claim(0x10).slot(), p.claim(0x20).slot());
        p.write_slot(a, 7);
        assert_eq!(r.scan(&p), Some(7));
        assert_eq!(r.scan(&p), None, "a change is reported once");
        p.write_slot(a, 8);
        p.write_slot(b, 9);
        let last = if a > b { 8 } else { 9 };
        assert_eq!(r.scan(&p), Some(last), "the highest changed slot");
        w[owner_word(a) + 1].store(encode(10) ^ (1 << 50), Ordering::Relaxed);
        assert_eq!(r.scan(&p), None, "torn");
        r.reset();
        assert!(
            r.scan(&p).is_some(),
            "after a reset every written slot is new"
        );
    }

    /// Two threads scanning while a writer rewrites one slot: every value
    /// the scanners report was written, and each change is reported at
    /// most once in all.
    #[test]
    fn concurrent_scanners_share_the_changes() {
        let w = page_words();
        let p = Page::new(&w).unwrap();
        p.init(1);
        let s = p.claim(0x33).slot();
        let r = SharedReader::new();
        let n = 2000u64;
        let seen: std::vec::Vec<u64> = std::thread::scope(|t| {
            let scan = || {
                let mut v = std::vec::Vec::new();
                for _ in 0..20_000 {
                    if let Some(id) = r.scan(&p) {
                        v.push(id);
                    }
                }
                v
            };
            let h1 = t.spawn(scan);
            let h2 = t.spawn(scan);
            for id in 1..=n {
                p.write_slot(s, id);
            }
            let mut a = h1.join().unwrap();
            a.extend(h2.join().unwrap());
            a
        });
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), seen.len(), "a change reported twice");
        assert!(seen.iter().all(|&id| (1..=n).contains(&id)));
    }

    #[test]
    fn zero_and_unwritten_never_decode() {
        assert_eq!(decode(0), None);
        assert_eq!(decode(encode(0)), Some(1));
    }

    #[test]
    fn a_full_table_shares_home_slots_and_owners_keep_theirs() {
        let w = page_words();
        let p = Page::new(&w).unwrap();
        p.init(7);
        let mut owned = std::collections::BTreeSet::new();
        for key in 1..=SLOTS as u64 {
            match p.claim(key) {
                Claim::Own(i) => assert!(owned.insert(i), "slot {i} given twice"),
                Claim::Shared(_) => panic!("table not full yet"),
            }
        }
        assert_eq!(owned.len(), SLOTS);
        // Owners find their slots again; the next key shares.
        for key in 1..=SLOTS as u64 {
            let c = p.claim(key);
            assert!(matches!(c, Claim::Own(_)));
            assert_eq!(p.slot(c.slot()).0, key);
        }
        let extra = SLOTS as u64 + 1;
        assert_eq!(p.claim(extra), Claim::Shared(home_slot(extra)));
        assert!(p.is_valid());
        assert_eq!(p.writer_pid(), 7);
        assert!(!p.ids_wanted());
        p.want_ids(true);
        assert!(p.ids_wanted());
        p.want_ids(false);
        assert!(!p.ids_wanted());
    }

    #[test]
    fn the_reader_reports_changes_once_and_counts_torn_values() {
        let w = page_words();
        let p = Page::new(&w).unwrap();
        p.init(1);
        let mut r = Reader::default();
        let s = p.claim(0x10).slot();
        p.write_slot(s, 42);
        let mut seen = vec![];
        assert_eq!(r.scan(&p, |i, id| seen.push((i, id))), 1);
        assert_eq!(seen, vec![(s, 42)]);
        assert_eq!(r.scan(&p, |_, _| panic!("nothing changed")), 0);
        // Half of a new value over half of the old one.
        let torn = (encode(42) & 0xFFFF_FFFF) | (encode(0x1234_5678_9ABC) & !0xFFFF_FFFF);
        w[owner_word(s) + 1].store(torn, Ordering::Relaxed);
        assert_eq!(r.scan(&p, |_, _| panic!("torn value taken")), 0);
        assert_eq!(r.torn, 1);
    }

    proptest! {
        #[test]
        fn every_id_round_trips_in_48_bits(id in any::<u64>()) {
            let id48 = id & ID_MASK;
            let want = if id48 == 0 { 1 } else { id48 };
            prop_assert_eq!(decode(encode(id)), Some(want));
        }

        /// A value made of the low half of one write and the high half of
        /// another (either order) decodes only if it equals one of them,
        /// up to the check's 2^-16 (no collision in 2000 random pairs is
        /// expected at that rate; the seed is fixed by proptest's config).
        #[test]
        fn torn_values_are_refused(a in any::<u64>(), b in any::<u64>(), split in 8u32..56) {
            let (va, vb) = (encode(a), encode(b));
            let low = (1u64 << split) - 1;
            for torn in [(va & low) | (vb & !low), (vb & low) | (va & !low)] {
                if torn != va && torn != vb {
                    prop_assert_eq!(decode(torn), None);
                }
            }
        }

        /// Any set of stream keys gets distinct own slots while there is room,
        /// and shares only when the table is full.
        #[test]
        fn many_streams_claim_distinct_slots(keys in proptest::collection::btree_set(1u64.., 1..400)) {
            let w = page_words();
            let p = Page::new(&w).unwrap();
            let mut own = std::collections::BTreeMap::new();
            for (n, &k) in keys.iter().enumerate() {
                match p.claim(k) {
                    Claim::Own(i) => {
                        prop_assert!(n < SLOTS);
                        prop_assert!(own.insert(i, k).is_none());
                    }
                    Claim::Shared(i) => {
                        prop_assert!(n >= SLOTS);
                        prop_assert_eq!(i, home_slot(k));
                    }
                }
            }
        }

        /// Ids written over and over (the GPU rewrites a slot at every launch,
        /// a captured graph the same value at every replay) are read back as
        /// the last one written whenever the reader scans.
        #[test]
        fn the_reader_follows_rewrites(ids in proptest::collection::vec(any::<u64>(), 1..200)) {
            let w = page_words();
            let p = Page::new(&w).unwrap();
            let mut r = Reader::default();
            let s = p.claim(99).slot();
            for id in ids {
                p.write_slot(s, id);
                r.scan(&p, |_, _| {});
                prop_assert_eq!(r.current(s), decode(encode(id)));
            }
            prop_assert_eq!(r.torn, 0);
        }
    }
}
