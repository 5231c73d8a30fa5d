//! The launcher's sitecustomize (runtime/python) against a stand-in torch
//! package laid out as PyTorch's is: `torch.cuda._lazy_init` initialises
//! CUDA, submodules import the name themselves (torch/cuda/memory.py does),
//! and PyTorch's C++ side calls `torch.cuda._lazy_init` by attribute. The
//! hook must attach after the first initialisation whichever way it comes,
//! once; without prescient-runtime loaded, marks are off with one line;
//! another sitecustomize on the path still runs. Needs python3.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fake_torch(dir: &Path) {
    let cuda = dir.join("torch/cuda");
    std::fs::create_dir_all(&cuda).unwrap();
    std::fs::write(dir.join("torch/__init__.py"), "from . import cuda\n").unwrap();
    std::fs::write(
        cuda.join("__init__.py"),
        "_init = [False]\ncalls = []\n\
         def is_initialized():\n    return _init[0]\n\
         def _lazy_init():\n    calls.append(1)\n    _init[0] = True\n\
         from . import memory\n",
    )
    .unwrap();
    std::fs::write(
        cuda.join("memory.py"),
        "from . import _lazy_init\ndef mem_get_info():\n    _lazy_init()\n",
    )
    .unwrap();
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("sitecustomize.py"),
        "import sys\nsys.stderr.write('other sitecustomize ran\\n')\n",
    )
    .unwrap();
}

fn run(dir: &Path, script: &str, socket: bool) -> Option<(bool, String)> {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let path = format!(
        "{}:{}:{}",
        py.display(),
        dir.display(),
        dir.join("other").display()
    );
    let mut c = Command::new("python3");
    c.arg("-c").arg(script).env("PYTHONPATH", path);
    if socket {
        c.env("PRESCIENT_MARKS_SOCKET", dir.join("none.sock"));
    } else {
        c.env_remove("PRESCIENT_MARKS_SOCKET");
    }
    let o = c.output().ok()?;
    Some((
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("torch-hook-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    fake_torch(&d);
    d
}

#[test]
fn the_hook_attaches_once_after_cuda_init_by_either_path() {
    let d = dir("paths");
    // By the submodule's own name, then by attribute (as C++ does), twice.
    let script = "import torch.cuda.memory as m, torch\n\
                  m.mem_get_info(); torch.cuda._lazy_init(); torch.cuda._lazy_init()\n\
                  assert len(torch.cuda.calls) == 3, torch.cuda.calls\n";
    let Some((ok, err)) = run(&d, script, true) else {
        eprintln!("python3 not found: skipped");
        return;
    };
    assert!(ok, "{err}");
    // The stand-in has no prescient-runtime in the process: off, said once.
    assert_eq!(
        err.matches("dead/alive marks off: prescient-runtime is not loaded")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("other sitecustomize ran"), "{err}");
}

#[test]
fn without_a_socket_nothing_is_armed() {
    let d = dir("nosock");
    let script = "import sys, torch\n\
                  assert not any(type(f).__name__ == '_Finder' for f in sys.meta_path)\n\
                  torch.cuda._lazy_init()\n";
    let Some((ok, err)) = run(&d, script, false) else {
        return;
    };
    assert!(ok, "{err}");
    assert!(!err.contains("dead/alive marks"), "{err}");
    assert!(err.contains("other sitecustomize ran"), "{err}");
}
