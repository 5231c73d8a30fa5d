#!/bin/bash
# Run 103: does the thrash guard turn on where prefetching pays? umbench
# stream (8 GiB in 32 buffers) under budgets a little under its footprint
# (7900M: 96%; 7600M: 93%), and random (4G of 4 GiB + 4 KB). "g1" = the
# guard counting victims back by fault or by our prefetch (main at
# 3eedae2), "g2" = counting only victims faulted back (this tree), "old"
# = no guard (d9e2dac); driver-like beside. Pressure only from the budget
# prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="g2:prescient:--exec-ids on:$C;g1:prescient:--exec-ids on:$C::$S/p1/prescientd;old:prescient:--exec-ids on:$C::$S/old/prescientd"
for b in 7900M 7600M; do
  OUT=$OUT/s$b WHAT=oracle ORACLE_WL=stream STREAM_BUDGET=$b REPS="1" ITERS=6 VARIANTS="$V" timeout 170 bash "$R" > "$OUT/s$b.log" 2>&1
  echo "stream $b done after $(( $(date +%s) - T0 )) s" >> "$OUT/run103.log"
done
OUT=$OUT/random WHAT=oracle ORACLE_WL=random REPS="1" ITERS=20 VARIANTS="$V" timeout 150 bash "$R" > "$OUT/random.log" 2>&1
echo "random done after $(( $(date +%s) - T0 )) s" >> "$OUT/run103.log"
cd "$OUT"
for w in s7900M s7600M random; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log 2>/dev/null | grep -v '^  \['
  [ -f $w/results.tgz ] || continue
  mkdir -p x/$w && tar -C x/$w -xzf $w/results.tgz
  for f in x/$w/*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k:d.get(k) for k in ("engine_thrash_guards","engine_thrash_guarded_gpus","prefetch_guarded","engine_victims","engine_refaults","fault_blocks","prefetch_bytes")})' $f 2>/dev/null; done
  for f in x/$w/*.bench.jsonl; do python3 -c 'import json,sys; it=[json.loads(l) for l in open(sys.argv[1]) if "\"iter\"" in l]; print(sys.argv[1].split("/")[-1], "gpu_ms", [round(i.get("gpu_ms",0)) for i in it])' $f 2>/dev/null; done
done > results.txt 2>&1
rm -rf x; tar czf run103.tgz s7900M s7600M random *.log gpu.csv 2>/dev/null; rm -rf s7900M s7600M random s7900M.log s7600M.log random.log
cat results.txt run103.log
