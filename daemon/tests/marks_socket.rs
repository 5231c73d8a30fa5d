//! The marks socket of `prescientd attach --pid PID --marks-socket PATH`, end to
//! end over a real Unix socket: this test process is the "target", a thread
//! stands in for its backend loop.

use prescientd::userspace::marks;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

fn call(s: &mut UnixStream, line: &str) -> serde_json::Value {
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut r = String::new();
    BufReader::new(s.try_clone().unwrap())
        .read_line(&mut r)
        .unwrap();
    serde_json::from_str(&r).unwrap()
}

#[test]
#[allow(clippy::single_range_in_vec_init)] // one block per mark
fn marks_reach_the_backend_and_alive_waits_for_it() {
    let dir = std::env::temp_dir().join(format!("prescient-marks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("marks.sock");
    let _ = std::fs::remove_file(&path);
    let (tx, rx) = marks::channel();
    let me = std::process::id() as i32;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = {
        let _g = rt.enter();
        tokio::net::UnixListener::bind(&path).unwrap()
    };
    rt.spawn(marks::serve(listener, me, tx));
    let backend = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok(m) = rx.recv() {
            seen.push((m.dead, m.blocks.clone()));
            if let Some(done) = m.done {
                done.send(prescient_uapi::control::Applied {
                    blocks: 1,
                    refetched: 1,
                    ..Default::default()
                })
                .unwrap();
            }
        }
        seen
    });
    let mut s = UnixStream::connect(&path).unwrap();
    // 4 MB at a 2 MB boundary + 1 MB: one whole block is dead.
    let r = call(
        &mut s,
        r#"{"cmd":"mark","dead":true,"ranges":[[3145728,4194304]]}"#,
    );
    assert_eq!(r["ok"]["reply"], "marked", "{r}");
    let r = call(
        &mut s,
        r#"{"cmd":"mark","dead":false,"ranges":[[4194304,2097152]]}"#,
    );
    assert_eq!(r["ok"]["refetched"], 1, "{r}");
    let r = call(&mut s, r#"{"cmd":"status"}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    let r = call(&mut s, r#"{"cmd":"mark","dead":true,"ranges":[[1,2]]}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    let r = call(&mut s, "not json");
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    drop(s);
    drop(rt); // ends the server, and with it the last sender
    let seen = backend.join().unwrap();
    assert_eq!(seen, vec![(true, vec![2..3]), (false, vec![2..3])]);
    let _ = std::fs::remove_dir_all(&dir);
}
