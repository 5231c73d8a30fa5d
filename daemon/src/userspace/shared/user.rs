//! The job's own host advice (the launch ring's host-advice table, which
//! prescient-runtime fills from the job's `cuMemAdvise` calls): ranges the
//! job advised to stay in host memory are the job's choice, so they are
//! never prefetched (`is_host`), never tried, and never undone when the
//! loop ends.
//!
//! A trial or a kept allocation the job's advice reaches is superseded:
//! prescientd forgets it without taking its advice back (taking it back
//! would unset the job's own preferred location).

use super::{Range, SharedBlocks};

impl SharedBlocks {
    /// The job's host-advised ranges are now `ranges` (`(start, end)`
    /// bytes, as the table holds them; empty ones are ignored).
    pub fn set_user_host(&mut self, ranges: &[(u64, u64)]) {
        self.user.clear();
        (self.user).extend(
            (ranges.iter())
                .filter(|&&(start, end)| start < end)
                .map(|&(start, end)| Range { start, end }),
        );
        self.stats.user_host_ranges = self.user.len() as u64;
        self.stats.user_host_bytes = self.user.iter().map(Range::size).sum();
        let before = self.kept.len();
        let user = &self.user;
        self.kept.retain(|a| !overlaps(user, a));
        let mut superseded = (before - self.kept.len()) as u64;
        if (self.trial.as_ref()).is_some_and(|t| t.allocs.iter().any(|a| overlaps(user, a))) {
            self.trial = None;
            superseded += 1;
        }
        self.stats.user_superseded += superseded;
    }

    /// Does allocation `a` overlap a range the job advised itself?
    pub(super) fn user_overlaps(&self, a: Range) -> bool {
        overlaps(&self.user, &a)
    }
}

/// Does `a` overlap any of `ranges`?
fn overlaps(ranges: &[Range], a: &Range) -> bool {
    ranges.iter().any(|u| u.overlap(a) > 0)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{alloc_of, run_steps, INPUT};
    use super::super::Action;
    use super::*;
    use std::time::{Duration, Instant};

    const GIB: u64 = 1 << 30;

    /// Advised ranges live in host memory (never prefetched) and are never
    /// tried, nor handed back when the loop ends; a new table replaces the
    /// old one; empty ranges are ignored.
    #[test]
    fn the_jobs_host_advice_is_never_prefetched_tried_or_undone() {
        let mut s = SharedBlocks::default();
        s.set_user_host(&[(4 * GIB + 100, 4 * GIB + 200), (7, 7)]);
        assert_eq!(s.stats.user_host_ranges, 1);
        assert_eq!(s.stats.user_host_bytes, 100);
        assert!(s.is_host(4 * GIB + 150) && !s.is_host(4 * GIB + 200));
        let block = (4 * GIB) >> prescient_core::BLOCK_SHIFT;
        for _ in 0..2 {
            s.cpu_took(block);
            s.gpu_had(block);
        }
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        assert_eq!(s.decide(alloc_of), None, "INPUT holds the job's range");
        assert!(s.take_placed().is_empty(), "nothing of the job's to undo");
        s.set_user_host(&[]);
        assert!(!s.is_host(4 * GIB + 150), "the job took its advice back");
    }

    /// Advice reaching a kept allocation or one on trial supersedes it:
    /// forgotten, never undone.
    #[test]
    fn the_jobs_advice_supersedes_a_trial_and_a_kept_allocation() {
        let mut s = SharedBlocks::default();
        let mut t = Instant::now();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        let block = (4 * GIB) >> prescient_core::BLOCK_SHIFT;
        for _ in 0..2 {
            s.cpu_took(block);
            s.gpu_had(block);
        }
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(vec![INPUT])));
        s.set_user_host(&[(INPUT.start, INPUT.start + 4096)]);
        assert_eq!(s.stats.user_superseded, 1);
        run_steps(&mut s, &mut t, 3, Duration::from_millis(900));
        assert_eq!(s.decide(alloc_of), None, "no verdict: no trial");
        assert!(s.take_placed().is_empty());
        // Kept first, then reached by the job's advice.
        let mut s = SharedBlocks::default();
        run_steps(&mut s, &mut t, 3, Duration::from_millis(300));
        for _ in 0..2 {
            s.cpu_took(block);
            s.gpu_had(block);
        }
        assert_eq!(s.decide(alloc_of), Some(Action::Advise(vec![INPUT])));
        run_steps(&mut s, &mut t, 3, Duration::from_millis(100));
        assert_eq!(s.decide(alloc_of), None);
        assert_eq!(s.stats.kept, 1);
        s.set_user_host(&[(INPUT.end - 1, INPUT.end + GIB)]);
        assert_eq!(s.stats.user_superseded, 1);
        assert!(s.take_placed().is_empty(), "the job's now");
        assert!(s.is_host(INPUT.end - 1));
    }
}
