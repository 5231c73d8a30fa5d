#!/bin/bash
# Run 130: run 128's build ("p", the overflow candidates) against main's
# prescientd (842eac7, "m") on FDTD-2D at the usual 10 iterations (the step
# median then includes the trials' iterations). 2 repetitions, driver-like
# beside. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
OUT=$OUT/fdtd WHAT=oracle ORACLE_WL=fdtd REPS="1 2" ITERS=10 VARIANTS="$V" timeout 300 bash "$R" > "$OUT/fdtd.log" 2>&1
cd "$OUT" && { sed -n '/cudaMemcpy H2D/,$p' fdtd.log | grep -v '^  \['
  for v in p_1 p_2 m_1 m_2; do
    tar -xzOf fdtd/results.tgz ./fdtd_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes")}, {k:s.get(k) for k in ("trials","kept","undone","overflow_candidates")})' 2>/dev/null
    tar -xzOf fdtd/results.tgz ./fdtd_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; print("   ", [round(json.loads(l)["gpu_ms"],1) for l in sys.stdin if "\"iter\"" in l])' 2>/dev/null
  done; } > tables.txt
tar czf run130.tgz fdtd fdtd.log gpu.csv; rm -rf fdtd fdtd.log
cat tables.txt
