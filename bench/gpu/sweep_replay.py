"""Blocks an iteration must bring to the GPU when a kernel is larger than
the capacity, for three victim choices: least recently migrated (the
engine's order, which prescientd kept while the running launches exceeded
the budget before ahead/sweep.rs), Belady's, and the sweep's (sweep.rs and
order.rs `order_sweep`: a block of the running launch the GPU has passed
goes by its next use, the farthest first, then by block number; the
blocks ahead of the front are kept; the front is the last fault's place
in its range, a block is passed a margin of 1/64 of its range behind it).
A replay of each program's access pattern at 2 MB blocks, demand misses
only (no prefetch), not a trace.

- fdtd: bench/gpu/fdtd2d.cu at N=16384: three fields of 512 blocks; the
  kernels sweep (ey, hz), (ex, hz), (ex, ey, hz) row by row, side by side;
  capacity 720 (its 1.61 GB budget less the reserve).
- dnn: `umbench dnn ITERS 1024 4 256` (see dnn_replay.py; its input is new
  every iteration); capacity 480.

Usage: python3 sweep_replay.py   (prints misses per iteration, steady state)"""
import collections

MARGIN = 1 / 64


def fdtd(n=512):
    kernels = []
    for fields in [("ey", "hz"), ("ex", "hz"), ("ex", "ey", "hz")]:
        kernels.append(({f: n for f in fields}, [(f, r) for r in range(n) for f in fields]))
    return kernels, set()


def dnn(n_in=512, layer=128, layers=4, waves=2):
    def kernel(src, ns, dst, nd):
        s, ratio = [], ns // nd
        for _ in range(waves):
            for j in range(nd):
                s += [(src, ratio * j + q) for q in range(ratio)] + [(dst, j)]
        return {src: ns, dst: nd}, s

    ks = [kernel("in", n_in, "b0", layer)]
    ks += [kernel(f"b{i - 1}", layer, f"b{i}", layer) for i in range(1, layers)]
    ks.append(({f"b{layers - 1}": layer}, [(f"b{layers - 1}", j) for j in range(layer)]))
    return ks, {"in"}


def replay(program, policy, cap, iters=6):
    """Misses of iterations 2 on."""
    kernels, fresh = program
    fields = sorted({f for r, _ in kernels for f in r})
    size = {f: n for r, _ in kernels for f, n in r.items()}
    seq = []
    for it in range(iters):
        for k, (_, acc) in enumerate(kernels):
            seq += [(((f, i, it) if f in fresh else (f, i)), it, k, f, i) for f, i in acc]
    nxt, last = [0] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i], last[seq[i][0]] = last.get(seq[i][0], 1 << 60), i
    res, order, misses, cur = {}, collections.OrderedDict(), [0] * iters, None

    def next_kernel(block, k, it):
        """Launches until the field's next use (recur.rs's prediction)."""
        if len(block) == 3 and block[2] != it:
            return 1 << 30  # an old iteration's input: never used again
        for d in range(1, len(kernels) + 1):
            if block[0] in kernels[(k + d) % len(kernels)][0]:
                return d
        return 1 << 30

    for i, (b, it, k, f, idx) in enumerate(seq):
        if (it, k) != cur:
            cur, front, ranges = (it, k), {}, kernels[k][0]
        if b in res:
            res[b] = nxt[i]
            continue
        misses[it] += 1
        front[f] = idx / ranges[f]
        if len(res) >= cap:
            victim = None
            if policy == "belady":
                victim = max(res, key=res.get)
            elif policy == "sweep" and sum(ranges.values()) > cap:
                lead = max(front.values())
                best = None
                for x in res:
                    place = x[1] / size[x[0]]
                    if x[0] in ranges and place + MARGIN >= front.get(x[0], lead):
                        continue  # ahead of the front: kept
                    key = (next_kernel(x, k, it), fields.index(x[0]), x[1])
                    if best is None or key > best:
                        best, victim = key, x
            if victim is None:
                victim = next(iter(order))
            del res[victim]
            order.pop(victim)
        res[b] = nxt[i]
        order[b] = True
    return misses[2:]


if __name__ == "__main__":
    for name, program, cap in [("fdtd", fdtd(), 720), ("dnn", dnn(), 480)]:
        for policy in ["lru-migrated", "belady", "sweep"]:
            print(f"{name} capacity {cap}: {policy} {replay(program, policy, cap)}")
