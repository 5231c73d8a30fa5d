"""What each step's faults fell on: a `prescientd attach --block-log` file beside
the step lines of bench/gpu/runtime/jobs.py (which carry `end_s`), for the
PyTorch jobs (BENCHMARKS-gpu.md, runs 149-160).

Per step: its time, the faults the engine saw (`F` lines) and on how many
distinct blocks, and the faults counted by their kind and by the block's
last line before them (`P`: its prefetch was queued and no migration seen
since; `V`: chosen as a victim; `G1`/`C1`...: migrated to the GPU / host with
that cause; `D`: discarded; `none`: never seen before), and of them the writes
to pages mapped read-only (`wperm`: the `F` line's fault type 3,
UvmFaultTypeWrite; runs 156-160). With `--step N`, that step's lines
per 100 ms and the queued-prefetch-to-migration waits of the step (a stall
shows as 100 ms buckets of faults alone).
Usage: python3 stepfaults.py BLOCKS_TSV[.gz] STEPS_JSONL [--step N]"""
import collections
import json
import sys

from blocklog import opener


def lines_of(path):
    with opener(path) as f:
        return f.read().split("\n")


def steps_of(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.startswith('{"step"')]


def window(step, t0):
    """The step's (start, end) in the block log's microseconds."""
    end = (step["end_s"] - t0) * 1e6
    return end - step["ms"] * 1e3, end


def per_step(lines, t0, steps):
    bounds = [window(s, t0) for s in steps]
    last, kinds, blocks = {}, [collections.Counter() for _ in steps], [set() for _ in steps]
    wperm = [0 for _ in steps]
    for line in lines:
        p = line.split("\t")
        if len(p) < 3:
            continue
        t, k, b = float(p[0]), p[1], p[2]
        i = next((j for j, (a, e) in enumerate(bounds) if a <= t <= e), None)
        if k == "F" and i is not None:
            kinds[i][f"F{p[3] if len(p) > 3 else ''}<-{last.get(b, 'none')}"] += 1
            blocks[i].add(b)
            # Fields after the kind: page, access, fault type (blocklog.rs).
            wperm[i] += len(p) > 6 and p[6] == "3"
        if k == "J":
            continue
        if k in ("G", "C"):
            last[b] = k + (p[3] if len(p) > 3 else "")
        elif k in ("P", "V", "D"):
            last[b] = k
    for s, c, bl, w in zip(steps, kinds, blocks, wperm):
        top = ", ".join(f"{k}:{v}" for k, v in c.most_common(6))
        print(f"step {s['step']} {s['ms']:7.0f} ms  faults {sum(c.values()):6}  wperm {w:6}  blocks {len(bl):5}  | {top}")


def one_step(lines, t0, step):
    a, e = window(step, t0)
    pending, waits = {}, []
    buckets = collections.defaultdict(collections.Counter)
    for line in lines:
        p = line.split("\t")
        if len(p) < 3:
            continue
        t, k, b = float(p[0]), p[1], p[2]
        if k == "P":
            pending[b] = t
        elif k == "G":
            if b in pending and a <= t <= e:
                waits.append((t - pending[b]) / 1e3)
            pending.pop(b, None)
        if a <= t <= e:
            buckets[int((t - a) / 1e5)][k] += 1
    waits.sort()
    if waits:
        q = lambda f: round(waits[min(len(waits) - 1, int(len(waits) * f))], 1)
        print(f"queued prefetch -> migration, ms: n {len(waits)} p50 {q(0.5)} p90 {q(0.9)} max {round(waits[-1], 1)}")
    for i in sorted(buckets):
        print(f"  {i * 100:6} ms  " + " ".join(f"{k}:{v}" for k, v in sorted(buckets[i].items())))


def main():
    if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--step"):
        sys.exit(__doc__.split("Usage: ")[1])
    lines = lines_of(sys.argv[1])
    t0 = float(lines[0].split("unix_s=")[1])
    steps = steps_of(sys.argv[2])
    if len(sys.argv) == 5:
        one_step(lines[1:], t0, steps[int(sys.argv[4])])
    else:
        per_step(lines[1:], t0, steps)


if __name__ == "__main__":
    main()
