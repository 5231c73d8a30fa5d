#!/bin/bash
# Run 85: running launches larger than the budget keeping part of it
# (prescientd --large-window-pct, hidden; 0 the default: the plain 25%
# window): 0 ("p"), 35, 50 and 75 ("L35", "L50", "L75"), each a large
# window's block prefetched once per start; the runtime's exact
# footprints for the job's own allocations in all; driver-like beside; 2
# repetitions. Pressure only from the budget prescientd enforces (half
# of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C"
for l in 35 50 75; do V="$V;L$l:prescient:--exec-ids on --large-window-pct $l:$C"; done
one() {  # one workload: NAME ITERS TIMEOUT_CAP VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run85.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$4" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run85.log"
}
one dnn 6 110 "$V"
one fdtd 5 110 "$V"
one stream 6 150 "$V"
one xf 6 150 "p:prescient:--exec-ids on:$C;L50:prescient:--exec-ids on --large-window-pct 50:$C"
cd "$OUT" && for w in dnn fdtd stream xf; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in p L35 L50 L75; do
    tar -xzOf $w/results.tgz ./${w}_${v}_1.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("'$w' '$v':", {k:d.get(k) for k in ("fault_blocks","engine_refaults","engine_regrets","prefetch_bytes","evict_bytes")}, (d.get("ahead") or {}).get("prefetched_blocks"))' 2>/dev/null
  done
done > counters.txt
tar czf run85.tgz dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log gpu.csv 2>/dev/null
rm -rf dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log
cat table_*.txt counters.txt; cat run85.log; ls -la
