#!/bin/bash
# Run 57 (first call): migbench (the mechanism's ceiling: UVM_MIGRATE ASYNC
# from another process into an idle CUDA process's 4 GiB of managed memory),
# then worker / merge variants of Prescient and the oracle on stream, FDTD-2D
# and dnn, 2 repetitions, under half of each workload's managed memory (the
# only pressure: the budget prescientd enforces).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 585 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl MIGBENCH=$BIN/migbench
OUT=$OUT/mig WHAT=migbench MIG_SYNC=1 timeout 120 bash "$R" > "$OUT/mig.log" 2>&1
echo "migbench done after $(( $(date +%s) - T0 )) s" >> "$OUT/mig.log"
V="prescientW8:prescient:--workers 8;prescientW8M:prescient:--workers 8 --merge-queued 64;prescientW16M:prescient:--workers 16 --merge-queued 64;oracleW8M:oracle:--workers 8 --merge-queued 64"
OUT=$OUT/stream WHAT=oracle ORACLE_WL=stream REPS="1 2" ITERS=6 VARIANTS="$V" \
  timeout 170 bash "$R" > "$OUT/stream.log" 2>&1
echo "stream done after $(( $(date +%s) - T0 )) s" >> "$OUT/stream.log"
t=$(( $(left) - 60 )); [ $t -gt 200 ] && t=200
OUT=$OUT/fdtd WHAT=oracle ORACLE_WL=fdtd REPS="1 2" ITERS=5 VARIANTS="prescientW8M:prescient:--workers 8 --merge-queued 64;oracleW8M:oracle:--workers 8 --merge-queued 64" \
  timeout $t bash "$R" > "$OUT/fdtd.log" 2>&1
echo "fdtd done after $(( $(date +%s) - T0 )) s" >> "$OUT/fdtd.log"
t=$(left); [ $t -gt 100 ] && t=100
[ $t -gt 30 ] && OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2" ITERS=6 VARIANTS="prescientW8M:prescient:--workers 8 --merge-queued 64" \
  timeout $t bash "$R" > "$OUT/dnn.log" 2>&1
echo "all done after $(( $(date +%s) - T0 )) s" >> "$OUT/stream.log"
ls -la "$OUT" "$OUT"/*
