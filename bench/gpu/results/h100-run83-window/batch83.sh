#!/bin/bash
# Run 83: is the encoder's loss under --order-queue (runs 79-81) the
# window's reach? The shipping build ("foot25": window 25%, no pass),
# with --order-queue ("foot25B" through pd-oq.sh), and with
# --order-queue and a 50% window (second call, "foot25B" with
# OQ_WINDOW=50); driver-like beside; 2 repetitions each. ids + marks +
# footprints under `prescientctl run`. Pressure only from the budget
# prescientd enforces (runs 61-62's: 2189426688 bytes).
set -u
S=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
A=$S/bench/gpu/runtime/ahead.sh
sed -i 's/^model_ resnet 3478M$//' $A
PD_B=$S/pd-oq.sh CONFIGS="driverlike foot25 foot25B" DEADLINE_S=200 timeout 260 bash $A $OUT/r83 2 8 > $OUT/ahead.console 2>&1
echo "window 25 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run83.log"
OQ_WINDOW=50 PD_B=$S/pd-oq.sh CONFIGS="foot25B" DEADLINE_S=120 timeout 160 bash $A $OUT/r83w50 2 8 > $OUT/ahead-w50.console 2>&1
echo "window 50 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run83.log"
cat $OUT/r83/*/summary.txt $OUT/r83w50/*/summary.txt > $OUT/summary.txt 2>/dev/null
grep -h "order-queue\|footprint-window" $OUT/r83w50/encoder/*.daemon.log 2>/dev/null | head -2
cd $OUT && tar czf run83.tgz --exclude='*.tgz' --exclude='*.sock' r83 r83w50 2>/dev/null; rm -rf r83 r83w50
grep -v '^{' summary.txt; grep '^{' summary.txt | cut -c1-120; cat run83.log; ls -la
