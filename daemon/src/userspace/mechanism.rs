//! Where the time goes between a fault and the block it needs: counters
//! of the mechanism rather than of the policy (issue 20, item 2).
//!
//! - fault -> our read: a fault event's CPU timestamp (the driver's
//!   NV_GETTIME, CLOCK_MONOTONIC_RAW, taken when its fault batch is
//!   serviced) to the moment the loop reads the event (the same clock);
//! - fault -> served: the fault's GPU timestamp (the fault buffer entry's)
//!   to the end GPU timestamp of the first migration of its block to the
//!   GPU after it (the copy engine's, the same GPU clock), split by who
//!   moved it: our UVM_MIGRATE (cause "user") or the driver's fault path;
//! - fault batches: changes of the events' batch id;
//! - copy overlap: GPU time with a copy to the GPU, to the CPU, and both at
//!   once, from every migration event's begin/end GPU timestamps;
//! - churn: blocks we prefetched, then evicted with no fault on them in
//!   between, then faulted on again (evicted before their use).

use prescient_uvm::ioctl as uvm;
use serde::Serialize;
use std::collections::HashMap;

/// Latency buckets: [0, 1) us, then powers of two up to 2^20 us (~1 s).
const BUCKETS: usize = 22;
/// Pending faults and churn states kept at most (then forgotten, counted).
const MAX_TRACKED: usize = 1 << 20;
/// A serve time above this is a stale pairing, not a latency: a fault
/// the driver served with no migration event (memory first touched by the
/// GPU is populated there) stays pending until some later migration of
/// its block, such as our prefetch of it an iteration later. Runs 40-41
/// paired those (up to 10 s): their "served by us" tails are such pairs.
const MAX_SERVE_NS: u64 = 100_000_000;

/// A latency histogram in microseconds (log2 buckets).
#[derive(Serialize, Default, Clone, Debug, PartialEq)]
pub struct Hist {
    pub count: u64,
    pub sum_us: f64,
    /// `buckets[0]`: under 1 us; `buckets[i]`: [2^(i-1), 2^i) us.
    pub buckets: Vec<u64>,
}

impl Hist {
    pub fn add_ns(&mut self, ns: u64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; BUCKETS];
        }
        let us = ns / 1000;
        let i = (64 - us.leading_zeros() as usize).min(BUCKETS - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_us += ns as f64 / 1000.0;
    }

    /// The upper edge (us) of the bucket holding quantile `q` (0..=1).
    pub fn quantile_us(&self, q: f64) -> f64 {
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return (1u64 << i) as f64;
            }
        }
        0.0
    }
}

/// The mechanism counters of one process (in the stats JSON).
#[derive(Serialize, Default, Clone, Debug)]
pub struct Mechanism {
    pub fault_batches: u64,
    pub fault_read: Hist,
    pub fault_served_by_us: Hist,
    pub fault_served_by_driver: Hist,
    /// GPU seconds with a copy in flight to the GPU, to the CPU, and both.
    pub h2d_busy_s: f64,
    pub d2h_busy_s: f64,
    pub both_busy_s: f64,
    /// Prefetched blocks the GPU faulted on before we evicted them (the
    /// prefetch came late, or the driver evicted it).
    pub prefetch_faulted: u64,
    /// Prefetched blocks we evicted with no fault on them in between
    /// (used while resident, or never: the upper bound of churn).
    pub prefetch_evicted_unfaulted: u64,
    /// Of those, blocks the GPU then faulted on: evicted before their use.
    pub churn: u64,
    /// Faults or churn states forgotten at the tracking bound.
    pub forgotten: u64,
}

/// What we know of a block we prefetched.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    Prefetched,
    EvictedUnfaulted,
}

/// The running state behind [`Mechanism`].
#[derive(Default)]
pub struct Tracker {
    pub m: Mechanism,
    last_batch: Option<u32>,
    /// Block -> GPU time of its first fault not yet served.
    pending: HashMap<u64, u64>,
    fates: HashMap<u64, Fate>,
    copies: Overlap,
}

impl Tracker {
    /// A fault event on `block`, read at `read_ns` (CLOCK_MONOTONIC_RAW).
    pub fn fault(&mut self, f: &uvm::GpuFaultV2, block: u64, read_ns: u64) {
        if self.last_batch != Some(f.batch_id) {
            self.last_batch = Some(f.batch_id);
            self.m.fault_batches += 1;
        }
        if f.time_stamp != 0 && read_ns >= f.time_stamp {
            self.m.fault_read.add_ns(read_ns - f.time_stamp);
        }
        if f.time_stamp_gpu != 0 {
            bounded(&mut self.pending, &mut self.m.forgotten);
            self.pending.entry(block).or_insert(f.time_stamp_gpu);
        }
        match self.fates.remove(&block) {
            Some(Fate::Prefetched) => self.m.prefetch_faulted += 1,
            Some(Fate::EvictedUnfaulted) => self.m.churn += 1,
            None => {}
        }
    }

