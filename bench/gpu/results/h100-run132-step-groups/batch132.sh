#!/bin/bash
# Run 132: this build ("p", the step's group trials of shared/overflow.rs)
# against main's prescientd ("m", 27386ef's behaviour) on stream (4 GiB of
# 8 GiB), the bench transformer (half its footprint), dnn (1 GiB of 2 GiB)
# and FDTD-2D (half of 3.22 GB). 2 repetitions of 10 iterations,
# driver-like beside. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
WLS=${WLS:-stream xf dnn fdtd}
one() {  # NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
for w in $WLS; do one $w 10 200; done
cd "$OUT" && for w in $WLS; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in p_1 p_2 m_1 m_2; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s")}, {k:s.get(k) for k in ("trials","kept","undone","overflow_candidates","step_overflows","group_trials","last_group_allocations","last_before_us","last_during_us")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e["gpu_ms"],1) for e in x if e.get("event")=="iter"])' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.daemon.log 2>/dev/null | grep -h 'host-memory trial' | sed 's/^.*INFO //' | cut -c1-260
  done
done > tables.txt 2>&1
tar czf run132.tgz $WLS $(for w in $WLS; do echo $w.log; done) gpu.csv 2>/dev/null; rm -rf $WLS $(for w in $WLS; do echo $w.log; done)
cat tables.txt run.log
