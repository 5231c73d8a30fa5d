//! The launch ring: a bounded ring of shared memory in which a CUDA
//! process's runtime (prescient-runtime) publishes, in launch order, each
//! kernel launch's execution id, stream and managed footprint (the 2 MB
//! blocks its pointer arguments point into), and from which prescientd
//! learns which kernels the GPU will run next, before it runs them.
//!
//! The CPU of a PyTorch job runs far ahead of a GPU that waits for its
//! pages, so the launches queued in the ring are the GPU's future; the
//! execution-id page (execpage.rs) says which of them the GPU is on.
//!
//! The runtime creates the ring (a memfd named [`MEMFD_NAME`], one per
//! process, [`RING_BYTES`] long) next to its execution-id page; the daemon
//! finds it the same way (by name among the process's descriptors), maps
//! it and reads it. Many launching threads write; one reader reads.
//!
//! # Layout (64-bit little-endian words)
//! - word 0: [`MAGIC`] (the format version is part of it); word 1: the
//!   capacity in records ([`CAPACITY`]); word 2: words per record
//!   ([`RECORD_WORDS`]); word 3: the writer's pid;
//! - word 4: control, written by the reader: bit 0 ([`WANT`]) asks for
//!   records (without it the runtime scans and writes nothing);
//! - word 5: records dropped because the ring was full; word 6: records
//!   committed;
//! - word 8: head, the next position a writer claims; word 16: tail, the
//!   next position the reader reads (on its own cache line);
//! - then [`CAPACITY`] records of [`RECORD_WORDS`] words; position `pos`
//!   lives in record `pos % CAPACITY`;
//! - then the host-advice table ([`advice`], [`ADVICE_WORDS`]): the ranges
//!   the process itself advised to stay in host memory.
//!
//! A record: `[seq, check, id, stream, meta, ranges...]`. `seq` is 0 until
//! first written, `2 pos + 1` while the writer of position `pos` writes it,
//! `2 pos + 2` once committed. `id` is the execution id as the page holds
//! it ([`execpage::encode`](crate::execpage::encode)d); `stream` the
//! stream's slot key; `meta` the range count (bits 0-7), [`TRUNCATED`]
//! and [`GUESSED`];
//! each range packs its first block (bits 0-31) and block count (bits
//! 32-63). `check` is a hash of the position and every other word.
//!
//! # Why the writer never blocks and the reader never takes a torn record
//! A writer claims a position with one compare-and-swap on head, only while
//! `head - tail < CAPACITY`; when the ring is full it counts a drop and
//! returns (a launch never waits for the daemon). The reader takes a record
//! only if `seq` reads committed for its position before and after the
//! payload and the check matches: a record half-written, or rewritten by a
//! later writer of the same slot, is refused. A writer that claimed a
//! position and never commits (a thread stopped mid-launch) would stall
//! the reader: after [`STUCK_POLLS`] polls with later positions claimed,
//! the reader skips it and counts it.
//!
//! This file is `no_std` and free of unsafe code.

use core::sync::atomic::{fence, AtomicU64, Ordering};

pub mod advice;
pub use advice::{ADVICE_SLOTS, ADVICE_WORDS};

/// The memfd's name (`/proc/PID/fd/N` links to `/memfd:NAME (deleted)`).
pub const MEMFD_NAME: &str = "prescient-launch-ring";
/// "PRSCLRG" and format version 3 in the low byte (version 2 added the
/// host-advice table, version 3 records of 128 words).
pub const MAGIC: u64 = 0x5052_5343_4c52_4703;
/// The format version [`MAGIC`] carries: the one this build reads and writes.
pub const FORMAT: u8 = MAGIC as u8;
/// [`MAGIC`] without its format version: a ring of another release has it
/// too (the daemon says so rather than finding no ring).
pub const MAGIC_NAME: u64 = MAGIC & !0xFF;

/// The format version of a ring whose first word is `word0`, if that word
/// names a launch ring (0 while a writer has not initialised it).
pub const fn format_of(word0: u64) -> Option<u8> {
    if word0 & !0xFF == MAGIC_NAME {
        Some(word0 as u8)
    } else {
        None
    }
}

