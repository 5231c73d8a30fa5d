//! Host-side model of the VM scenario: the stand-in's trace, GPU size and FIFO
//! eviction, and prescient.ko's worker policy (same engine, same parameters),
//! with the worker running to completion after every event (the most
//! favourable interleaving). Predicts the faults per iteration the VM shows
//! in execution-id mode; in transparent mode use SPEED=1 (below), the only
//! setting here whose level matches the VM's boots (vm-tests/README.md).
//! usage: hostsim [trace.h] [gpu_blocks] [iters]
//! env: BASE (first block number), SUCCS WINDOW ASSOC ROWS WM (watermark %), EXEC=1 (execution-id mode:
//! the runtime reports the kernel index before every kernel), TABLES, LOOK,
//! DEFER=1 (the worker sees a kernel's faults only after the kernel's last
//! access), DEFER=2 (it sees the kernel's start then too: an asynchronous
//! worker that lags by one kernel, as prescient.ko does in the VM, where the
//! kernel's accesses follow SET_EXEC_ID at once),
//! BURST=n (DEFER=1, and the worker sees the faults of n kernels in a row,
//! then takes them one by one, a prefetch round after each, as prescient.ko
//! does with the ring: the VM's replay runs kernels in bursts of 4 ms
//! (stand-in `kernel_us` 1000) between its sleeps),
//! SPEED=m (DEFER=1, and the worker does at most m migrations per kernel,
//! a fault counting as one: faults it has no time for wait, in order, as
//! in prescient.ko's ring, so a burst of faults makes it late; SPEED=1
//! matches the VM's transparent level before and after the plan follower's
//! oldest-place jumps, 43.0 / 39.0 against the boots' 44.0 / 42.4),
//! SKIP=1 (with SPEED: a fault with later ones waiting is fed to the engine
//! without a prefetch round: a module that acts on the newest fault only),
//! JITTER=seed (with BURST=n: bursts of 1 to 2n-1 kernels, drawn from the
//! seed: the worker late by however long its vCPU waited),
//! BATCH=n (DEFER=2, and the engine is fed the events of n kernels in a row
//! before the worker's next prefetch round: prescient.ko before it walked the
//! window after every fault; BATCH=1 gives the 18-19 faults/iteration the VM
//! showed then), TRACK=0 (the module does not hear of the driver's evictions),
//! SAMPLE=n (EXEC=1: the engine hears of a kernel's start only if it
//! faults, at its first fault, or if it is every n-th kernel: prescient.ko
//! reading the runtime's execution-id page at faults and polling it
//! between them, where a poll sees about one kernel in n),
//! LOG=1 (one `faultlog:` line per fault of the 2nd half of the iterations,
//! in the format the VM test prints, and a `faultcause:` count per iteration),
//! WHY=1 (with LOG=1, transparent mode: one `faultwhy:` line per fault the
//! engine is fed in the 2nd half, with what the history follower made of
//! it: `hit` (predicted, the window moves on), `jump` (unpredicted, the
//! window moved elsewhere), `miss` (unpredicted, recorded), `passed`
//! (neither: a block the window had just passed, or the same block again)),
//! STATS=1 (the engine's counters after each run).
use prescient_core::{ChainState, Engine, Mode, Prefetch, Victim};
use prescient_uapi::kernel_default_params;
use std::collections::{HashMap, VecDeque};

/// Why a block is not resident (the stand-in's GONE_* codes).
const GONE: [&str; 5] = ["never", "evict-fault", "evict-migrate", "to-cpu", "discard"];

struct Gpu {
    fifo: VecDeque<u64>,
    cap: usize,
    limit: usize,
    prefetched: u64,
    evicted: u64,
    gone: HashMap<u64, (usize, usize)>,
    track: bool,
    /// The kernel being replayed (for the fault log).
    cur: usize,
}

impl Gpu {
    /// Makes `b` resident, evicting FIFO first if full (`why`: the cause
    /// recorded for the victim). The module hears of the eviction (the
    /// driver's MIGRATION event) and tells the engine.
    fn make_resident(&mut self, e: Option<&mut Engine<Vec<u64>>>, b: u64, why: usize) {
        if self.fifo.len() >= self.cap {
            if let Some(v) = self.fifo.pop_front() {
                self.gone.insert(v, (why, self.cur));
                if let Some(e) = e.filter(|_| self.track) {
                    if e.is_resident(v) {
                        e.demand_evicted(v);
                    }
                }
            }
        }
        self.fifo.push_back(b);
    }

    /// prescient.ko's limit: the watermark, or less when the engine's free
    /// target asks for more free memory.
    fn limit(&self, e: &Engine<Vec<u64>>) -> usize {
        self.limit
            .min(self.cap.saturating_sub(e.free_target() as usize))
            .max(1)
    }
}

