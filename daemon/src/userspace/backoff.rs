//! Self back-off: stop prefetching when predictions are not worth it.
//!
//! The tools events show faults, not accesses to resident memory, so a
//! prefetched block that the GPU then used cannot be told from one it never
//! touched. Accuracy is therefore measured on predictions that are *not*
//! prefetched: while prefetching, one predicted (non-resident) block in
//! `holdout` is held back and watched; it counts as a hit if the process
//! faults on it within the next `horizon` fault blocks, a miss otherwise.
//! Every `window` watched predictions the accuracy is compared with the
//! thresholds:
//!
//! * **On** (prefetching): accuracy below `stop_below` -> **Off**.
//! * **Off**: nothing is prefetched or watched; the engine still sees every
//!   fault and keeps learning. After `probe_every`, -> **Probing**.
//! * **Probing**: nothing is prefetched, every prediction is watched (an
//!   unbiased sample, with no prefetch hiding faults); after one window,
//!   accuracy at or above `resume_at` -> **On**, else back to **Off**.
//!
//! `resume_at` > `stop_below` is the hysteresis.

use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub holdout: u32,
    pub horizon: u64,
    pub window: u64,
    pub stop_below: f64,
    pub resume_at: f64,
    pub probe_every: Duration,
}

impl Default for Params {
    /// The values prescientd's `--backoff-*` options default to.
    fn default() -> Params {
        Params {
            holdout: 16,
            horizon: 4096,
            window: 64,
            stop_below: 0.3,
            resume_at: 0.5,
            probe_every: Duration::from_millis(2000),
        }
    }
}

