"""Summary of bench/gpu/ddp/svc.sh's results: per-worker median steps and
speed-ups over driver-like (DDP against one GPU; medians over the
repetitions), every worker's lanes by GPU UUID in the service's stats,
and losses against the plain runs.

Usage: python3 svc_summary.py OUTDIR
"""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "."


def objects(path):
    """Every JSON object in the file, wherever it starts: the ranks of a
    torchrun job share one stdout, so two ranks' lines may interleave."""
    try:
        text = open(path).read()
    except OSError:
        return []
    dec, out, i = json.JSONDecoder(), [], 0
    while (j := text.find("{", i)) >= 0:
        try:
            o, i = dec.raw_decode(text, j)
            out.append(o)
        except json.JSONDecodeError:
            i = j + 1
    return out


lines = objects


def median_ms(rows, rank):
    """Median of steps 3.. (the first three warm up)."""
    ms = [r["ms"] for r in rows if r.get("rank") == rank and "step" in r][3:]
    return statistics.median(ms) if ms else float("nan")


def losses(rows, rank):
    return [r["loss"] for r in rows if r.get("rank") == rank and "step" in r]


def reps(pre, mode):
    return sorted(p for p in glob.glob(os.path.join(out, f"{pre}.{mode}.*.jsonl")) if ".stats." not in p)


def service_lanes(case, rows, rank):
    """The worker's lanes in the last stats the service gave while it ran,
    and whether all of its prefetches went to its own GPU."""
    me = next((r for r in rows if r.get("rank") == rank and "uuid" in r), {})
    pid, own = me.get("pid"), me.get("uuid", "?").lower()
    last = None
    for s in objects(os.path.join(out, case + ".stats.jsonl")):
        lanes = [g for g in s.get("gpus") or [] if g.get("pid") == pid]
        proc = [p for p in s.get("processes") or [] if p.get("pid") == pid]
        if lanes and proc:
            last = (lanes, proc[0])
    if last is None:
        print(f"  {case} rank {rank}: pid {pid} GPU {own}: NOT SEEN ATTACHED in the service's stats")
        return False
    lanes, proc = last
    lane_bytes = sum(g["prefetched_bytes"] for g in lanes)
    proc_bytes = proc["prefetched_blocks"] << 21
    ok = all(g["uuid"].lower() == own for g in lanes) and lane_bytes == proc_bytes and lane_bytes > 0
    desc = [(g["uuid"], g.get("index"), g["faults"], round(g["prefetched_bytes"] / 1e9, 2),
             round(g["pre_evicted_bytes"] / 1e9, 2), g.get("budget_bytes")) for g in lanes]
    print(f"  {case} rank {rank}: pid {pid} GPU {own}; lanes (uuid, nvidia-smi index, faults, prefetched GB, "
          f"pre-evicted GB, budget) {desc}; the process prefetched {proc_bytes / 1e9:.2f} GB in all; "
          f"{'all to its own GPU' if ok else 'NOT ALL TO ITS OWN GPU'}")
    return ok


def attach_lanes(case, rows, rank):
    me = next((r for r in rows if r.get("rank") == rank and "uuid" in r), {})
    own = me.get("uuid", "?").lower()
    try:
        s = json.load(open(os.path.join(out, f"{case}.w{rank}.stats.json")))
    except (OSError, json.JSONDecodeError):
        s = {}
    lanes = [(l["uuid"], l["faults"], l["budget_bytes"]) for l in s.get("gpus") or []]
    ok = bool(lanes) and all(u.lower() == own for u, *_ in lanes)
    print(f"  {case} rank {rank}: pid {me.get('pid')} GPU {own}; lanes (uuid, faults, budget) {lanes}; "
          f"evicted {s.get('evict_bytes', 0) / 1e9:.2f} GB; {'own GPU only' if ok else 'NOT ONLY ITS OWN GPU'}")
    return ok


def main():
    plain = {"one": lines(os.path.join(out, "plain1.jsonl")), "ddp": lines(os.path.join(out, "plain2.jsonl"))}
    med = {}
    all_own = True
    for pre, world in (("one", 1), ("ddp", 2)):
        for mode in ("driverlike", "prescient"):
            for path in reps(pre, mode):
                case = os.path.basename(path)[: -len(".jsonl")]
                rows = lines(path)
                for rank in range(world):
                    m = median_ms(rows, rank)
                    med.setdefault((pre, mode, rank), []).append(m)
                    want, got = losses(plain[pre], rank), losses(rows, rank)
                    diff = max((abs(a - b) for a, b in zip(want, got)), default=float("nan"))
                    print(f"{case} rank {rank}: median step {m:.1f} ms; {len(got)} losses ({len(want)} plain), "
                          f"max |loss - plain| {diff:.3g} (plain: {[round(x, 5) for x in want[:2]]}.."
                          f"{[round(x, 5) for x in want[-1:]]})")
                    if mode == "prescient":
                        all_own &= service_lanes(case, rows, rank)
                    else:
                        all_own &= attach_lanes(case, rows, rank)
    speed = {}
    for (pre, mode, rank), v in sorted(med.items()):
        print(f"{pre} {mode} rank {rank}: per repetition {[round(x, 1) for x in v]} ms, median {statistics.median(v):.1f}")
    for pre, world in (("one", 1), ("ddp", 2)):
        for rank in range(world):
            d, p = med.get((pre, "driverlike", rank)), med.get((pre, "prescient", rank))
            if d and p:
                speed[(pre, rank)] = statistics.median(d) / statistics.median(p)
                per = [round(a / b, 2) for a, b in zip(d, p)]
                print(f"{pre} rank {rank}: speed-up {speed[(pre, rank)]:.2f}x (per repetition {per})")
    s1 = speed.get(("one", 0))
    for rank in (0, 1):
        s = speed.get(("ddp", rank))
        if s and s1:
            print(f"DDP rank {rank}: {s:.2f}x = {s / s1:.1%} of the one-GPU {s1:.2f}x "
                  f"({'within' if abs(s / s1 - 1) <= 0.15 else 'NOT within'} 15%)")
    print("every worker's lanes on its own GPU, every prefetch to it:", "yes" if all_own else "NO")
    try:
        log = open(os.path.join(out, "svc.daemon.log")).read()
        log = re.sub(r"\x1b\[[0-9;]*m", "", log)
        att = [l for l in log.splitlines() if " attached " in l or "detached" in l or "exited" in l]
        print(f"service log: {len(att)} attach/detach/exit lines")
        for l in att:
            print("  " + l[:240])
    except OSError:
        pass


if __name__ == "__main__":
    main()
