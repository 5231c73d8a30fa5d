#!/bin/bash
# Run 72: the ledger that counts a block as on the GPU until its eviction
# returns (wt-ledger) against the one before (main at f1aa268), the same
# workloads, defaults and cases as run 71 without the oracle: driver-like
# and Prescient (`prescientctl run`, ids, launch footprints), 2
# repetitions each, the two prescientd builds one after the other per
# workload. Pressure only from the budget prescientd enforces (half of each
# workload's managed memory); what the GPU held beyond it is in each
# case's stats (max_resident_bytes; budget_high_water_bytes, new build).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
V="foot:prescient:--exec-ids on:--mode exec-id --no-marks"
one() {  # one workload and build: NAME ITERS TIMEOUT_CAP BUILD(pre|new)
  local t=$(left) pd=$BIN/prescientd; [ $4 = pre ] && pd=$S/pre/prescientd
  [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 $4 skipped: $(left) s left" >> "$OUT/run72.log"; return; }
  PRESCIENTD=$pd OUT=$OUT/$1-$4 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1-$4.log" 2>&1
  echo "$1 $4 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run72.log"
}
for w in "xf 6 100" "fdtd 5 80" "stream 6 110"; do
  set -- $w; one $1 $2 $3 pre; one $1 $2 $3 new
done
cd "$OUT"
for d in */; do d=${d%/}
  sed -n '/cudaMemcpy H2D/,$p' $d.log | grep -v '^  \[' > table_$d.txt 2>/dev/null
  for j in $d/*_[dfp]*_[12].daemon.json; do
    python3 - "$j" >> budget.txt <<'PY'
import json, sys
p = sys.argv[1]
j = json.loads(open(p).read().strip().splitlines()[-1])
b = j.get("budget_bytes") or 0
keys = ("max_resident_bytes", "budget_high_water_bytes", "leaving_bytes", "prefetch_wait_evictions", "evict_refused_blocks")
print(p, "budget", b, " ".join(f"{k}={j.get(k)}" + (f"({j[k]/b:.3f}x)" if b and k.endswith("bytes") and isinstance(j.get(k), (int, float)) and k != "leaving_bytes" else "") for k in keys))
PY
  done
done
tar czf run72.tgz */ *.log gpu.csv 2>/dev/null
rm -rf */ xf-*.log fdtd-*.log stream-*.log
cat table_*.txt; cat budget.txt; cat run72.log; ls -la
