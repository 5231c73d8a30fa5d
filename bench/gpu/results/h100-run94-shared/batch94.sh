#!/bin/bash
# Run 94: blocks the CPU and the GPU take from each other kept in host
# memory (prescientd shared.rs, on by default: "p"), against
# --no-host-shared ("nohs") and against dnn's input advised so by hand
# (umbench DNN_ADVISE=1 under the default build: "adv"); driver-like
# beside. dnn 10 iterations, 3 repetitions; then umbench random (no
# budget: the CPU rewrites a random quarter of 4 GiB every iteration,
# the GPU reads random pages) with and without; then stream, FDTD-2D and
# the transformer once each with the default, for its counters. Pressure
# only from the budget prescientd enforces (half of each workload's
# managed memory; random has none).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;nohs:prescient:--exec-ids on --no-host-shared:$C;adv:prescient:--exec-ids on:$C:DNN_ADVISE=1"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2 3" ITERS=10 VARIANTS="$V" timeout 200 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run94.log"
OUT=$OUT/random WHAT=random timeout 90 bash "$R" > "$OUT/random.log" 2>&1
OUT=$OUT/random_nohs WHAT=random EXTRA=--no-host-shared timeout 90 bash "$R" > "$OUT/random_nohs.log" 2>&1
echo "random done after $(( $(date +%s) - T0 )) s" >> "$OUT/run94.log"
for w in fdtd stream xf; do
  t=$(left); [ $t -gt 130 ] && t=130; [ $t -lt 40 ] && break
  OUT=$OUT/$w WHAT=oracle ORACLE_WL=$w REPS="1" ITERS=5 VARIANTS="p:prescient:--exec-ids on:$C" timeout $t bash "$R" > "$OUT/$w.log" 2>&1
  echo "$w done after $(( $(date +%s) - T0 )) s" >> "$OUT/run94.log"
done
cd "$OUT" && for w in dnn fdtd stream xf; do sed -n '/cudaMemcpy H2D/,$p' $w.log 2>/dev/null | grep -v '^  \[' > table_$w.txt; done
for w in dnn random random_nohs fdtd stream xf; do
  [ -f $w/results.tgz ] || continue
  mkdir -p x/$w && tar -C x/$w -xzf $w/results.tgz
  for f in x/$w/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "host_shared", d.get("host_shared"), {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes")}, "max_resident", d["gpus"][0].get("max_resident_bytes") if d.get("gpus") else None)' $f 2>/dev/null; done
  for f in x/$w/*.bench.jsonl; do python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; s=[json.loads(l) for l in open(sys.argv[1]) if "summary" in l]; print(sys.argv[1].split("/")[-1], "gpu_ms", [round(i.get("gpu_ms",0)) for i in it], "cpu_ms", [round(i.get("cpu_ms",0)) for i in it], s[-1] if s else "")' $f 2>/dev/null; done
done > counters.txt
rm -rf x; tar czf run94.tgz dnn random random_nohs fdtd stream xf *.log gpu.csv 2>/dev/null
rm -rf dnn random random_nohs fdtd stream xf dnn.log random.log random_nohs.log fdtd.log stream.log xf.log
cat table_*.txt; cut -c1-400 counters.txt; cat run94.log; ls -la
