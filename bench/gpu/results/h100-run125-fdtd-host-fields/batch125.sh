#!/bin/bash
# Run 125: FDTD-2D with none, one (hz) or two (ex, hz) of its three 1.07 GB
# fields advised to stay in host memory, mapped to the GPU (FDTD_HOST,
# fdtd2d.cu: what a user could do by hand), under main's prescientd
# (842eac7): driver-like and Prescient ("p"), each under half of the
# managed footprint (the only pressure: the budget prescientd enforces),
# and the resident run (no budget) with the same advice. 2 repetitions of
# 10 iterations.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C"
for h in none hz ex,hz; do
  n=host_${h/,/_}; t=$(left); [ $t -gt 180 ] && t=180
  [ $t -lt 40 ] && { echo "$n skipped" >> "$OUT/run125.log"; continue; }
  if [ $h = none ]; then unset FDTD_HOST; else export FDTD_HOST=$h; fi
  OUT=$OUT/$n WHAT=oracle ORACLE_WL=fdtd REPS="1 2" ITERS=10 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$n.log" 2>&1
  echo "$n done after $(( $(date +%s) - T0 )) s" >> "$OUT/run125.log"
done
cd "$OUT" && for n in host_none host_hz host_ex_hz; do
  echo "== FDTD_HOST: $n"; sed -n '/cudaMemcpy H2D/,$p' $n.log | grep -v '^  \['
  for v in base driverlike_1 driverlike_2 p_1 p_2; do
    tar -xzOf $n/results.tgz ./fdtd_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","migrated_to_gpu_bytes","elapsed_s")})' 2>/dev/null
    tar -xzOf $n/results.tgz ./fdtd_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("   ", [e.get("field") for e in x if e.get("event")=="advise"], [round(e["gpu_ms"],1) for e in x if e.get("event")=="iter"])' 2>/dev/null
  done
done > tables.txt
tar czf run125.tgz host_none host_hz host_ex_hz host_*.log gpu.csv 2>/dev/null; rm -rf host_none host_hz host_ex_hz host_*.log
cat tables.txt run125.log
