#!/bin/bash
# Run 139 (diagnosis): the overflow rule's launches and groups logged
# (branch wt-overflow-group with two info lines, not kept), FDTD-2D, one
# repetition of 10 iterations under half its footprint as the budget
# prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="g:prescient:--exec-ids on:$C"
OUT=$OUT/fdtd WHAT=oracle ORACLE_WL=fdtd REPS="1" ITERS=10 VARIANTS="$V" timeout 200 bash "$R" > "$OUT/fdtd.log" 2>&1
cd "$OUT/fdtd" && tar xzf results.tgz && grep -h 'overflow\|host-memory trial' fdtd_g_1.daemon.log | sed 's/^.*INFO //' | cut -c1-400 | head -40
grep -h '"iter"' fdtd_g_1.bench.jsonl | python3 -c 'import json,sys; print([round(json.loads(l)["gpu_ms"],1) for l in sys.stdin])'
