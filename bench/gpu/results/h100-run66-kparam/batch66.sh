#!/bin/bash
# Run 66: does cuFuncGetParamInfo refuse the launches of nvcc-built and
# PyTorch kernels (CUDA 12+'s runtime launches CUkernel handles)? Each
# workload under `prescientctl run` with the runtime's exit line on
# (CTL_LOG=1), with two runtimes: main's (ids0: cuFuncGetParamInfo only)
# and this build's (ids, foot: falls back to cuKernelGetParamInfo).
# Driver-like beside them, 2 repetitions, no oracle, no transparent case.
# Pressure only from the budget prescientd enforces (half of each
# workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_ORACLE=1 NO_PRESCIENT=1 CTL_LOG=1
C="--mode exec-id --no-marks"
V0="ids0:prescient:--exec-ids on:$C:PRESCIENT_RUNTIME=$S/rt-main/libprescient_runtime.so"
V1="ids:prescient:--exec-ids on:$C"
V2="foot:prescient:--exec-ids on --footprints:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run66.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$4" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run66.log"
}
one fdtd 5 150 "$V0;$V1;$V2"
one xf 6 240 "$V0;$V1;$V2"
one dnn 6 150 "$V0;$V1"
cd "$OUT" && for w in fdtd xf dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log > table_$w.txt 2>/dev/null
  grep -H "param_info" $w/*.bench.err > exitlines_$w.txt 2>/dev/null
done
tar czf run66.tgz fdtd xf dnn fdtd.log xf.log dnn.log gpu.csv 2>/dev/null
rm -rf fdtd xf dnn fdtd.log xf.log dnn.log
cat table_*.txt | grep -v '^  \['; cat exitlines_*.txt | sed 's/.*lookups/lookups/' | cut -c1-400; cat run66.log; ls -la
