"""Issue 20's table from run.sh's WHAT=oracle results: per workload, the
median (over repetitions) of each mode's median step, the link bound, bytes
to the GPU per steady step, checksums, and the mechanism counters.
Link bound = max(resident step, oracle bytes per step / memcpy H2D).
"evicted GB/step": what prescientd moved to the CPU per steady step (periter.py).
Usage: python3 oracle_table.py RESULTS_JSONL BW_JSONL"""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bw = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
h2d = bw[0]["h2d_gbps"] if bw else None
print(f"cudaMemcpy H2D {h2d} GB/s (umbench bw, same run)")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def mech(d):
    """A one-line summary of a case's mechanism counters."""
    if not d:
        return ""
    m = d.get("mechanism") or {}
    q = lambda h, p: quantile(h, p)
    reads, us, drv = m.get("fault_read") or {}, m.get("fault_served_by_us") or {}, m.get("fault_served_by_driver") or {}
    o = d.get("oracle") or {}
    parts = [
        f"batches {m.get('fault_batches')}",
        f"read p50/p90 {q(reads, .5)}/{q(reads, .9)}us",
        f"served-by-us n={us.get('count')} p50 {q(us, .5)}us",
        f"by-driver n={drv.get('count')} p50 {q(drv, .5)}us",
        f"h2d {f(m.get('h2d_busy_s'), 2)}s d2h {f(m.get('d2h_busy_s'), 2)}s both {f(m.get('both_busy_s'), 2)}s",
        f"late {m.get('prefetch_faulted')} churn {m.get('churn')}/{m.get('prefetch_evicted_unfaulted')}",
        f"queue max {d.get('queue_max')} mean {f(d.get('queue_mean'))} inflight mean {f(d.get('inflight_mean'), 2)}",
        f"jobs to-gpu {d.get('prefetch_job_sizes')} to-cpu {d.get('evict_job_sizes')} merged {d.get('merged_jobs')}",
    ]
    if o:
        parts.append("oracle " + " ".join(f"{k}={o.get(k)}" for k in (
            "applied_after_s", "applied_at", "over_after_s", "cursor", "plan_entries", "faults_ahead", "faults_far", "faults_unplanned",
            "no_room", "evicted_before_use", "victims_for_prefetch", "victims_over_budget")))
    return "; ".join(parts)


def quantile(h, p):
    n, b = h.get("count") or 0, h.get("buckets") or []
    want, seen = max(1, int(p * n + 0.999)), 0
    for i, c in enumerate(b):
        seen += c
        if seen >= want:
            return 1 << i
    return "-"


wls = []
for r in rows:
    wl = r["case"].split("_")[0]
    if wl not in wls:
        wls.append(wl)
for wl in wls:
    rs = [r for r in rows if r["case"].split("_")[0] == wl]
    by = {}
    for r in rs:
        kind = r["case"].split("_")[1]
        by.setdefault(kind, []).append(r)
    step = {k: med([(r.get("bench") or {}).get("median_gpu_ms") for r in v]) for k, v in by.items()}
    gbytes = {k: med([(r.get("per_iter") or {}).get("steady_mean_gpu_bytes") for r in v]) for k, v in by.items()}
    ebytes = {k: med([(r.get("per_iter") or {}).get("steady_mean_evict_bytes") for r in v]) for k, v in by.items()}
    cks = sorted({str((r.get("bench") or {}).get("checksum")) for r in rs})
    ob = gbytes.get("oracle")
    link = None
    if step.get("base") is not None and ob is not None and h2d:
        link = max(step["base"], ob / (h2d * 1e9) * 1e3)
    print(f"\n== {wl}: checksums {cks}")
    # Every case kind, in the order run.sh ran them (VARIANTS add kinds).
    for k in by:
        if k in step:
            ratio = "" if not link or step[k] is None else f"  {step[k] / link:.2f}x link"
            reps = " / ".join(f((r.get("bench") or {}).get("median_gpu_ms")) for r in by[k])
            ev = f"  evicted GB/step {f(ebytes[k] / 1e9, 2)}" if ebytes.get(k) else ""
            print(f"  {k:11s} step {f(step[k])} ms ({reps})  GB/step {f(gbytes.get(k) and gbytes[k] / 1e9, 2)}{ratio}{ev}")
    print(f"  link bound {f(link)} ms (resident {f(step.get('base'))} ms, oracle bytes / H2D)")
    if step.get("driverlike") and step.get("prescient") and step.get("oracle"):
        print(f"  driver-like/prescient {step['driverlike'] / step['prescient']:.2f}x, "
              f"driver-like/oracle {step['driverlike'] / step['oracle']:.2f}x, prescient/oracle {step['prescient'] / step['oracle']:.2f}x")
    for k, v in by.items():
        for r in v:
            if r.get("daemon"):
                print(f"  [{r['case']}] {mech(r['daemon'])}")
                o = r["daemon"].get("oracle") or {}
                if r.get("mode") == "oracle" and (o.get("applied_after_s") is None
                                                  or o.get("applied_at", 0) * 2 > (o.get("plan_entries") or 0)):
                    # The plan applied late or never: mostly driver-like.
                    print(f"  [{r['case']}] PLAN APPLIED LATE OR NEVER: not an oracle result")
            elif r.get("mode") != "none":
                # No final counters: the daemon failed or was killed, and
                # the job's later steps ran without it: not a result.
                print(f"  [{r['case']}] DAEMON DID NOT FINISH: its times are not valid")
