"""migbench's table (run.sh WHAT=migbench): per direction, job size and
thread count, the median over repetitions of GB/s (copies included: each
phase ends with a synchronous fence), the time to issue the async calls, and
the per-call latency p50 / p90 (the driver's CPU-side work per UVM_MIGRATE).
Usage: python3 migtable.py MIGBENCH_JSONL"""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
groups = {}
for r in rows:
    key = (r["async"], r["dir"], r["size_mb"], r["threads"])
    groups.setdefault(key, []).append(r)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def calls(r):
    """The per-call numbers of the phase's direction(s): both for "both"."""
    return [r[d] for d in ("h2d", "d2h") if r[d]["n"]]


print("async dir  MB thr | GB/s (reps)        | issue ms | call p50/p90 us (h2d; d2h) | errors")
for (asy, d, mb, thr), rs in sorted(groups.items(), key=lambda kv: (not kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
    g = [r["gbps"] for r in rs]
    cs = " ; ".join(
        f"{med([c[k]['p50_us'] for c in map(calls, rs)]):.0f}/{med([c[k]['p90_us'] for c in map(calls, rs)]):.0f}"
        for k in range(len(calls(rs[0])))
    )
    errs = sum(c["errors"] for r in rs for c in calls(r))
    reps = "/".join(f"{x:.1f}" for x in g)
    print(f"{'A' if asy else 'S'}     {d:4} {mb:3} {thr:3} | {med(g):6.1f} ({reps:10}) | {med([r['issue_ms'] for r in rs]):8.1f} | {cs:26} | {errs}")
