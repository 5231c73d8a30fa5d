#!/bin/bash
# Run 116: the last fault as the front again (run 114), and the sweep stands aside for a launch whose faults come behind it (more than 1 in 8); running launches larger than the limit ordered by where the GPU
# is in them (ahead/sweep.rs; the default of this build, "p") against
# `--no-sweep-victims` ("ns": main's order), on FDTD-2D, dnn and stream,
# driver-like beside, 2 repetitions. Pressure only from the budget
# prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;ns:prescient:--exec-ids on --no-sweep-victims:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run116.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run116.log"
}
one fdtd 10 220
one dnn 10 200

cd "$OUT" && for w in fdtd dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in p ns; do for r in 1 2; do
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d.get("ahead") or {}; s=d.get("host_shared") or {}; print("'$w' '$v' '$r':", {k:d.get(k) for k in ("fault_blocks","engine_refaults","prefetch_bytes","evict_bytes","elapsed_s")}, {k:a.get(k) for k in ("next_use_period","sweep_orders","sweep_asides","prefetched_blocks","window_blocks","matched")}, {k:s.get(k) for k in ("trials","kept","undone")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; print("  gpu_ms per iteration:", [round(json.loads(l)["gpu_ms"],1) for l in sys.stdin if "\"iter\"" in l])' 2>/dev/null
  done; done
done > counters.txt
tar czf run116.tgz fdtd dnn fdtd.log dnn.log gpu.csv 2>/dev/null
rm -rf fdtd dnn fdtd.log dnn.log
cat table_*.txt counters.txt; cat run116.log
