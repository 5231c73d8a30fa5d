//! One measured phase of the sweep: a list of UVM_MIGRATE jobs taken by
//! `threads` threads from one shared cursor (as prescientd's workers take
//! them from their queue), then a synchronous UVM_MIGRATE of every
//! destination region as a fence, so that the phase's time includes the
//! copies and not only the driver's CPU-side work of the async calls.
//!
//! Why a synchronous migrate is a fence: uvm_migrate.c adds each block's
//! tracker to the call's tracker even when nothing moves
//! (`uvm_va_block_migrate_locked`) and waits on it when the call is not
//! UVM_MIGRATE_FLAG_ASYNC, so it returns once every copy queued on those
//! blocks has finished.

use prescient_uvm::ioctl as uvm;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// One UVM_MIGRATE: `[base, base + len)` to the GPU or to the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub base: u64,
    pub len: u64,
    pub to_gpu: bool,
}

/// Splits `[base, base + bytes)` into jobs of `size` bytes (the last may
/// be shorter), all one way.
pub fn split(base: u64, bytes: u64, size: u64, to_gpu: bool) -> Vec<Job> {
    let size = size.max(1);
    (0..bytes.div_ceil(size))
        .map(|i| Job {
            base: base + i * size,
            len: size.min(bytes - i * size),
            to_gpu,
        })
        .collect()
}

/// Alternates two job lists (one to the GPU, one to the CPU), the rest of
/// the longer at the end: both directions in flight at once.
pub fn interleave(a: Vec<Job>, b: Vec<Job>) -> Vec<Job> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return out,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
}

/// Per-call latencies of one direction, in microseconds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Calls {
    pub us: Vec<u64>,
    pub errors: u64,
}

impl Calls {
    /// The `p`-quantile (nearest rank) of the latencies; 0 when none.
    pub fn quantile(&self, p: f64) -> u64 {
        let mut v = self.us.clone();
        v.sort_unstable();
        if v.is_empty() {
            return 0;
        }
        let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    pub fn mean(&self) -> f64 {
        if self.us.is_empty() {
            return 0.0;
        }
        self.us.iter().sum::<u64>() as f64 / self.us.len() as f64
    }
}

/// What one phase took.
#[derive(Debug, Default)]
pub struct Outcome {
    /// From the first call to the last call's return.
    pub issue: Duration,
    /// From the first call to the fence's return.
    pub total: Duration,
    /// [to the GPU, to the CPU].
    pub calls: [Calls; 2],
}

/// Runs `jobs` on `threads` threads with UVM_MIGRATE `flags`, then the
/// fence: a synchronous migrate of each of `fences` (base, len, to_gpu).
pub fn run(
    fd: RawFd,
    gpu: [u8; 16],
    jobs: &[Job],
    threads: usize,
    flags: u32,
    fences: &[Job],
) -> Outcome {
    let next = AtomicUsize::new(0);
    let t0 = Instant::now();
    let per: Vec<[Calls; 2]> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| s.spawn(|| worker(fd, gpu, jobs, &next, flags)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let issue = t0.elapsed();
    fence(fd, gpu, fences);
    let total = t0.elapsed();
    let mut calls: [Calls; 2] = Default::default();
    for p in per {
        for (k, c) in p.into_iter().enumerate() {
            calls[k].us.extend(c.us);
            calls[k].errors += c.errors;
        }
    }
    Outcome {
        issue,
        total,
        calls,
    }
}

/// Synchronous migrates of `regions` to their destinations: moves what is
/// not there yet and waits for every copy queued on their blocks.
pub fn fence(fd: RawFd, gpu: [u8; 16], regions: &[Job]) -> u64 {
    let mut errors = 0;
    for r in regions {
        let dest = if r.to_gpu { gpu } else { uvm::CPU_UUID };
        if uvm::migrate(fd, r.base, r.len, dest, 0).is_err() {
            errors += 1;
        }
    }
    errors
}

/// One thread: takes the next job until none is left.
fn worker(fd: RawFd, gpu: [u8; 16], jobs: &[Job], next: &AtomicUsize, flags: u32) -> [Calls; 2] {
    let mut calls: [Calls; 2] = Default::default();
    loop {
        let i = next.fetch_add(1, Relaxed);
        let Some(j) = jobs.get(i) else {
            return calls;
        };
        let dest = if j.to_gpu { gpu } else { uvm::CPU_UUID };
        let t = Instant::now();
        let r = uvm::migrate(fd, j.base, j.len, dest, flags);
        let c = &mut calls[usize::from(!j.to_gpu)];
        c.us.push(t.elapsed().as_micros() as u64);
        if r.is_err() {
            c.errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_the_range_in_jobs_of_the_size() {
        let mb = 1 << 20;
        let j = split(64 * mb, 10 * mb, 4 * mb, true);
        let got: Vec<(u64, u64)> = j.iter().map(|j| (j.base / mb, j.len / mb)).collect();
        assert_eq!(got, [(64, 4), (68, 4), (72, 2)]);
        assert!(j.iter().all(|j| j.to_gpu));
    }

    #[test]
    fn interleave_alternates_then_appends_the_rest() {
        let g = split(0, 6, 2, true);
        let c = split(100, 2, 2, false);
        let got: Vec<(u64, bool)> = interleave(g, c)
            .iter()
            .map(|j| (j.base, j.to_gpu))
            .collect();
        assert_eq!(got, [(0, true), (100, false), (2, true), (4, true)]);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let c = Calls {
            us: vec![50, 10, 40, 20, 30],
            errors: 0,
        };
        assert_eq!(c.quantile(0.5), 30);
        assert_eq!(c.quantile(0.9), 50);
        assert_eq!(c.quantile(0.0), 10);
        assert_eq!(c.mean(), 30.0);
        assert_eq!(Calls::default().quantile(0.5), 0);
    }
}
