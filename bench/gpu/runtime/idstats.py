"""Execution-id statistics from the runtime's id log (PRESCIENT_ID_LOG).

Usage: python3 idstats.py LOGFILE STEPS
The job launches the same kernels every step; the launches per step are
found as the period of the id sequence over its second half (the shift
with the most positions equal). Prints launches per step, distinct ids per
step, and stability: the fraction of a step's launches whose id equals the
id at the same position one step earlier, over the last half of the steps.
"""
import struct
import sys
from collections import Counter


def main():
    data = open(sys.argv[1], "rb").read()
    steps = int(sys.argv[2])
    ids = list(struct.unpack(f"<{len(data) // 8}Q", data))
    n = len(ids)
    guess = n // steps
    tail = ids[n // 2:]
    best, best_eq = guess, -1
    for p in range(max(1, guess // 2), min(len(tail) // 2, guess * 2) + 1):
        eq = sum(1 for i in range(len(tail) - p) if tail[i] == tail[i + p])
        if eq > best_eq:
            best, best_eq = p, eq
    p = best
    stab = best_eq / max(1, len(tail) - p)
    last = ids[n - p:]
    print(f"launches={n} steps={steps} launches_per_step={p} distinct_ids_last_step={len(set(last))} "
          f"distinct_ids_total={len(set(ids))} stability_step_to_step={stab:.4f} "
          f"most_repeated_in_step={Counter(last).most_common(1)[0][1] if last else 0}")


if __name__ == "__main__":
    main()
