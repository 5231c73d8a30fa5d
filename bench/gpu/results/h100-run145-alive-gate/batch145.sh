#!/bin/bash
# Run 145: alive marks answered at once (daemon/src/userspace/alive.rs: the
# blocks go into the process's alive gate, which every UVM_DISCARD holds
# while it runs and whose blocks it leaves alone; the backend applies the
# mark at its next turn) against main's prescientd (51f7f4b: the reply
# after the backend's turn), both with this build's prescientctl and
# runtime. The bench transformer with its allocator's marks (run 144's
# "pm"), 3 repetitions of 10 steps, driver-like beside; then ResNet-50
# and the encoder (bench/gpu/runtime/ahead.sh, foot25 = this build,
# foot25B = main's), 2 repetitions of 8 steps. Half of each footprint as
# the budget prescientd enforces (the only pressure).
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
D=/run/prescient-bench; mkdir -p -m 755 $D; SOCK=$D/xf-marks.sock
V="g:prescient:--exec-ids on --marks-socket $SOCK:--mode exec-id;m:prescient:--exec-ids on --marks-socket $SOCK:--mode exec-id::$BIN/prescientd-main"
MARKS_SOCK=$SOCK OUT=$OUT/xf WHAT=oracle ORACLE_WL=xf REPS="1 2 3" ITERS=10 VARIANTS="$V" timeout 240 bash "$R" > "$OUT/xf.log" 2>&1
echo "xf done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
DEADLINE_S=$(( $(left) - 75 )) PD_B=$BIN/prescientd-main CONFIGS="foot25 foot25B" timeout $(( $(left) - 5 )) bash "$S/bench/gpu/runtime/ahead.sh" "$OUT/ahead" 2 8 > "$OUT/ahead.log" 2>&1
echo "ahead done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
cd "$OUT" && {
  echo "== xf"; sed -n '/cudaMemcpy H2D/,$p' xf.log | grep -v '^  \['
  for v in g_1 g_2 g_3 m_1 m_2 m_3; do
    tar -xzOf xf/results.tgz ./xf_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","mark_requests","discarded_blocks","refetched_blocks","discards_held_alive","discard_errors")})' 2>/dev/null
    tar -xzOf xf/results.tgz ./xf_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e.get("gpu_ms", 0),1) for e in x if e.get("event")=="iter"]); print("    ", [e.get("marks") for e in x if e.get("event")=="summary"])' 2>/dev/null
  done
  echo "== ahead"; cat ahead/*/summary.txt 2>/dev/null; grep -h "marks" ahead/*/*.err 2>/dev/null | grep -o "alive_wait_ms[^,]*\|marks:.*" | cut -c1-200 | head -20
} > tables.txt 2>&1
tar czf run145.tgz xf xf.log ahead/all.tgz ahead.log gpu.csv 2>/dev/null; rm -rf xf xf.log ahead
cat tables.txt run.log
