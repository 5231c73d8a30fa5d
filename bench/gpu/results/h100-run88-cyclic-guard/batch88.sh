#!/bin/bash
# Run 88: --cyclic-victims (hidden) with the whole-queue pass standing
# aside while the running launches alone exceed the limit, against the
# default ("p"): the four bench workloads (driver-like beside, 2
# repetitions), then the encoder and ResNet-50 under ids + marks +
# footprints (ahead.sh: driverlike, foot25, foot25B = with the flag; 2
# repetitions, 8 steps). Pressure only from the budget prescientd
# enforces (half of each bench workload's managed memory; runs 61-62's
# budgets for the encoder and ResNet-50).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;cyc:prescient:--exec-ids on --cyclic-victims:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run88.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run88.log"
}
one dnn 6 80
one stream 6 90
one fdtd 5 70
one xf 6 100
A=$S/bench/gpu/runtime/ahead.sh
t=$(left); D=$(( t - 50 ))
PD_B=$S/pd-cyc.sh CONFIGS="driverlike foot25 foot25B" DEADLINE_S=$D timeout $t bash $A $OUT/r88 2 8 > $OUT/ahead.console 2>&1
echo "ahead done after $(( $(date +%s) - T0 )) s" >> "$OUT/run88.log"
cat $OUT/r88/*/summary.txt > $OUT/summary.txt 2>/dev/null
cd "$OUT" && for w in dnn stream fdtd xf; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
done
tar czf run88.tgz --exclude='*.sock' dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log r88 ahead.console gpu.csv 2>/dev/null
rm -rf dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log r88
cat table_*.txt; grep -v '^{' summary.txt; cat run88.log; ls -la
