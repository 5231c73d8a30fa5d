#!/bin/bash
# Run 53 (second call): stream's oracle table, 2 repetitions, with 8 workers and queue merging;
# dnn's oracle with 4 and 8 workers again (this build ends the plan at its last entry);
# then run 54 (the HF Llama LM's oracle) if time is left.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
OUT=$OUT/r53s PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl WHAT=oracle ORACLE_WL="stream" \
  REPS="1 2" ITERS=6 \
  VARIANTS="oracleM:oracle:--merge-queued 64;oracleW8:oracle:--workers 8;prescientM:prescient:--merge-queued 64;prescientW8:prescient:--workers 8" \
  timeout 250 bash "$S/bench/gpu/run.sh" > "$OUT/r53s.log" 2>&1
echo "stream done after $(( $(date +%s) - T0 )) s" >> "$OUT/r53s.log"
OUT=$OUT/r53d PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl WHAT=oracle ORACLE_WL="dnn" \
  REPS="1 2" ITERS=6 NO_PRESCIENT=1 VARIANTS="oracleW8:oracle:--workers 8" \
  timeout 60 bash "$S/bench/gpu/run.sh" > "$OUT/r53d.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/r53d.log"
if [ $(( $(date +%s) - T0 )) -lt 240 ]; then
  timeout 110 bash "$S/bench/gpu/runtime/oracle_lm.sh" "$OUT/r54" 6 3680M 1 "$BIN" > "$OUT/r54.log" 2>&1
else
  echo "run 54 skipped: $(( $(date +%s) - T0 )) s gone" > "$OUT/r54.log"
fi
echo "all done after $(( $(date +%s) - T0 )) s" >> "$OUT/r54.log"
cd "$OUT" && tar czf results2.tgz r53s r53d r54 2>/dev/null; rm -rf "$OUT/r53s" "$OUT/r53d" "$OUT/r54"
ls -la "$OUT"
