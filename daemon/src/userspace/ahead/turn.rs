//! The loop's side of launch footprints: finding the ring next to the
//! page, reading it each turn, and asking for records exactly while the
//! page's ids are asked for.

use super::Ahead;
use crate::userspace::mode::PolicyMode;
use crate::userspace::state::Process;
use std::time::{Duration, Instant};

/// How often a ring not found yet is looked for (the runtime makes it
/// with the page, so it is there once the page is).
const LOOK_EVERY: Duration = Duration::from_millis(100);

impl Process {
    /// Reads the launch ring (found once the page is), with `want`: the
    /// page's ids are asked for now.
    pub(in crate::userspace) fn read_ring(&mut self, want: bool) {
        if !self.cfg.footprints || self.cfg.mode != PolicyMode::Prescient {
            return;
        }
        if self.ahead.is_none() {
            if self.ring_foreign || self.ahead_looked.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
                return;
            }
            self.ahead_looked = Some(Instant::now());
            match Ahead::find(self.snap.pid) {
                Ok(a) => self.ahead = a,
                Err(foreign) => {
                    // Its format will not change while it runs: said once.
                    tracing::warn!(pid = self.snap.pid, "{foreign}");
                    self.ring_foreign = true;
                    return;
                }
            }
            if let Some(a) = self.ahead.as_mut() {
                tracing::info!(pid = self.snap.pid, "launch footprints: ring found");
                if self.log.on() {
                    a.log_launches();
                }
            }
        }
        let Some(a) = self.ahead.as_mut() else { return };
        a.want(want);
        if want {
            a.poll();
            for r in a.take_logged() {
                self.log.launch(&r);
            }
        }
        if let Some(ranges) = a.host_advice() {
            let had = self.shared.stats.user_host_ranges > 0;
            self.shared.set_user_host(&ranges);
            if had || !ranges.is_empty() {
                tracing::info!(
                    pid = self.snap.pid,
                    ranges = ranges.len(),
                    bytes = self.shared.stats.user_host_bytes,
                    "the job's own host-memory advice: left in host memory"
                );
            }
        }
    }
}
