"""CPU tests of alt.py and alts_summary.py (not in CI: they need torch,
torchvision and transformers, which CI does not install).

Run: python3 -m unittest bench/gpu/runtime/test_alt.py   (from the repo root,
with torch, torchvision and transformers importable; about 1 minute on 2
cores). jobs.py's models are shrunk through its size constants; the GPU
parts (--cap, FSDP1, which refuses a CPU-only machine) are not covered.
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import alt  # noqa: E402
import alts_summary  # noqa: E402
import jobs  # noqa: E402

jobs.LM_DIMS = (64, 128, 500)
jobs.LM_SIZES = {"lm": (2, 2, 16), "lmbig": (3, 2, 16)}
jobs.RESNET_INPUT = (2, 32)
jobs.ENCODER_DIMS = (64, 2, 8)


def run_alt(args):
    """alt.main's printed JSON lines and its exit status (0 if it returned)."""
    buf, rc = io.StringIO(), 0
    with contextlib.redirect_stdout(buf):
        try:
            alt.main(args)
        except SystemExit as e:
            rc = e.code
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return [json.loads(x) for x in buf.getvalue().splitlines() if x.startswith("{")], rc


class Variants(unittest.TestCase):
    def test_same_losses_as_plain(self):
        """Checkpointing and FSDP2 with CPU offload change where memory is,
        not the arithmetic: every variant's losses equal the plain run's."""
        for model in ["lm", "lmbig", "resnet", "encoder"]:
            plain, rc = run_alt([model, "3", "--device", "cpu"])
            self.assertEqual(rc, 0)
            base = [x["loss"] for x in plain if "step" in x]
            self.assertEqual(len(base), 3)
            for extra in (["--ckpt"], ["--fsdp2"], ["--fsdp2", "--ckpt"]):
                lines, rc = run_alt([model, "3", "--device", "cpu"] + extra)
                self.assertEqual(rc, 0, (model, extra))
                losses = [x["loss"] for x in lines if "step" in x]
                for a, b in zip(losses, base):
                    self.assertAlmostEqual(a, b, delta=1e-5 * abs(b), msg=(model, extra))
                self.assertEqual(len(losses), 3)
                self.assertEqual(len(lines[-1]["how"]), len(extra), (model, extra))

    def test_checkpointing_is_applied(self):
        """--ckpt wraps the repeated block, or turns on Hugging Face's flag."""
        job = jobs.BUILDERS["encoder"]()
        alt.checkpointed(job, job.model)
        names = {type(m).__name__ for m in job.model.modules()}
        self.assertIn("CheckpointWrapper", names)
        job = jobs.BUILDERS["lm"]()
        alt.checkpointed(job, job.model)
        self.assertTrue(job.model.is_gradient_checkpointing)

    def test_out_of_memory_is_a_line_and_exit_3(self):
        real = jobs.BUILDERS["lm"]

        def failing():
            job = real()

            def loss(m, i, dev):
                if i == 1:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
                return job.loss(m, i, dev)
            return job._replace(loss=loss)
        jobs.BUILDERS["lm"] = failing
        try:
            lines, rc = run_alt(["lm", "3", "--device", "cpu"])
        finally:
            jobs.BUILDERS["lm"] = real
        self.assertEqual(rc, 3)
        self.assertEqual([x["step"] for x in lines if "step" in x], [0])
        self.assertEqual(lines[-1]["oom"], 1)
        self.assertIn("out of memory", lines[-1]["error"])

    def test_cap_needs_a_gpu(self):
        with self.assertRaises(SystemExit):
            alt.main(["lm", "1", "--device", "cpu", "--cap", "1000"])

    def test_one_fsdp_at_a_time(self):
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            alt.parse(["lm", "1", "--fsdp", "--fsdp2"])


def write(path, steps, done=None, oom=None):
    with open(path, "w") as f:
        f.write("some warning on stdout\n")
        for i, (loss, ms) in enumerate(steps):
            f.write(json.dumps({"step": i, "loss": loss, "ms": ms}) + "\n")
        if oom is not None:
            f.write(json.dumps({"oom": oom, "error": "CUDA out of memory."}) + "\n")
        if done:
            f.write(json.dumps(done) + "\n")


class Summary(unittest.TestCase):
    def test_medians_ratios_and_oom(self):
        """A folder laid out as alts.sh lays it: plain, a capped run out of
        memory, the alternative, and marks.sh's driver-like and marks runs."""
        losses = [10.5, 10.4, 10.3, 10.2]
        with tempfile.TemporaryDirectory() as t:
            d = os.path.join(t, "lm")
            os.makedirs(os.path.join(d, "um"))
            open(os.path.join(d, "cap.txt"), "w").write("5033164800\n")
            open(os.path.join(d, "chosen.txt"), "w").write("ckpt\n")
            for r, ms in ((1, 100.0), (2, 120.0)):
                write(os.path.join(d, f"lm.plain.{r}.jsonl"), [(x, 999.0 if i < 2 else ms) for i, x in enumerate(losses)],
                      done={"done": "lm", "peak_allocated": 8.67e9, "reserved": 9.5e9})
            write(os.path.join(d, "lm.cap-plain.1.jsonl"), [], oom=0)
            # a candidate that failed after some steps: not a result
            write(os.path.join(d, "lm.alt-fsdp.1.jsonl"), [(x, 50.0) for x in losses])
            open(os.path.join(d, "rc.txt"), "w").write("lm.plain.1 rc=0\nlm.cap-plain.1 rc=3\nlm.alt-fsdp.1 rc=1\n")
            for r, ms in ((1, 150.0), (2, 170.0)):
                write(os.path.join(d, f"lm.alt-ckpt.{r}.jsonl"), [(x, ms) for x in losses])
            for r, ms in ((1, 1800.0), (2, 2000.0)):
                write(os.path.join(d, "um", f"lm.driverlike.{r}.jsonl"), [(x, ms) for x in losses])
            for r, ms in ((1, 500.0), (2, 700.0)):
                write(os.path.join(d, "um", f"lm.marks.{r}.jsonl"), [(x + 1e-6, ms) for x in losses])
            open(os.path.join(d, "um", "lm.marks.1.daemon.json"), "w").write(json.dumps(
                {"migrated_to_gpu_bytes": 48.4e9, "migrated_to_cpu_bytes": 40e9, "fault_blocks": 1234}))
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                alts_summary.summarize(d)
            text = buf.getvalue()
        last = json.loads(text.splitlines()[-1])
        self.assertEqual(last["ms"], {"plain": 110.0, "alt-ckpt": 160.0, "driverlike": 1900.0, "marks": 600.0})
        self.assertAlmostEqual(last["ratios"]["prescient_vs_alt-ckpt"], 160 / 600)
        self.assertAlmostEqual(last["ratios"]["prescient_vs_driverlike"], 1900 / 600)
        self.assertAlmostEqual(last["ratios"]["prescient_time_over_alt-ckpt"], 600 / 160)
        self.assertIn("OUT OF MEMORY at step 0", text)
        self.assertIn("FAILED rc=1", text)
        self.assertIn("to_gpu_GB=48.4", text)
        self.assertIn("max_loss_diff=1e-06", text)


if __name__ == "__main__":
    unittest.main()
