//! Engine cost: ns per recorded fault, per emitted prefetch, per victim
//! choice, on tables warmed with a DNN-like pattern (200 kernels of 40
//! blocks in runs, as a G10 trace has them).

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use prescient_core::{Engine, Mode, Params, Prefetch, Victim};

fn warmed(mode: Mode) -> Engine<Vec<u64>> {
    let p = Params {
        mode,
        ..Params::DEEPUM
    };
    let mut e = Engine::new(p, vec![0u64; p.storage_words()]).unwrap();
    let mut pf = [Prefetch::default(); 64];
    for _ in 0..2 {
        for k in 0..200u32 {
            e.kernel_start(k);
            for b in 0..40u64 {
                e.fault(k as u64 * 97 + b * 3);
            }
            while e.prefetches(&mut pf) > 0 {}
        }
    }
    for b in 0..20_000u64 {
        e.migrated_in(b);
    }
    e
}

fn bench(c: &mut Criterion) {
    for (mode, name) in [
        (Mode::ExecId, "exec-id"),
        (Mode::Transparent, "transparent"),
    ] {
        let mut g = c.benchmark_group(name);
        let mut e = warmed(mode);
        let mut k = 0u32;
        g.throughput(Throughput::Elements(1));
        g.bench_function("record_fault", |b| {
            b.iter(|| {
                k = (k + 1) % 200;
                e.fault(black_box(k as u64 * 97 + 5));
            })
        });
        // Per prefetch candidate: a kernel start (or fault) opens a window,
        // then the chain is drained; cost divided by blocks emitted.
        let mut e = warmed(mode);
        let mut pf = [Prefetch::default(); 64];
        let mut emitted = 0u64;
        let mut calls = 0u64;
        g.bench_function("chain_window", |b| {
            b.iter(|| {
                k = (k + 1) % 200;
                match mode {
                    Mode::ExecId => e.kernel_start(k),
                    Mode::Transparent => e.fault(k as u64 * 97),
                }
                loop {
                    let n = e.prefetches(&mut pf);
                    emitted += n as u64;
                    if n == 0 {
                        break;
                    }
                }
                calls += 1;
            })
        });
        if calls > 0 {
            eprintln!(
                "{name}: chain_window emits {:.1} prefetches per window",
                emitted as f64 / calls as f64
            );
        }
        let mut e = warmed(mode);
        let mut v = [Victim::default(); 1];
        g.bench_function("choose_victim", |b| {
            b.iter_batched(
                || (),
                |_| {
                    let n = e.victims(&mut v);
                    if n == 1 {
                        e.evicted(v[0].block);
                        e.migrated_in(v[0].block);
                    }
                },
                BatchSize::SmallInput,
            )
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
