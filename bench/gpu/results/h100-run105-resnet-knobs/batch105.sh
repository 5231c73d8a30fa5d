#!/bin/bash
# Run 105 (informative; no default changed): ResNet-50 on this stop's build
# (the marks flusher: its step is bound by evictions to the host) with the
# footprint window at 25% (the default) and 50%, and the reserve at 3% and
# 12% of the budget (default 6%), 2 repetitions of 8 steps, alternating.
# Pressure only from the budget prescientd enforces (3478M, half of the
# job's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
sed -i 's/^model_ encoder .*$//' $S/bench/gpu/runtime/ahead.sh
CONFIGS="foot25 foot foot25r3 foot25r12" DEADLINE_S=480 timeout 540 bash $S/bench/gpu/runtime/ahead.sh $OUT/r105 2 8 > $OUT/ahead.console 2>&1
cd $OUT
grep -h '"config"' r105/resnet/summary.txt | python3 -c 'import json,sys
for l in sys.stdin:
    j=json.loads(l); print(j["config"], j["rep"], j["ms"], "faults", j["faults"], "toGPU", j["to_gpu_gb"])' > results.txt
grep -v '^{' r105/resnet/summary.txt >> results.txt
for f in r105/resnet/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("evict_bytes","migrated_to_gpu_bytes","host_discarded_blocks","evict_gbps","engine_thrash_guards")})' $f; done >> results.txt
tar czf run105.tgz --exclude='*.sock' r105; rm -rf r105
cat results.txt
