"""Blocks an iteration of `umbench dnn ITERS 1024 4 256` (umbench.cu) must
bring to the GPU under a capacity in 2 MB blocks, with Belady's victim
choice and with least-recently-used: a replay of its access pattern, not
of a trace. The input is 512 blocks and each of the 4 layers 128; each
kernel is a grid-stride loop with twice the thread blocks an H100 holds at
once (2048 x 256 threads), so it reads its input, and writes its output,
in two waves; the CPU rewrites the input before every iteration, so the
input's blocks are new each time. Iterations after the first two are
printed (steady state).
Usage: python3 dnn_replay.py [CAPACITY_BLOCKS]   (default 480: the 1 GiB
budget less the 6% reserve)"""
import collections
import sys

IN, LAYER, LAYERS, WAVES = 512, 128, 4, 2


def kernel(src, n_src, dst, n_dst):
    """One layer kernel's block accesses: per wave, for each output block,
    its share of input blocks then the output block."""
    s, ratio = [], n_src // n_dst
    for _ in range(WAVES):
        for j in range(n_dst):
            s += [(src, ratio * j + q) for q in range(ratio)] + [(dst, j)]
    return s


def iteration():
    s = kernel("in", IN, "b0", LAYER)
    for layer in range(1, LAYERS):
        s += kernel(f"b{layer - 1}", LAYER, f"b{layer}", LAYER)
    return s + [(f"b{LAYERS - 1}", j) for j in range(LAYER)]  # the checksum


def belady(cap, iters=6):
    """Misses per iteration with the victim used furthest in the future."""
    seq = []
    for it in range(iters):
        seq.append(None)  # the CPU rewrites the input: a new version of it
        seq += [x if x[0] != "in" else (x[0], x[1], it) for x in iteration()]
    nxt, last = [0] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        if seq[i] is not None:
            nxt[i], last[seq[i]] = last.get(seq[i], 1 << 62), i
    res, miss, out = {}, 0, []
    for i, v in enumerate(seq):
        if v is None:
            out.append(miss)
            miss = 0
            continue
        if v not in res:
            miss += 1
            if len(res) >= cap:
                del res[max(res, key=res.get)]
        res[v] = nxt[i]
    out.append(miss)
    return out[3:]


def lru(cap, iters=6):
    """Misses per iteration with the least recently used victim."""
    res, out = collections.OrderedDict(), []
    for _ in range(iters):
        for k in [k for k in res if k[0] == "in"]:
            del res[k]  # the CPU took the input back
        miss = 0
        for x in iteration():
            if x in res:
                res.move_to_end(x)
                continue
            miss += 1
            if len(res) >= cap:
                res.popitem(last=False)
            res[x] = True
        out.append(miss)
    return out[2:]


if __name__ == "__main__":
    cap = int(sys.argv[1]) if len(sys.argv) > 1 else 480
    print(f"capacity {cap} blocks: belady {belady(cap)}, lru {lru(cap)} blocks an iteration")
