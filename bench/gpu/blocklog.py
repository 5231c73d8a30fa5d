"""Where the migrated bytes go: follows every 2 MB block through each
iteration of a `prescientd attach --block-log` file (blocklog.rs gives the format).

Per steady iteration (the first two are left out), in blocks:
- moves to the GPU, by cause (user = our prefetches, else the driver's);
- how often a block came to the GPU in one iteration (1, 2, 3 or more);
- victims we chose, and "regrets": victims back on the GPU later in the same
  iteration (a prefetch or a fault), with the median time to come back;
- prefetches evicted by us again with no fault between ("unused": the log
  cannot see a use without a fault, so an upper bound on waste) and those of
  them that came back in the same iteration ("wasted");
- faults by what the engine made of them (hit, miss, jump, refault).
Blocks are grouped into regions of contiguous block numbers (one region per
allocation, roughly) so that waste can be put on a buffer.
Usage: python3 blocklog.py BLOCKS_TSV[.gz] BENCH_JSONL -> one JSON line"""
import bisect
import collections
import gzip
import json
import statistics
import sys

CAUSES = {0: "invalid", 1: "user", 2: "coherence", 3: "prefetch", 4: "eviction",
          5: "access_counters", 6: "api"}


def opener(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def main(log_path, bench_path):
    start = None
    rows = []
    with opener(log_path) as f:
        for line in f:
            if line.startswith("#"):
                start = float(line.split("unix_s=")[1])
                continue
            p = line.rstrip("\n").split("\t")
            if len(p) < 3:
                continue
            rows.append((start + int(p[0]) / 1e6, p[1], int(p[2]), p[3] if len(p) > 3 else ""))
    iters = [json.loads(l) for l in open(bench_path) if l.startswith("{") and '"iter"' in l]
    iters = [d for d in iters if d.get("event") == "iter" and "w0" in d]
    if start is None or not iters:
        return {"error": "no header or no iterations"}
    bounds = [d["w0"] for d in iters] + [iters[-1]["w1"]]

    # Regions: runs of block numbers with gaps of at most 1 between them.
    blocks = sorted({r[2] for r in rows})
    region_of, regions = {}, []
    for b in blocks:
        if not regions or b - regions[-1][1] > 1:
            regions.append([b, b])
        regions[-1][1] = b
        region_of[b] = len(regions) - 1

    per_iter = []
    by_region = collections.defaultdict(lambda: collections.Counter())
    for i in range(2 if len(iters) > 2 else 0, len(iters)):
        t0, t1 = bounds[i], bounds[i + 1]
        lo = bisect.bisect_left(rows, (t0,))
        hi = bisect.bisect_left(rows, (t1,))
        ev = rows[lo:hi]
        c = collections.Counter()
        moves = collections.Counter()
        last_victim = {}
        prefetched = set()
        back_ms = []
        for t, kind, b, d in ev:
            reg = region_of[b]
            if kind == "G":
                cause = CAUSES.get(int(d), d)
                c["to_gpu_" + cause] += 1
                moves[b] += 1
                if b in last_victim:
                    tv, was_unused = last_victim.pop(b)
                    c["regret"] += 1
                    by_region[reg]["regret"] += 1
                    back_ms.append((t - tv) * 1e3)
                    if was_unused:
                        c["wasted_prefetch"] += 1
                        by_region[reg]["wasted_prefetch"] += 1
                by_region[reg]["to_gpu"] += 1
            elif kind == "C":
                c["to_cpu_" + CAUSES.get(int(d), d)] += 1
            elif kind == "F":
                c["fault_" + d] += 1
                prefetched.discard(b)
            elif kind == "P":
                c["prefetch"] += 1
                prefetched.add(b)
            elif kind == "V":
                c["victim"] += 1
                by_region[reg]["victim"] += 1
                unused = b in prefetched
                last_victim[b] = (t, unused)
                if unused:
                    c["unused_prefetch"] += 1
                    by_region[reg]["unused_prefetch"] += 1
                    prefetched.discard(b)
        hist = collections.Counter(min(n, 3) for n in moves.values())
        c["blocks_moved_once"] = hist[1]
        c["blocks_moved_twice"] = hist[2]
        c["blocks_moved_3plus"] = hist[3]
        c["regret_back_ms_median"] = round(statistics.median(back_ms), 2) if back_ms else None
        c["gpu_ms"] = iters[i].get("gpu_ms")
        per_iter.append(dict(c))

    keys = sorted({k for d in per_iter for k in d if k not in ("regret_back_ms_median", "gpu_ms")})
    mean = {k: round(statistics.mean(d.get(k, 0) for d in per_iter), 1) for k in keys}
    n = max(len(per_iter), 1)
    return {
        "steady_iters": len(per_iter),
        "mean_per_iter": mean,
        "regions": [{"first": a, "blocks": b - a + 1,
                     **{k: round(v / n, 1) for k, v in by_region[r].items()}}
                    for r, (a, b) in enumerate(regions)],
        "per_iter": per_iter,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
