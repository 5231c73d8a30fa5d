#!/bin/bash
# Run 104: the shipped thrash guard (g2: only victims faulted back count)
# on dnn (10 iterations, 2 repetitions) against the build without the guard
# ("old", d9e2dac), driver-like beside. Pressure only from the budget
# prescientd enforces (1 GiB of dnn's 2 GiB).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="g2:prescient:--exec-ids on:$C;old:prescient:--exec-ids on:$C::$S/old/prescientd"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2" ITERS=10 VARIANTS="$V" timeout 250 bash "$R" > "$OUT/dnn.log" 2>&1
cd "$OUT"
sed -n '/cudaMemcpy H2D/,$p' dnn.log | grep -v '^  \['
mkdir -p x && tar -C x -xzf dnn/results.tgz
for f in x/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("engine_thrash_guards","engine_thrash_guarded_gpus","prefetch_guarded","engine_victims","engine_refaults","host_shared")})' $f 2>/dev/null; done
for f in x/*.bench.jsonl; do python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; print(sys.argv[1].split("/")[-1], "gpu_ms", [round(i.get("gpu_ms",0)) for i in it])' $f 2>/dev/null; done
rm -rf x; tar czf run104.tgz dnn dnn.log gpu.csv; rm -rf dnn dnn.log
