#!/bin/bash
# Run 110: --next-use-victims with its pass run only when the next uses
# were computed again (every 32nd of a step; run 109 ordered every 1 ms),
# on the PyTorch jobs: the 220M LM (marks.sh foot = ids, marks, footprints;
# footnu = the same with the flag; 6 steps, 4 repetitions, alternating,
# budget 4800M, plus the plain run), ResNet-50 and the encoder (ahead.sh
# foot25 / foot25nu, 3 repetitions of 8 steps). Pressure only from the
# budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
CASES="foot footnu" timeout 230 bash $S/bench/gpu/runtime/marks.sh $OUT/lm lm 6 4 4800M > $OUT/lm.console 2>&1
echo "lm done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
t=$(( 400 - ($(date +%s) - T0) ))
sed 's/^model_ encoder .*$//' $S/bench/gpu/runtime/ahead.sh > $S/bench/gpu/runtime/ahead_resnet.sh
CONFIGS="foot25 foot25nu" DEADLINE_S=$(( t - 30 )) timeout $t bash $S/bench/gpu/runtime/ahead_resnet.sh $OUT/ah 3 8 > $OUT/ah.console 2>&1
sed 's/^model_ resnet .*$//' $S/bench/gpu/runtime/ahead.sh > $S/bench/gpu/runtime/ahead_encoder.sh
t=$(( 570 - ($(date +%s) - T0) ))
CONFIGS="foot25 foot25nu" DEADLINE_S=$(( t - 30 )) timeout $t bash $S/bench/gpu/runtime/ahead_encoder.sh $OUT/ae 3 8 > $OUT/ae.console 2>&1
echo "ahead done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
cd $OUT
{
  echo "== rc"; cat lm/rc.txt ah/resnet/rc.txt ae/encoder/rc.txt
  echo "== lm"; grep -v '^\[' lm/summary.txt | cut -c1-330
  for d in ah/resnet:resnet ae/encoder:encoder; do
    python3 $S/bench/gpu/runtime/ahead_summary.py ${d%%:*} ${d##*:} | grep -v '^{'
    d=${d%%:*}; echo "== $d"
    for f in $d/*.jsonl; do python3 -c 'import json,sys,statistics as s; st=[json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]; ms=[x["ms"] for x in st][1:]; print(sys.argv[1].split("/")[-1], round(s.median(ms),1) if ms else None, [round(x,1) for x in ms])' $f; done
  done
  for f in lm/*.daemon.json ah/resnet/*.daemon.json ae/encoder/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); a=d.get("ahead") or {}; print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("fault_blocks","evict_bytes","migrated_to_gpu_bytes")}, {k:a.get(k) for k in ("next_use_period","next_use_restarts")})' $f 2>/dev/null; done
  grep -l -i "segmentation\|core dumped\|Traceback" lm/*.err ah/resnet/*.err ae/encoder/*.err
} > results.txt 2>&1
rm -f lm.tgz
tar czf run110.tgz --exclude='*.sock' lm ah ae *.console; rm -rf lm ah ae
cat results.txt run.log
