"""Faults per iteration: cuts a sampler.py time series at the iteration
boundaries a workload printed ("w0"/"w1" wall-clock seconds in its iter lines).
Counts between the first sample at or after w0 of iteration i and the first
at or after w0 of iteration i+1 (the last iteration ends at its w1). Samples
come every --stats-interval; the cut is as coarse as that.
Usage: python3 periter.py BENCH_JSONL SAMPLES_TSV  -> one JSON line"""
import bisect
import json
import statistics
import sys

bench, samples = sys.argv[1], sys.argv[2]
iters = [json.loads(l) for l in open(bench) if l.startswith("{") and '"iter"' in l]
iters = [d for d in iters if d.get("event") == "iter" and "w0" in d]
rows = [tuple(float(x) for x in l.split("\t")) for l in open(samples) if l.strip()]
if not iters or not rows:
    print(json.dumps({"error": "no iterations or no samples"}))
    sys.exit(0)
ts = [r[0] for r in rows]


def at(t, col):
    i = bisect.bisect_left(ts, t)
    return rows[min(i, len(rows) - 1)][col] if i < len(rows) else rows[-1][col]


bounds = [d["w0"] for d in iters] + [iters[-1]["w1"]]
blocks = [at(bounds[i + 1], 2) - at(bounds[i], 2) for i in range(len(iters))]
events = [at(bounds[i + 1], 1) - at(bounds[i], 1) for i in range(len(iters))]
steady = blocks[2:] if len(blocks) > 2 else blocks
# Bytes migrated to the GPU per iteration (column 10; older series lack it).
gpu_bytes = [at(bounds[i + 1], 10) - at(bounds[i], 10) for i in range(len(iters))] if len(rows[0]) > 10 else []
steady_bytes = gpu_bytes[2:] if len(gpu_bytes) > 2 else gpu_bytes
# Bytes prescientd evicted (UVM_MIGRATE to the CPU) per iteration (column 5):
# under a budget every byte brought in goes back out, and an eviction costs
# a worker several times what a prefetch does (run 57's migbench).
evict = [at(bounds[i + 1], 5) - at(bounds[i], 5) for i in range(len(iters))] if len(rows[0]) > 5 else []
steady_evict = evict[2:] if len(evict) > 2 else evict
print(json.dumps({"fault_blocks_per_iter": blocks, "fault_events_per_iter": events,
                  "steady_mean_fault_blocks": statistics.mean(steady),
                  "gpu_bytes_per_iter": gpu_bytes,
                  "steady_mean_gpu_bytes": statistics.mean(steady_bytes) if steady_bytes else None,
                  "evict_bytes_per_iter": evict,
                  "steady_mean_evict_bytes": statistics.mean(steady_evict) if steady_evict else None,
                  "first_sample": ts[0], "first_w0": bounds[0], "samples": len(rows)}))
