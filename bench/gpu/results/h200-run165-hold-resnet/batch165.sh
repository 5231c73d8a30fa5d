#!/bin/bash
# Run 165: (1) the runtime's 10 ms dead-mark hold (the default since run
# 164) on ResNet-50, the third PyTorch job that sends marks: "foot" = this
# build's defaults (hold 10 ms), "foothold" = the same with
# PRESCIENT_MARKS_HOLD_MS=0 (no hold, as before run 164), interleaved, 3
# repetitions of 8 steps under its 3478M cap (3646947328 B). (2) stream and
# FDTD-2D on the H200: driver-like (recording the plan), the oracle, and
# Prescient, 2 repetitions of 10 iterations, the link bound from the
# oracle's bytes and this run's cudaMemcpy H2D (runs 142 on the H100).
# Every budget is one prescientd enforces (the only pressure).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
job=resnet
mkdir -p "$OUT/$job"
HOLD_MS=0 CASES="foot foothold" PLAIN=0 timeout 290 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 8 3 3646947328 > "$OUT/$job.marks.log" 2>&1
echo "rc=$?" >> "$OUT/$job.marks.log"; rm -rf "$OUT/$job"
tail -3 "$OUT/$job.marks.log" | cut -c1-200
grep -o "^$job[.a-z0-9]* *steps=8 median_ms=[0-9.]*\|requests=[0-9]*\|alive_wait_ms=[0-9.]*\|hold_ms=[0-9]*\|discarded=[0-9]*" "$OUT/$job.marks.log" | paste -sd' ' | sed "s/ $job\./\n$job./g"; echo
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1
V="p:prescient:--exec-ids on:--mode exec-id --no-marks"
one() {  # NAME REPS CAP
  local t=$(left); [ $t -gt $3 ] && t=$3
  [ $t -lt 40 ] && { echo "$1 skipped" >> "$OUT/run.log"; return; }
  OUT=$OUT/$1 WHAT=oracle ORACLE_WL=$1 REPS="$2" ITERS=10 VARIANTS="$V" timeout $t bash "$R" > "$OUT/$1.log" 2>&1
  echo "$1 done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
}
one stream "1 2" 150
one fdtd "1 2" 130
NAMES="stream fdtd"
cd "$OUT" && for w in $NAMES; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
done > tables.txt 2>&1
tar czf run165.tgz $NAMES $(for n in $NAMES; do echo $n.log; done) 2>/dev/null; rm -rf $NAMES $(for n in $NAMES; do echo $n.log; done)
cat tables.txt run.log
