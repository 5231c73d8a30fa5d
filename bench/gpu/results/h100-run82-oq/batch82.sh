#!/bin/bash
# Run 82: the shipping build of this stop (the whole-queue victim order
# off by default), with its hidden --order-queue on ("oq") on the
# transformer, whose footprints may be guessed (the order then stays
# off), and dnn with 2 and 3 of its 8 workers prefetch-only ("pw2",
# "pw3"); driver-like beside; 2 repetitions. Pressure only from the
# budget prescientd enforces (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
one() {  # one workload: NAME ITERS TIMEOUT_CAP VARIANTS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run82.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$4" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run82.log"
}
one xf 6 160 "p:prescient:--exec-ids on:$C:PRESCIENT_RUNTIME_LOG=1;oq:prescient:--exec-ids on --order-queue:$C:PRESCIENT_RUNTIME_LOG=1"
one dnn 6 110 "p:prescient:--exec-ids on:$C;pw2:prescient:--exec-ids on --prefetch-workers 2:$C;pw3:prescient:--exec-ids on --prefetch-workers 3:$C"
cd "$OUT" && for w in xf dnn; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
done
for f in xf/xf_oq_1.stats.json xf/xf_p_1.stats.json; do
  tar -xzOf xf/results.tgz ./$(basename $f) 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("ahead"))' || true
done
tar -xzOf xf/results.tgz --wildcards "*_oq_1.bench.err" 2>/dev/null | grep -a "footprints" | head -3
tar czf run82.tgz xf dnn xf.log dnn.log gpu.csv 2>/dev/null
rm -rf xf dnn xf.log dnn.log
cat table_*.txt; cat run82.log; ls -la
