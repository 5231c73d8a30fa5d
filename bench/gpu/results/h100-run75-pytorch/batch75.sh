#!/bin/bash
# Run 75: run 73 again with the shipping build of this session (after the
# ledger of run 72 and the 6% reserve of run 74): driver-like and
# Prescient's defaults (`prescientctl run`,
# execution ids + marks, launch footprints), 2 repetitions. Pressure only
# from the budget prescientd enforces (runs 68-70's: half of each job's
# managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
CONFIGS="driverlike foot25" DEADLINE_S=330 bash $S/bench/gpu/runtime/ahead.sh $OUT/r75 2 8 > $OUT/ahead.console 2>&1
PLAIN=0 CASES="driverlike foot" timeout 200 bash $S/bench/gpu/runtime/marks.sh /tmp/r75lm lm 6 2 4800M > $OUT/lm.console 2>&1
cp /tmp/r75lm.tgz $OUT/lm.tgz 2>/dev/null; cp /tmp/r75lm/summary.txt $OUT/lm-summary.txt 2>/dev/null
cat $OUT/r75/*/summary.txt | grep -v '^{'; cat $OUT/lm-summary.txt; tail -3 $OUT/r75/run.log
cd $OUT/r75 && rm -rf resnet encoder