impl Params {
    pub fn validate(&self) -> Result<(), String> {
        if self.holdout < 2 {
            return Err("--backoff-holdout must be at least 2".into());
        }
        if self.window == 0 || self.horizon == 0 {
            return Err("--backoff-window and --backoff-horizon must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.stop_below)
            || !(0.0..=1.0).contains(&self.resume_at)
            || self.resume_at < self.stop_below
        {
            return Err(format!(
                "back-off thresholds must satisfy 0 <= stop ({}) <= resume ({}) <= 1",
                self.stop_below, self.resume_at
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    #[default]
    On,
    Off,
    Probing,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Stats {
    pub state: State,
    /// On -> Off transitions.
    pub backoffs: u64,
    /// Probing -> On transitions.
    pub resumes: u64,
    pub probes: u64,
    /// Watched predictions that the process then faulted on / never did.
    pub watched_hits: u64,
    pub watched_misses: u64,
    /// Predictions held back (not prefetched) while On, to be watched.
    pub held_out: u64,
    /// Predictions not prefetched because of Off / Probing.
    pub suppressed: u64,
    /// Accuracy of the last complete window (-1 before the first).
    pub last_accuracy: f64,
    /// Seconds spent Off or Probing.
    pub off_s: f64,
}

pub struct Backoff {
    p: Params,
    st: Stats,
    /// Watched block -> the fault-block clock at which it expires.
    pending: HashMap<u64, u64>,
    expiry: VecDeque<(u64, u64)>,
    sample: u32,
    win_hits: u64,
    win_misses: u64,
    since: Instant,
}

impl Backoff {
    pub fn new(p: Params, now: Instant) -> Backoff {
        Backoff {
            p,
            st: Stats {
                last_accuracy: -1.0,
                ..Stats::default()
            },
            pending: HashMap::new(),
            expiry: VecDeque::new(),
            sample: 0,
            win_hits: 0,
            win_misses: 0,
            since: now,
        }
    }

    #[cfg(test)]
    pub fn state(&self) -> State {
        self.st.state
    }

    pub fn stats(&self, now: Instant) -> Stats {
        let mut s = self.st;
        if s.state != State::On {
            s.off_s += now.duration_since(self.since).as_secs_f64();
        }
        s
    }

    fn watch(&mut self, block: u64, clock: u64) {
        // A re-predicted block keeps the later expiry; its older queue
        // entry is skipped when it comes up.
        let exp = clock + self.p.horizon;
        self.pending.insert(block, exp);
        self.expiry.push_back((exp, block));
    }

    /// The engine predicts `block`, which is not resident: true to prefetch it.
    pub fn admit(&mut self, block: u64, clock: u64) -> bool {
        match self.st.state {
            State::On => {
                self.sample = self.sample.wrapping_add(1);
                if self.sample.is_multiple_of(self.p.holdout) {
                    self.st.held_out += 1;
                    self.watch(block, clock);
                    false
                } else {
                    true
                }
            }
            State::Probing => {
                self.st.suppressed += 1;
                self.watch(block, clock);
                false
            }
            State::Off => {
                self.st.suppressed += 1;
                false
            }
        }
    }

    /// The process faulted on `block` (a new fault block).
    pub fn fault(&mut self, block: u64) {
        if self.pending.remove(&block).is_some() {
            self.win_hits += 1;
            self.st.watched_hits += 1;
        }
    }

    /// Expires watched predictions and takes the decisions; `clock` counts
    /// fault blocks.
    pub fn tick(&mut self, clock: u64, now: Instant) {
        while let Some(&(exp, b)) = self.expiry.front() {
            if exp > clock {
                break;
            }
            self.expiry.pop_front();
            if self.pending.get(&b) == Some(&exp) {
                self.pending.remove(&b);
                self.win_misses += 1;
                self.st.watched_misses += 1;
            }
        }
        if self.st.state == State::Off {
            if now.duration_since(self.since) >= self.p.probe_every {
                self.st.state = State::Probing;
                self.st.probes += 1;
                self.reset_window();
            }
            return;
        }
        let n = self.win_hits + self.win_misses;
        if n < self.p.window {
            return;
        }
        let acc = self.win_hits as f64 / n as f64;
        self.st.last_accuracy = acc;
        self.reset_window();
        match self.st.state {
            State::On if acc < self.p.stop_below => {
                self.st.backoffs += 1;
                self.st.state = State::Off;
                self.since = now;
                self.forget();
            }
            State::Probing if acc >= self.p.resume_at => {
                self.st.resumes += 1;
                self.st.state = State::On;
                self.st.off_s += now.duration_since(self.since).as_secs_f64();
            }
            State::Probing => {
                self.st.state = State::Off;
                self.st.off_s += now.duration_since(self.since).as_secs_f64();
                self.since = now;
                self.forget();
            }
            _ => {}
        }
    }

    fn reset_window(&mut self) {
        self.win_hits = 0;
        self.win_misses = 0;
    }

    fn forget(&mut self) {
        self.pending.clear();
        self.expiry.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            holdout: 4,
            horizon: 10,
            window: 8,
            stop_below: 0.3,
            resume_at: 0.6,
            probe_every: Duration::from_millis(100),
        }
    }

    /// Feeds `n` predictions; a fraction `hit` of the watched ones are
    /// faulted on right away. Returns the prefetches admitted.
    fn feed(b: &mut Backoff, clock: &mut u64, n: u64, hit: bool, now: Instant) -> u64 {
        let mut admitted = 0;
        for i in 0..n {
            let block = *clock * 1000 + i;
            if b.admit(block, *clock) {
                admitted += 1;
            } else if hit {
                b.fault(block);
            }
            *clock += 1;
            b.tick(*clock, now);
        }
        admitted
    }

    #[test]
    fn accurate_predictions_keep_prefetching_with_a_holdout() {
        let t = Instant::now();
        let mut b = Backoff::new(params(), t);
        let mut c = 0;
        let admitted = feed(&mut b, &mut c, 400, true, t);
        assert_eq!(b.state(), State::On);
        assert_eq!(admitted, 300); // one in four held out
        let s = b.stats(t);
        assert_eq!(s.watched_hits, 100);
        assert_eq!(s.last_accuracy, 1.0);
        assert_eq!(s.backoffs, 0);
    }

    #[test]
    fn useless_predictions_back_off_then_probe_and_stay_off() {
        let t0 = Instant::now();
        let mut b = Backoff::new(params(), t0);
        let mut c = 0;
        // 8 watched misses need 32 predictions, plus the horizon to expire.
        feed(&mut b, &mut c, 32 + 40, false, t0);
        assert_eq!(b.state(), State::Off);
        assert_eq!(b.stats(t0).backoffs, 1);
        assert_eq!(b.stats(t0).last_accuracy, 0.0);
        // Off: nothing admitted, nothing watched.
        assert_eq!(feed(&mut b, &mut c, 50, false, t0), 0);
        assert_eq!(b.state(), State::Off);
        // The probe comes after probe_every, watches everything, and a
        // useless window sends it back Off.
        let t1 = t0 + Duration::from_millis(150);
        b.tick(c, t1);
        assert_eq!(b.state(), State::Probing);
        assert_eq!(feed(&mut b, &mut c, 8 + 20, false, t1), 0);
        assert_eq!(b.state(), State::Off);
        let s = b.stats(t1);
        assert_eq!((s.probes, s.resumes), (1, 0));
        assert!(s.off_s >= 0.15);
    }

    #[test]
    fn a_probe_with_good_predictions_resumes_prefetching() {
        let t0 = Instant::now();
        let mut b = Backoff::new(params(), t0);
        let mut c = 0;
        feed(&mut b, &mut c, 80, false, t0);
        assert_eq!(b.state(), State::Off);
        let t1 = t0 + Duration::from_millis(100);
        b.tick(c, t1);
        assert_eq!(b.state(), State::Probing);
        feed(&mut b, &mut c, 8, true, t1);
        assert_eq!(b.state(), State::On);
        assert_eq!(b.stats(t1).resumes, 1);
        assert!(feed(&mut b, &mut c, 8, true, t1) > 0);
    }

    #[test]
    fn hysteresis_keeps_a_middling_accuracy_where_it_is() {
        // Half of the watched predictions hit: above stop (0.3) so On stays
        // On, below resume (0.6) so a probe does not resume.
        let t0 = Instant::now();
        let mut b = Backoff::new(params(), t0);
        let mut c = 0u64;
        for i in 0..400u64 {
            let block = 1_000_000 + i;
            if !b.admit(block, c) && (i / 4) % 2 == 0 {
                b.fault(block);
            }
            c += 1;
            b.tick(c, t0);
        }
        assert_eq!(b.state(), State::On);
        let acc = b.stats(t0).last_accuracy;
        assert!((0.3..0.6).contains(&acc), "{acc}");
    }

    #[test]
    fn bad_thresholds_are_refused() {
        let mut p = params();
        p.resume_at = 0.1;
        assert!(p.validate().is_err());
        p = params();
        p.holdout = 1;
        assert!(p.validate().is_err());
        assert!(params().validate().is_ok());
    }
}
