#!/bin/bash
# Run 151: run 150 on a fresh machine (run 150 ran on run 149's, warm, and had no storm); run 149 again with every block logged (BLOCK_LOG=1: the faults the
# engine saw, migrations, prefetches and victims, per block), 4 repetitions of
# 8 steps. Run 149's first repetition had a 5.2 s step with 145,111 fault
# blocks, 518k fault events and 7.7M engine predictions all resident, the
# links nearly idle; run 146's first repetition had twice the faults too. The
# 220M LM as run 146 ran it (alts.sh's Prescient case: `prescientctl run` with
# execution ids, dead/alive marks and launch footprints, the 4800M cap as the
# budget prescientd enforces, the only pressure), each step's end time
# (jobs.py end_s) and prescientd's whole stats file every 50 ms (snaps.tsv).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
mkdir -p "$OUT/lm"
( while [ ! -e "$OUT/stop" ]; do
    for f in $(find "$OUT/lm" -name '*.stats.json' -newermt '-1 second' 2>/dev/null); do
      printf '%s\t' "$(basename "$f")"; tr -d '\n' < "$f"; echo
    done >> "$OUT/snaps.tsv"; sleep 0.05
  done ) &
BLOCK_LOG=1 ATTACH_EXTRA="--stats-interval 50ms" CASES=foot PLAIN=0 timeout 540 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 4 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; touch "$OUT/stop"; sleep 0.2
gzip -f "$OUT/snaps.tsv"; rm -rf "$OUT/lm"   # marks.sh packed it into lm.tgz
cat "$OUT/marks.log" | tail -8
tar -xzOf "$OUT/lm.tgz" 2>/dev/null | head -0
for r in 1 2 3 4; do tar -xzOf "$OUT/lm.tgz" ./lm/lm.foot.$r.jsonl 2>/dev/null || tar -xzOf "$OUT/lm.tgz" lm/lm.foot.$r.jsonl; done | cut -c1-200