fn env(k: &str, d: u32) -> u32 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn evict_one(e: &mut Engine<Vec<u64>>, g: &mut Gpu) -> bool {
    let mut v = [Victim::default()];
    if e.victims(&mut v) == 0 {
        return false;
    }
    g.fifo.retain(|&x| x != v[0].block);
    g.gone.insert(v[0].block, (3, g.cur));
    e.evicted(v[0].block);
    g.evicted += 1;
    true
}

/// Engine calls per worker run at most: an engine state that keeps its
/// chain running without emitting would otherwise spin here for ever
/// (prescient.ko's worker and core's pump bound their steps the same way).
const MAX_WORKER_CALLS: usize = 1 << 16;

fn worker(e: &mut Engine<Vec<u64>>, g: &mut Gpu) {
    for _ in 0..MAX_WORKER_CALLS {
        while e.resident_blocks() as usize > g.limit(e) {
            if !evict_one(e, g) {
                break;
            }
        }
        let mut buf = [Prefetch::default(); 16];
        let n = e.prefetches(&mut buf);
        for q in &buf[..n] {
            if e.is_resident(q.block) {
                continue;
            }
            let mut room = true;
            while e.resident_blocks() as usize >= g.limit(e) {
                if !evict_one(e, g) {
                    room = false;
                    break;
                }
            }
            if !room {
                break;
            }
            if !g.fifo.contains(&q.block) {
                g.make_resident(Some(&mut *e), q.block, 2);
            }
            e.migrated_in(q.block);
            g.prefetched += 1;
        }
        if e.chain_state() != ChainState::Running {
            break;
        }
    }
}

