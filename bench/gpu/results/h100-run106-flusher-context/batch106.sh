#!/bin/bash
# Run 106: the marks flusher with each event's context made current on its
# thread (runtime fence.rs `enter`) and `last_flush` left to the allocator
# calls: ResNet-50, ahead.sh foot25, 3 repetitions of 8 steps. Does any job
# crash (run 105 had one SIGSEGV, rc 139, with the flusher querying events
# with no current context), and does the flusher still send the marks?
# Pressure only from the budget prescientd enforces (3478M).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
sed -i 's/^model_ encoder .*$//' $S/bench/gpu/runtime/ahead.sh
CONFIGS="foot25" DEADLINE_S=200 timeout 280 bash $S/bench/gpu/runtime/ahead.sh $OUT/r106 3 8 > $OUT/ahead.console 2>&1
cd $OUT
cat r106/resnet/rc.txt > results.txt
grep -v '^{' r106/resnet/summary.txt >> results.txt
for f in r106/resnet/*.jsonl; do python3 -c 'import json,sys; st=[json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]; print(sys.argv[1].split("/")[-1], [round(s["ms"],1) for s in st])' $f; done >> results.txt
for f in r106/resnet/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("evict_bytes","host_discarded_blocks","marked_dead_blocks","engine_thrash_guards")})' $f; done >> results.txt
grep -h "marks: frees" r106/resnet/*.err >> results.txt
tar czf run106.tgz --exclude='*.sock' r106; rm -rf r106
cat results.txt
