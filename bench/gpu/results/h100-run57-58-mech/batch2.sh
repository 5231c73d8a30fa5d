#!/bin/bash
# Run 58 (second call): the oracle table (driver-like, Prescient, oracle;
# 2 repetitions) on stream, FDTD-2D, the transformer and dnn with this
# build's defaults (8 workers, --merge-queued 64), beside, in the same
# repetitions, Prescient with the old defaults (Old: 4 workers, no merging)
# and with 2 of the 8 workers prefetch-only (P2). Pressure only from the
# budget prescientd enforces (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl
V="prescientOld:prescient:--workers 4 --merge-queued 0;prescientP2:prescient:--prefetch-workers 2"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run58.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run58.log"
}
one stream 6 170
one fdtd 5 130
one xf 6 170
one dnn 6 90
cd "$OUT" && for w in stream fdtd xf dnn; do sed -n '/cudaMemcpy H2D/,$p' $w.log > table_$w.txt 2>/dev/null; done
tar czf run58.tgz stream fdtd xf dnn stream.log fdtd.log xf.log dnn.log gpu.csv 2>/dev/null
rm -rf stream fdtd xf dnn stream.log fdtd.log xf.log dnn.log
cat table_*.txt | grep -v '^  \['; ls -la
