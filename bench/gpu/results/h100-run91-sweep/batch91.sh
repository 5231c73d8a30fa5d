#!/bin/bash
# Run 91: the sweep (ahead/sweep.rs: running launches larger than the
# budget followed through their blocks by the GPU's faults; what they
# passed is evicted first, their window starts where they are), on by
# default ("p"), against --no-sweep ("nosw"); driver-like beside. dnn 4
# repetitions, FDTD-2D, stream and the transformer 2. Pressure only from
# the budget prescientd enforces (half of each workload's managed memory).
# (The build was 89aa777, reverted in a595a5b; pd-nosw.sh was staged but unused.)
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;nosw:prescient:--exec-ids on --no-sweep:$C"
one() {  # one workload: NAME ITERS TIMEOUT_CAP REPS
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run91.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$4" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run91.log"
}
one dnn 6 150 "1 2 3 4"
one fdtd 5 120 "1 2"
one xf 6 140 "1 2"
one stream 6 130 "1 2"
cd "$OUT" && for w in dnn fdtd xf stream; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in p nosw; do for r in 1 2; do
    tar -xzOf $w/results.tgz ./${w}_${v}_$r.daemon.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d.get("ahead") or {}; print("'$w' '$v' '$r':", {k:d.get(k) for k in ("fault_blocks","engine_refaults","prefetch_bytes","evict_bytes")}, {k:a.get(k) for k in ("passed_blocks","sweep_restarts","large_fronts","prefetched_blocks")})' 2>/dev/null
  done; done
done > counters.txt
tar czf run91.tgz dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log gpu.csv 2>/dev/null
rm -rf dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log
cat table_*.txt counters.txt; cat run91.log; ls -la
