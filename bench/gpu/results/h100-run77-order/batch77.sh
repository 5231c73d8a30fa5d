#!/bin/bash
# Run 77: victims ordered over the whole queue of launches to come
# ("new": ahead/issue.rs order_upcoming, every 1 ms) against the build
# before ("old": only the footprint window ordered), both with
# Prescient's shipping defaults (`prescientctl run`, pointer ids, launch
# footprints, 6% reserve), and each with --prefetch-workers 2 where
# named ("pw2"); driver-like beside; 2 repetitions; dnn with every
# block's movements logged (BLOCK_LOG=1, all its cases). Pressure only
# from the budget prescientd enforces (half of each workload's managed
# memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"; OLD=$BIN/prescientd.old
VOLD="old:prescient:--exec-ids on:$C::$OLD"; VNEW="new:prescient:--exec-ids on:$C"
VNEW2="newpw2:prescient:--exec-ids on --prefetch-workers 2:$C"; VOLD2="oldpw2:prescient:--exec-ids on --prefetch-workers 2:$C::$OLD"
one() {  # one workload: NAME ITERS TIMEOUT_CAP VARIANTS [ENV=VAL]
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run77.log"; return; }
  env ${5:-X=} OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$4" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run77.log"
}
one dnn 6 110 "$VOLD;$VNEW;$VNEW2;$VOLD2" BLOCK_LOG=1
one stream 6 160 "$VOLD;$VNEW;$VNEW2"
one fdtd 5 120 "$VOLD;$VNEW;$VNEW2"
one xf 6 150 "$VOLD;$VNEW"
cd "$OUT" && for w in xf stream fdtd dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
done
tar czf run77.tgz xf stream fdtd dnn xf.log stream.log fdtd.log dnn.log gpu.csv 2>/dev/null
rm -rf xf stream fdtd dnn xf.log stream.log fdtd.log dnn.log
cat table_*.txt; cat run77.log; ls -la