    /// A migration event: serves a pending fault when it goes to the GPU.
    pub fn migration(&mut self, m: &uvm::MigrationV2, block: u64) {
        let to_gpu = m.dst_index != uvm::CPU_INDEX;
        if m.begin_time_stamp_gpu != 0 && m.end_time_stamp_gpu >= m.begin_time_stamp_gpu {
            self.copies
                .add(to_gpu, m.begin_time_stamp_gpu, m.end_time_stamp_gpu);
        }
        if !to_gpu {
            // The block left the GPU: a fault still pending on it is stale.
            self.pending.remove(&block);
            return;
        }
        if m.end_time_stamp_gpu == 0 {
            return;
        }
        let Some(t) = self.pending.remove(&block) else {
            return;
        };
        let ns = m.end_time_stamp_gpu.saturating_sub(t);
        if m.end_time_stamp_gpu < t || ns > MAX_SERVE_NS {
            return;
        }
        if m.migration_cause == uvm::CAUSE_USER {
            self.m.fault_served_by_us.add_ns(ns);
        } else {
            self.m.fault_served_by_driver.add_ns(ns);
        }
    }

    /// We issued a prefetch of `block`.
    pub fn prefetched(&mut self, block: u64) {
        bounded(&mut self.fates, &mut self.m.forgotten);
        self.fates.insert(block, Fate::Prefetched);
    }

    /// We evicted `block` (a copy to the CPU, not a discard).
    pub fn evicted(&mut self, block: u64) {
        if let Some(f) = self.fates.get_mut(&block) {
            if *f == Fate::Prefetched {
                *f = Fate::EvictedUnfaulted;
                self.m.prefetch_evicted_unfaulted += 1;
            }
        }
    }

    /// The counters now.
    pub fn snapshot(&mut self) -> Mechanism {
        let (h, d, b) = self.copies.busy_ns();
        self.m.h2d_busy_s = h as f64 / 1e9;
        self.m.d2h_busy_s = d as f64 / 1e9;
        self.m.both_busy_s = b as f64 / 1e9;
        self.m.clone()
    }
}

/// Forgets everything in `map` once it holds `MAX_TRACKED` entries.
fn bounded<V>(map: &mut HashMap<u64, V>, forgotten: &mut u64) {
    if map.len() >= MAX_TRACKED {
        *forgotten += map.len() as u64;
        map.clear();
    }
}

/// GPU time covered by copies in each direction and by both at once.
/// Intervals are merged per direction as they come (the driver records
/// them in about completion order); an interval that starts before the
/// end of what is already counted adds only its part after it.
#[derive(Default)]
struct Overlap {
    /// Per direction [to GPU, to CPU]: the open interval.
    open: [(u64, u64); 2],
    busy: [u64; 2],
    /// Closed intervals per direction not yet intersected with the other.
    closed: [Vec<(u64, u64)>; 2],
    both: u64,
}

impl Overlap {
    fn add(&mut self, to_gpu: bool, b0: u64, b1: u64) {
        let k = usize::from(!to_gpu);
        let (s, e) = self.open[k];
        if e == 0 {
            self.open[k] = (b0, b1);
        } else if b0 > e {
            self.busy[k] += e - s;
            self.closed[k].push((s, e));
            self.open[k] = (b0, b1);
        } else {
            self.open[k].1 = e.max(b1);
        }
        if self.closed[k].len() >= 4096 {
            self.intersect();
        }
    }

    /// Adds the overlap of the closed intervals of both directions up to
    /// the earlier of the two open intervals' starts, and drops them.
    /// A direction with no copy yet does not hold the other back: a copy
    /// of it recorded later but starting earlier is then missed (counted
    /// in neither `both` nor lost from `busy`).
    fn intersect(&mut self) {
        let start = |k: usize| match self.open[k] {
            (_, 0) => u64::MAX,
            (s, _) => s,
        };
        let upto = start(0).min(start(1));
        let [a, b] = std::mem::take(&mut self.closed);
        self.both += overlap_ns(&a, &b, upto);
        // What is left starts at `upto`: none of it is counted twice.
        let rest = |v: Vec<(u64, u64)>| -> Vec<(u64, u64)> {
            v.into_iter()
                .filter(|x| x.1 > upto)
                .map(|(s, e)| (s.max(upto), e))
                .collect()
        };
        self.closed = [rest(a), rest(b)];
    }

    /// (to GPU, to CPU, both) in ns, the open intervals included.
    fn busy_ns(&mut self) -> (u64, u64, u64) {
        self.intersect();
        let mut a = self.closed[0].clone();
        let mut b = self.closed[1].clone();
        a.push(self.open[0]);
        b.push(self.open[1]);
        let both = self.both + overlap_ns(&a, &b, u64::MAX);
        let open = |k: usize| self.open[k].1 - self.open[k].0;
        (self.busy[0] + open(0), self.busy[1] + open(1), both)
    }
}

