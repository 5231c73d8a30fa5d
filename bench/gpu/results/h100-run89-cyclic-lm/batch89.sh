#!/bin/bash
# Run 89: --cyclic-victims (hidden; the pass stands aside while the
# running launches exceed the limit) on the transformers LM of 220M
# parameters (marks.sh lm, 6 steps, budget 4800M as runs 69-80:
# driverlike, foot = the default, footB = with the flag through
# pd-cyc.sh; 2 repetitions) and the encoder again (ahead.sh, 3
# repetitions, 8 steps). Pressure only from the budget prescientd
# enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl PD_B=$S/pd-cyc.sh
PLAIN=0 CASES="driverlike foot footB" timeout 300 bash $S/bench/gpu/runtime/marks.sh /tmp/r89lm lm 6 2 4800M > $OUT/lm.console 2>&1
cp /tmp/r89lm.tgz $OUT/lm.tgz 2>/dev/null; cp /tmp/r89lm/summary.txt $OUT/lm-summary.txt 2>/dev/null
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run89.log"
sed -i 's/^model_ resnet 3478M$//' $S/bench/gpu/runtime/ahead.sh
CONFIGS="driverlike foot25 foot25B" DEADLINE_S=$(( 500 - ($(date +%s) - T0) )) \
  timeout $(( 570 - ($(date +%s) - T0) )) bash $S/bench/gpu/runtime/ahead.sh $OUT/r89 3 8 > $OUT/ahead.console 2>&1
echo "encoder done after $(( $(date +%s) - T0 )) s" >> "$OUT/run89.log"
cat $OUT/r89/*/summary.txt > $OUT/encoder-summary.txt 2>/dev/null
cd $OUT && tar czf run89.tgz --exclude='*.sock' r89 2>/dev/null; rm -rf r89
grep -v '^{' encoder-summary.txt; cat lm-summary.txt | tail -12; cat run89.log; ls -la
