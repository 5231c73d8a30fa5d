#!/bin/bash
# Run 147 (the final build of this stop: the alive gate held per UVM_DISCARD run): run 144 again with the oracle, the bench transformer (train.py) with its allocator's dead marks.
# Every bench run since run 84 ran it under `prescientctl run --mode
# exec-id --no-marks`: ids and launch footprints, but no marks, so its
# freed activations were evicted (copied to the host) and brought back
# (copied again) like live data. train.py's allocator (managed_alloc.cu)
# marks a freed 2 MB block dead once the GPU has passed its free, and
# alive (waiting for the daemon's answer) when it hands it out again:
# prescientd then discards dead blocks (UVM_DISCARD, no copy) before
# evicting live ones. "p" = as before (--no-marks); "pm" = the same with
# marks (`prescientctl run --mode exec-id`, PRESCIENT_MARKS_SOCKET naming
# the socket that `prescientd attach --marks-socket` serves). Driver-like
# beside (no oracle: run 143 had it); 3 repetitions of 10 steps; half of the
# footprint as the budget prescientd enforces (the only pressure).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1
D=/run/prescient-bench; mkdir -p -m 755 $D; SOCK=$D/xf-marks.sock
V="p:prescient:--exec-ids on:--mode exec-id --no-marks;pm:prescient:--exec-ids on --marks-socket $SOCK:--mode exec-id"
one() {  # NAME REPS CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  MARKS_SOCK=$SOCK OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$2" ITERS=10 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
one xf "1 2 3" 330
NAMES="xf"
cd "$OUT" && for w in $NAMES; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in p_1 p_2 p_3 pm_1 pm_2 pm_3; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s","evict_gbps","mark_requests","marked_dead_blocks","marked_alive_blocks","discarded_blocks","host_discarded_blocks","refetched_blocks","discard_errors")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e.get("gpu_ms", e.get("step_ms", 0)),1) for e in x if e.get("event") in ("iter","step")]); print("    ", [ {k:e.get(k) for k in ("marks","loss","losses","checksum")} for e in x if e.get("event") not in ("iter","step")][-1:])' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.err 2>/dev/null | tail -3 | cut -c1-300
  done
done > tables.txt 2>&1
tar czf run147.tgz $NAMES $(for n in $NAMES; do echo $n.log; done) gpu.csv 2>/dev/null; rm -rf $NAMES $(for n in $NAMES; do echo $n.log; done)
cat tables.txt run.log
