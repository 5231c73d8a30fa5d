#!/bin/bash
# Run 99: the thrash guard (core engine/thrash.rs). "p" = this build,
# "old" = main at d9e2dac (PD_CASE), driver-like beside. umbench random
# (20 iterations, 2 repetitions) under a budget of about its footprint
# (4G of 4 GiB + 4 KB): the guard should turn on and the step come near
# driver-like's. dnn (10 iterations, 2 reps), FDTD-2D, stream and the
# transformer (1 rep): the guard should never turn on and the steps stay
# as the old build's. Pressure only from the budget prescientd enforces
# (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;old:prescient:--exec-ids on:$C::$S/old/prescientd"
OUT=$OUT/random WHAT=oracle ORACLE_WL=random REPS="1 2" ITERS=20 VARIANTS="$V" timeout 200 bash "$R" > "$OUT/random.log" 2>&1
echo "random done after $(( $(date +%s) - T0 )) s" >> "$OUT/run99.log"
OUT=$OUT/dnn WHAT=oracle ORACLE_WL=dnn REPS="1 2" ITERS=10 VARIANTS="$V" timeout 150 bash "$R" > "$OUT/dnn.log" 2>&1
echo "dnn done after $(( $(date +%s) - T0 )) s" >> "$OUT/run99.log"
for w in xf stream fdtd; do
  t=$(left); [ $t -gt 110 ] && t=110; [ $t -lt 40 ] && break
  OUT=$OUT/$w WHAT=oracle ORACLE_WL=$w REPS="1" ITERS=6 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$w.log" 2>&1
  echo "$w done after $(( $(date +%s) - T0 )) s" >> "$OUT/run99.log"
done
cd "$OUT" && for w in random dnn xf stream fdtd; do sed -n '/cudaMemcpy H2D/,$p' $w.log 2>/dev/null | grep -v '^  \[' > table_$w.txt; done
for w in random dnn xf stream fdtd; do
  [ -f $w/results.tgz ] || continue
  mkdir -p x/$w && tar -C x/$w -xzf $w/results.tgz
  for f in x/$w/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("engine_thrash_guards","engine_thrash_guarded_gpus","prefetch_guarded","engine_victims","engine_regrets","engine_refaults","engine_free_target","fault_blocks","prefetch_bytes","evict_bytes")})' $f 2>/dev/null; done
  for f in x/$w/*.bench.jsonl; do python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; s=[json.loads(l) for l in open(sys.argv[1]) if "summary" in l]; print(sys.argv[1].split("/")[-1], "gpu_ms", [round(i.get("gpu_ms",0)) for i in it], {k:s[-1].get(k) for k in ("median_gpu_ms","median_iter_ms","checksum")} if s else "")' $f 2>/dev/null; done
  grep -h "thrash" x/$w/*.daemon.log 2>/dev/null | cut -c1-300 | head -6
done > counters.txt
rm -rf x; tar czf run99.tgz random dnn xf stream fdtd *.log gpu.csv 2>/dev/null
rm -rf random dnn xf stream fdtd random.log dnn.log xf.log stream.log fdtd.log
cat table_*.txt; cut -c1-400 counters.txt; cat run99.log
