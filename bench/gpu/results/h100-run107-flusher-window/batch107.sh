#!/bin/bash
# Run 107: the marks flusher's crash rate and the footprint window, on the
# 220M LM (marks.sh: foot = ids, marks, footprints at the default 25% window;
# foot50 = window 50%; footnf = foot with the flusher off,
# PRESCIENT_MARKS_FLUSHER=0; 6 steps, 4 repetitions, alternating, budget
# 4800M, plus the plain run whose losses each must equal) and ResNet-50
# (ahead.sh foot25 / foot (50%) / foot25nf, 3 repetitions of 8 steps, budget
# 3478M). Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
CASES="foot foot50 footnf" timeout 330 bash $S/bench/gpu/runtime/marks.sh $OUT/lm lm 6 4 4800M > $OUT/lm.console 2>&1
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
sed -i 's/^model_ encoder .*$//' $S/bench/gpu/runtime/ahead.sh
t=$(( 565 - ($(date +%s) - T0) ))
CONFIGS="foot25 foot foot25nf" DEADLINE_S=$(( t - 35 )) timeout $t bash $S/bench/gpu/runtime/ahead.sh $OUT/ah 3 8 > $OUT/ah.console 2>&1
echo "ahead done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
cd $OUT
{
  echo "== rc"; cat lm/rc.txt ah/resnet/rc.txt
  echo "== lm"; grep -v '^\[' lm/summary.txt | cut -c1-330
  grep -H "marks: frees" lm/*.err | sed 's/.*lm\///' | cut -c1-220
  echo "== resnet"; grep -h '"config"' ah/resnet/summary.txt | python3 -c 'import json,sys
for l in sys.stdin:
    j=json.loads(l); print(j["config"], j["rep"], j["ms"], "faults", j["faults"], "toGPU", j["to_gpu_gb"], "loss", j.get("loss_maxdiff_vs_driverlike"))'
  grep -v '^{' ah/resnet/summary.txt
  for f in lm/*.daemon.json ah/resnet/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("evict_bytes","migrated_to_gpu_bytes","host_discarded_blocks","engine_thrash_guards")})' $f; done
  grep -H "marks: frees" ah/resnet/*.err | sed 's/.*resnet\///' | cut -c1-220
  grep -l -i "segmentation\|core dumped\|Traceback" lm/*.err ah/resnet/*.err
} > results.txt 2>&1
rm -f lm.tgz
tar czf run107.tgz --exclude='*.sock' lm ah *.console; rm -rf lm ah
cat results.txt run.log
