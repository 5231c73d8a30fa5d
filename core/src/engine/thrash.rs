//! The thrash guard: keep no reserve and make no room for prefetches
//! while victims come back before the reserve would have been used.
//!
//! Pre-eviction keeps a reserve of free blocks ([`Engine::free_target`])
//! so that prefetches need not wait for the evictions that make their
//! room. That pays while the blocks pushed out are needed later than the
//! blocks brought in. When the blocks the kernels touch at random exceed
//! the limit by little, it does not: any victim is needed again after
//! about as many other victims as there are blocks missing, and the
//! reserve is most of those. umbench random under a budget of about its
//! footprint ran 14-19x slower than the driver's way (evict only on
//! demand, no reserve) for that reason (BENCHMARKS-gpu.md, run 96).
//!
//! A victim faulted again within twice the reserve's number of victims
//! after it went (a *quick return*) would have been resident still without
//! the reserve, and the GPU waited for it. Only faults count: where
//! prefetching pays, a victim needed again soon comes back by our prefetch
//! before the GPU asks (umbench stream under 96% of its footprint: a
//! guard counting those returns too turned on and made it 3.1x slower,
//! BENCHMARKS-gpu.md run 103), and in the G10 traces victims come back
//! after thousands of victims.
//!
//! # States
//! Measured over the regret window's epochs of victims (`victims.rs`):
//! - **Off**: the engine's policy as it is. `ENTER_EPOCHS` (2) epochs in
//!   a row with more than 1/`ENTER_RATE` (half) of their victims back
//!   quickly -> **On**, to stay at least `hold` epochs. One epoch is not
//!   enough: the G10 CNN traces at 40 GiB have single epochs past half
//!   (the simulator's runs of BENCHMARKS.md section 9 change with one,
//!   and are identical with two).
//! - **On** ([`Engine::thrash_guarded`]): the reserve is 0, so the whole
//!   limit stays resident, and the host loop makes no room for a prefetch
//!   (`pump.rs`): blocks come in by their faults, and the victims are the
//!   engine's, as under the driver's own policy. The engine still learns
//!   from every fault. After `hold` epochs, an epoch with at most
//!   1/`LEAVE_RATE` (a sixth) back quickly -> **Off**; so does a run of faults
//!   longer than an epoch with no victim at all (everything fits now).
//!
//! `hold` is 1 epoch, doubled (up to `MAX_HOLD`) each time the guard comes
//! back as soon as it can after leaving: a workload whose thrash the guard
//! itself cures, and which thrashes again as soon as it leaves, spends
//! most of its time guarded rather than half.

/// `ENTER_EPOCHS` epochs in a row with more than 1 in this many victims
/// back quickly turn it on ...
const ENTER_RATE: u64 = 2;
const ENTER_EPOCHS: u32 = 2;
/// ... and, once held long enough, one with at most 1 in this many off.
const LEAVE_RATE: u64 = 6;
/// Most epochs the guard holds before it may leave.
const MAX_HOLD: u32 = 64;

/// The guard's state: whether it is on, and how long it holds.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Thrash {
    on: bool,
    /// Epochs left before it may leave.
    hold: u32,
    /// The hold it takes on its next entry.
    next_hold: u32,
    /// Epochs since it last left (saturating).
    since_left: u32,
    /// Faults since the last victim, while on.
    quiet_faults: u32,
    /// Quick returns in this epoch.
    quick: u64,
    /// Epochs in a row above the entering rate, while off.
    streak: u32,
}

impl Thrash {
    /// Off, with the shortest hold.
    pub(super) fn new() -> Self {
        Thrash {
            next_hold: 1,
            since_left: u32::MAX,
            ..Thrash::default()
        }
    }

    /// True while the guard is on.
    pub(super) fn on(&self) -> bool {
        self.on
    }

    /// A victim was faulted again `age` victims after it went, with
    /// `reserve` blocks kept free (the unguarded reserve).
    pub(super) fn returned(&mut self, age: u64, reserve: u32) {
        if age <= 2 * u64::from(reserve) {
            self.quick += 1;
        }
    }

    /// An epoch of `victims` ended. Returns true when this turned the guard
    /// on.
    pub(super) fn end_epoch(&mut self, victims: u64) -> bool {
        let quick = core::mem::take(&mut self.quick);
        if self.on {
            self.hold = self.hold.saturating_sub(1);
            if self.hold == 0 && quick * LEAVE_RATE <= victims {
                self.leave();
            }
            return false;
        }
        self.since_left = self.since_left.saturating_add(1);
        if quick * ENTER_RATE <= victims {
            self.streak = 0;
            return false;
        }
        self.streak += 1;
        if self.streak < ENTER_EPOCHS {
            return false;
        }
        // Back as soon as it could after leaving: leaving was too early.
        self.next_hold = if self.since_left <= ENTER_EPOCHS {
            (self.next_hold * 2).min(MAX_HOLD)
        } else {
            1
        };
        self.on = true;
        self.streak = 0;
        self.hold = self.next_hold;
        self.quiet_faults = 0;
        true
    }

