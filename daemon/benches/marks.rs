//! The cost of one mark on a marks socket, without a GPU: the round trip a
//! PyTorch allocator waits for at every alive mark (runtime/src/marks),
//! through the daemon's own socket server (`marks::serve`, on a tokio
//! runtime of two workers as prescientd's) and alive gate, with a thread
//! that applies the marks as a backend's turn does. On the GPU the
//! allocator waited 0.1-0.25 ms a request (BENCHMARKS-gpu.md runs 162-164);
//! this measures the part that is the daemon's plumbing, not the driver
//! (BENCHMARKS.md section 13).

#[path = "../tests/support/marks_server.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let (rt, path, rx) = support::server("bench", 2);
    // The backend's side: applies each mark (closes its gate entry).
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let backend = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            let Some(first) = rx.wait(Duration::from_millis(10)) else {
                continue;
            };
            for m in std::iter::once(first).chain(std::iter::from_fn(|| rx.next())) {
                if let Some(id) = m.gate {
                    rx.gate().close(id);
                }
            }
        }
    });
    let conn = UnixStream::connect(&path).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    let mut line = String::new();
    // A full queue answers "busy": asked again, as the runtime does.
    let mut call = |req: &str| loop {
        writer.write_all(req.as_bytes()).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.starts_with(r#"{"ok""#) {
            break;
        }
        assert!(line.contains(r#""busy""#), "{line}");
        std::thread::yield_now();
    };
    let mut g = c.benchmark_group("marks_socket");
    g.throughput(Throughput::Elements(1));
    let (dead, alive) = (
        "{\"cmd\":\"mark\",\"dead\":true,\"ranges\":[[2097152,4194304]]}\n",
        "{\"cmd\":\"mark\",\"dead\":false,\"ranges\":[[2097152,4194304]]}\n",
    );
    g.bench_function("dead_then_alive", |b| {
        b.iter(|| {
            call(dead);
            call(alive);
        })
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    backend.join().unwrap();
    drop(rt);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