/// Total overlap of two sorted lists of disjoint intervals, before `upto`.
fn overlap_ns(a: &[(u64, u64)], b: &[(u64, u64)], upto: u64) -> u64 {
    let (mut i, mut j, mut t) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let s = a[i].0.max(b[j].0);
        let e = a[i].1.min(b[j].1).min(upto);
        t += e.saturating_sub(s);
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_powers_of_two_of_microseconds() {
        let mut h = Hist::default();
        for ns in [500, 1_500, 3_000, 3_900, 1_000_000] {
            h.add_ns(ns);
        }
        assert_eq!(h.count, 5);
        assert_eq!(&h.buckets[..3], &[1, 1, 2]);
        assert_eq!(h.buckets[10], 1); // 1000 us is in [512, 1024)
        assert_eq!(h.quantile_us(0.5), 4.0);
        assert_eq!(h.quantile_us(1.0), 1024.0);
    }

    fn fault(block: u64, batch: u32, cpu: u64, gpu: u64) -> uvm::GpuFaultV2 {
        uvm::GpuFaultV2 {
            address: block << 21,
            batch_id: batch,
            time_stamp: cpu,
            time_stamp_gpu: gpu,
            ..Default::default()
        }
    }

    fn mig(block: u64, to_gpu: bool, cause: u8, b0: u64, b1: u64) -> uvm::MigrationV2 {
        let (src, dst) = if to_gpu {
            (uvm::CPU_INDEX, 1)
        } else {
            (1, uvm::CPU_INDEX)
        };
        uvm::MigrationV2 {
            migration_cause: cause,
            src_index: src,
            dst_index: dst,
            address: block << 21,
            begin_time_stamp_gpu: b0,
            end_time_stamp_gpu: b1,
            ..Default::default()
        }
    }

    #[test]
    fn faults_are_served_by_the_next_migration_of_their_block() {
        let mut t = Tracker::default();
        t.fault(&fault(5, 1, 100_000, 1_000_000), 5, 150_000);
        t.fault(&fault(5, 1, 100_000, 1_200_000), 5, 151_000); // same pending fault
        t.fault(&fault(6, 2, 100_000, 1_000_000), 6, 180_000);
        assert_eq!(t.m.fault_batches, 2);
        assert_eq!(t.m.fault_read.count, 3);
        t.migration(&mig(5, true, uvm::CAUSE_USER, 1_100_000, 1_300_000), 5);
        t.migration(&mig(6, true, uvm::CAUSE_COHERENCE, 1_050_000, 1_090_000), 6);
        // A second migration of 5 serves nothing more.
        t.migration(&mig(5, true, uvm::CAUSE_USER, 1_400_000, 1_500_000), 5);
        assert_eq!(t.m.fault_served_by_us.count, 1);
        assert_eq!(t.m.fault_served_by_us.sum_us, 300.0);
        assert_eq!(t.m.fault_served_by_driver.sum_us, 90.0);
        // A fault served with no migration (first touch), then its block
        // evicted and prefetched much later: no latency is made of it.
        t.fault(&fault(7, 3, 0, 2_000_000), 7, 0);
        t.migration(&mig(7, false, uvm::CAUSE_USER, 3_000_000, 3_100_000), 7);
        t.migration(&mig(7, true, uvm::CAUSE_USER, 4_000_000, 4_100_000), 7);
        t.fault(&fault(8, 3, 0, 2_000_000), 8, 0);
        t.migration(&mig(8, true, uvm::CAUSE_USER, 900_000_000, 900_100_000), 8);
        assert_eq!(t.m.fault_served_by_us.count, 1);
    }

    #[test]
    fn churn_is_a_prefetch_evicted_then_faulted() {
        let mut t = Tracker::default();
        t.prefetched(1);
        t.prefetched(2);
        t.prefetched(3);
        t.evicted(1);
        t.evicted(2);
        t.fault(&fault(1, 1, 0, 0), 1, 0); // needed after its eviction
        t.fault(&fault(3, 1, 0, 0), 3, 0); // the prefetch was late
        assert_eq!(t.m.prefetch_evicted_unfaulted, 2);
        assert_eq!(t.m.churn, 1);
        assert_eq!(t.m.prefetch_faulted, 1);
    }

    #[test]
    fn copy_overlap_by_brute_force_over_the_timeline() {
        // Intervals in ns (to GPU, to CPU), in completion order.
        let evs = [
            (true, 0, 100),
            (false, 50, 120),
            (true, 90, 200),
            (true, 300, 400),
            (false, 350, 500),
            (false, 600, 700),
            (true, 650, 660),
        ];
        let mut o = Overlap::default();
        for &(g, b0, b1) in &evs {
            o.add(g, b0, b1);
        }
        // Every ns of the timeline checked one by one.
        let covered = |dir: bool, t: u64| evs.iter().any(|&(g, s, e)| g == dir && s <= t && t < e);
        let (mut h, mut d, mut both) = (0, 0, 0);
        for t in 0..800 {
            let (x, y) = (covered(true, t), covered(false, t));
            h += u64::from(x);
            d += u64::from(y);
            both += u64::from(x && y);
        }
        assert_eq!(o.busy_ns(), (h, d, both));
    }
}
