#!/usr/bin/env python3
"""A model of prescientd's footprint policy replayed on a block log's launches (runs 172-177).

usage: replay.py BLOCKS_TSV[.gz] BUDGET_BYTES PERIOD [NAME=PASSES[:DEMOTE] ...]

It replays the log's L lines (launches and their blocks) and M lines (dead
and alive marks) against a GPU of BUDGET bytes the way the daemon's loop
decides, as far as a model can:
- the GPU runs launch g while the CPU has queued up to g + LAG;
- each launch, the blocks of the queued launches, in order, up to 25% of
  the budget (the window), are made the most recently migrated and
  prefetched, each evicting a victim; the running launch's blocks stay;
- victims are dead blocks first (discarded), then the least recently
  migrated (the engine's ledger);
- PASSES times a period, the next-use pass (order.rs `order_next_use`):
  resident blocks no queued launch uses, ordered by their next use
  predicted from their uses a period ago (recur.rs), the farthest first
  (no prediction: before all), then the queued ones, the one used last
  first; DEMOTE > 0: each launch, the DEMOTE resident blocks with the
  farthest predicted next use are made the next victims (the farthest
  victims of 9662d29, removed);
- a block the launch uses that is not resident is a fault, brought in the
  same way.
It prints the blocks each configuration copies to the host and to the GPU,
to compare with minevict.py's clairvoyant replay. It does not model time:
evictions that complete late, the engine's own prefetches, its reserve,
or faults the driver serves in pieces. Run 176 measured what it predicted
for PASSES 256 (18% fewer blocks to the host) at 11% on the GPU, and
runs 172-174 measured none of what it predicted for DEMOTE 64 (22%).
"""
import bisect
import collections
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import minevict  # noqa: E402  (bench/gpu/minevict.py)

LAG = 23  # launches queued ahead of the GPU: run 174's median (K lines)
WINDOW_PCT = 25
KEPT_USES = 16


class Model:
    def __init__(self, launches, cap, period):
        self.launches, self.cap, self.period = launches, cap, period
        self.uses = collections.defaultdict(list)
        for i, blocks in enumerate(launches):
            for b in blocks:
                self.uses[b].append(i)
        self.res = OrderedDict()  # least recently migrated first
        self.dead, self.data, self.on_host = set(), set(), set()
        self.to_host = self.to_gpu = 0

    def predict(self, b, g, r):
        """Next use at or after g: a queued one, else a kept use plus a period."""
        u = self.uses[b]
        k = bisect.bisect_left(u, g)
        if k < len(u) and u[k] <= r:
            return u[k]
        known = u[max(0, bisect.bisect_right(u, r) - KEPT_USES):bisect.bisect_right(u, r)]
        for x in known:
            if x + self.period >= g:
                return x + self.period
        return None

    def evict(self, protect):
        for b in self.dead & self.res.keys():
            if b not in protect:
                del self.res[b]
                self.dead.discard(b)
                return True
        for b in self.res:
            if b not in protect:
                del self.res[b]
                if b in self.data:
                    self.to_host += 1
                    self.on_host.add(b)
                return True
        return False

    def bring(self, b, protect):
        while len(self.res) >= self.cap and self.evict(protect):
            pass
        self.res[b] = 1
        if b in self.on_host:
            self.to_gpu += 1
            self.on_host.discard(b)

    def queued(self, g, r):
        order, seen = [], set()
        for i in range(g, r + 1):
            for b in self.launches[i]:
                if b not in seen:
                    seen.add(b)
                    order.append(b)
        return order, seen

    def next_use_pass(self, g, r):
        order, seen = self.queued(g, r)
        far = [(p, b) for b in self.res if b not in seen and b not in self.dead
               for p in [self.predict(b, g, r)] if p is not None]
        for _, b in sorted(far, reverse=True):
            self.res.move_to_end(b)
        for b in reversed(order):
            if b in self.res and b not in self.dead:
                self.res.move_to_end(b)

    def demote_farthest(self, g, r, k):
        order, seen = self.queued(g, r)
        far, none = [], []
        for b in self.res:
            if b in self.dead or b in seen:
                continue
            p = self.predict(b, g, r)
            (none.append(b) if p is None else far.append((p, b)))
        for _, b in sorted(far)[-k:]:
            self.res.move_to_end(b, last=False)
        for b in none[:k]:
            self.res.move_to_end(b, last=False)


def run(launches, marks, cap, period, passes, demote):
    m = Model(launches, cap, period)
    every = max(1, period // passes)
    win = cap * WINDOW_PCT // 100
    for g in range(len(launches)):
        r = min(len(launches) - 1, g + LAG)
        for dead, b0, n in marks[g]:
            for b in range(b0, b0 + n):
                if dead:
                    m.dead.add(b)
                    m.data.discard(b)
                    m.on_host.discard(b)
                else:
                    m.dead.discard(b)
        if g % every == 0:
            m.next_use_pass(g, r)
        if demote:
            m.demote_farthest(g, r, demote)
        window = m.queued(g, r)[0][:win]
        for b in reversed(window):
            if b in m.res:
                m.res.move_to_end(b)
        protect = set(launches[g]) if len(launches[g]) <= cap else set()
        for i, b in enumerate(window):
            if b not in m.res:
                m.bring(b, protect | set(window[:i]))
        for b in launches[g]:
            if b not in m.res:
                m.bring(b, protect)
            m.data.add(b)
            m.dead.discard(b)
    return m.to_host, m.to_gpu


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[2])
    launches, marks, _ = minevict.read_log(sys.argv[1])
    cap, period = int(sys.argv[2]) // minevict.BLOCK, int(sys.argv[3])
    configs = sys.argv[4:] or ["p32=32", "p256=256"]
    for c in configs:
        name, spec = c.split("=")
        passes, _, demote = spec.partition(":")
        host, gpu = run(launches, marks, cap, period, int(passes), int(demote or 0))
        print(f"{name:12} to_host_blocks {host:6} to_gpu_blocks {gpu:6}", flush=True)


if __name__ == "__main__":
    main()
