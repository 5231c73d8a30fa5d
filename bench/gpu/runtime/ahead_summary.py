"""Summary of bench/gpu/runtime/ahead.sh: per run, the median step (steps
3..), the daemon's faults and bytes to the GPU, and the launch-footprint
counters (the stats JSON's `ahead`: launches queued behind the kernel the
GPU started, records dropped, blocks prefetched); then per configuration
the median over repetitions and its speed-up over driver-like.

Usage: python3 ahead_summary.py DIR MODEL
"""
import glob
import json
import os
import re
import statistics
import sys

WARM = 3
CONFIGS = ["driverlike", "marks", "foot", "foot25", "foot25u", "foot10", "foot25B", "foot25r3", "foot25r12", "foot25nf", "foot25nu", "foot25nn"]


def steps_of(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith('{"step"')]
    except OSError:
        return []


def stats_of(path):
    try:
        return json.loads(open(path).read())
    except Exception:
        return {}


def runtime_counters(err):
    try:
        for line in open(err):
            if "lookups_wrapped=" in line:
                return dict(re.findall(r"(\w+)=(\d+)", line))
    except OSError:
        pass
    return {}


def footprint_line(err):
    """The runtime's footprints line (records, pointer kinds, blocks)."""
    try:
        for line in open(err):
            if "footprints: records=" in line:
                return dict(re.findall(r"(\w+)=(\d+)", line))
    except OSError:
        pass
    return {}


def quantile(hist, q):
    """The bucket bound (2^k - 1) below which a fraction q of matches fall."""
    total = sum(hist)
    if not total:
        return None
    acc = 0
    for k, n in enumerate(hist):
        acc += n
        if acc >= q * total:
            return 0 if k == 0 else (1 << k) - 1
    return None


def row(d, model, config, rep):
    base = os.path.join(d, f"{model}.{config}.{rep}")
    steps = steps_of(base + ".jsonl")
    if len(steps) <= WARM:
        return None
    ms = statistics.median(s["ms"] for s in steps[WARM:])
    st = stats_of(base + ".stats.json")
    a = st.get("ahead") or {}
    rt = runtime_counters(base + ".err")
    launches = int(rt.get("launches", 0) or 0)
    r = {
        "config": config, "rep": rep, "ms": ms,
        "losses": [s["loss"] for s in steps],
        "faults": st.get("fault_blocks"),
        "to_gpu_gb": (st.get("migrated_to_gpu_bytes") or 0) / 1e9,
        "mark_us": int(rt.get("mark_ns", 0) or 0) / 1e3 / launches if launches else None,
    }
    if a:
        m = a.get("matched", 0)
        r.update({
            "records": a.get("records_read"), "dropped": a.get("records_dropped"),
            "skipped": a.get("records_skipped"), "truncated": a.get("truncated"), "guessed": a.get("guessed"),
            "matched": m, "unmatched": a.get("unmatched"), "ran_unseen": a.get("ran_unseen"),
            "queued_mean": a.get("queued_sum", 0) / m if m else None,
            "queued_p50": quantile(a.get("queued_hist", []), 0.5),
            "queued_p90": quantile(a.get("queued_hist", []), 0.9),
            "queued_max": a.get("queued_max"),
            "prefetched_blocks": a.get("prefetched_blocks"),
            "resident_blocks": a.get("resident_blocks"),
            "no_room": a.get("no_room"),
            "blocks_per_launch": a.get("blocks", 0) / a["launches"] if a.get("launches") else None,
            "runtime": footprint_line(base + ".err"),
        })
    return r


def main():
    d, model = sys.argv[1], sys.argv[2]
    rows = []
    for c in CONFIGS:
        for path in sorted(glob.glob(os.path.join(d, f"{model}.{c}.*.jsonl"))):
            rep = path.rsplit(".", 2)[-2]
            r = row(d, model, c, rep)
            if r:
                rows.append(r)
    ref = next((r["losses"] for r in rows if r["config"] == "driverlike"), None)
    for r in rows:
        diff = max((abs(a - b) for a, b in zip(r["losses"], ref)), default=None) if ref else None
        shown = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items() if k != "losses"}
        print(json.dumps({**shown, "loss_maxdiff_vs_driverlike": diff}))
    med = {}
    for c in CONFIGS:
        v = [r["ms"] for r in rows if r["config"] == c]
        if v:
            med[c] = statistics.median(v)
    dl = med.get("driverlike")
    for c, m in med.items():
        print(f"{model} {c}: median {m:.1f} ms" + (f", {dl / m:.2f}x driver-like" if dl else ""))


if __name__ == "__main__":
    main()
