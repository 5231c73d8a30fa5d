"""Loaded by Python at start-up for jobs under `prescientctl run`, which puts
this folder first on PYTHONPATH: arms Prescient's dead/alive marks for
PyTorch (prescient_torch), then runs the sitecustomize this one shadows, if
there is one, so that a distribution's or a virtualenv's still runs."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

try:
    import prescient_torch

    prescient_torch.install()
except Exception as _e:  # never the job's problem
    sys.stderr.write("prescient: dead/alive marks off: %s\n" % _e)


def _chain():
    """Executes the next sitecustomize.py on sys.path after this folder."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


_chain()
