#!/bin/bash
# Run 124 (branch wt-sweep-left at 34d99ea, the build of run 121): with the
# engine's predictions for the running kernel left to the sweep's window,
# does a window reaching further ahead make up for them? "pk" = the
# predictions kept (--sweep-running-predictions; main's behaviour plus the
# cycle rule), "p40" / "p60" = left to a window of 40% / 60% of the limit.
# FDTD-2D, 2 repetitions of 10 iterations, driver-like beside. Pressure
# only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="pk:prescient:--exec-ids on --sweep-running-predictions:$C;p40:prescient:--exec-ids on --sweep-window-pct 40:$C;p60:prescient:--exec-ids on --sweep-window-pct 60:$C"
OUT=$OUT/fdtd WHAT=oracle ORACLE_WL=fdtd REPS="1 2" ITERS=10 VARIANTS="$V" timeout 400 bash "$R" > "$OUT/fdtd.log" 2>&1
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' fdtd.log | grep -v '^  \[' > table_fdtd.txt
for v in pk p40 p60; do for r in 1 2; do
  tar -xzOf fdtd/results.tgz ./fdtd_${v}_$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d.get("ahead") or {}; print("fdtd '$v' '$r':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s","engine_prefetches","prefetch_left_to_sweep")}, {k:a.get(k) for k in ("sweep_orders","sweep_asides","prefetched_blocks")})'
  tar -xzOf fdtd/results.tgz ./fdtd_${v}_$r.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; print("  gpu_ms per iteration:", [round(json.loads(l)["gpu_ms"],1) for l in sys.stdin if "\"iter\"" in l])'
done; done > counters.txt
tar czf run124.tgz fdtd fdtd.log gpu.csv; rm -rf fdtd fdtd.log
cat table_fdtd.txt counters.txt
