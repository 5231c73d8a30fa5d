#!/bin/bash
# Run 84: exact footprints for the job's own managed allocations (the
# runtime) and running launches larger than the budget keeping 75% of it
# (prescientd), against run 82's build: "old" (old prescientd, old
# runtime), "rt" (old prescientd, new runtime), "new" (both new), with
# Prescient's defaults otherwise (`prescientctl run`, pointer ids, launch
# footprints); driver-like beside; 2 repetitions. Pressure only from the
# budget prescientd enforces (half of each workload's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
OLDRT="PRESCIENT_RUNTIME=$S/old/libprescient_runtime.so PRESCIENT_RUNTIME_LOG=1"
V="old:prescient:--exec-ids on:$C:$OLDRT:$S/old/prescientd;rt:prescient:--exec-ids on:$C:PRESCIENT_RUNTIME_LOG=1:$S/old/prescientd;new:prescient:--exec-ids on:$C:PRESCIENT_RUNTIME_LOG=1"
one() {  # one workload: NAME ITERS TIMEOUT_CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped: $(left) s left" >> "$OUT/run84.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="1 2" ITERS=$2 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run84.log"
}
one dnn 6 100
one xf 6 170
one stream 6 150
one fdtd 5 110
cd "$OUT" && for w in dnn xf stream fdtd; do
  sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \[' > table_$w.txt 2>/dev/null
  for v in old rt new; do
    tar -xzOf $w/results.tgz --wildcards "*_${v}_1.bench.err" 2>/dev/null | grep -a "footprints:" | head -1 | sed "s/^/$w $v: /"
    tar -xzOf $w/results.tgz ./${w}_${v}_1.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d.get("ahead") or {}; print("'$w' '$v' ahead:", {k:a.get(k) for k in ("launches","guessed","blocks","prefetched_blocks","window_blocks","no_room","waiting")})' 2>/dev/null
  done
done > footprints.txt
tar czf run84.tgz dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log gpu.csv 2>/dev/null
rm -rf dnn xf stream fdtd dnn.log xf.log stream.log fdtd.log
cat table_*.txt footprints.txt; cat run84.log; ls -la
