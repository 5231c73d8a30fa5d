#!/bin/bash
# Run 102: the PyTorch jobs on this stop's whole build (thrash guard and
# marks flusher): the 220M LM (marks.sh: driver-like and foot = ids, marks,
# footprints; 6 steps, 2 repetitions, budget 4800M) with "footold" = foot
# with main's runtime (d9e2dac) beside it; ResNet-50 and the encoder a third
# time (ahead.sh driverlike foot25, 8 steps, 1 rep). Pressure only from the
# budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for r in 1 2; do
  PLAIN=0 CASES="foot" timeout 150 bash $S/bench/gpu/runtime/marks.sh $OUT/lmnew$r lm 6 1 4800M > $OUT/lmnew$r.console 2>&1
  PLAIN=0 CASES="foot" timeout 150 bash $S/oldrt/bench/gpu/runtime/marks.sh $OUT/lmold$r lm 6 1 4800M > $OUT/lmold$r.console 2>&1
  echo "lm $r done after $(( $(date +%s) - T0 )) s" >> "$OUT/run102.log"
done
PLAIN=0 CASES="driverlike" timeout 150 bash $S/bench/gpu/runtime/marks.sh $OUT/lmdl lm 6 1 4800M > $OUT/lmdl.console 2>&1
echo "lm driver-like done after $(( $(date +%s) - T0 )) s" >> "$OUT/run102.log"
t=$(( 560 - ($(date +%s) - T0) ))
[ $t -gt 60 ] && CONFIGS="driverlike foot25" DEADLINE_S=$(( t - 40 )) timeout $t bash $S/bench/gpu/runtime/ahead.sh $OUT/ah 1 8 > $OUT/ah.console 2>&1
echo "ahead done after $(( $(date +%s) - T0 )) s" >> "$OUT/run102.log"
cd $OUT
for d in lmnew1 lmold1 lmnew2 lmold2 lmdl; do
  echo "== $d"; grep -v '^\[' $d/summary.txt 2>/dev/null | head -5 | cut -c1-300
  for f in $d/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("   ", sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("evict_bytes","migrated_to_gpu_bytes","host_discarded_blocks","marked_dead_blocks","engine_thrash_guards")})' $f 2>/dev/null; done
  grep -h "marks: frees" $d/*.err 2>/dev/null | cut -c1-200
done > results.txt 2>&1
for m in resnet encoder; do grep -h '"config"' ah/$m/summary.txt 2>/dev/null | cut -c1-120; grep -v '^{' ah/$m/summary.txt 2>/dev/null; done >> results.txt
tar czf run102.tgz --exclude='*.sock' lmnew1 lmnew2 lmold1 lmold2 lmdl ah *.console 2>/dev/null; rm -rf lmnew1 lmnew2 lmold1 lmold2 lmdl ah
cat results.txt run102.log
