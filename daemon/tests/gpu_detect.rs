//! The service with a GPU detected through NVML and without one: a fake
//! libnvidia-ml (tests/fake_nvml, written from NVML's documented API) stands
//! in for the driver's. With it, the module is told the GPU's size, status
//! says where each value came from and every /metrics series carries the
//! GPU's labels; without it, the daemon still answers prescientctl and
//! /metrics and tells the module no size.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_prescientd");

/// The fake NVML with `gpus` GPUs, built into `dir`.
fn fake_nvml(dir: &Path, gpus: u32) -> PathBuf {
    let so = dir.join(format!("libnvidia-ml-{gpus}.so.1"));
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fake_nvml/fake_nvml.c"
        ))
        .arg(format!("-DFAKE_GPUS={gpus}"))
        .status()
        .expect("a C compiler (cc)");
    assert!(st.success());
    so
}

/// A running service on `dir`'s socket and a free port.
struct Service {
    child: Child,
    sock: PathBuf,
    port: u16,
}

impl Service {
    fn start(dir: &Path, gpu_section: &str) -> Service {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let sock = dir.join("control.sock");
        let cfg = dir.join("prescientd.toml");
        std::fs::write(
            &cfg,
            format!(
                "device = \"{}\"\npoll_interval_ms = 100\n[control]\nsocket = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n{gpu_section}\n",
                dir.join("prescient").display(),
                sock.display()
            ),
        )
        .unwrap();
        let child = Command::new(BIN)
            .args(["service", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "no socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        Service { child, sock, port }
    }

    fn status(&self) -> serde_json::Value {
        let s = UnixStream::connect(&self.sock).unwrap();
        let mut w = s.try_clone().unwrap();
        w.write_all(b"{\"cmd\":\"status\"}\n").unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v["ok"].clone()
    }

    fn metrics(&self) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The source status gives for config key `key`.
fn source(status: &serde_json::Value, key: &str) -> (String, String) {
    let s = status["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {status}"));
    (
        s["value"].as_str().unwrap().into(),
        s["source"].as_str().unwrap().into(),
    )
}

#[test]
fn a_detected_gpu_sizes_the_budget_and_labels_every_series() {
    let d = tempfile::tempdir().unwrap();
    let so = fake_nvml(d.path(), 2);
    let svc = Service::start(
        d.path(),
        &format!("[gpu]\nindex = 1\nnvml_library = \"{}\"", so.display()),
    );
    let st = svc.status();
    assert_eq!(
        st["gpu"]["uuid"], "GPU-fa4e0000-0000-0000-0000-000000000001",
        "{st}"
    );
    assert_eq!(st["gpu"]["model"], "Fake NVIDIA H100 80GB HBM3");
    // 80 GiB + 1 MiB, rounded down to whole 2 MB blocks.
    assert_eq!(st["params"]["residency_budget_bytes"], 80u64 << 30, "{st}");
    assert_eq!(
        source(&st, "engine.residency_budget"),
        ("80GiB".into(), "detected GPU size (NVML)".into())
    );
    assert_eq!(
        source(&st, "gpu.index"),
        ("1".into(), "config (NVML)".into())
    );
    assert_eq!(source(&st, "engine.rows").1, "default");
    let m = svc.metrics();
    let up = m
        .lines()
        .find(|l| l.starts_with("prescient_backend_up{"))
        .unwrap_or_else(|| panic!("{m}"));
    for label in [
        r#"UUID="GPU-fa4e0000-0000-0000-0000-000000000001""#,
        r#"gpu="1""#,
        r#"modelName="Fake NVIDIA H100 80GB HBM3""#,
        "Hostname=",
    ] {
        assert!(up.contains(label), "{up}");
    }
    assert!(
        m.lines()
            .any(|l| l.starts_with("prescient_residency_budget_bytes{")
                && l.ends_with(" 85899345920")),
        "{m}"
    );
}

#[test]
fn without_nvml_the_daemon_serves_and_tells_the_module_no_size() {
    let d = tempfile::tempdir().unwrap();
    let svc = Service::start(
        d.path(),
        "[gpu]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"",
    );
    let st = svc.status();
    assert!(st["gpu"].is_null(), "{st}");
    assert_eq!(st["params"]["residency_budget_bytes"], 0, "{st}");
    let (_, why) = source(&st, "gpu.index");
    assert!(
        why.starts_with("not detected: NVML is not available"),
        "{why}"
    );
    let m = svc.metrics();
    assert!(m.contains("prescient_backend_up{"), "{m}");
    assert!(!m.contains("UUID="), "{m}");
    // No budget in force: the series is absent, not a 0 sentinel.
    assert!(!m.contains("prescient_residency_budget_bytes{"), "{m}");
    let log = std::fs::read_to_string(d.path().join("daemon.log")).unwrap();
    assert!(log.contains("no GPU detected"), "{log}");
}

#[test]
fn a_gpu_the_host_does_not_have_is_named_and_nothing_is_sized_from_it() {
    let d = tempfile::tempdir().unwrap();
    let so = fake_nvml(d.path(), 1);
    let svc = Service::start(
        d.path(),
        &format!("[gpu]\nindex = 4\nnvml_library = \"{}\"", so.display()),
    );
    let st = svc.status();
    assert!(st["gpu"].is_null(), "{st}");
    assert_eq!(st["params"]["residency_budget_bytes"], 0);
    let (_, why) = source(&st, "gpu.index");
    assert!(why.contains("GPU 4 does not exist"), "{why}");
}
