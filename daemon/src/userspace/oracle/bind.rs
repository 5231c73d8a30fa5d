//! The managed ranges the GPU has faulted on, which a plan is bound to
//! before it applies (plan.rs, `Plan::bind`): each fault's address is
//! looked up in the process's ranges (/proc/PID/maps), read again when an
//! address lies outside every range known, at most every `REREAD`; such
//! addresses wait for that read, so no range faulted on is missed.

use super::maps::{self, Range};
use std::time::{Duration, Instant};

/// The least time between two reads of the process's ranges.
pub const REREAD: Duration = Duration::from_millis(10);

#[derive(Default)]
pub struct Faulted {
    /// The process's ranges at the last read, by address.
    known: Vec<Range>,
    /// Ranges faulted on, by address; one mapped again over an older one
    /// (freed and allocated anew) replaces it.
    faulted: Vec<Range>,
    /// Fault addresses outside every range known at the last read.
    pending: Vec<u64>,
    last_read: Option<Instant>,
}

impl Faulted {
    /// A GPU fault at byte address `addr`: true if its range is new.
    pub fn note(&mut self, addr: u64) -> bool {
        match maps::find(&self.known, addr) {
            Some(i) => add(&mut self.faulted, self.known[i]),
            None => {
                self.pending.push(addr);
                false
            }
        }
    }

    /// Whether addresses wait for a read of the ranges, and one is due.
    pub fn wants_read(&self) -> bool {
        !self.pending.is_empty() && self.last_read.is_none_or(|t| t.elapsed() >= REREAD)
    }

    /// The process's ranges `now` (by address): the waiting addresses
    /// are looked up again (those still outside every range are dropped);
    /// true if a range faulted on is new.
    pub fn reread(&mut self, now: Vec<Range>) -> bool {
        self.last_read = Some(Instant::now());
        self.known = now;
        let mut added = false;
        for a in std::mem::take(&mut self.pending) {
            if let Some(i) = maps::find(&self.known, a) {
                added |= add(&mut self.faulted, self.known[i]);
            }
        }
        added
    }

    pub fn ranges(&self) -> &[Range] {
        &self.faulted
    }
}

/// Adds `r` to `set` (by address), replacing ranges it overlaps; true if
/// it was not there.
fn add(set: &mut Vec<Range>, r: Range) -> bool {
    if set.contains(&r) {
        return false;
    }
    set.retain(|s| s.end <= r.start || s.start >= r.end);
    let i = set.partition_point(|s| s.start < r.start);
    set.insert(i, r);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> Range {
        Range { start, end }
    }

    #[test]
    fn addresses_outside_known_ranges_wait_for_the_next_read() {
        let mut f = Faulted::default();
        assert!(!f.note(150));
        assert!(f.wants_read());
        assert!(f.reread(vec![r(100, 200), r(300, 400)]));
        assert_eq!(f.ranges(), [r(100, 200)]);
        assert!(!f.wants_read());
        // Known now: no read needed; a second fault on it is not new.
        assert!(f.note(350));
        assert!(!f.note(301));
        assert_eq!(f.ranges(), [r(100, 200), r(300, 400)]);
        // Outside everything: waits, and is dropped if still outside.
        assert!(!f.note(999));
        assert!(!f.wants_read(), "read less than REREAD ago");
        assert!(!f.reread(vec![r(100, 200), r(300, 400)]));
        assert!(!f.wants_read());
    }

    #[test]
    fn a_range_mapped_again_over_an_older_one_replaces_it() {
        let mut f = Faulted::default();
        f.reread(vec![r(100, 200)]);
        f.note(100);
        f.reread(vec![r(150, 400)]);
        assert!(f.note(160));
        assert_eq!(f.ranges(), [r(150, 400)]);
    }
}
