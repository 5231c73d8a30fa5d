#!/bin/bash
# Run 96: allocations the CPU rewrites every step tried in host memory,
# kept only if the step got shorter (prescientd shared.rs, on: "p")
# against --no-host-shared ("nohs"): dnn 10 iterations, 3 repetitions;
# umbench random under prescientctl run (a trial there should be undone);
# then FDTD-2D, stream and the transformer once with "p" for their
# counters. Driver-like beside. Pressure only from the budget prescientd
# enforces (half of each workload's managed memory; random 4G of its
# 4 GiB + 4 KB).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;nohs:prescient:--exec-ids on --no-host-shared:$C"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2 3" ITERS=10 VARIANTS="$V" timeout 200 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run96.log"
OUT=$OUT/random WHAT=oracle ORACLE_WL=random REPS="1" ITERS=20 VARIANTS="$V" timeout 150 bash "$R" > "$OUT/random.log" 2>&1
echo "random done after $(( $(date +%s) - T0 )) s" >> "$OUT/run96.log"
for w in fdtd stream xf; do
  t=$(left); [ $t -gt 120 ] && t=120; [ $t -lt 40 ] && break
  OUT=$OUT/$w WHAT=oracle ORACLE_WL=$w REPS="1" ITERS=6 VARIANTS="p:prescient:--exec-ids on:$C" timeout $t bash "$R" > "$OUT/$w.log" 2>&1
  echo "$w done after $(( $(date +%s) - T0 )) s" >> "$OUT/run96.log"
done
cd "$OUT" && for w in dnn random fdtd stream xf; do sed -n '/cudaMemcpy H2D/,$p' $w.log 2>/dev/null | grep -v '^  \[' > table_$w.txt; done
for w in dnn random fdtd stream xf; do
  [ -f $w/results.tgz ] || continue
  mkdir -p x/$w && tar -C x/$w -xzf $w/results.tgz
  for f in x/$w/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], "host_shared", d.get("host_shared"), {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes")}, "max_resident", d["gpus"][0].get("max_resident_bytes") if d.get("gpus") else None)' $f 2>/dev/null; done
  for f in x/$w/*.bench.jsonl; do python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; s=[json.loads(l) for l in open(sys.argv[1]) if "summary" in l]; print(sys.argv[1].split("/")[-1], "gpu_ms", [round(i.get("gpu_ms",0)) for i in it], "cpu_ms", [round(i.get("cpu_ms",0)) for i in it], {k:s[-1].get(k) for k in ("median_gpu_ms","median_iter_ms","checksum")} if s else "")' $f 2>/dev/null; done
  grep -h "host-memory trial" x/$w/*.daemon.log 2>/dev/null | cut -c1-400 | head -6
done > counters.txt
rm -rf x; tar czf run96.tgz dnn random fdtd stream xf *.log gpu.csv 2>/dev/null
rm -rf dnn random fdtd stream xf dnn.log random.log fdtd.log stream.log xf.log
cat table_*.txt; cut -c1-330 counters.txt; cat run96.log
