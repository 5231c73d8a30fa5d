#!/bin/bash
# Run 164: dead marks held 10 ms after each free (the runtime's
# PRESCIENT_MARKS_HOLD_MS) against none. Run 163's block logs
# (bench/gpu/markgaps.py): on the 374M LM 27-31% of the blocks marked alive
# came back within 10 ms of their dead mark, 2-3% of the discards were of
# those, and the allocator waited 0.6-1.0 s a repetition for alive replies.
# lmbig under half its managed memory (4032823296 B) and the 220M LM under
# 4800M (5033164800 B), the budgets prescientd enforces (the only
# pressure); `prescientctl run` with execution ids, marks and footprints;
# "foot" = no hold (as before), "foothold" = 10 ms, interleaved, lmbig 4
# and lm 3 repetitions of 8 steps, every block logged.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for spec in "lmbig 4032823296 4 270" "lm 5033164800 3 270"; do
  set -- $spec; job=$1
  mkdir -p "$OUT/$job"
  BLOCK_LOG=1 HOLD_MS=10 CASES="foot foothold" PLAIN=0 timeout "$4" bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 8 "$3" "$2" > "$OUT/$job.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$job.marks.log"
  for f in "$OUT/$job"/*.blocks.tsv; do
    echo "$(basename "$f") $(python3 "$S/bench/gpu/markgaps.py" "$f" --json)" >> "$OUT/markgaps.txt"
  done
  rm -rf "$OUT/$job"
  tail -3 "$OUT/$job.marks.log" | cut -c1-200
  grep -o "^$job[.a-z0-9]* *steps=8 median_ms=[0-9.]*\|requests=[0-9]*\|alive_wait_ms=[0-9.]*\|hold_ms=[0-9]*\|fault_blocks=[0-9]*" "$OUT/$job.marks.log" | paste -sd' ' | sed "s/ $job\./\n$job./g"
  echo
done
