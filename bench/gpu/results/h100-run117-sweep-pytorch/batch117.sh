#!/bin/bash
# Run 117: does the sweep (ahead/sweep.rs, on by default in this build) ever
# run on the PyTorch jobs? ResNet-50 and the encoder (ahead.sh foot25, the
# default; 1 repetition of 8 steps) and the 220M LM (marks.sh foot, 6 steps,
# 1 repetition, budget 4800M): their daemons' ahead.sweep_orders and
# sweep_asides. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
CASES="foot" timeout 150 bash $S/bench/gpu/runtime/marks.sh $OUT/lm lm 6 1 4800M > $OUT/lm.console 2>&1
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
CONFIGS="foot25" DEADLINE_S=200 timeout 300 bash $S/bench/gpu/runtime/ahead.sh $OUT/ah 1 8 > $OUT/ah.console 2>&1
echo "ahead done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
cd $OUT
{
  for f in lm/*.daemon.json ah/*/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); a=d.get("ahead") or {}; print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("fault_blocks","evict_bytes","migrated_to_gpu_bytes")}, {k:a.get(k) for k in ("next_use_period","sweep_orders","sweep_asides","launches")})' $f 2>/dev/null; done
  for f in lm/*.jsonl ah/*/*.jsonl; do python3 -c 'import json,sys,statistics as s; st=[json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]; ms=[x["ms"] for x in st][1:]; print(sys.argv[1].split("/")[-1], round(s.median(ms),1) if ms else None, [round(x,1) for x in ms])' $f; done
  grep -l -i "segmentation\|core dumped\|Traceback" lm/*.err ah/*/*.err
} > results.txt 2>&1
tar czf run117.tgz --exclude='*.sock' --exclude='*.tgz' lm ah *.console; rm -rf lm ah
cat results.txt run.log
