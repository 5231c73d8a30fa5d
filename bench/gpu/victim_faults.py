"""Which GPU faults are on blocks Prescient itself evicted: per
`prescientd attach --block-log` file (blocklog.rs gives the format), the
log lines by kind, the faults by the engine's verdict, the distinct blocks
faulted, and how many faults hit a block that was our victim with no
prefetch of it since (and the median time since that eviction).
Usage: python3 victim_faults.py BLOCKS_TSV[.gz] ... -> one line each"""
import collections
import gzip
import statistics
import sys


def opener(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def one(path):
    last_victim, last_prefetch = {}, {}
    kinds, verdicts = collections.Counter(), collections.Counter()
    blocks, since = set(), []
    others = 0
    with opener(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.rstrip("\n").split("\t")
            t, k, b = int(p[0]), p[1], int(p[2])
            kinds[k] += 1
            if k == "V":
                last_victim[b] = t
            elif k == "P":
                last_prefetch[b] = t
            elif k == "F":
                verdicts[p[3] if len(p) > 3 else "?"] += 1
                blocks.add(b)
                if b in last_victim and last_prefetch.get(b, -1) < last_victim[b]:
                    since.append((t - last_victim[b]) / 1000)
                else:
                    others += 1
    med = round(statistics.median(since), 1) if since else None
    print(f"{path}: lines {dict(kinds)} faults {dict(verdicts)} distinct_fault_blocks={len(blocks)} "
          f"faults_after_our_victim={len(since)} other_faults={others} median_ms_since_victim={med}")


if __name__ == "__main__":
    for a in sys.argv[1:]:
        one(a)
