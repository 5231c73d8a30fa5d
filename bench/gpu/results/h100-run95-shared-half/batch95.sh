#!/bin/bash
# Run 95: shared.rs with the half-block rule (a round counts only when the
# CPU took back at least 1 MB of the block), now off by default:
# --host-shared ("hs") against the default ("p"), dnn 10 iterations, 3
# repetitions, driver-like beside; umbench random (no budget) with and
# without. Pressure only from the budget prescientd enforces (dnn: 1 GiB
# of its 2 GiB managed; random has none).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;hs:prescient:--exec-ids on --host-shared:$C"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2 3" ITERS=10 VARIANTS="$V" timeout 200 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run95.log"
OUT=$OUT/random WHAT=random timeout 90 bash "$R" > "$OUT/random.log" 2>&1
OUT=$OUT/random_hs WHAT=random EXTRA=--host-shared timeout 90 bash "$R" > "$OUT/random_hs.log" 2>&1
echo "random done after $(( $(date +%s) - T0 )) s" >> "$OUT/run95.log"
cd "$OUT" && sed -n '/cudaMemcpy H2D/,$p' dnn.log | grep -v '^  \[' > table_dnn.txt
for w in dnn random random_hs; do
  mkdir -p x/$w && tar -C x/$w -xzf $w/results.tgz
  for f in x/$w/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "host_shared", d.get("host_shared"), {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes")}, "max_resident", d["gpus"][0].get("max_resident_bytes") if d.get("gpus") else None)' $f 2>/dev/null; done
  for f in x/$w/*.bench.jsonl; do python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; s=[json.loads(l) for l in open(sys.argv[1]) if "summary" in l]; print(sys.argv[1].split("/")[-1], "gpu_ms", [round(i.get("gpu_ms",0)) for i in it], "cpu_ms", [round(i.get("cpu_ms",0)) for i in it], {k:s[-1].get(k) for k in ("median_gpu_ms","median_iter_ms","checksum")} if s else "")' $f 2>/dev/null; done
done > counters.txt
rm -rf x; tar czf run95.tgz dnn random random_hs *.log gpu.csv 2>/dev/null
rm -rf dnn random random_hs dnn.log random.log random_hs.log
cat table_dnn.txt; cut -c1-330 counters.txt; cat run95.log
