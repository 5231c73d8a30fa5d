#!/bin/bash
# Run 81: the encoder's regression under the whole-queue victim order
# (run 80: 584 / 595 / 295 ms against 217 / 348 / 224, three times the
# faults), with every block's movements logged (BLOCK_LOG=1), on a build
# whose order pass leaves blocks declared dead alone ("foot25"), against
# the build before ("foot25B"), driver-like beside, 3 repetitions; then
# ResNet-50 the same way, 2 repetitions. ids + marks + footprints under
# `prescientctl run`. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PD_B=$BIN/prescientd.old BLOCK_LOG=1
A=$S/bench/gpu/runtime/ahead.sh
sed -i 's/^model_ resnet 3478M$//' $A
CONFIGS="driverlike foot25 foot25B" DEADLINE_S=250 timeout 300 bash $A $OUT/r81 3 8 > $OUT/ahead.console 2>&1
echo "encoder done after $(( $(date +%s) - T0 )) s" >> "$OUT/run81.log"
sed -i 's/^model_ encoder 2189426688$/model_ resnet 3478M/' $A
CONFIGS="foot25 foot25B" DEADLINE_S=$(( 480 - ($(date +%s) - T0) )) timeout $(( 560 - ($(date +%s) - T0) )) bash $A $OUT/r81b 2 8 > $OUT/ahead-resnet.console 2>&1
echo "resnet done after $(( $(date +%s) - T0 )) s" >> "$OUT/run81.log"
cat $OUT/r81/*/summary.txt $OUT/r81b/*/summary.txt > $OUT/summary.txt 2>/dev/null
cd $OUT && gzip -f r81/*/*.blocks.tsv r81b/*/*.blocks.tsv 2>/dev/null; tar czf run81.tgz --exclude='*.tgz' --exclude='*.sock' r81 r81b 2>/dev/null; rm -rf r81 r81b
grep -v '^{' summary.txt; cat run81.log; ls -la
