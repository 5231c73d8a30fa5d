#!/usr/bin/env python3
"""Where a job's faults and evictions fall, from a block log with K lines (runs 173-174).

usage: where.py BLOCKS_TSV[.gz] BUDGET_BYTES [PERIOD]

The K lines (prescientd's block log, blocklog.rs) give the launch the GPU
runs; the L lines, every launch's blocks. For each F (fault), P (prefetch)
and V (victim) line this prints how many launches after the GPU's its
block is next used (0: by the launch running), and whether a queued launch
uses it; then, per 200 launches of a step of PERIOD launches (2972 for
lmbig), faults, truncated records, victims against the evictions of
minevict.py's clairvoyant replay, and the next-use distances of the victims
in launches 200-600 of a step against that replay's.
"""
import bisect
import collections
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import minevict  # noqa: E402  (bench/gpu/minevict.py)

FAR = 10**6


def read(path):
    """Launches, their flags, per-launch uses, and (kind, ring, gpu, block) events."""
    launches, flags, events = [], [], []
    uses = collections.defaultdict(list)
    gpu = 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 3 or p[0].startswith("#"):
                continue
            kind = p[1]
            if kind == "L" and len(p) >= 6:
                blocks = minevict.blocks_of(p[5])
                for b in set(blocks):
                    uses[b].append(len(launches))
                launches.append(blocks)
                flags.append(p[4])
            elif kind == "K":
                gpu = int(p[2]) - 1
            elif kind in "FPV":
                events.append((kind, len(launches), gpu, int(p[2])))
    return launches, flags, uses, events


def next_use(uses, b, g):
    u = uses[b]
    j = bisect.bisect_left(u, g)
    return u[j] - g if j < len(u) else FAR


def quantiles(d):
    d = sorted(d)
    n = len(d)
    return [d[int(n * q)] for q in (0.1, 0.25, 0.5, 0.75, 0.9)] if n else []


def belady_evictions(path, cap, uses):
    """(launch index, next-use distance) of each copy the clairvoyant replay
    makes; `uses`: each block's launches, as `read` gives them."""
    launches, marks, _ = minevict.read_log(path)
    nxt, _ = minevict.next_uses(launches)
    g = minevict.Gpu(cap)
    out = []
    for i, blocks in enumerate(launches):
        for dead, b0, n in marks[i]:
            for b in range(b0, b0 + n):
                g.mark(dead, b)
        protect = set(blocks) if len(blocks) <= cap else set()
        before = set(g.resident)
        for b, nu in zip(blocks, nxt[i]):
            g.use(b, nu, protect)
        for b in before - set(g.resident):
            if b in g.on_host:
                out.append((i, next_use(uses, b, i)))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2])
    path, cap = sys.argv[1], int(sys.argv[2]) // minevict.BLOCK
    period = int(sys.argv[3]) if len(sys.argv) > 3 else 2972
    launches, flags, uses, events = read(path)
    by = collections.defaultdict(list)
    for kind, ring, g, b in events:
        by[kind].append((next_use(uses, b, g), ring - g))
    for kind in "FPV":
        v = by[kind]
        if v:
            queued = sum(1 for nx, lag in v if nx <= lag) / len(v)
            print(f"{kind} {len(v)} next use from the GPU's launch {quantiles([x for x, _ in v])}"
                  f" used by a queued launch {queued:.2f}")
    faults, victims = collections.Counter(), collections.Counter()
    phase_victims = []
    for kind, ring, g, b in events:
        if g < period:
            continue
        ph = (g % period) // 200
        if kind == "F":
            faults[ph] += 1
        elif kind == "V":
            victims[ph] += 1
            if 200 <= g % period < 600:
                phase_victims.append(next_use(uses, b, g))
    truncated = collections.Counter((i % period) // 200 for i, f in enumerate(flags) if "t" in f)
    bel = belady_evictions(path, cap, uses)
    bel_ph = collections.Counter((i % period) // 200 for i, _ in bel if i >= period)
    print("per 200 launches of a step (steps 2 on): faults, truncated records, victims, clairvoyant copies")
    for ph in range((period + 199) // 200):
        print(ph, faults[ph], truncated[ph], victims[ph], bel_ph[ph])
    bel_phase = [d for i, d in bel if i >= period and 200 <= i % period < 600]
    print("launches 200-600: victims' next use", len(phase_victims), quantiles(phase_victims))
    print("launches 200-600: clairvoyant copies' next use", len(bel_phase), quantiles(bel_phase))


if __name__ == "__main__":
    main()
