#!/bin/bash
# Run 71: the four bench workloads with Prescient's defaults as a user gets
# them after runs 66-70 (`prescientctl run`: execution ids hashing the
# managed pointers among the arguments; prescientd: launch footprints on),
# beside driver-like and the GPU oracle (replaying the same repetition's
# driver-like plan), 2 repetitions. dnn also with all argument bytes in its
# ids (run 67's best for it). Pressure only from the budget prescientd
# enforces (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1
C="--mode exec-id --no-marks"
VD="foot:prescient:--exec-ids on:$C"
VA="footA:prescient:--exec-ids on:$C:PRESCIENT_ID_ARGS=all"
one() {  # one workload: NAME ITERS TIMEOUT_CAP VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run71.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$4" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run71.log"
}
one dnn 6 90 "$VD;$VA"
one fdtd 5 110 "$VD"
one xf 6 170 "$VD"
one stream 6 200 "$VD"
cd "$OUT" && for w in dnn fdtd xf stream; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log > table_$w.txt 2>/dev/null
done
tar czf run71.tgz dnn fdtd xf stream dnn.log fdtd.log xf.log stream.log gpu.csv 2>/dev/null
rm -rf dnn fdtd xf stream dnn.log fdtd.log xf.log stream.log
cat table_*.txt | grep -v '^  \['; cat run71.log; ls -la
