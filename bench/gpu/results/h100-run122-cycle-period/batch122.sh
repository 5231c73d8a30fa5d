#!/bin/bash
# Run 122 (branch wt-sweep-left after run 121, the engine's predictions for
# the running kernel prefetched again as on main): a strict cycle of
# distinct ids gives its period after 4 intervals. "c" = this build's
# default; "m" = main's prescientd (842eac7); on FDTD-2D also "c40" (this
# build, --sweep-window-pct 40). dnn 3 repetitions, FDTD-2D 2, the bench
# transformer 2 (as time allows), 10 iterations, driver-like beside.
# Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="c:prescient:--exec-ids on:$C;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
VF="$V;c40:prescient:--exec-ids on --sweep-window-pct 40:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP REPS VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run122.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$4" ITERS=$2 VARIANTS="$5" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run122.log"
}
one dnn 10 150 "1 2 3" "$V"
one fdtd 10 200 "1 2" "$VF"
one xf 10 200 "1 2" "$V"

cd "$OUT" && for w in dnn fdtd xf; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in c m c40; do for r in 1 2 3; do
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d.get("ahead") or {}; print("'$w' '$v' '$r':", {k:d.get(k) for k in ("fault_blocks","engine_refaults","prefetch_bytes","evict_bytes","elapsed_s")}, {k:a.get(k) for k in ("next_use_period","sweep_orders","sweep_asides","prefetched_blocks")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[round(json.loads(l).get("gpu_ms", json.loads(l).get("step_ms", 0)),1) for l in sys.stdin if "\"iter\"" in l or "\"step\"" in l]; x and print("  per iteration ms:", x)' 2>/dev/null
  done; done
done > counters.txt
tar czf run122.tgz dnn fdtd xf dnn.log fdtd.log xf.log gpu.csv 2>/dev/null
rm -rf dnn fdtd xf dnn.log fdtd.log xf.log
cat table_*.txt counters.txt; cat run122.log