/// Header words before the first record.
pub const HEADER_WORDS: usize = 24;
/// Words per record: 123 ranges.
///
/// Why so many: an optimizer's foreach launch names hundreds of tensors
/// (Adam's: parameters, gradients and both moments of up to 110 tensors);
/// with 27 ranges (32 words, format 2) those records were truncated, and
/// the blocks left out are faulted on instead of prefetched. GPU run 173:
/// the 374M LM's 35 truncated launches a step (27 ranges, 260-370 blocks
/// each) fall in the 400 launches of a step where nearly all its faults
/// are (BENCHMARKS-gpu.md). The ring is 4 MiB.
pub const RECORD_WORDS: usize = 128;
/// Words of a record before its ranges.
pub const RECORD_HEAD: usize = 5;
/// Ranges a record holds at most.
pub const MAX_RANGES: usize = RECORD_WORDS - RECORD_HEAD;
/// Records in the ring: 4096 launches, several steps of a ResNet-50
/// forward and backward pass (about 600 launches a step).
pub const CAPACITY: usize = 4096;
/// Words in the ring.
pub const RING_WORDS: usize = HEADER_WORDS + CAPACITY * RECORD_WORDS + ADVICE_WORDS;
/// Bytes in the ring (the memfd's size).
pub const RING_BYTES: usize = RING_WORDS * 8;
/// Word indices of the header.
pub const W_CAPACITY: usize = 1;
pub const W_RECORD_WORDS: usize = 2;
pub const W_PID: usize = 3;
pub const W_CONTROL: usize = 4;
pub const W_DROPPED: usize = 5;
pub const W_COMMITTED: usize = 6;
pub const W_HEAD: usize = 8;
pub const W_TAIL: usize = 16;
/// Control bit: the reader wants records.
pub const WANT: u64 = 1;
/// Meta bit: the launch pointed into more ranges than the record holds,
/// or had more argument words than the runtime scans.
pub const TRUNCATED: u64 = 1 << 8;
/// Meta bit: some range is a guess, not a block the process's allocator
/// handed out: a pointer into a managed allocation where no live block was
/// known stands for the allocation from the pointer on, capped. Such a
/// range says where the launch starts reading, not all it will use.
pub const GUESSED: u64 = 1 << 9;
/// Polls a reader waits on an uncommitted record while later ones are
/// claimed before it skips it.
pub const STUCK_POLLS: u32 = 1000;

/// One launch as the ring carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The launch's execution id, encoded as in the page.
    pub id: u64,
    /// The launch stream's slot key (execpage's `claim` key).
    pub stream: u64,
    /// More ranges or argument words than were recorded.
    pub truncated: bool,
    /// Some range is a guess ([`GUESSED`]).
    pub guessed: bool,
    /// Ranges in use.
    pub n: usize,
    /// `(first block, block count)` pairs, packed ([`pack`]).
    pub ranges: [u64; MAX_RANGES],
}

impl Default for Record {
    fn default() -> Self {
        Record {
            id: 0,
            stream: 0,
            truncated: false,
            guessed: false,
            n: 0,
            ranges: [0; MAX_RANGES],
        }
    }
}

impl Record {
    /// Adds the blocks `first .. first + count`; false (and truncated) when
    /// the record is full or the range does not pack.
    pub fn push(&mut self, first: u64, count: u64) -> bool {
        match pack(first, count) {
            Some(w) if self.n < MAX_RANGES => {
                self.ranges[self.n] = w;
                self.n += 1;
                true
            }
            _ => {
                self.truncated = true;
                false
            }
        }
    }

    /// The `(first block, block count)` ranges.
    pub fn blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges[..self.n].iter().map(|&w| unpack(w))
    }

    fn meta(&self) -> u64 {
        let flag = |on: bool, bit: u64| if on { bit } else { 0 };
        self.n as u64 | flag(self.truncated, TRUNCATED) | flag(self.guessed, GUESSED)
    }
}

