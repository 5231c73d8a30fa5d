"""Compares jobs.py outputs: plain vs another configuration, per model.

Usage: python3 compare.py DIR   (DIR holds MODEL.CONFIG.REP.jsonl files)
Per model and configuration: the median step time (ms, steps after the
first WARM) of each repetition, the median of those, the ratio to plain,
and the largest loss difference from plain repetition 0.
"""
import glob
import json
import os
import statistics
import sys

WARM = 5


def load(path):
    steps, done = [], None
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "step" in d:
            steps.append(d)
        elif "done" in d:
            done = d
    return steps, done


def main():
    runs = {}
    for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
        model, config, rep = os.path.basename(p)[:-6].split(".")
        steps, done = load(p)
        if len(steps) > WARM:  # a run cut short (timeout) is left out
            runs.setdefault(model, {}).setdefault(config, []).append((steps, done))
    for model, configs in runs.items():
        if "plain" not in configs:
            continue
        base = configs["plain"][0][0]
        plain_ms = statistics.median(statistics.median(s["ms"] for s in r[WARM:]) for r, _ in configs["plain"])
        for config, reps in configs.items():
            meds = [statistics.median(s["ms"] for s in r[WARM:]) for r, _ in reps]
            m = statistics.median(meds)
            dl = max((abs(a["loss"] - b["loss"]) for r, _ in reps for a, b in zip(r, base)), default=float("nan"))
            rel = max((abs(a["loss"] - b["loss"]) / max(abs(b["loss"]), 1e-9) for r, _ in reps for a, b in zip(r, base)),
                      default=float("nan"))
            done = reps[-1][1] or {}
            print(f"{model:8s} {config:12s} steps={len(reps[0][0])} reps={len(reps)} median_ms={m:.2f} "
                  f"per_rep={[round(x, 2) for x in meds]} vs_plain={m / plain_ms:.4f} "
                  f"max_loss_diff={dl:.3g} max_rel={rel:.3g} backend={done.get('backend')} "
                  f"peak_alloc={done.get('peak_allocated')} mem_total={done.get('mem_total')}")


if __name__ == "__main__":
    main()
