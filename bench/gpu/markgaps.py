#!/usr/bin/env python3
"""What holding dead marks back would save: from a block log with mark lines.

A block the caching allocator frees and hands out again soon costs one dead
mark and one synchronous alive mark (a round trip the allocator waits for),
and gains only if prescientd discarded it in between. This reads the `M`
(mark applied), `D` (discarded) lines of a `prescientd attach --block-log`
file (daemon/src/userspace/blocklog.rs) and, per block, pairs each dead mark
with the alive mark that undoes it. For a hold-off H (dead marks sent only
once the block has stayed free for H), it counts the alive-marked blocks
revived within H (their dead and alive marks never sent) and, of those, the
ones discarded before they came back (the discards H would lose). Alive
marks that bring nothing back (`r`: a revocation, memory going back to the
driver) end a block's dead interval without counting as a reuse. Times are
the backend's apply times, a turn at most after the send.

Usage: python3 markgaps.py BLOCKS_TSV[.gz] [--json]"""
import gzip
import json
import sys

HOLDS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]


def lines(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        for line in f:
            if not line.startswith("#"):
                yield line.rstrip("\n").split("\t")


def pairs(path):
    """(gap_us, discarded_between) per alive-marked block, plus totals."""
    dead_at = {}  # block -> time of its open dead mark
    discarded = set()  # blocks discarded since their open dead mark
    out, dead_blocks, discards = [], 0, 0
    for f in lines(path):
        t, kind, block = int(f[0]), f[1], int(f[2])
        if kind == "D":
            discards += 1
            if block in dead_at:
                discarded.add(block)
        elif kind == "M":
            count, kind = int(f[3]), f[4]
            for b in range(block, block + count):
                if kind == "d":
                    dead_blocks += 1
                    dead_at[b] = t
                    discarded.discard(b)
                elif b in dead_at:
                    gap = t - dead_at.pop(b)
                    if kind == "a":
                        out.append((gap, b in discarded))
                    discarded.discard(b)
    return out, dead_blocks, discards


def table(path):
    gaps, dead_blocks, discards = pairs(path)
    rows = []
    for h in HOLDS_MS:
        within = [d for g, d in gaps if g < h * 1000]
        rows.append(
            {
                "hold_ms": h,
                "alive_blocks_saved": len(within),
                "discards_lost": sum(within),
            }
        )
    return {
        "dead_blocks": dead_blocks,
        "alive_blocks": len(gaps),
        "alive_after_discard": sum(d for _, d in gaps),
        "discards": discards,
        "holds": rows,
    }


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    t = table(sys.argv[1])
    if "--json" in sys.argv:
        print(json.dumps(t))
        return
    print(
        f"dead blocks {t['dead_blocks']}, alive {t['alive_blocks']} "
        f"({t['alive_after_discard']} discarded before), discards {t['discards']}"
    )
    print("hold ms  alive blocks saved  discards lost")
    for r in t["holds"]:
        print(f"{r['hold_ms']:>7}  {r['alive_blocks_saved']:>18}  {r['discards_lost']:>13}")


if __name__ == "__main__":
    main()
