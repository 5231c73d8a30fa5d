#!/bin/bash
# Run 63: the bench workloads (FDTD-2D, the transformer, dnn) with execution
# ids from the runtime (`prescientctl run --mode exec-id --no-marks`, prescientd
# --exec-ids on) beside driver-like, transparent Prescient and the oracle, 2
# repetitions. Pressure only from the budget prescientd enforces (half of each
# workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/../bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl
V="ids:prescient:--exec-ids on:--mode exec-id --no-marks"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run63.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run63.log"
}
one fdtd 5 170
one xf 6 230
one dnn 6 120
cd "$OUT" && for w in fdtd xf dnn; do sed -n '/cudaMemcpy H2D/,$p' $w.log > table_$w.txt 2>/dev/null; done
for w in fdtd xf dnn; do tail -3 $w/*ids_1.bench.err 2>/dev/null | head -8; done > ids_err.txt
tar czf run63.tgz fdtd xf dnn fdtd.log xf.log dnn.log gpu.csv 2>/dev/null
rm -rf fdtd xf dnn fdtd.log xf.log dnn.log
cat table_*.txt | grep -v '^  \['; cat run63.log; ls -la
