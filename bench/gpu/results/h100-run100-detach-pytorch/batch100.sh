#!/bin/bash
# Run 100: (1) dnn, 40 iterations under prescientctl run, "pdur" =
# prescientd attach --duration 7s: it detaches mid-run; after the detach
# the job runs unbudgeted and its input should be back to the driver's
# default placement (the advice taken back), so its GPU phase returns to
# the unadvised one (base, ~100 ms) and not the advised ~35 ms.
# (2) the thrash guard on the PyTorch jobs: ResNet-50 and the encoder
# (ahead.sh foot25 = this build, foot25B = main at d9e2dac, driver-like
# beside, 2 repetitions of 8 steps). Pressure only from the budget
# prescientd enforces (half of each job's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="pdur:prescient:--exec-ids on --duration 7s:$C"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1" ITERS=40 VARIANTS="$V" timeout 150 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run100.log"
( cd "$OUT" && mkdir x && tar -C x -xzf dnn/results.tgz
  for f in x/dnn_pdur_1 x/dnn_base; do
    python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]+".bench.jsonl") if "\"iter\"" in l]; print(sys.argv[1], "gpu_ms", [round(i["gpu_ms"]) for i in it], "w1", [round(i["w1"]-it[0]["w0"],1) for i in it])' $f
    grep -h "host-memory\|advice\|detach\|duration" $f.daemon.log 2>/dev/null | cut -c1-260
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]+".daemon.json")); print(d.get("host_shared"), d.get("elapsed_s"), d.get("engine_thrash_guards"))' $f 2>/dev/null
  done > periter.txt 2>&1; rm -rf x )
sed -n '/cudaMemcpy H2D/,$p' $OUT/dnn.log | grep -v '^  \[' > $OUT/table_dnn.txt
PD_B=$S/old/prescientd CONFIGS="driverlike foot25 foot25B" DEADLINE_S=$(( 480 - ($(date +%s) - T0) )) \
  timeout $(( 540 - ($(date +%s) - T0) )) bash $S/bench/gpu/runtime/ahead.sh $OUT/r100 2 8 > $OUT/ahead.console 2>&1
echo "pytorch done after $(( $(date +%s) - T0 )) s" >> "$OUT/run100.log"
cat $OUT/r100/*/summary.txt > $OUT/ahead-summary.txt 2>/dev/null
for f in $OUT/r100/*/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("engine_thrash_guards","engine_thrash_guarded_gpus","prefetch_guarded","engine_victims","engine_regrets","fault_blocks")})' $f; done > $OUT/counters.txt 2>&1
cd $OUT && tar czf run100.tgz --exclude='*.sock' r100 dnn dnn.log 2>/dev/null; rm -rf r100 dnn dnn.log
cat table_dnn.txt periter.txt; grep -v '^{' ahead-summary.txt; cut -c1-300 counters.txt; cat run100.log
