#!/bin/bash
# Run 80: run 79's A/B on the encoder again (3 repetitions: run 79's
# foot25 repetitions were 798 and 280 ms) and on the transformers LM of
# 220M parameters (marks.sh lm, 6 steps, budget 4800M as runs 69-75):
# driver-like, the shipping build ("foot25"/"foot": the whole queue
# ordered for victims where every launch is known) and the build before
# ("foot25B"/"footB"). Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PD_B=$BIN/prescientd.old
PLAIN=0 CASES="driverlike foot footB" timeout 330 bash $S/bench/gpu/runtime/marks.sh /tmp/r80lm lm 6 2 4800M > $OUT/lm.console 2>&1
cp /tmp/r80lm.tgz $OUT/lm.tgz 2>/dev/null; cp /tmp/r80lm/summary.txt $OUT/lm-summary.txt 2>/dev/null
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run80.log"
sed -i 's/^model_ resnet 3478M$//' $S/bench/gpu/runtime/ahead.sh
CONFIGS="driverlike foot25 foot25B" DEADLINE_S=$(( 500 - ($(date +%s) - T0) )) \
  timeout $(( 570 - ($(date +%s) - T0) )) bash $S/bench/gpu/runtime/ahead.sh $OUT/r80 3 8 > $OUT/ahead.console 2>&1
echo "encoder done after $(( $(date +%s) - T0 )) s" >> "$OUT/run80.log"
cat $OUT/r80/*/summary.txt > $OUT/encoder-summary.txt 2>/dev/null
cd $OUT && tar czf run80.tgz r80 2>/dev/null; rm -rf r80
grep -v '^{' encoder-summary.txt; cat lm-summary.txt | tail -12; cat run80.log; ls -la
