//! Caps on a socket's connections: in all (for peers other than root) and
//! per uid, each held as a slot for the connection's life.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one socket allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once from peers other than root.
    pub max_connections: usize,
    /// Connections at once from one uid (root included).
    pub max_per_uid: usize,
    /// How long a connection may wait on its peer (a line, or a reply read).
    pub idle: Duration,
    /// Whether a peer may stay quiet (send no line) for longer than `idle`.
    ///
    /// A control client that goes quiet is gone and gives its slot back; a
    /// job's marks connection is quiet whenever the job frees nothing (an
    /// evaluation phase), and closing it would make all its dead ranges
    /// alive again. A reply left unread still ends either after `idle`.
    pub quiet_allowed: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_per_uid: 16,
            idle: Duration::from_secs(60),
            quiet_allowed: false,
        }
    }
}

#[derive(Default)]
struct Counts {
    others: usize,
    per_uid: HashMap<u32, usize>,
}

/// The connections a socket holds now.
#[derive(Clone)]
pub(super) struct Slots {
    limits: Limits,
    counts: Arc<Mutex<Counts>>,
}

/// One connection's place; released when dropped.
pub(super) struct Slot {
    uid: u32,
    counts: Arc<Mutex<Counts>>,
}

impl Slots {
    pub(super) fn new(limits: Limits) -> Slots {
        Slots {
            limits,
            counts: Arc::default(),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a peer of `uid` (an unknown uid counts as nobody's), or
    /// None when a cap is reached.
    pub(super) fn take(&self, uid: Option<u32>) -> Option<Slot> {
        let uid = uid.unwrap_or(u32::MAX);
        let mut c = self.counts();
        let mine = c.per_uid.get(&uid).copied().unwrap_or(0);
        if mine >= self.limits.max_per_uid || (uid != 0 && c.others >= self.limits.max_connections)
        {
            return None;
        }
        *c.per_uid.entry(uid).or_insert(0) += 1;
        if uid != 0 {
            c.others += 1;
        }
        Some(Slot {
            uid,
            counts: self.counts.clone(),
        })
    }

    /// Why a peer of `uid` got no slot, as its reply says.
    pub(super) fn why(&self, uid: Option<u32>) -> String {
        format!(
            "too many connections (at most {} per uid and {} in all); try again later",
            self.limits.max_per_uid, self.limits.max_connections
        ) + if uid.is_none() {
            " (peer uid unknown)"
        } else {
            ""
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.per_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                c.per_uid.remove(&self.uid);
            }
        }
        if self.uid != 0 {
            c.others -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_uid_and_in_all_with_root_kept_apart() {
        let s = Slots::new(Limits {
            max_connections: 3,
            max_per_uid: 2,
            idle: Duration::from_secs(1),
            quiet_allowed: false,
        });
        let a1 = s.take(Some(1000)).unwrap();
        let _a2 = s.take(Some(1000)).unwrap();
        assert!(s.take(Some(1000)).is_none(), "per-uid cap");
        let _b = s.take(Some(1001)).unwrap();
        assert!(s.take(Some(1002)).is_none(), "total cap");
        // Root is not crowded out by the others.
        let _r = s.take(Some(0)).unwrap();
        drop(a1);
        assert!(s.take(Some(1002)).is_some());
    }
}
