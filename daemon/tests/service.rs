//! prescientd as a service, without prescient.ko (the VM end-to-end test in
//! tests/e2e covers the module): bad configs, a port in use, a busy control
//! socket, a missing or wrong device node, the control protocol, SIGHUP and
//! SIGTERM. Each case checks the exit status and that the message names the
//! key or the cause.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_prescientd");

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("prescientd-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
    /// A config with this test's socket, a free port and `extra` appended
    /// (top-level keys must come before any table in `top`).
    fn config(&self, top: &str, extra: &str) -> PathBuf {
        let port = free_port();
        let text = format!(
            "device = \"{dev}\"\npoll_interval_ms = 100\n{top}\n[control]\nsocket = \"{sock}\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n{extra}\n",
            dev = self.path("prescient").display(),
            sock = self.path("run/control.sock").display(),
        );
        let p = self.path("prescientd.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run_to_end(cfg: &Path) -> Output {
    let mut c = Command::new(BIN)
        .args(["service", "--config"])
        .arg(cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            c.kill().unwrap();
            panic!("prescientd did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

struct Daemon {
    child: Child,
    sock: PathBuf,
}

impl Daemon {
    fn start(dir: &Dir, cfg: &Path) -> Daemon {
        let child = Command::new(BIN)
            .args(["service", "--config"])
            .arg(cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        let sock = dir.path("run/control.sock");
        let t0 = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "socket never appeared"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, sock }
    }
    fn call(&self, req: &str) -> serde_json::Value {
        let s = UnixStream::connect(&self.sock).unwrap();
        let mut w = s.try_clone().unwrap();
        w.write_all(req.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }
    fn signal(&self, sig: i32) {
        // SAFETY: plain syscall on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }
    fn wait(mut self) -> i32 {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "daemon did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `r` is an error reply of class `kind` whose message contains `says`.
fn assert_error(r: &serde_json::Value, kind: &str, says: &str) {
    assert_eq!(r["error"]["kind"], kind, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{r}");
}

fn metrics(cfg: &Path) -> String {
    let text = std::fs::read_to_string(cfg).unwrap();
    let listen = text
        .lines()
        .find_map(|l| l.strip_prefix("listen = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut s, &mut body).unwrap();
    body
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .map(without_host_labels)
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A sample line without the labels every series carries (this host and
/// its GPU, as dcgm-exporter names them), so a series reads as its own
/// labels: `x{Hostname="h"} 1` -> `x 1`, `x{pid="1",Hostname="h"} 1` ->
/// `x{pid="1"} 1`.
fn without_host_labels(line: &str) -> String {
    let Some((name, rest)) = line.split_once('{') else {
        return line.to_string();
    };
    let Some((labels, value)) = rest.rsplit_once('}') else {
        return line.to_string();
    };
    let own: Vec<&str> = labels
        .split(',')
        .filter(|kv| {
            let k = kv.split('=').next().unwrap_or("");
            !["Hostname", "gpu", "UUID", "device", "modelName"].contains(&k)
        })
        .collect();
    if own.is_empty() {
        format!("{name}{value}")
    } else {
        format!("{name}{{{}}}{value}", own.join(","))
    }
}

#[test]
fn bad_configs_exit_78_naming_the_key_and_touch_nothing() {
    let d = Dir::new("badcfg");
    for (top, extra, key) in [
        ("poll_interval_ms = 1", "", "poll_interval_ms"),
        ("", "[engine]\nassoc = 99", "engine.assoc"),
        ("", "[engine]\nrows = 1000", "engine.rows"),
        (
            "",
            "[engine]\nresidency_budget = \"1M\"",
            "engine.residency_budget",
        ),
        ("", "[engine]\nwat = 1", "wat"),
        ("colour = \"blue\"", "", "colour"),
        ("", "[attach]\npids = [2147483000]", "attach.pids[0]"),
        (
            "",
            "[attach]\ncmdline_patterns = [\"[\"]",
            "attach.cmdline_patterns[0]",
        ),
    ] {
        let cfg = d.config(top, extra);
        let o = run_to_end(&cfg);
        assert_eq!(o.status.code(), Some(78), "{key}: {}", stderr(&o));
        assert!(stderr(&o).contains(key), "{key}: {}", stderr(&o));
        assert!(
            !d.path("run/control.sock").exists(),
            "{key}: socket left behind"
        );
    }
    // --check-config says the same without starting.
    let cfg = d.config("", "[engine]\nsuccs = 0");
    let o = Command::new(BIN)
        .args(["service", "--check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78));
    assert!(stderr(&o).contains("engine.succs"), "{}", stderr(&o));
    let o = run_to_end(&d.path("nonexistent.toml"));
    assert_eq!(o.status.code(), Some(78));
    assert!(stderr(&o).contains("nonexistent.toml"), "{}", stderr(&o));
}

#[test]
fn a_port_in_use_exits_1_naming_metrics_listen() {
    let d = Dir::new("port");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let cfg = d.config("", "");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("listen") {
                format!("listen = \"127.0.0.1:{port}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&cfg, text).unwrap();
    let o = run_to_end(&cfg);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("metrics.listen"), "{}", stderr(&o));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
}

#[test]
fn missing_module_exits_69_when_asked_and_a_foreign_node_is_refused() {
    let d = Dir::new("missing");
    let cfg = d.config("on_missing_module = \"exit\"", "");
    let o = run_to_end(&cfg);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("not loaded"), "{}", stderr(&o));
    // A device node that is not prescient's: refused, not misread.
    let cfg = d.config("", "");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&d.path("prescient").display().to_string(), "/dev/null");
    std::fs::write(&cfg, text).unwrap();
    let o = run_to_end(&cfg);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("/dev/null"), "{}", stderr(&o));
}

#[test]
fn waits_for_the_module_answers_ctl_reloads_and_stops_cleanly() {
    let d = Dir::new("wait");
    let cfg = d.config("", "");
    let dm = Daemon::start(&d, &cfg);

    // A second daemon on the same socket is refused.
    let port2 = free_port();
    let text = std::fs::read_to_string(&cfg).unwrap();
    let listen_line = text
        .lines()
        .find(|l| l.starts_with("listen"))
        .unwrap()
        .to_string();
    let cfg2 = d.path("second.toml");
    std::fs::write(
        &cfg2,
        text.replace(&listen_line, &format!("listen = \"127.0.0.1:{port2}\"")),
    )
    .unwrap();
    let o = run_to_end(&cfg2);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("another prescientd"), "{}", stderr(&o));

    let st = dm.call(r#"{"cmd":"status"}"#);
    assert_eq!(st["ok"]["reply"], "status", "{st}");
    assert_eq!(st["ok"]["backend_up"], false);
    assert_eq!(st["ok"]["params"]["assoc"], 2);
    assert!(
        st["ok"]["module"].is_null() && st["ok"]["userspace"].is_null(),
        "{st}"
    );
    // Without the module, stats is a state as status is: why, what to do.
    let r = dm.call(r#"{"cmd":"stats"}"#);
    assert_eq!(r["ok"]["reply"], "stats", "{r}");
    assert_eq!(r["ok"]["backend_up"], false, "{r}");
    let why = r["ok"]["unavailable"].as_str().unwrap_or_default();
    assert!(why.starts_with("prescient.ko is not loaded"), "{r}");
    assert!(
        why.contains(&format!("backend = \"userspace\" in {}", cfg.display())),
        "{r}"
    );
    // Without the module, changes are refused and nothing changes.
    let r = dm.call(r#"{"cmd":"set-params","changes":{"assoc":4}}"#);
    assert_eq!(r["error"]["kind"], "unavailable", "{r}");
    let r = dm.call(r#"{"cmd":"set-params","changes":{"rows":3}}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().starts_with("rows"),
        "{r}"
    );
    let r = dm.call(r#"{"cmd":"attach","pid":2147483000}"#);
    assert_eq!(r["error"]["kind"], "not-found", "{r}");
    let r = dm.call(r#"{"cmd":"erase"}"#);
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    // prescientd applies marks to the module (module/marks.rs): without
    // it they are unavailable. Bad ranges are refused first, naming the rule.
    let r = dm.call(r#"{"cmd":"mark","dead":true,"ranges":[[2097152,2097152]]}"#);
    assert_error(&r, "unavailable", "prescient.ko is not loaded");
    let r = dm.call(r#"{"cmd":"mark","dead":true,"ranges":[[1,4096]]}"#);
    assert_error(&r, "invalid", "aligned");
    let r = dm.call("not json");
    assert_eq!(r["error"]["kind"], "invalid", "{r}");
    // Per-GPU budgets: the module keeps one budget per process.
    let r = dm.call(r#"{"cmd":"set-gpu-budget","budget":"GPU-ab12=8G"}"#);
    assert_error(&r, "invalid", "backend = \"userspace\"");
    let r = dm.call(r#"{"cmd":"set-gpu-budget","budget":"1=2G,1=3G"}"#);
    assert_error(&r, "invalid", "named twice");
    let st = dm.call(r#"{"cmd":"status"}"#);
    assert_eq!(st["ok"]["params"]["assoc"], 2);
    assert_eq!(st["ok"]["gpu_budget"], "", "{st}");

    let m = metrics(&cfg);
    assert_eq!(metric(&m, "prescient_backend_up"), Some(0.0), "{m}");

    // SIGHUP with a bad file: refused, the running config stays.
    let good = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{good}\n[engine]\nassoc = 0\n")).unwrap();
    dm.signal(libc::SIGHUP);
    let t0 = Instant::now();
    loop {
        let m = metrics(&cfg);
        if metric(
            &m,
            "prescient_daemon_config_reloads_total{result=\"error\"}",
        ) == Some(1.0)
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{m}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGHUP with a good file: applied (to the desired state; no module).
    std::fs::write(&cfg, format!("{good}\n[engine]\nassoc = 4\n")).unwrap();
    dm.signal(libc::SIGHUP);
    let t0 = Instant::now();
    loop {
        let st = dm.call(r#"{"cmd":"status"}"#);
        if st["ok"]["params"]["assoc"] == 4 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{st}");
        std::thread::sleep(Duration::from_millis(50));
    }

    dm.signal(libc::SIGTERM);
    let sock = dm.sock.clone();
    assert_eq!(dm.wait(), 0);
    assert!(!sock.exists(), "socket left behind");
    let log = std::fs::read_to_string(d.path("daemon.log")).unwrap();
    assert!(log.contains("waiting for it"), "{log}");
    assert!(log.contains("engine.assoc"), "{log}");
}

/// `backend = "userspace"` on a host without the NVIDIA driver (CI): the
/// same missing-driver behaviour as a missing module, in the backend's own
/// words; an exec-id config is refused. (Attaching for real is measured on
/// the H200: BENCHMARKS-gpu.md.)
#[test]
fn userspace_backend_without_nvidia_uvm_waits_or_exits_69() {
    if Path::new("/sys/module/nvidia_uvm").exists() {
        return; // a GPU host: the behaviour below is for hosts without one
    }
    let d = Dir::new("userspace");
    let cfg = d.config("backend = \"userspace\"\non_missing_module = \"exit\"", "");
    let o = run_to_end(&cfg);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nvidia_uvm is not loaded"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("NVIDIA driver"), "{}", stderr(&o));

    let cfg = d.config("backend = \"userspace\"", "[engine]\nmode = \"exec-id\"\n");
    let o = run_to_end(&cfg);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("engine.mode"), "{}", stderr(&o));

    let cfg = d.config("backend = \"userspace\"", "[userspace]\nworkers = 0\n");
    let o = run_to_end(&cfg);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("userspace.workers"), "{}", stderr(&o));

    let cfg = d.config("backend = \"userspace\"", "");
    let dm = Daemon::start(&d, &cfg);
    let st = dm.call(r#"{"cmd":"status"}"#);
    assert_eq!(st["ok"]["backend"], "userspace", "{st}");
    assert_eq!(st["ok"]["backend_up"], false, "{st}");
    assert!(st["ok"]["module"].is_null(), "{st}");
    let r = dm.call(r#"{"cmd":"stats"}"#);
    assert_eq!(r["ok"]["backend"], "userspace", "{r}");
    let why = r["ok"]["unavailable"].as_str().unwrap_or_default();
    assert!(why.starts_with("nvidia_uvm is not loaded"), "{r}");
    assert!(why.contains("modprobe nvidia-uvm"), "{r}");
    let r = dm.call(r#"{"cmd":"attach","pid":1}"#);
    assert_error(&r, "unavailable", "nvidia_uvm");
    // This test process is not attached: its marks have nowhere to go.
    let r = dm.call(r#"{"cmd":"mark","dead":false,"ranges":[[2097152,4096]]}"#);
    assert_error(&r, "not-found", "not attached");
    // Per-GPU budgets: by UUID they are taken (no NVML here to check them
    // against), by index they cannot be matched without NVML.
    let r = dm.call(r#"{"cmd":"set-gpu-budget","budget":"GPU-AB12=8G"}"#);
    assert_eq!(r["ok"]["reply"], "done", "{r}");
    let st = dm.call(r#"{"cmd":"status"}"#);
    assert_eq!(st["ok"]["gpu_budget"], "GPU-ab12=8GiB", "{st}");
    let r = dm.call(r#"{"cmd":"set-gpu-budget","budget":"1=8G"}"#);
    assert_error(&r, "invalid", "name the GPU by its UUID");
    let r = dm.call(r#"{"cmd":"set-gpu-budget","budget":"GPU-ab12=3M"}"#);
    assert_error(&r, "invalid", "2 MiB blocks");
    let m = metrics(&cfg);
    assert_eq!(metric(&m, "prescient_backend_up"), Some(0.0), "{m}");
    dm.signal(libc::SIGTERM);
    assert_eq!(dm.wait(), 0);
}
