#!/bin/bash
# Run 92: the bounded list of upcoming blocks (fc5a13c: computed only as
# far as the largest window reaches) against the build before it
# (637a832, the whole list of up to 4,096 blocks at every kernel start),
# on the most launch-dense jobs: the transformers LM of 220M parameters
# (marks.sh lm, 6 steps, budget 4800M; foot = this build, footB = the old
# prescientd through pd-old.sh; 3 repetitions) and the encoder (ahead.sh,
# 8 steps; foot25 / foot25B; 3 repetitions; driver-like beside), then
# ResNet-50 if time is left. Pressure only from the budget prescientd
# enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl PD_B=$S/pd-old.sh
PLAIN=0 CASES="foot footB" timeout 300 bash $S/bench/gpu/runtime/marks.sh /tmp/r92lm lm 6 3 4800M > $OUT/lm.console 2>&1
cp /tmp/r92lm.tgz $OUT/lm.tgz 2>/dev/null; cp /tmp/r92lm/summary.txt $OUT/lm-summary.txt 2>/dev/null
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run92.log"
sed -i 's/^model_ resnet 3478M$//; s/^model_ encoder 2189426688$/model_ encoder 2189426688\nmodel_ resnet 3478M/' $S/bench/gpu/runtime/ahead.sh
CONFIGS="driverlike foot25 foot25B" DEADLINE_S=$(( 520 - ($(date +%s) - T0) )) \
  timeout $(( 575 - ($(date +%s) - T0) )) bash $S/bench/gpu/runtime/ahead.sh $OUT/r92 3 8 > $OUT/ahead.console 2>&1
echo "encoder/resnet done after $(( $(date +%s) - T0 )) s" >> "$OUT/run92.log"
cat $OUT/r92/*/summary.txt > $OUT/ahead-summary.txt 2>/dev/null
cd $OUT && tar czf run92.tgz --exclude='*.sock' r92 2>/dev/null; rm -rf r92
grep -v '^{' ahead-summary.txt; cut -c1-220 lm-summary.txt | tail -10; cat run92.log; ls -la
