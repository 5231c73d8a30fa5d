#!/bin/bash
# Run 126: the part of a kernel larger than the budget tried in host memory
# (shared.rs `overflow`: the largest ranges of running launches that exceed
# the budget, as many as cover what does not fit, each a measured trial kept
# if the step gets 10% shorter). "p" = this build; "m" = main's prescientd
# (842eac7) in the same call. FDTD-2D 20 iterations (the trials need steps),
# dnn 10, 2 repetitions, driver-like beside. Pressure only from the budget
# prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
one() {  # NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run126.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run126.log"
}
one fdtd 20 330
one dnn 10 200
cd "$OUT" && for w in fdtd dnn; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in p_1 p_2 m_1 m_2; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s")}, s)' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; print("   ", [round(json.loads(l)["gpu_ms"],1) for l in sys.stdin if "\"iter\"" in l])' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.daemon.log 2>/dev/null | grep -a "host-memory" | cut -c1-300 | head -6
  done
done > tables.txt
tar czf run126.tgz fdtd dnn fdtd.log dnn.log gpu.csv 2>/dev/null; rm -rf fdtd dnn fdtd.log dnn.log
cat tables.txt run126.log
