#!/bin/bash
# Run 118: FDTD-2D with the block log (BLOCK_LOG=1), the sweep's build (p)
# and --no-sweep-victims (ns), 1 repetition of 10 iterations, to see where
# its bytes go. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;ns:prescient:--exec-ids on --no-sweep-victims:$C"
BLOCK_LOG=1 OUT=$OUT/fdtd WHAT=oracle ORACLE_WL=fdtd REPS="1" ITERS=10 VARIANTS="$V" timeout 300 bash "$R" > "$OUT/fdtd.log" 2>&1
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' fdtd.log | grep -v '^  \[' > table_fdtd.txt
mkdir -p logs && tar -xzf fdtd/results.tgz -C logs 2>/dev/null
ls logs | head -50
for v in p ns; do cat logs/fdtd_${v}_1.blocklog.json 2>/dev/null | cut -c1-3000; echo; done
gzip -9 logs/*.blocks.tsv 2>/dev/null
tar czf run118.tgz fdtd.log gpu.csv
mv logs/fdtd_p_1.blocks.tsv.gz logs/fdtd_ns_1.blocks.tsv.gz logs/fdtd_p_1.bench.jsonl logs/fdtd_ns_1.bench.jsonl . 2>/dev/null
rm -rf fdtd logs fdtd.log
ls -la
