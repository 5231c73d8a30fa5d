//! A marks socket server of this process, as `prescientd attach
//! --marks-socket` runs one, for the tests and the benchmark.

use prescientd::pidfd::Pidfd;
use prescientd::userspace::marks;
use std::sync::Arc;

/// A marks server for this process on a fresh socket named by `name`, on a
/// tokio runtime of `workers` threads: (runtime, path, receiver).
pub fn server(
    name: &str,
    workers: usize,
) -> (tokio::runtime::Runtime, std::path::PathBuf, marks::Receiver) {
    let dir = std::env::temp_dir().join(format!("prescient-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("marks.sock");
    let _ = std::fs::remove_file(&path);
    let (tx, rx) = marks::channel();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let listener = {
        let _g = rt.enter();
        tokio::net::UnixListener::bind(&path).unwrap()
    };
    let target = Arc::new(Pidfd::open(std::process::id() as i32).unwrap());
    rt.spawn(marks::serve(listener, target, tx));
    (rt, path, rx)
}
