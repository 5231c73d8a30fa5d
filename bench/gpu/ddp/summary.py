"""Summary of bench/gpu/ddp/run.sh's results: per-worker step times and
speed-ups (DDP against one GPU), every worker's bytes by GPU UUID, and the
pipeline's per-GPU lanes and losses against the plain run.

Usage: python3 summary.py OUTDIR UUID0 UUID1
"""
import glob
import json
import os
import statistics
import sys

out, gpus = sys.argv[1], [u.lower() for u in sys.argv[2:]]


def lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return []


def median_ms(rows, rank):
    ms = [r["ms"] for r in rows if r.get("rank") == rank and "step" in r][3:]
    return statistics.median(ms) if ms else float("nan")


def worker_line(case, rank, rows):
    """One worker: its GPU, median step, and its daemon's bytes by GPU."""
    me = next((r for r in rows if r.get("rank") == rank and "uuid" in r), {})
    own = me.get("uuid", "?").lower()
    s = {}
    try:
        s = json.load(open(os.path.join(out, f"{case}.w{rank}.stats.json")))
    except OSError:
        pass
    by = {k.lower(): v for k, v in (s.get("prefetch_bytes_by_gpu") or {}).items()}
    lanes = [(l["uuid"].lower(), l["faults"], l["prefetched_bytes"], l["pre_evicted_bytes"], l["budget_bytes"])
             for l in s.get("gpus") or []]
    # Every lane and every prefetched byte on its own GPU, and something
    # there to judge (prefetches in prescient mode, a lane in both).
    ok = bool(lanes) and (bool(by) or "driverlike" in case)
    ok = ok and all(u == own for u in by) and all(u == own for u, *_ in lanes)
    print(f"  {case} rank {rank}: pid {me.get('pid')} GPU {own}; median step {median_ms(rows, rank):.1f} ms; "
          f"prefetched by GPU {by}; lanes (uuid, faults, prefetched, pre-evicted, budget) {lanes}; "
          f"table {s.get('gpu_uuids')}; other-GPU {s.get('prefetch_other_gpu')}; no-GPU {s.get('prefetch_no_gpu')}; "
          f"{'only its own GPU' if ok else 'NOT ONLY ITS OWN GPU'}")
    return ok


def ddp():
    speed = {}
    all_own = True
    for world, pre in ((2, "ddp"), (1, "one")):
        for mode in ("driverlike", "prescient"):
            case = f"{pre}.{mode}"
            rows = lines(os.path.join(out, case + ".jsonl"))
            for rank in range(world):
                all_own &= worker_line(case, rank, rows)
                speed.setdefault((pre, rank), {})[mode] = median_ms(rows, rank)
            losses = [r["loss"] for r in rows if r.get("rank") == 0 and "step" in r]
            print(f"  {case}: rank-0 losses {[round(x, 4) for x in losses[:3]]}..{losses[-1:]}")
    one = speed[("one", 0)]
    s1 = one["driverlike"] / one["prescient"]
    print(f"one GPU: driver-like {one['driverlike']:.1f} ms, prescient {one['prescient']:.1f} ms, speed-up {s1:.2f}x")
    for rank in (0, 1):
        d = speed[("ddp", rank)]
        s = d["driverlike"] / d["prescient"]
        print(f"DDP rank {rank}: driver-like {d['driverlike']:.1f} ms, prescient {d['prescient']:.1f} ms, "
              f"speed-up {s:.2f}x = {s / s1:.2%} of the one-GPU speed-up "
              f"({'within' if abs(s / s1 - 1) <= 0.15 else 'NOT within'} 15%)")
    print("every worker's migrations to its own GPU:", "yes" if all_own else "NO")


def pipe():
    plain = lines(os.path.join(out, "pipe.plain.jsonl"))
    pres = lines(os.path.join(out, "pipe.prescient.jsonl"))
    a = [r["loss_hex"] for r in plain if "step" in r]
    b = [r["loss_hex"] for r in pres if "step" in r]
    print(f"pipeline: {len(a)} plain steps, {len(b)} under Prescient; losses bit-identical: {a == b and len(a) > 0}")
    print(f"  plain losses {[float.fromhex(x) for x in a[:3]]}..; under Prescient {[float.fromhex(x) for x in b[:3]]}..")
    for name, rows in (("plain", plain), ("prescient", pres)):
        ms = [r["ms"] for r in rows if "step" in r][3:]
        done = next((r for r in rows if r.get("done")), {})
        print(f"  {name}: median step {statistics.median(ms) if ms else float('nan'):.1f} ms; "
              f"peak reserved {done.get('peak_reserved')}")
    try:
        st = json.load(open(os.path.join(out, "pipe.stats.json")))
    except (OSError, ValueError):
        st = {}
    pid = next((r.get("pid") for r in pres if "gpus" in r), None)
    for l in st.get("gpus") or []:
        if l["pid"] == pid:
            print(f"  lane pid {pid} GPU {l['index']} {l['uuid']}: budget {l['budget_bytes']}, faults {l['faults']}, "
                  f"prefetched {l['prefetched_bytes']}, pre-evicted {l['pre_evicted_bytes']}, "
                  f"resident {l['resident_bytes']}, other-GPU {l['prefetch_other_gpu']}")


if __name__ == "__main__":
    for f in (ddp, pipe):
        try:
            f()
        except Exception as e:  # one part's failure leaves the other's lines
            print(f"{f.__name__}: {type(e).__name__}: {e}")
