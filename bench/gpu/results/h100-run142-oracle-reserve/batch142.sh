#!/bin/bash
# Run 142: the GPU oracle with Prescient's reserve (oracle/belady.rs `fill`:
# victims taken until fewer than budget - reserve blocks stay, so that
# prefetches go in while their victims' evictions are on their way; run
# 141's oracle waited for each victim's UVM_MIGRATE to the CPU and ran 6x
# slower than Prescient on stream). The four bench workloads, driver-like
# (recording the plan), the oracle (replaying the same repetition's plan)
# and Prescient ("p", this build's defaults; the oracle change touches
# only --mode oracle) in each repetition; 2 repetitions of 10 iterations;
# half of each footprint as the budget prescientd enforces (the only
# pressure).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C"
one() {  # NAME REPS CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$2" ITERS=10 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
one stream "1 2" 150
one xf "1 2" 170
one fdtd "1 2" 150
one dnn "1 2" 120
NAMES="stream xf fdtd dnn"
cd "$OUT" && for w in $NAMES; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in p_1 p_2 oracle_1 oracle_2; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); o=d.get("oracle") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s","evict_gbps","engine_free_target")}, {k:o.get(k) for k in ("plan_over","over_after_s","applied_after_s","waiting","prefetched_blocks","victims_over_budget","faults_far","no_room")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e.get("gpu_ms", e.get("step_ms", 0)),1) for e in x if e.get("event") in ("iter","step")])' 2>/dev/null
  done
done > tables.txt 2>&1
tar czf run142.tgz $NAMES $(for n in $NAMES; do echo $n.log; done) gpu.csv 2>/dev/null; rm -rf $NAMES $(for n in $NAMES; do echo $n.log; done)
cat tables.txt run.log
