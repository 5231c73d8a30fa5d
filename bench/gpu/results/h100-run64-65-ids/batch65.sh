#!/bin/bash
# Run 65: xf and FDTD-2D as run 64, after the runtime records the job's own
# cuMemAllocManaged (launch footprints were empty in run 64): driver-like,
# transparent Prescient, execution ids, and execution ids with launch
# footprints, 2 repetitions, no oracle. Pressure only from the budget
# prescientd enforces (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/../bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_ORACLE=1
V="ids:prescient:--exec-ids on:--mode exec-id --no-marks;foot:prescient:--exec-ids on --footprints:--mode exec-id --no-marks"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run65.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run65.log"
}
one xf 6 250
one fdtd 5 150
cd "$OUT" && for w in xf fdtd; do sed -n '/cudaMemcpy H2D/,$p' $w.log > table_$w.txt 2>/dev/null; done
tar czf run65.tgz xf fdtd xf.log fdtd.log gpu.csv 2>/dev/null
rm -rf xf fdtd xf.log fdtd.log
cat table_*.txt | grep -v '^  \['; cat run65.log; ls -la
