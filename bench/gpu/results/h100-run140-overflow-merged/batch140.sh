#!/bin/bash
# Run 140: run 138 with each range of the group giving every allocation it
# covers (the runtime merges touching extents: run 139 logged FDTD-2D's ex
# and ey as one 1,024-block range, named by its middle: one field) and the
# group offered a whole step after its union
# began (run 137 offered it at the first large launch, one field), taken
# from the union of the ranges of
# every launch larger than the budget since the last trial (branch
# wt-overflow-group: as many of the largest ranges together as it takes
# for the rest to fit; FDTD-2D's two fields in one trial instead of one
# after another) as "g", against main's prescientd ("m", 25a8789: one range
# at a time), both with this build's runtime. FDTD-2D (3 repetitions) and
# dnn (2) at the usual 10 iterations, half of each footprint as the budget
# prescientd enforces (the only pressure), driver-like beside.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="g:prescient:--exec-ids on:$C;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
one() {  # NAME REPS
  local t=$(left); [ $t -gt 330 ] && t=330
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$2" ITERS=10 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
one fdtd "1 2"
one dnn "1 2"
NAMES="fdtd dnn"
cd "$OUT" && for w in $NAMES; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in g_1 g_2 g_3 m_1 m_2 m_3; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s")}, {k:s.get(k) for k in ("trials","kept","undone","overflow_candidates","last_before_us","last_during_us")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e["gpu_ms"],1) for e in x if e.get("event")=="iter"])' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.daemon.log 2>/dev/null | grep -h "host-memory trial" | sed 's/^.*INFO //' | cut -c1-200
  done
done > tables.txt 2>&1
tar czf run140.tgz $NAMES $(for n in $NAMES; do echo $n.log; done) gpu.csv 2>/dev/null; rm -rf $NAMES $(for n in $NAMES; do echo $n.log; done)
cat tables.txt run.log
