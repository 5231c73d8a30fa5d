#!/bin/bash
# Run 90: the 220M LM again, default ("foot") against --cyclic-victims
# ("footB" through pd-cyc.sh), 3 repetitions each, with the plain run for
# the losses (marks.sh lm, 6 steps, budget 4800M); then dnn, default
# ("p") against the flag ("cyc"), 3 repetitions, driver-like beside.
# Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl PD_B=$S/pd-cyc.sh
CASES="foot footB" timeout 330 bash $S/bench/gpu/runtime/marks.sh /tmp/r90lm lm 6 3 4800M > $OUT/lm.console 2>&1
cp /tmp/r90lm.tgz $OUT/lm.tgz 2>/dev/null; cp /tmp/r90lm/summary.txt $OUT/lm-summary.txt 2>/dev/null
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run90.log"
C="--mode exec-id --no-marks"
NO_PRESCIENT=1 NO_ORACLE=1 OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2 3" ITERS=6 \
  VARIANTS="p:prescient:--exec-ids on:$C;cyc:prescient:--exec-ids on --cyclic-victims:$C" \
  timeout $(( 575 - ($(date +%s) - T0) )) bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run90.log"
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' dnn.log | grep -v '^  \[' > table_dnn.txt
tar czf run90.tgz dnn dnn.log 2>/dev/null; rm -rf dnn dnn.log
cat table_dnn.txt; cut -c1-200 lm-summary.txt | tail -12; cat run90.log; ls -la
