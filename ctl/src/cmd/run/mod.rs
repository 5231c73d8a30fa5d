//! `prescientctl run [--budget BUDGET] [--mode auto|exec-id|transparent]
//! [--no-marks] -- CMD ARGS...`: starts CMD with Prescient's runtime
//! preloaded (its device allocations managed, its launches marked with
//! execution ids) and PyTorch's allocator set for managed memory, asks
//! prescientd to attach CMD and every CUDA child once they open the GPU,
//! says in one line what is in force, and exits with CMD's status.
//!
//! Whatever goes wrong on Prescient's side (no runtime installed, prescientd
//! absent or refusing), CMD still runs, after one clear line.

mod env;
mod watch;

use crate::cli::RunArgs;
use crate::client::{fail, Client, Res, EXIT_NOPERM, EXIT_USAGE};
use prescient_uapi::control::{ParamChanges, Request};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The runtime's file name.
pub const RUNTIME_SO: &str = "libprescient_runtime.so";
/// How often the command's processes are scanned for new CUDA ones.
const SCAN_EVERY: Duration = Duration::from_millis(200);

/// Where the runtime is looked for: PRESCIENT_RUNTIME, beside prescientctl
/// (a build tree), then the install locations (`make install`, packages).
fn find_runtime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PRESCIENT_RUNTIME") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe_dir = std::env::current_exe().ok()?.parent()?.to_path_buf();
    [
        exe_dir.join(RUNTIME_SO),
        exe_dir.join("../lib/prescient").join(RUNTIME_SO),
        PathBuf::from("/usr/lib/prescient").join(RUNTIME_SO),
        PathBuf::from("/usr/local/lib/prescient").join(RUNTIME_SO),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .and_then(|p| p.canonicalize().ok())
}

/// The folder of the torch helper's sitecustomize (runtime/python):
/// PRESCIENT_PYTHON, beside the runtime (`make install`, packages), or the
/// source tree of a build tree's prescientctl.
fn find_python_dir(runtime: &Path) -> Option<PathBuf> {
    let ok = |p: &PathBuf| p.join("sitecustomize.py").is_file();
    if let Some(p) = std::env::var_os("PRESCIENT_PYTHON") {
        return Some(PathBuf::from(p)).filter(ok);
    }
    let exe_dir = std::env::current_exe().ok()?.parent()?.to_path_buf();
    [
        runtime.parent()?.join("python"),
        exe_dir.join("../../runtime/python"),
    ]
    .into_iter()
    .find(ok)
    .and_then(|p| p.canonicalize().ok())
}

/// The socket's group, for a permission message.
fn socket_group(socket: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(socket) else {
        return "the socket's group".into();
    };
    // SAFETY: getgrgid returns null or a pointer to a static entry, read at once.
    let name = unsafe {
        let g = libc::getgrgid(m.gid());
        (!g.is_null()).then(|| {
            std::ffi::CStr::from_ptr((*g).gr_name)
                .to_string_lossy()
                .into_owned()
        })
    };
    name.map_or_else(|| format!("group {}", m.gid()), |n| format!("group {n:?}"))
}

/// Asks prescientd for the budget (when given) and checks it answers;
/// the error is the sentence to print.
fn probe_daemon(socket: &Path, args: &RunArgs) -> Result<String, String> {
    let permission = |e: crate::client::Failure| {
        if e.code == EXIT_NOPERM {
            format!(
                "{} (root or membership of {} is needed)",
                e.message,
                socket_group(socket)
            )
        } else {
            e.message
        }
    };
    let mut c = Client::connect(socket).map_err(permission)?;
    c.call(&Request::Status).map_err(permission)?;
    let Some(b) = &args.budget else {
        return Ok(String::new());
    };
    if b.gpus.is_empty() {
        let changes = ParamChanges {
            residency_budget_bytes: b.each,
            ..Default::default()
        };
        c.call(&Request::SetParams { changes })
            .map_err(permission)?;
        return Ok(format!(
            ", prescientd's residency budget set to {} MiB per GPU",
            b.each_bytes() >> 20
        ));
    }
    // Per-GPU sizes: one request carries all (the daemon refuses them
    // whole, with its reason, if its backend cannot keep them).
    c.call(&Request::SetGpuBudget {
        budget: b.to_string(),
    })
    .map_err(permission)?;
    Ok(format!(", prescientd's residency budgets set to {b}"))
}

/// Inside another `prescientctl run`: the command runs as it is (the outer
/// run's runtime and attachment cover it).
#[cold]
fn nested(outer: &str, args: &RunArgs) -> Res<()> {
    eprintln!("prescientctl run: already inside prescientctl run (pid {outer}): running the command as it is");
    let e = Command::new(&args.command[0])
        .args(&args.command[1..])
        .exec();
    Err(fail(
        127,
        format!("{}: {e}", args.command[0].to_string_lossy()),
    ))
}

/// How long a CUDA process may go without its execution-id page before it
/// is attached anyway (in transparent mode: a job that launches no kernel).
const PAGE_WAIT: Duration = Duration::from_secs(3);

