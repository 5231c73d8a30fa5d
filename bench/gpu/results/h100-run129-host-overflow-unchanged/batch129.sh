#!/bin/bash
# Run 129: run 128's build ("p", the overflow candidates of shared.rs)
# against main's prescientd (842eac7, "m") on the workloads where no running
# launch exceeds the budget, so the rule should offer nothing: stream (4 GB
# of 8 GB) and the bench transformer (half its footprint). 2 repetitions of
# 10 iterations, driver-like beside. Pressure only from the budget
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
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run129.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run129.log"
}
one stream 10 260
one xf 10 280
cd "$OUT" && for w in stream xf; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in p_1 p_2 m_1 m_2; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; a=d.get("ahead") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s")}, {k:s.get(k) for k in ("trials","kept","undone","overflow_candidates")}, {k:a.get(k) for k in ("sweep_orders","sweep_asides")})' 2>/dev/null
  done
done > tables.txt
tar czf run129.tgz stream xf stream.log xf.log gpu.csv 2>/dev/null; rm -rf stream xf stream.log xf.log
cat tables.txt run129.log
