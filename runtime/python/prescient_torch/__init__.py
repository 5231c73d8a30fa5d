"""Dead/alive marks from PyTorch's caching allocator, for jobs started with
`prescientctl run` (which puts this folder's parent first on PYTHONPATH; its
sitecustomize.py calls install()).

PyTorch has no Python binding for the allocator's trace tracker, so a small
C++ helper (marks.cpp) is compiled at first use against the installed
torch's headers, cached per torch version, and attached once CUDA is
initialised (before that the allocator has no device to attach to). The
helper forwards the allocator's events to prescient-runtime, which does the
rest (runtime/src/marks/mod.rs).

Nothing here may break the job: whatever fails, marks are off, one line
says why, and the job runs as it would have.
"""

import hashlib
import os
import subprocess
import sys

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks.cpp")
_state = {"attached": False, "said": False}


def _say(msg):
    """One line on stderr, once per process."""
    if not _state["said"]:
        _state["said"] = True
        sys.stderr.write("prescient: dead/alive marks %s\n" % msg)
        sys.stderr.flush()


def _cache_dir(torch):
    """Where the helper is built: one folder per torch build and source."""
    base = os.environ.get("PRESCIENT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "prescient",
    )
    with open(_SOURCE, "rb") as f:
        src = hashlib.sha256(f.read()).hexdigest()[:12]
    key = "%s-cuda%s-%s" % (torch.__version__, torch.version.cuda, src)
    return os.path.join(base, "torch-marks", key.replace("+", "_").replace("/", "_"))


def _cuda_include(torch):
    """A folder with cuda_runtime_api.h: the toolkit, or the wheel's own."""
    cands = []
    for v in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(v):
            cands.append(os.path.join(os.environ[v], "include"))
    cands.append("/usr/local/cuda/include")
    try:
        import nvidia  # the CUDA wheels torch depends on

        for p in list(nvidia.__path__):
            for sub in sorted(os.listdir(p)):
                cands.append(os.path.join(p, sub, "include"))
    except Exception:
        pass
    for c in cands:
        if os.path.isfile(os.path.join(c, "cuda_runtime_api.h")):
            return c
    raise RuntimeError("no cuda_runtime_api.h found (set CUDA_HOME)")


def _build(torch, out):
    """Compiles marks.cpp into `out` (atomically: built aside, renamed)."""
    tdir = os.path.dirname(os.path.abspath(torch.__file__))
    lib = os.path.join(tdir, "lib")
    cxx = os.environ.get("CXX") or "c++"
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    tmp = "%s.%d.tmp" % (out, os.getpid())
    cmd = [
        cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-w",
        "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi,
        "-I", os.path.join(tdir, "include"),
        "-I", _cuda_include(torch),
        _SOURCE, "-o", tmp,
        "-L", lib, "-Wl,-rpath," + lib, "-lc10_cuda", "-lc10",
    ]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        with open(out + ".log", "w") as f:
            f.write(" ".join(cmd) + "\n" + r.stdout)
        raise RuntimeError("the helper did not compile for torch %s (%s.log)" % (torch.__version__, out))
    os.replace(tmp, out)


def _helper(torch):
    """The helper's path, built first if needed (one builder at a time)."""
    d = _cache_dir(torch)
    out = os.path.join(d, "prescient_torch_marks.so")
    if os.path.isfile(out):
        return out
    os.makedirs(d, exist_ok=True)
    import fcntl

    with open(os.path.join(d, "lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if not os.path.isfile(out):
            _build(torch, out)
    return out


def attach():
    """Attaches the tracker (once); CUDA must be initialised."""
    if _state["attached"]:
        return
    _state["attached"] = True
    try:
        import ctypes
        import torch

        rt = ctypes.CDLL(None)
        if not hasattr(rt, "prescient_allocator_event"):
            return _say("off: prescient-runtime is not loaded")
        if not rt.prescient_marks_enabled():
            return  # no socket, or prescientd refused: the runtime says why
        backend = torch.cuda.memory.get_allocator_backend()
        if backend != "native":
            return _say("off: PyTorch's allocator backend is %r, not 'native'" % backend)
        h = ctypes.CDLL(_helper(torch))
        if h.prescient_torch_attach() != 0:
            return _say("off: the helper found no prescient-runtime")
        if os.environ.get("PRESCIENT_RUNTIME_LOG") == "1":
            sys.stderr.write("prescient: dead/alive marks on (pid %d)\n" % os.getpid())
    except Exception as e:  # never the job's problem
        _say("off: %s" % e)


def _wrap(module):
    """Makes torch.cuda._lazy_init attach the tracker after it has run."""
    orig = getattr(module, "_lazy_init", None)
    if orig is None or getattr(orig, "_prescient", False):
        return

    def _lazy_init():
        orig()
        if not _state["attached"] and module.is_initialized():
            attach()

    _lazy_init._prescient = True
    module._lazy_init = _lazy_init
    # Submodules that imported the name themselves (torch.cuda.memory ...).
    for name, m in list(sys.modules.items()):
        if name.startswith("torch.cuda.") and getattr(m, "_lazy_init", None) is orig:
            m._lazy_init = _lazy_init


class _Finder:
    """Waits for torch.cuda to be imported, then wraps its _lazy_init
    (PyTorch's C++ side calls torch.cuda._lazy_init by name too)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _wrap(module)
            except Exception as e:
                _say("off: %s" % e)

        spec.loader.exec_module = exec_module
        return spec


def install():
    """Called from sitecustomize: arms the hook (imports nothing heavy)."""
    if os.environ.get("PRESCIENT_MARKS_SOCKET") and not any(
        isinstance(f, _Finder) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _Finder())
