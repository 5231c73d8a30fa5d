#!/bin/bash
# Run 86: dnn with the runtime's exact footprints, 4 repetitions: the
# default ("p"), 2 of the 8 workers prefetch-only ("pw2"), a 50% large
# window ("L50") and both ("L50pw2"); then what pw2 costs FDTD-2D, stream
# and the transformer now (2 repetitions). Driver-like beside in every
# repetition. Pressure only from the budget prescientd enforces (half of
# each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
P="p:prescient:--exec-ids on:$C;pw2:prescient:--exec-ids on --prefetch-workers 2:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP REPS VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run86.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$4" ITERS=$2 VARIANTS="$5" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run86.log"
}
one dnn 6 170 "1 2 3 4" "$P;L50:prescient:--exec-ids on --large-window-pct 50:$C;L50pw2:prescient:--exec-ids on --large-window-pct 50 --prefetch-workers 2:$C"
one fdtd 5 120 "1 2" "$P"
one stream 6 130 "1 2" "$P"
one xf 6 140 "1 2" "$P"
cd "$OUT" && for w in dnn fdtd stream xf; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
done
tar czf run86.tgz dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log gpu.csv 2>/dev/null
rm -rf dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log
cat table_*.txt; cat run86.log; ls -la
