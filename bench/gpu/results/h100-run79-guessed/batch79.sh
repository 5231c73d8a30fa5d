#!/bin/bash
# Run 79: the shipping build with the whole queue of launches ordered for
# victim choice only where every listed launch's blocks are known exactly
# (no guessed range) and the running ones fit in half the budget
# ("new"/foot25), against the build before ("old"/foot25B: only the
# footprint window ordered): dnn (guessed footprints: both must match),
# with 2 of 8 workers prefetch-only beside ("newpw2"); the encoder and
# ResNet-50 under `prescientctl run` (ids + marks + footprints). Driver-like
# beside, 2 repetitions. Pressure only from the budget prescientd enforces
# (half of each workload's managed memory; runs 61-62's budgets for the
# PyTorch jobs).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"; OLD=$BIN/prescientd.old
V="old:prescient:--exec-ids on:$C::$OLD;new:prescient:--exec-ids on:$C;newpw2:prescient:--exec-ids on --prefetch-workers 2:$C"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2" ITERS=6 VARIANTS="$V" timeout 100 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run79.log"
PD_B=$OLD CONFIGS="driverlike foot25 foot25B" DEADLINE_S=$(( 455 - ($(date +%s) - T0) )) \
  timeout $(( 560 - ($(date +%s) - T0) )) bash $S/bench/gpu/runtime/ahead.sh $OUT/r79 2 8 > $OUT/ahead.console 2>&1
echo "pytorch done after $(( $(date +%s) - T0 )) s" >> "$OUT/run79.log"
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' dnn.log | grep -v '^  \[' > table_dnn.txt 2>/dev/null
cat r79/*/summary.txt > pytorch-summary.txt 2>/dev/null
tar czf run79.tgz dnn dnn.log r79 ahead.console gpu.csv 2>/dev/null
rm -rf dnn dnn.log r79
cat table_dnn.txt; grep -v '^{' pytorch-summary.txt; cat run79.log; ls -la