/// One range as a word: first block in bits 0-31, count in 32-63; None
/// if either does not fit or the count is 0.
pub const fn pack(first: u64, count: u64) -> Option<u64> {
    if first > u32::MAX as u64 || count == 0 || count > u32::MAX as u64 {
        return None;
    }
    Some(first | count << 32)
}

/// A range word's `(first block, block count)`.
pub const fn unpack(w: u64) -> (u64, u64) {
    (w & 0xFFFF_FFFF, w >> 32)
}

/// The check of a record at `pos` whose words after the check are `w`.
pub fn check_of(pos: u64, w: &[u64]) -> u64 {
    let mut h = pos.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5bd1_e995;
    for &x in w {
        h = (h ^ x).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    h
}

/// Word index of the first word of position `pos`'s record.
pub const fn record_word(pos: u64) -> usize {
    HEADER_WORDS + (pos % CAPACITY as u64) as usize * RECORD_WORDS
}

/// A view of the ring as atomic words (the runtime's mapping, or the
/// daemon's mapping of the same memfd).
pub struct Ring<'a> {
    words: &'a [AtomicU64],
}

impl<'a> Ring<'a> {
    /// Wraps `words`, which must be the ring's [`RING_WORDS`] words.
    pub fn new(words: &'a [AtomicU64]) -> Option<Ring<'a>> {
        (words.len() == RING_WORDS).then_some(Ring { words })
    }

    /// Writes the header (writer side, once, before any record).
    pub fn init(&self, pid: u32) {
        self.words[W_CAPACITY].store(CAPACITY as u64, Ordering::Relaxed);
        self.words[W_RECORD_WORDS].store(RECORD_WORDS as u64, Ordering::Relaxed);
        self.words[W_PID].store(u64::from(pid), Ordering::Relaxed);
        self.words[0].store(MAGIC, Ordering::Release);
    }

    /// True once a writer has initialised the ring with this format.
    pub fn is_valid(&self) -> bool {
        self.words[0].load(Ordering::Acquire) == MAGIC
            && self.words[W_CAPACITY].load(Ordering::Relaxed) == CAPACITY as u64
            && self.words[W_RECORD_WORDS].load(Ordering::Relaxed) == RECORD_WORDS as u64
    }

    /// The writer's pid, as it stored it.
    pub fn writer_pid(&self) -> u64 {
        self.words[W_PID].load(Ordering::Relaxed)
    }

    /// True while a reader wants records.
    pub fn wanted(&self) -> bool {
        self.words[W_CONTROL].load(Ordering::Relaxed) & WANT != 0
    }

    /// Asks for records, or stops asking (reader side).
    pub fn want(&self, on: bool) {
        if on {
            self.words[W_CONTROL].fetch_or(WANT, Ordering::Relaxed);
        } else {
            self.words[W_CONTROL].fetch_and(!WANT, Ordering::Relaxed);
        }
    }

    /// Records dropped on a full ring, and records committed.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.words[W_DROPPED].load(Ordering::Relaxed),
            self.words[W_COMMITTED].load(Ordering::Relaxed),
        )
    }

    /// Claims the next position, or None (a drop, counted) when the ring
    /// is full. Never waits: a lost race is retried at once.
    pub fn claim(&self) -> Option<u64> {
        let head = &self.words[W_HEAD];
        let mut h = head.load(Ordering::Relaxed);
        loop {
            let tail = self.words[W_TAIL].load(Ordering::Acquire);
            if h.wrapping_sub(tail) >= CAPACITY as u64 {
                self.words[W_DROPPED].fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match head.compare_exchange_weak(h, h + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(h),
                Err(now) => h = now,
            }
        }
    }

    /// Writes `r` at the claimed position `pos` and commits it.
    pub fn write(&self, pos: u64, r: &Record) {
        let base = record_word(pos);
        let w = &self.words[base..base + RECORD_WORDS];
        w[0].store(2 * pos + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let mut body = [0u64; RECORD_WORDS - 2];
        body[0] = r.id;
        body[1] = r.stream;
        body[2] = r.meta();
        body[3..3 + r.n].copy_from_slice(&r.ranges[..r.n]);
        let used = 3 + r.n;
        for (i, &x) in body[..used].iter().enumerate() {
            w[2 + i].store(x, Ordering::Relaxed);
        }
        w[1].store(check_of(pos, &body[..used]), Ordering::Relaxed);
        w[0].store(2 * pos + 2, Ordering::Release);
        self.words[W_COMMITTED].fetch_add(1, Ordering::Relaxed);
    }

    /// Claims a position and writes `r` there; false if it was dropped.
    pub fn push(&self, r: &Record) -> bool {
        match self.claim() {
            Some(pos) => {
                self.write(pos, r);
                true
            }
            None => false,
        }
    }

    /// The record at `pos` if it is committed there and intact.
    fn read(&self, pos: u64) -> Result<Record, Refused> {
        let base = record_word(pos);
        let w = &self.words[base..base + RECORD_WORDS];
        let seq = w[0].load(Ordering::Acquire);
        if seq != 2 * pos + 2 {
            return Err(Refused::NotYet);
        }
        let mut body = [0u64; RECORD_WORDS - 2];
        let check = w[1].load(Ordering::Relaxed);
        body[2] = w[4].load(Ordering::Relaxed);
        let n = (body[2] & 0xFF) as usize;
        if n > MAX_RANGES {
            return Err(Refused::Torn);
        }
        for (i, b) in body[..3 + n].iter_mut().enumerate() {
            *b = w[2 + i].load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if w[0].load(Ordering::Relaxed) != seq
            || body[2] != w[4].load(Ordering::Relaxed)
            || check_of(pos, &body[..3 + n]) != check
        {
            return Err(Refused::Torn);
        }
        let mut r = Record {
            id: body[0],
            stream: body[1],
            truncated: body[2] & TRUNCATED != 0,
            guessed: body[2] & GUESSED != 0,
            n,
            ..Record::default()
        };
        r.ranges[..n].copy_from_slice(&body[3..3 + n]);
        Ok(r)
    }
}

enum Refused {
    NotYet,
    Torn,
}

/// What the one reader keeps between polls.
#[derive(Debug, Default)]
pub struct Reader {
    tail: u64,
    waited: u32,
    /// Records read.
    pub read: u64,
    /// Positions skipped: never committed ([`STUCK_POLLS`]) or torn.
    pub skipped: u64,
    /// Of those, refused as torn (committed, but the check failed).
    pub torn: u64,
}

impl Reader {
    /// A reader that starts at the ring's head: records written before it
    /// came (for a reader gone since) are not the GPU's future any more.
    pub fn attach(ring: &Ring<'_>) -> Reader {
        let head = ring.words[W_HEAD].load(Ordering::Acquire);
        ring.words[W_TAIL].store(head, Ordering::Release);
        Reader {
            tail: head,
            ..Reader::default()
        }
    }

    /// Reads up to `max` records in position order, calling `f` with each;
    /// returns how many were read. Frees their room for the writers.
    pub fn poll(&mut self, ring: &Ring<'_>, max: usize, mut f: impl FnMut(Record)) -> usize {
        let mut n = 0;
        while n < max {
            let head = ring.words[W_HEAD].load(Ordering::Acquire);
            if self.tail == head {
                break;
            }
            match ring.read(self.tail) {
                Ok(r) => {
                    self.waited = 0;
                    self.read += 1;
                    n += 1;
                    self.tail += 1;
                    f(r);
                }
                Err(Refused::Torn) => {
                    self.torn += 1;
                    self.skip();
                }
                Err(Refused::NotYet) => {
                    self.waited += 1;
                    if self.waited < STUCK_POLLS {
                        break;
                    }
                    self.skip();
                }
            }
        }
        ring.words[W_TAIL].store(self.tail, Ordering::Release);
        n
    }

    fn skip(&mut self) {
        self.waited = 0;
        self.skipped += 1;
        self.tail += 1;
    }

    /// Positions claimed by writers and not read yet.
    pub fn behind(&self, ring: &Ring<'_>) -> u64 {
        ring.words[W_HEAD]
            .load(Ordering::Acquire)
            .wrapping_sub(self.tail)
    }
}

#[cfg(test)]
mod tests;
