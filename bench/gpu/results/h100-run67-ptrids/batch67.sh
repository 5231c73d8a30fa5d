#!/bin/bash
# Run 67: which argument bytes should an execution id hash? One runtime
# build (cuKernelGetParamInfo fallback, run 66), the choice made per
# variant with PRESCIENT_ID_ARGS: ids0 = none (what main did in effect,
# since cuFuncGetParamInfo refused every CUkernel), idsP = the managed
# pointers among the arguments (the new default), idsA = all bytes (run
# 66's ids); footP/footA = the same with launch footprints. Driver-like
# beside them, 2 repetitions, no oracle. Pressure only from the budget
# prescientd enforces (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_ORACLE=1 NO_PRESCIENT=1 CTL_LOG=1
C="--mode exec-id --no-marks"; I="--exec-ids on"; F="--exec-ids on --footprints"
V0="ids0:prescient:$I:$C:PRESCIENT_ID_ARGS=0"
VP="idsP:prescient:$I:$C"
VA="idsA:prescient:$I:$C:PRESCIENT_ID_ARGS=all"
FP="footP:prescient:$F:$C"
FA="footA:prescient:$F:$C:PRESCIENT_ID_ARGS=all"
one() {  # one workload: NAME ITERS TIMEOUT_CAP VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run67.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$4" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run67.log"
}
one dnn 6 100 "$V0;$VP;$VA"
one fdtd 5 140 "$V0;$VP;$FP"
one xf 6 300 "$V0;$VP;$FP;$FA"
cd "$OUT" && for w in fdtd xf dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log > table_$w.txt 2>/dev/null
done
tar czf run67.tgz fdtd xf dnn fdtd.log xf.log dnn.log gpu.csv 2>/dev/null
rm -rf fdtd xf dnn fdtd.log xf.log dnn.log
cat table_*.txt | grep -v '^  \['; cat run67.log; ls -la
