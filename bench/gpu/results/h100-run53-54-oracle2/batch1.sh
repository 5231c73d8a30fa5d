#!/bin/bash
# Runs 53-54 (issue 20, wt-oracle2): one call on the device machine.
# Run from the carried stage folder (binaries in target/release, scripts in bench/gpu).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
# Run 53: the oracle table (xf, dnn, stream), 2 repetitions, workers and queue merging on dnn and stream.
OUT=$OUT/r53 PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl WHAT=oracle ORACLE_WL="xf dnn stream" \
  REPS="1 2" ITERS=6 WL_VARIANTS="dnn stream" \
  VARIANTS="oracleW8:oracle:--workers 8;oracleM:oracle:--merge-queued 64;oracleW8M:oracle:--workers 8 --merge-queued 64;prescientW8:prescient:--workers 8;prescientM:prescient:--merge-queued 64" \
  timeout 420 bash "$S/bench/gpu/run.sh" > "$OUT/r53.log" 2>&1
echo "run 53 done after $(( $(date +%s) - T0 )) s" >> "$OUT/r53.log"
# Run 54: the HF Llama LM's oracle, if time is left (budget: half of its about 7.7 GB peak).
if [ $(( $(date +%s) - T0 )) -lt 380 ]; then
  timeout 140 bash "$S/bench/gpu/runtime/oracle_lm.sh" "$OUT/r54" 8 3680M 1 "$BIN" > "$OUT/r54.log" 2>&1
else
  echo "run 54 skipped: $(( $(date +%s) - T0 )) s gone" > "$OUT/r54.log"
fi
echo "all done after $(( $(date +%s) - T0 )) s" >> "$OUT/r54.log"
cd "$OUT" && tar czf results.tgz r53 r54 2>/dev/null; rm -rf "$OUT/r53" "$OUT/r54"
ls -la "$OUT"
