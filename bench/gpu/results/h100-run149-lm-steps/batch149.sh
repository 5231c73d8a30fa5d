#!/bin/bash
# Run 149: why the 220M LM's steps spread 360-907 ms under Prescient (run
# 146: one repetition had twice the faults of the other). The job as run
# 146 ran it (alts.sh's Prescient case: `prescientctl run` with execution
# ids, dead/alive marks and launch footprints, the 4800M cap as the budget
# prescientd enforces, the only pressure), 3 repetitions of 8 steps, each
# step's end time (jobs.py end_s) and prescientd's whole stats file every
# 50 ms (snaps.tsv: case, snapshot), to put each step beside what the
# daemon did during it.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
mkdir -p "$OUT/lm"
( while [ ! -e "$OUT/stop" ]; do
    for f in $(find "$OUT/lm" -name '*.stats.json' -newermt '-1 second' 2>/dev/null); do
      printf '%s\t' "$(basename "$f")"; tr -d '\n' < "$f"; echo
    done >> "$OUT/snaps.tsv"; sleep 0.05
  done ) &
ATTACH_EXTRA="--stats-interval 50ms" CASES=foot PLAIN=0 timeout 540 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 3 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; touch "$OUT/stop"; sleep 0.2
gzip -f "$OUT/snaps.tsv"; rm -rf "$OUT/lm"   # marks.sh packed it into lm.tgz
cat "$OUT/marks.log" | tail -8
tar -xzOf "$OUT/lm.tgz" 2>/dev/null | head -0
for r in 1 2 3; do tar -xzOf "$OUT/lm.tgz" ./lm/lm.foot.$r.jsonl 2>/dev/null || tar -xzOf "$OUT/lm.tgz" lm/lm.foot.$r.jsonl; done | cut -c1-200
