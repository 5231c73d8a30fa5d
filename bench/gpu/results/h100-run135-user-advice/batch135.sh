#!/bin/bash
# Run 135: the job's own host advice left alone. This build ("p": its
# prescientd and its runtime, which publishes the job's cuMemAdvise host
# ranges in the ring's host-advice table) against main's prescientd with
# main's runtime ("m", 27386ef's behaviour: the window prefetches advised
# ranges too). FDTD-2D with ex and hz advised to stay in host memory by
# the program (FDTD_HOST=ex,hz, run 125), then without advice; dnn with its
# input advised (DNN_ADVISE=1). Half of each footprint as the budget
# prescientd enforces (the only pressure), driver-like beside, 2
# repetitions of 10 iterations.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="p:prescient:--exec-ids on:$C;m:prescient:--exec-ids on:$C:PRESCIENT_RUNTIME=$BIN/libprescient_runtime-main.so:$BIN/prescientd-main"
one() {  # NAME WORKLOAD ENV
  local t=$(left); [ $t -gt 200 ] && t=200
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  env $3 OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$2 REPS="1 2" ITERS=10 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
one fdtd_exhz fdtd FDTD_HOST=ex,hz
one dnn_adv dnn DNN_ADVISE=1
one fdtd_none fdtd FDTD_NONE=1
NAMES="fdtd_exhz dnn_adv fdtd_none"
cd "$OUT" && for n in $NAMES; do
  w=${n%%_*}
  echo "== $n"; sed -n '/cudaMemcpy H2D/,$p' $n.log | grep -v '^  \['
  for v in p_1 p_2 m_1 m_2; do
    tar -xzOf $n/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; a=d.get("ahead") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s")}, {k:s.get(k) for k in ("trials","kept","undone","overflow_candidates","prefetches_declined","user_host_ranges","user_host_bytes","user_superseded")}, {k:a.get(k) for k in ("records_read",)})' 2>/dev/null
    tar -xzOf $n/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    advise", [e.get("field", e.get("bytes")) for e in x if e.get("event")=="advise"], "iters", [round(e["gpu_ms"],1) for e in x if e.get("event")=="iter"])' 2>/dev/null
    tar -xzOf $n/results.tgz ./${w}_$v.daemon.log 2>/dev/null | grep -h "host-memory" | sed 's/^.*INFO //' | cut -c1-220
  done
done > tables.txt 2>&1
tar czf run135.tgz $NAMES $(for n in $NAMES; do echo $n.log; done) gpu.csv 2>/dev/null; rm -rf $NAMES $(for n in $NAMES; do echo $n.log; done)
cat tables.txt run.log
