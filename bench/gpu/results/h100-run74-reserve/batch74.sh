#!/bin/bash
# Run 74: the engine's smallest reserve under the ledger of run 72 (how
# many evictions may be on their way while prefetches go in): 2.5% of the
# budget (the default), 6% and 12% (prescientd's hidden --reserve-pct),
# with Prescient's defaults otherwise (`prescientctl run`, pointer ids,
# launch footprints), driver-like beside, 2 repetitions. Pressure only
# from the budget prescientd enforces (half of each workload's managed
# memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="r2:prescient:--exec-ids on:$C;r6:prescient:--exec-ids on --reserve-pct 6:$C;r12:prescient:--exec-ids on --reserve-pct 12:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run74.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run74.log"
}
one xf 6 150
one stream 6 160
one fdtd 5 110
one dnn 6 100
cd "$OUT" && for w in xf stream fdtd dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
done
tar czf run74.tgz xf stream fdtd dnn xf.log stream.log fdtd.log dnn.log gpu.csv 2>/dev/null
rm -rf xf stream fdtd dnn xf.log stream.log fdtd.log dnn.log
cat table_*.txt; cat run74.log; ls -la
