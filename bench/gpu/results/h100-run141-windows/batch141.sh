#!/bin/bash
# Run 141: how far ahead the prefetches reach, against bytes and time on the
# two workloads just above 2x their link bound (stream, the bench
# transformer). Every block prefetched ahead of its use holds budget that a
# block used again would otherwise keep (a cyclic program's misses per step
# grow by the lookahead), so a shorter lookahead moves fewer bytes as long
# as the link stays busy. "p" = main's defaults (footprint window 25% of
# the budget, the engine's window 1/8 of it), "w15" = --footprint-window-pct
# 15, "e64" = --window-blocks 64, "w15e64" both. Driver-like and the oracle
# (replaying the same repetition's driver-like plan) beside: the link bound
# from this run. 3 repetitions of 8 iterations; half of each footprint as
# the budget prescientd enforces (the only pressure).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;w15:prescient:--exec-ids on --footprint-window-pct 15:$C;e64:prescient:--exec-ids on --window-blocks 64:$C;w15e64:prescient:--exec-ids on --footprint-window-pct 15 --window-blocks 64:$C"
one() {  # NAME REPS CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$2" ITERS=8 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
one stream "1 2" 280
one xf "1 2" 280
NAMES="stream xf"
cd "$OUT" && for w in $NAMES; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in p_1 p_2 w15_1 w15_2 e64_1 e64_2 w15e64_1 w15e64_2 oracle_1 oracle_2; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s","evict_gbps")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e.get("gpu_ms", e.get("step_ms", 0)),1) for e in x if e.get("event") in ("iter","step")])' 2>/dev/null
  done
done > tables.txt 2>&1
tar czf run141.tgz $NAMES $(for n in $NAMES; do echo $n.log; done) gpu.csv 2>/dev/null; rm -rf $NAMES $(for n in $NAMES; do echo $n.log; done)
cat tables.txt run.log
