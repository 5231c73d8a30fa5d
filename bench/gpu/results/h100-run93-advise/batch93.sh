#!/bin/bash
# Run 93: dnn's input (1 GiB the CPU rewrites every iteration, read once by
# the first layer) advised to stay in host memory and be read there by the
# GPU (umbench DNN_ADVISE=1: cudaMemAdvise SetPreferredLocation host +
# SetAccessedBy GPU 0, what a user would do by hand): Prescient ("p", the
# default build), Prescient with the advice ("adv"), driver-like with the
# advice ("dladv"); driver-like and the resident run beside. 3
# repetitions. Pressure only from the budget prescientd enforces (1 GiB of
# the 2 GiB managed).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
nvcc -O2 -arch=sm_90 -o /tmp/umb-check $S/bench/gpu/umbench.cu > $OUT/nvcc-check.log 2>&1 || { cat $OUT/nvcc-check.log; exit 1; }
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;adv:prescient:--exec-ids on:$C:DNN_ADVISE=1;dladv:driver-like::$C:DNN_ADVISE=1"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2 3" ITERS=6 VARIANTS="$V" timeout 400 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run93.log"
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' dnn.log | grep -v '^  \[' > table_dnn.txt
mkdir x && cd x && tar xzf ../dnn/results.tgz && for f in dnn_*_[123].bench.jsonl; do
  python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; print(sys.argv[1], "cpu_ms", [round(i["cpu_ms"]) for i in it], "gpu_ms", [round(i["gpu_ms"]) for i in it])' $f
done > ../periter.txt; grep -l advise dnn_*.bench.jsonl | head -3 >> ../periter.txt
for f in dnn_*_1.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","evict_gbps")}, d["gpus"][0].get("max_resident_bytes"))' $f; done >> ../periter.txt
cd .. && rm -rf x && tar czf run93.tgz dnn dnn.log gpu.csv 2>/dev/null; rm -rf dnn dnn.log
cat table_dnn.txt periter.txt run93.log; ls -la
