//! A pause of dead marks while prescientd has no backend to take them.
//!
//! prescientd answers "unavailable" when its backend is gone: prescient.ko
//! unloaded (an upgrade, `rmmod` under load), or not loaded yet. Its
//! records of this process's dead blocks went with the module, and it
//! re-attaches the process once the module is back (service/reconcile.rs).
//! Turning marks off for good on that reply lost every discard for the
//! rest of the job; sending every free's mark into it costs a round trip
//! each. So dead marks pause, for one second first and twice as long each
//! time the pause ends with the backend still gone (at most `MAX`), and a
//! dead mark taken again brings the first length back.

use std::time::{Duration, Instant};

/// The first pause.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest pause: a backend back after an outage is used within it.
pub const MAX: Duration = Duration::from_secs(32);

/// Whether dead marks are paused, and for how long the next pause lasts.
#[derive(Debug)]
pub struct Pause {
    until: Option<Instant>,
    next: Duration,
    /// Pauses begun (the exit line's `paused=`).
    pub count: u64,
    /// Pauses ended by a dead mark taken again (the backend came back).
    pub resumed: u64,
    /// Why the last pause began (the daemon's reply).
    pub why: Option<String>,
}

impl Default for Pause {
    fn default() -> Self {
        Pause {
            until: None,
            next: FIRST,
            count: 0,
            resumed: 0,
            why: None,
        }
    }
}

impl Pause {
    /// prescientd answered "unavailable" at `now`: pause dead marks.
    pub fn begin(&mut self, now: Instant, why: String) {
        self.until = Some(now + self.next);
        self.next = (self.next * 2).min(MAX);
        self.count += 1;
        self.why = Some(why);
    }

    /// Whether dead marks are paused at `now`.
    pub fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// A dead mark was taken: the backend is there, and the next pause
    /// (after another outage) is short again.
    pub fn taken(&mut self) {
        if self.until.take().is_some() {
            self.resumed += 1;
        }
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_longest_and_a_taken_mark_shortens_them_again() {
        let mut p = Pause::default();
        let t = Instant::now();
        assert!(!p.active(t));
        p.begin(t, "gone".into());
        assert!(p.active(t + FIRST - Duration::from_millis(1)));
        assert!(!p.active(t + FIRST));
        let mut at = t + FIRST;
        let mut lens = Vec::new();
        for _ in 0..7 {
            p.begin(at, "gone".into());
            let mut len = Duration::ZERO;
            while p.active(at + len) {
                len += Duration::from_millis(500);
            }
            lens.push(len.as_secs());
            at += len;
        }
        assert_eq!(lens, [2, 4, 8, 16, 32, 32, 32]);
        assert_eq!(p.count, 8);
        p.taken();
        assert!(!p.active(at));
        assert_eq!(p.resumed, 1);
        p.taken();
        assert_eq!(p.resumed, 1, "a mark taken with no pause resumes nothing");
        p.begin(at, "gone again".into());
        assert!(!p.active(at + FIRST));
        assert_eq!(p.why.as_deref(), Some("gone again"));
    }
}
