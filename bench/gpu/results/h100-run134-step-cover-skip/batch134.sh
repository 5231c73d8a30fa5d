#!/bin/bash
# Run 134: run 133 with a group trial's samples a whole step after its advice
# (it skipped 4 intervals, an eighth of stream's step): the group holding 25%, 50%
# or 100% of the step's whole excess over the budget ("c25", "c50",
# "c100": PRESCIENT_STEP_COVER_PCT, an experiment's knob), a group tried
# only after two measured steps, against main's prescientd ("m", 27386ef's
# behaviour), on stream (4 GiB of 8 GiB) and (c50 and m only) the bench
# transformer (half its footprint). 2 repetitions of 10 iterations,
# driver-like beside. Pressure only from the budget prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
C="--mode exec-id --no-marks"
V="c25:prescient:--exec-ids on:$C::$BIN/prescientd-c25;c50:prescient:--exec-ids on:$C::$BIN/prescientd-c50;c100:prescient:--exec-ids on:$C::$BIN/prescientd-c100;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
WLS=${WLS:-stream xf}
for w in $WLS; do
  # The bench transformer: the 50% group and main only.
  [ $w = xf ] && V="c50:prescient:--exec-ids on:$C::$BIN/prescientd-c50;m:prescient:--exec-ids on:$C::$BIN/prescientd-main"
  OUT=$OUT/$w WHAT=oracle ORACLE_WL=$w REPS="1 2" ITERS=10 VARIANTS="$V" timeout $(left) bash "$R" > "$OUT/$w.log" 2>&1
  echo "$w done after $(( $(date +%s) - T0 )) s" >> "$OUT/run.log"
done
cd "$OUT" && for w in $WLS; do
  echo "== $w"; sed -n '/cudaMemcpy H2D/,$p' $w.log | grep -v '^  \['
  for v in c25_1 c25_2 c50_1 c50_2 c100_1 c100_2 m_1 m_2; do
    tar -xzOf $w/results.tgz ./${w}_$v.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d.get("host_shared") or {}; print("  '$v':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s")}, {k:s.get(k) for k in ("trials","kept","undone","step_overflows","group_trials","last_group_allocations","last_before_us","last_during_us")})' 2>/dev/null
    tar -xzOf $w/results.tgz ./${w}_$v.bench.jsonl 2>/dev/null | python3 -c 'import json,sys; x=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print("    iters", [round(e["gpu_ms"],1) for e in x if e.get("event")=="iter"])' 2>/dev/null
  done
  tar -xzOf $w/results.tgz ./results.jsonl | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d.get("per_iter") or {}
    print("  ", d["case"], "GB in", [round(x/1e9,2) for x in p.get("gpu_bytes_per_iter",[])], "out", [round(x/1e9,2) for x in p.get("evict_bytes_per_iter",[])])'
done > tables.txt 2>&1
tar czf run134.tgz $WLS $(for w in $WLS; do echo $w.log; done) gpu.csv 2>/dev/null; rm -rf $WLS $(for w in $WLS; do echo $w.log; done)
cat tables.txt run.log
