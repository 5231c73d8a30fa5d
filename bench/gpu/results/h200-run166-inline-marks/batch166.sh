#!/bin/bash
# Run 166: marks answered on the socket connection's own task (a dead mark,
# or an alive mark with no discard in flight and nothing to populate),
# against the blocking pool as before (two thread hand-offs a request:
# daemon/benches/marks.rs, 1.9x on this repo's 2-core machine). "foot" =
# this build, "footB" = the same build's runtime and prescientctl with the
# prescientd of 3294b94 (pd-old, carried), interleaved; lmbig under half
# its managed memory (4032823296 B) 4 repetitions and the 220M LM under
# 4800M (5033164800 B) 2 repetitions of 8 steps; execution ids, marks
# (the runtime's 10 ms hold), footprints; the budgets prescientd enforces
# are the only pressure. No block logs (they would cost time).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
chmod +x "$S/pd-old"
for spec in "lmbig 4032823296 4 330" "lm 5033164800 2 150"; do
  set -- $spec; job=$1
  mkdir -p "$OUT/$job"
  PD_B="$S/pd-old" CASES="foot footB" PLAIN=0 timeout "$4" bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 8 "$3" "$2" > "$OUT/$job.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$job.marks.log"
  rm -rf "$OUT/$job"
  tail -3 "$OUT/$job.marks.log" | cut -c1-200
  grep -o "^$job[.a-zA-Z0-9]* *steps=8 median_ms=[0-9.]*\|requests=[0-9]*\|alive_wait_ms=[0-9.]*\|hold_ms=[0-9]*\|fault_blocks=[0-9]*" "$OUT/$job.marks.log" | paste -sd' ' | sed "s/ $job\./\n$job./g"
  echo
done
