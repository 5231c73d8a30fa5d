#!/usr/bin/env python3
"""How many bytes a job had to move under its budget: Belady on its launch footprints.

Reads a block log (`prescientd attach --block-log`, blocklog.rs) that has
`L` lines (the launches the runtime published, in launch order, each with
the blocks its pointer arguments point into) and `M` lines (the dead and
alive marks applied), and replays the launches against a GPU of BUDGET
bytes with a clairvoyant policy:

- every block a launch names must be on the GPU while it runs (a launch
  larger than the budget streams: its own blocks may go);
- a victim is a dead block first (discarded: no copy), else the block used
  again furthest ahead (Belady), never one of the running launch's while
  it fits;
- evicting a live block copies it to the host; bringing back a block whose
  data is on the host copies it to the GPU; a block never written before,
  or dead since its data went, is populated on the GPU with no copy.

It prints the bytes each way this policy moves, next to what the same run
moved (the log's `C`/`G` lines, one per run of migration events on a
block; and, with --stats, the daemon's stats JSON), so that the gap between
the two is the part of the traffic a better choice of victims and
prefetches could save. It is an estimate, not a proven minimum: launch
footprints name whole allocations where a kernel may touch part of one,
truncated records lose blocks, and dead-first is a heuristic where dead
and live victims compete.

usage: minevict.py BLOCKS_TSV[.gz] BUDGET_BYTES [--stats STATS_JSON] [--json]
       minevict.py --self-test
"""
import gzip
import heapq
import json
import sys

BLOCK = 2 << 20
INF = float("inf")


def blocks_of(field):
    """The blocks of an `L` line's ranges field (`first:count` joined by `,`)."""
    blocks = []
    for r in field.split(","):
        if r:
            a, n = r.split(":")
            blocks.extend(range(int(a), int(a) + int(n)))
    return blocks


def read_log(path):
    """Launches (lists of blocks) and, per launch index, the marks before it."""
    opener = gzip.open if path.endswith(".gz") else open
    launches, marks, moved = [], [], {"C": 0, "G": 0}
    pending = []
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.rstrip("\n").split("\t")
            if len(p) < 3:
                continue
            kind = p[1]
            if kind == "L" and len(p) >= 6:
                marks.append(pending)
                pending = []
                launches.append(list(dict.fromkeys(blocks_of(p[5]))))
            elif kind == "M" and len(p) >= 5:
                b, n = int(p[2]), int(p[3])
                pending.append((p[4] == "d", b, n))
            elif kind in moved and launches:
                moved[kind] += 1
    return launches, marks, moved


def next_uses(launches):
    """For each launch i and block b of it: the next launch index using b."""
    last = {}
    nxt = [None] * len(launches)
    for i in range(len(launches) - 1, -1, -1):
        nxt[i] = [last.get(b, INF) for b in launches[i]]
        for b in launches[i]:
            last[b] = i
    return nxt, last


class Gpu:
    """The GPU under the clairvoyant policy: what is resident, dead, on the host."""

    def __init__(self, cap):
        self.cap = cap
        self.resident = {}  # block -> its next use
        self.heap = []  # (-next use, block), entries of old next uses skipped
        self.dead, self.dead_resident = set(), set()
        self.data = set()  # blocks whose data exists (used, not dead since)
        self.on_host = set()
        self.to_host = self.to_gpu = 0

    def mark(self, dead, b):
        if dead:
            self.dead.add(b)
            self.data.discard(b)
            self.on_host.discard(b)
            if b in self.resident:
                self.dead_resident.add(b)
        else:
            self.dead.discard(b)
            self.dead_resident.discard(b)

    def evict_one(self, protect):
        """Evicts a dead block, else the one used furthest ahead; False if none may go."""
        for b in self.dead_resident:
            if b not in protect:
                self.dead_resident.discard(b)
                del self.resident[b]
                return True
        kept, done = [], False
        while self.heap:
            nu, b = heapq.heappop(self.heap)
            if self.resident.get(b) != -nu:
                continue
            if b in protect:
                kept.append((nu, b))
                continue
            del self.resident[b]
            if b in self.data:
                self.to_host += 1
                self.on_host.add(b)
            done = True
            break
        for k in kept:
            heapq.heappush(self.heap, k)
        return done

    def use(self, b, next_use, protect):
        if b not in self.resident:
            while len(self.resident) >= self.cap and self.evict_one(protect):
                pass
            if b in self.on_host:
                self.to_gpu += 1
                self.on_host.discard(b)
        self.resident[b] = next_use
        heapq.heappush(self.heap, (-next_use, b))
        self.data.add(b)
        self.dead.discard(b)
        self.dead_resident.discard(b)


def replay(launches, marks, cap):
    """Blocks this policy moves to the host and to the GPU."""
    nxt, _ = next_uses(launches)
    g = Gpu(cap)
    for i, blocks in enumerate(launches):
        for d, b0, n in marks[i]:
            for b in range(b0, b0 + n):
                g.mark(d, b)
        protect = set(blocks) if len(blocks) <= cap else set()
        for b, nu in zip(blocks, nxt[i]):
            g.use(b, nu, protect)
    return g.to_host, g.to_gpu


def self_test():
    """Hand-checked cases: a cycle larger than the GPU, and dead data."""
    # Blocks 0-3 used in turn, three times, on a GPU of 3: Belady misses
    # once in each pass after the first (LRU would miss every access):
    # 2 back from the host; 3 to it (2 for those, and block 0 last, which
    # is live though no launch uses it again).
    cyc = [[0], [1], [2], [3]] * 3
    out, back = replay(cyc, [[] for _ in cyc], 3)
    assert (out, back) == (3, 2), (out, back)
    # The same with each block dead after its use and alive before the next:
    # nothing is copied.
    marks = [[] for _ in cyc]
    for i, l in enumerate(cyc[:-1]):
        marks[i + 1].append((True, l[0], 1))
    out, back = replay(cyc, marks, 3)
    assert (out, back) == (0, 0), (out, back)
    print("minevict.py: self-test passed")


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        return self_test()
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    stats = None
    if "--stats" in args:
        k = args.index("--stats")
        stats = json.load(open(args[k + 1]))
        del args[k:k + 2]
    if len(args) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    launches, marks, moved = read_log(args[0])
    cap = int(args[1]) // BLOCK
    if not launches:
        sys.exit("minevict.py: no L lines (a block log of a run with launch footprints)")
    out, back = replay(launches, marks, cap)
    r = {
        "launches": len(launches),
        "blocks_named": sum(len(l) for l in launches),
        "budget_blocks": cap,
        "belady_to_host_gb": out * BLOCK / 1e9,
        "belady_to_gpu_gb": back * BLOCK / 1e9,
        "log_to_host_gb": moved["C"] * BLOCK / 1e9,
        "log_to_gpu_gb": moved["G"] * BLOCK / 1e9,
    }
    if stats:
        r["stats_to_host_gb"] = stats.get("migrated_to_cpu_bytes", 0) / 1e9
        r["stats_to_gpu_gb"] = stats.get("migrated_to_gpu_bytes", 0) / 1e9
    if as_json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print(f"{k:20} {v:.2f}" if isinstance(v, float) else f"{k:20} {v}")


if __name__ == "__main__":
    main()
