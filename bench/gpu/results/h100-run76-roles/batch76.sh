#!/bin/bash
# Run 76: worker roles under the ledger (--prefetch-workers 2 and 4 of 8:
# those take only prefetches, the others evictions first) against the
# default (every worker both, prefetches first, one eviction in 4 while
# both wait), Prescient's shipping defaults otherwise (`prescientctl run`,
# pointer ids, launch footprints, 6% reserve), driver-like beside, 2
# repetitions; dnn with every block's movements logged (BLOCK_LOG=1, all
# its cases). Pressure only from the budget prescientd enforces (half of
# each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;pw2:prescient:--exec-ids on --prefetch-workers 2:$C;pw4:prescient:--exec-ids on --prefetch-workers 4:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP [ENV=VAL]
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run76.log"; return; }
  env ${4:-X=} OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run76.log"
}
one dnn 6 110 BLOCK_LOG=1
one stream 6 160
one fdtd 5 120
one xf 6 150
cd "$OUT" && for w in xf stream fdtd dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
done
tar czf run76.tgz xf stream fdtd dnn xf.log stream.log fdtd.log dnn.log gpu.csv 2>/dev/null
rm -rf xf stream fdtd dnn xf.log stream.log fdtd.log dnn.log
cat table_*.txt; cat run76.log; ls -la
