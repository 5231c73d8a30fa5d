#!/bin/bash
# Run 167: where the allocator's alive-mark wait goes. prescientd now counts
# each alive mark's wait for the gate (a discard run holding it) and for its
# populates (stats `alive_marks`, `alive_gate_wait_s`, `alive_populate_s`);
# the runtime counts the time ALLOC events waited for its marks lock
# (`alloc_lock_wait_ms`: the flusher thread sending dead marks holds it)
# beside its `alive_wait_ms` (its time in alive requests). This build's
# defaults ("foot": execution ids, marks with the 10 ms hold, footprints,
# the populate), lmbig under half its managed memory (4032823296 B) and the
# 220M LM under 4800M (5033164800 B), the budgets prescientd enforces (the
# only pressure), 2 repetitions of 8 steps each.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for spec in "lmbig 4032823296 2 150" "lm 5033164800 2 110"; do
  set -- $spec; job=$1
  mkdir -p "$OUT/$job"
  CASES="foot" PLAIN=0 timeout "$4" bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 8 "$3" "$2" > "$OUT/$job.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$job.marks.log"
  for r in 1 2; do
    f="$OUT/$job/$job.foot.$r.stats.json"
    [ -f "$f" ] && echo "$job.foot.$r $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k:d.get(k) for k in ("alive_marks","alive_gate_wait_s","alive_populate_s","alive_populated_blocks","discard_s","discard_ops","mark_requests","discarded_blocks")})' "$f") $(grep -o 'requests=[0-9]* alive_wait_ms=[0-9.]* alloc_lock_wait_ms=[0-9.]*' "$OUT/$job/$job.foot.$r.err")" | tee -a "$OUT/alive.txt"
  done
  rm -rf "$OUT/$job"
  tail -2 "$OUT/$job.marks.log" | cut -c1-200
done