/// Attaches each CUDA process of the command once, until `stop`: once it
/// has its execution-id page (so that prescientd starts it in
/// execution-id mode), or after [`PAGE_WAIT`], or at once when ids are off.
/// Says once if prescientd refuses.
fn attach_loop(socket: PathBuf, root: i32, ids: bool, stop: Arc<AtomicBool>) {
    let mut tried = std::collections::BTreeSet::new();
    let mut first_seen = std::collections::BTreeMap::new();
    let mut said = false;
    while !stop.load(Ordering::Relaxed) {
        for pid in watch::cuda_processes(root) {
            let seen = *first_seen
                .entry(pid)
                .or_insert_with(std::time::Instant::now);
            let ready = !ids || watch::has_exec_page(pid) || seen.elapsed() >= PAGE_WAIT;
            if !ready || !tried.insert(pid) {
                continue;
            }
            let r = Client::connect(&socket).and_then(|mut c| c.call(&Request::Attach { pid }));
            if let Err(e) = r {
                if !std::mem::replace(&mut said, true) {
                    eprintln!("prescientctl run: prescientd did not attach pid {pid}: {} (it runs unaccelerated)", e.message);
                }
            }
        }
        std::thread::sleep(SCAN_EVERY);
    }
}

/// The exit status of a finished command, as a shell reports it.
fn exit_code(st: std::process::ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Runs the command; exits with its status.
pub fn run(socket: &Path, args: &RunArgs) -> Res<()> {
    if let Ok(outer) = std::env::var(env::ENV_NESTED) {
        return nested(&outer, args);
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    let runtime = find_runtime();
    let daemon = probe_daemon(socket, args);
    let mut said = Vec::new();
    let python = runtime.as_deref().and_then(find_python_dir);
    let py = python.as_ref().map(|p| p.to_string_lossy().into_owned());
    let sock = daemon
        .is_ok()
        .then(|| socket.to_string_lossy().into_owned());
    let marks = env::MarksSetup {
        python_dir: py.as_deref(),
        socket: sock.as_deref(),
    };
    match &runtime {
        Some(rt) => {
            let e = env::child_env(args, &rt.to_string_lossy(), std::process::id(), marks, |k| std::env::var(k).ok());
            cmd.envs(&e.set);
            said.extend(e.notes);
        }
        None => said.push(format!("{RUNTIME_SO} not found (make install puts it in /usr/lib/prescient; PRESCIENT_RUNTIME names another): the command runs as it is")),
    }
    let marks_on = cmd
        .get_envs()
        .any(|(k, v)| k == env::ENV_MARKS_SOCKET && v.is_some_and(|v| !v.is_empty()));
    let mut child = cmd.spawn().map_err(|e| {
        fail(
            if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                EXIT_USAGE
            },
            format!("{}: {e}", args.command[0].to_string_lossy()),
        )
    })?;
    let pid = child.id() as i32;
    eprintln!(
        "prescientctl run: {}",
        in_force(
            pid,
            args,
            runtime.is_some(),
            marks_text(args, marks_on, python.is_some()),
            &daemon,
            socket
        )
    );
    for n in said {
        eprintln!("prescientctl run: {n}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = daemon.is_ok().then(|| {
        let (s, st) = (socket.to_path_buf(), stop.clone());
        let ids = args.mode != crate::cli::RunMode::Transparent;
        std::thread::spawn(move || attach_loop(s, pid, ids, st))
    });
    // SAFETY: ignoring the terminal's interrupt while the command (in the
    // same process group) decides what to do with it, as system() does.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let st = child
        .wait()
        .map_err(|e| fail(EXIT_USAGE, format!("waiting for the command: {e}")))?;
    stop.store(true, Ordering::Relaxed);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    std::process::exit(exit_code(st));
}

/// What the line says of dead/alive marks.
fn marks_text(args: &RunArgs, on: bool, helper: bool) -> &'static str {
    if args.no_marks {
        "off"
    } else if on {
        "on for PyTorch's allocator (its helper is built at first use)"
    } else if !helper {
        "off (the torch helper's runtime/python is not installed)"
    } else {
        "off (no prescientd to send them to)"
    }
}

/// The one line of what is in force.
fn in_force(
    pid: i32,
    args: &RunArgs,
    runtime: bool,
    marks: &str,
    daemon: &Result<String, String>,
    socket: &Path,
) -> String {
    let job = if runtime {
        let each = env::job_budget(args.budget.as_ref())
            .map_or("the GPU's size".into(), |b| format!("{} MiB", b >> 20));
        let budget = match env::job_gpu_budgets(args.budget.as_ref()) {
            Some(_) => format!("its GPU's own budget where --budget names it by UUID, else {each}"),
            None => each,
        };
        let ids = if args.mode == crate::cli::RunMode::Transparent {
            "off"
        } else {
            "on"
        };
        format!("pid {pid}: device memory managed, the job sees {budget}, execution ids {ids}, dead/alive marks {marks}")
    } else {
        format!("pid {pid}: without the runtime")
    };
    match daemon {
        Ok(extra) => format!(
            "{job}; prescientd ({}) attaches it and its CUDA children{extra}; watch: prescientctl status, prescientctl stats --watch 1s, /metrics",
            socket.display()
        ),
        Err(e) => format!("{job}; prescientd not available ({e}): the job runs unaccelerated (managed memory paged by the driver alone)"),
    }
}
