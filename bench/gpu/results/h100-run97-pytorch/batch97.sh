#!/bin/bash
# Run 97: the PyTorch jobs with host-memory trials on (shared.rs, the
# default of this build): the encoder (ahead.sh foot25, 8 steps, 2
# repetitions, driver-like beside) and the 220M LM (marks.sh foot, 6
# steps, 1 repetition, budget 4800M): do trials start, and what do the
# steps cost. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl
PLAIN=0 CASES="foot" timeout 150 bash $S/bench/gpu/runtime/marks.sh /tmp/r97lm lm 6 1 4800M > $OUT/lm.console 2>&1
cp /tmp/r97lm/summary.txt $OUT/lm-summary.txt 2>/dev/null
for f in /tmp/r97lm/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], d.get("host_shared"))' $f; done > $OUT/counters.txt 2>&1
grep -h "host-memory trial" /tmp/r97lm/*.daemon.log >> $OUT/counters.txt 2>/dev/null
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run97.log"
sed -i 's/^model_ resnet 3478M$//' $S/bench/gpu/runtime/ahead.sh
CONFIGS="driverlike foot25" DEADLINE_S=$(( 330 - ($(date +%s) - T0) )) \
  timeout $(( 380 - ($(date +%s) - T0) )) bash $S/bench/gpu/runtime/ahead.sh $OUT/r97 2 8 > $OUT/ahead.console 2>&1
echo "encoder done after $(( $(date +%s) - T0 )) s" >> "$OUT/run97.log"
cat $OUT/r97/*/summary.txt > $OUT/ahead-summary.txt 2>/dev/null
for f in $OUT/r97/*/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], d.get("host_shared"))' $f; done >> $OUT/counters.txt 2>&1
grep -h "host-memory trial" $OUT/r97/*/*.daemon.log >> $OUT/counters.txt 2>/dev/null
cd $OUT && tar czf run97.tgz --exclude='*.sock' r97 2>/dev/null; rm -rf r97
grep -v '^{' ahead-summary.txt; grep '^{' ahead-summary.txt; cut -c1-200 lm-summary.txt | tail -3; cut -c1-300 counters.txt; cat run97.log
