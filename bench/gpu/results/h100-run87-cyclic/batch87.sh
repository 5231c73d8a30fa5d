#!/bin/bash
# Run 87: victims among blocks no queued launch uses from the one that
# left the queue last (prescientd --cyclic-victims, hidden: Belady's
# choice in a program that repeats itself), against the default ("p")
# and --order-queue ("oq", runs 77-83); driver-like beside; 2
# repetitions. Pressure only from the budget prescientd enforces (half of
# each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;cyc:prescient:--exec-ids on --cyclic-victims:$C;oq:prescient:--exec-ids on --order-queue:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run87.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run87.log"
}
one stream 6 150
one dnn 6 100
one fdtd 5 110
one xf 6 160
cd "$OUT" && for w in stream dnn fdtd xf; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in p cyc oq; do
    tar -xzOf $w/results.tgz ./${w}_${v}_1.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("'$w' '$v':", {k:d.get(k) for k in ("fault_blocks","engine_refaults","prefetch_bytes","evict_bytes","elapsed_s")})' 2>/dev/null
  done
done > counters.txt
tar czf run87.tgz dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log gpu.csv 2>/dev/null
rm -rf dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log
cat table_*.txt counters.txt; cat run87.log; ls -la