    /// A fault: while on, one with no victim since the last one counts
    /// towards leaving; past `epoch` of them nothing is being pushed out.
    pub(super) fn fault(&mut self, epoch: u64) {
        if !self.on {
            return;
        }
        self.quiet_faults = self.quiet_faults.saturating_add(1);
        if u64::from(self.quiet_faults) > epoch {
            self.leave();
        }
    }

    /// A live victim was chosen.
    pub(super) fn victim(&mut self) {
        self.quiet_faults = 0;
    }

    fn leave(&mut self) {
        self.on = false;
        self.hold = 0;
        self.since_left = 0;
        self.quiet_faults = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ends an epoch of `victims` of which `quick` came back quickly.
    fn epoch(t: &mut Thrash, victims: u64, quick: u64) -> bool {
        for _ in 0..quick {
            t.returned(10, 100);
        }
        t.end_epoch(victims)
    }

    #[test]
    fn only_returns_within_twice_the_reserve_count() {
        let mut t = Thrash::new();
        for age in [0, 150, 200, 201, 5000] {
            t.returned(age, 100);
        }
        assert_eq!(t.quick, 3);
        t.returned(0, 0);
        assert_eq!(t.quick, 4, "a victim back at once counts with no reserve");
        t.end_epoch(100);
        assert_eq!(t.quick, 0, "an epoch starts from none");
    }

    /// Two epochs past the entering rate: on.
    fn thrashing() -> Thrash {
        let mut t = Thrash::new();
        assert!(!epoch(&mut t, 100, 90));
        assert!(epoch(&mut t, 100, 90));
        t
    }

    #[test]
    fn two_returning_epochs_in_a_row_turn_it_on_and_a_clean_one_off() {
        let mut t = Thrash::new();
        assert!(!epoch(&mut t, 1024, 500), "49% stays off");
        assert!(!epoch(&mut t, 1024, 700));
        assert!(!epoch(&mut t, 1024, 100), "one epoch alone is not enough");
        assert!(!epoch(&mut t, 1024, 700));
        assert!(!t.on());
        assert!(epoch(&mut t, 1024, 700));
        assert!(t.on());
        // Held one epoch; still thrashing keeps it on.
        assert!(!epoch(&mut t, 1024, 700));
        assert!(t.on());
        assert!(!epoch(&mut t, 1024, 100));
        assert!(!t.on(), "10% after the hold turns it off");
    }

    #[test]
    fn between_the_two_rates_it_keeps_its_state() {
        let mut t = thrashing();
        epoch(&mut t, 1024, 250);
        assert!(t.on(), "24% is above the leaving rate");
        epoch(&mut t, 1024, 150);
        assert!(!t.on());
        epoch(&mut t, 1024, 450);
        epoch(&mut t, 1024, 450);
        assert!(!t.on(), "44% is below the entering rate");
    }

    #[test]
    fn coming_back_at_once_doubles_the_hold() {
        let mut t = Thrash::new();
        let mut holds = [0u32; 9];
        for h in holds.iter_mut() {
            assert!(!epoch(&mut t, 100, 90));
            assert!(epoch(&mut t, 100, 90));
            while t.on() {
                epoch(&mut t, 100, 0);
                *h += 1;
            }
        }
        assert_eq!(holds, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        // A clean epoch in between: the next entry holds one epoch again.
        epoch(&mut t, 100, 0);
        epoch(&mut t, 100, 90);
        assert!(epoch(&mut t, 100, 90));
        epoch(&mut t, 100, 0);
        assert!(!t.on());
    }

    #[test]
    fn faults_with_no_victim_turn_it_off() {
        let mut t = thrashing();
        for _ in 0..100 {
            t.fault(100);
        }
        assert!(t.on());
        t.victim();
        for _ in 0..100 {
            t.fault(100);
        }
        assert!(t.on(), "a victim restarts the count");
        t.fault(100);
        assert!(!t.on());
    }

    #[test]
    fn off_it_ignores_faults() {
        let mut t = Thrash::new();
        for _ in 0..1000 {
            t.fault(10);
        }
        assert!(!t.on());
        epoch(&mut t, 10, 6);
        assert!(epoch(&mut t, 10, 6), "60% twice turns it on");
    }
}
