#!/bin/bash
# Run 98: the host-memory advice is taken back when prescientd's loop ends.
# dnn 16 iterations under prescientctl run: "p" (the loop lasts the job)
# and "pdur" (prescientd attach --duration 5s: it detaches mid-run while
# the job goes on); the steps after the detach show whether the input left
# host memory. Pressure only from the budget prescientd enforces (1 GiB of
# dnn's 2 GiB managed).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;pdur:prescient:--exec-ids on --duration 5s:$C"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1" ITERS=16 VARIANTS="$V" timeout 200 bash "$R" > "$OUT/dnn.log" 2>&1
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' dnn.log | grep -v '^  \[' > table_dnn.txt
mkdir x && tar -C x -xzf dnn/results.tgz
for f in x/dnn_p_1 x/dnn_pdur_1; do
  python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]+".bench.jsonl") if "\"iter\"" in l]; print(sys.argv[1], "gpu_ms", [round(i["gpu_ms"]) for i in it], "w1", [round(i["w1"]-it[0]["w0"],1) for i in it])' $f
  grep -h "host-memory" $f.daemon.log | cut -c1-260
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]+".daemon.json")); print(d.get("host_shared"), d.get("elapsed_s"))' $f
done > periter.txt 2>&1
rm -rf x; tar czf run98.tgz dnn dnn.log gpu.csv; rm -rf dnn dnn.log
cat table_dnn.txt periter.txt
