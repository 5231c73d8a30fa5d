//! Host-side model of the VM scenario: the stand-in's trace, GPU size and FIFO
//! eviction, and prescient.ko's worker policy (same engine, same parameters),
//! with the worker running to completion after every event (the most
//! favourable interleaving). Predicts the faults per iteration the VM shows.
//! usage: hostsim [trace.h] [gpu_blocks] [iters]
//! env: SUCCS WINDOW ASSOC ROWS WM (watermark %), EXEC=1 (execution-id mode:
//! the runtime reports the kernel index before every kernel), TABLES, LOOK.
use prescient_core::{ChainState, Engine, Mode, Prefetch, Victim};
use prescient_uapi::kernel_default_params;
use std::collections::VecDeque;

struct Gpu {
    fifo: VecDeque<u64>,
    cap: usize,
    limit: usize,
    prefetched: u64,
    evicted: u64,
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
    e.evicted(v[0].block);
    g.evicted += 1;
    true
}

fn worker(e: &mut Engine<Vec<u64>>, g: &mut Gpu) {
    loop {
        while e.resident_blocks() as usize > g.limit {
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
            while e.resident_blocks() as usize >= g.limit {
                if !evict_one(e, g) {
                    room = false;
                    break;
                }
            }
            if !room {
                break;
            }
            if !g.fifo.contains(&q.block) {
                if g.fifo.len() >= g.cap {
                    g.fifo.pop_front();
                }
                g.fifo.push_back(q.block);
            }
            e.migrated_in(q.block);
            g.prefetched += 1;
        }
        if e.chain_state() != ChainState::Running {
            break;
        }
    }
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
    let base = 0x7f00_0000_0000u64 >> 21;
    let exec_mode = env("EXEC", 0) == 1;
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
        };
        let mut faults_it = vec![];
        for _ in 0..iters {
            let mut faults = 0;
            for k in 0..ks.len() - 1 {
                if with && exec_mode {
                    e.kernel_start(k as u32 + 1);
                    worker(&mut e, &mut g);
                }
                for &a in &acc[ks[k] as usize..ks[k + 1] as usize] {
                    let b = base + (a >> 1) as u64;
                    if g.fifo.contains(&b) {
                        continue;
                    }
                    faults += 1;
                    if g.fifo.len() >= g.cap {
                        g.fifo.pop_front();
                    }
                    g.fifo.push_back(b);
                    if with {
                        e.fault(b);
                        e.migrated_in(b);
                        worker(&mut e, &mut g);
                    }
                }
            }
            faults_it.push(faults);
        }
        println!(
            "{}: faults/iter {:?} prefetched {} pre-evicted {} (storage {} KiB)",
            if with { "prescient" } else { "baseline " },
            faults_it,
            g.prefetched,
            g.evicted,
            p.storage_bytes() / 1024
        );
    }
}
