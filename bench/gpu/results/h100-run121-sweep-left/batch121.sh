#!/bin/bash
# Run 121 (branch wt-sweep-left): while the sweep orders, the engine's
# predictions for the running kernel are left to the sweep's window, and a
# strict cycle of distinct ids gives its period after 4 intervals.
# "p" = this build's default; "pk" = this build with
# --sweep-running-predictions (isolates the first change); "m" = main's
# prescientd (842eac7) (pk vs m isolates the period); on FDTD-2D also "p10"
# (this build, --sweep-window-pct 10). FDTD-2D 3 repetitions, dnn and stream
# 2, 10 iterations, driver-like beside. Pressure only from the budget
# prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;pk:prescient:--exec-ids on --sweep-running-predictions:$C;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
VF="$V;p10:prescient:--exec-ids on --sweep-window-pct 10:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP REPS VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run121.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$4" ITERS=$2 VARIANTS="$5" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run121.log"
}
one fdtd 10 260 "1 2 3" "$VF"
one dnn 10 130 "1 2" "$V"
one stream 10 170 "1 2" "$V"

cd "$OUT" && for w in fdtd dnn stream; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in p pk m p10; do for r in 1 2 3; do
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d.get("ahead") or {}; print("'$w' '$v' '$r':", {k:d.get(k) for k in ("fault_blocks","engine_refaults","prefetch_bytes","evict_bytes","elapsed_s","engine_prefetches","prefetch_left_to_sweep")}, {k:a.get(k) for k in ("next_use_period","sweep_orders","sweep_asides","prefetched_blocks")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; print("  gpu_ms per iteration:", [round(json.loads(l)["gpu_ms"],1) for l in sys.stdin if "\"iter\"" in l])' 2>/dev/null
  done; done
done > counters.txt
tar czf run121.tgz fdtd dnn stream fdtd.log dnn.log stream.log gpu.csv 2>/dev/null
rm -rf fdtd dnn stream fdtd.log dnn.log stream.log
cat table_*.txt counters.txt; cat run121.log