/// Feeds fault `b` to the engine; with `why`, prints what the transparent
/// follower made of it (the counter it moved).
fn feed_fault(e: &mut Engine<Vec<u64>>, b: u64, why: Option<(usize, usize, u64)>) {
    let s0 = e.stats();
    e.fault(b);
    let Some((it, k, base)) = why else {
        return;
    };
    let s1 = e.stats();
    let verdict = if s1.history_hits > s0.history_hits {
        "hit"
    } else if s1.history_jumps > s0.history_jumps {
        "jump"
    } else if s1.history_misses > s0.history_misses {
        "miss"
    } else {
        "passed"
    };
    println!(
        "faultwhy: iter {it} k {k} b {} {verdict} resident {}",
        b - base,
        e.resident_blocks()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("../stand-in/trace.h");
    let gpu: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(24);
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(8);
    let text = std::fs::read_to_string(path).expect("trace.h");
    let arr = |name: &str| -> Vec<u32> {
        let s = &text[text.find(name).expect(name)..];
        let s = &s[s.find('{').unwrap() + 1..s.find('}').unwrap()];
        s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
    };
    let (acc, ks) = (arr("trace_access[]"), arr("trace_kernel[]"));
    // The stand-in's managed range starts at 0x7f00_0000_0000; BASE=<block>
    // moves it (prescient-sim keeps addresses below 16 TiB).
    let base = std::env::var("BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x7f00_0000_0000u64 >> 21);
    let exec_mode = env("EXEC", 0) == 1;
    let log = env("LOG", 0) == 1;
    let why_log = log && env("WHY", 0) == 1;
    for with in [false, true] {
        let mut p = kernel_default_params(gpu as u32);
        p.succs = env("SUCCS", p.succs);
        p.window_blocks = env("WINDOW", p.window_blocks);
        p.assoc = env("ASSOC", p.assoc);
        p.rows = env("ROWS", p.rows);
        if exec_mode {
            p.mode = Mode::ExecId;
            p.max_tables = env("TABLES", 2048);
            p.exec_ids = 4096;
            p.exec_records = 4;
            p.lookahead = env("LOOK", 4);
        }
        let mut e = Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
        let mut g = Gpu {
            fifo: VecDeque::new(),
            cap: gpu,
            limit: gpu * env("WM", 90) as usize / 100,
            prefetched: 0,
            evicted: 0,
            gone: HashMap::new(),
            track: env("TRACK", 1) == 1,
            cur: 0,
        };
        let defer = env("DEFER", 0) >= 1;
        let batch = env("BATCH", 0) as usize;
        let late_start = env("DEFER", 0) == 2 || batch > 0;
        let burst = env("BURST", 0) as usize;
        let jitter = env("JITTER", 0) as u64;
        let speed = i64::from(env("SPEED", 0));
        let mut credit = 0i64;
        let stale_skip = env("SKIP", 0) == 1;
        let (mut rng, mut left) = (jitter.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, 1usize);
        let defer = defer || batch > 0 || burst > 0 || speed > 0;
        // Events not yet seen by the worker: Some(block) = fault, None = kernel start.
        let mut events: Vec<(Option<u64>, u32)> = vec![];
        let mut pending: Vec<u64> = vec![];
        let mut faults_it = vec![];
        let sample = env("SAMPLE", 0) as usize;
        for it in 0..iters {
            let mut faults = 0;
            let mut by = [0u32; 5];
            for k in 0..ks.len() - 1 {
                g.cur = k;
                let verdict_at =
                    (with && why_log && !exec_mode && it >= iters / 2).then_some((it, k, base));
                let mut announced = true;
                if with && exec_mode && !late_start {
                    if sample == 0 || k % sample == 0 {
                        e.kernel_start(k as u32 + 1);
                        worker(&mut e, &mut g);
                    } else {
                        announced = false;
                    }
                }
                for &a in &acc[ks[k] as usize..ks[k + 1] as usize] {
                    let b = base + (a >> 1) as u64;
                    if g.fifo.contains(&b) {
                        continue;
                    }
                    faults += 1;
                    if !announced {
                        // The fault path reads the page: the faulting kernel's start first.
                        e.kernel_start(k as u32 + 1);
                        announced = true;
                    }
                    let (why, left) = g.gone.get(&b).copied().unwrap_or((0, 0));
                    by[why] += 1;
                    if with && log && it >= iters / 2 {
                        println!(
                            "faultlog: exec iter {it} k {k} b {} {} (left during k {left})",
                            b - base,
                            GONE[why]
                        );
                    }
                    g.make_resident(if with { Some(&mut e) } else { None }, b, 1);
                    if with && defer {
                        pending.push(b);
                    } else if with {
                        feed_fault(&mut e, b, verdict_at);
                        e.migrated_in(b);
                        worker(&mut e, &mut g);
                    }
                }
                if batch > 0 && with {
                    if exec_mode {
                        events.push((None, k as u32 + 1));
                    }
                    events.extend(pending.drain(..).map(|b| (Some(b), 0)));
                    if (k + 1) % batch == 0 {
                        for (f, x) in events.drain(..) {
                            match f {
                                Some(b) => {
                                    feed_fault(&mut e, b, verdict_at);
                                    e.migrated_in(b);
                                }
                                None => e.kernel_start(x),
                            }
                        }
                        worker(&mut e, &mut g);
                    }
                    continue;
                }
                if with && exec_mode && late_start {
                    e.kernel_start(k as u32 + 1);
                    worker(&mut e, &mut g);
                }
                if jitter > 0 {
                    // JITTER=seed: bursts of random length (1 to 2*BURST-1
                    // kernels, mean BURST), the VM's worker being late by
                    // however long its vCPU waited.
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    left = left.saturating_sub(1);
                    if left > 0 {
                        continue;
                    }
                    left = 1 + (rng % (2 * burst.max(1) as u64 - 1)) as usize;
                } else if burst > 1 && (k + 1) % burst != 0 {
                    // BURST=n: the faults of n kernels wait for the worker.
                    continue;
                }
                if speed > 0 {
                    // SPEED=m: the worker does m migrations per kernel; each
                    // fault costs one more. What it cannot do waits.
                    credit += speed;
                    let mut done = 0;
                    while credit > 0 && done < pending.len() {
                        let b = pending[done];
                        done += 1;
                        let before = g.prefetched + g.evicted;
                        feed_fault(&mut e, b, verdict_at);
                        e.migrated_in(b);
                        if !(stale_skip && done < pending.len()) {
                            worker(&mut e, &mut g);
                        }
                        credit -= 1 + (g.prefetched + g.evicted - before) as i64;
                    }
                    pending.drain(..done);
                    if pending.is_empty() {
                        credit = credit.min(speed);
                    }
                    continue;
                }
                for b in pending.drain(..) {
                    feed_fault(&mut e, b, verdict_at);
                    e.migrated_in(b);
                    worker(&mut e, &mut g);
                }
            }
            faults_it.push(faults);
            if with && log && it >= iters / 2 {
                println!(
                    "faultcause: exec iter {it} never {} evict-fault {} evict-migrate {} to-cpu {} discard {} (prefetch landed during the fault: 0)",
                    by[0], by[1], by[2], by[3], by[4]
                );
            }
        }
        println!(
            "{}: faults/iter {:?} prefetched {} pre-evicted {} (storage {} KiB)",
            if with { "prescient" } else { "baseline " },
            faults_it,
            g.prefetched,
            g.evicted,
            p.storage_bytes() / 1024
        );
        if std::env::var("STATS").is_ok() {
            println!("{:?}", e.stats());
        }
    }
}
