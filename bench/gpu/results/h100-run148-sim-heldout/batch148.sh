#!/bin/bash
# Run 148: held-out runs for the simulator's GPU model (check-gpu), measured
# with the engine the model replays. check-gpu replays today's core engine in
# transparent mode with 4 migration workers against runs 30-34, which measured
# older engines; these cases run main's prescientd (f2919c8, its daemon
# unchanged by the model's change) as the model configures it: transparent
# mode (no runtime, --exec-ids off), 4 workers, no queue merging ("t4"),
# beside driver-like with the same workers ("d4"), and the defaults (8 workers,
# merge 64: "t8" and the plain driver-like case) for comparison. umbench dnn
# (2 GiB, 1 GiB budget) and stream (8 GiB, 4 GiB budget), the runs' commands;
# 2 repetitions of 10 iterations; the only memory pressure is the budget
# prescientd enforces.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
W="--workers 4 --merge-queued 0"
V="t4:prescient:--exec-ids off $W;d4:driver-like:$W;t8:prescient:--exec-ids off"
OUT=$OUT/sim WHAT=oracle ORACLE_WL="dnn stream" REPS="1 2" ITERS=10 VARIANTS="$V" timeout 560 bash "$R" > "$OUT/sim.log" 2>&1
echo "rc=$?" >> "$OUT/sim.log"
cd "$OUT" && for c in $(tar -tzf sim/results.tgz 2>/dev/null | grep 'stats.json' | sed 's|./||; s|.stats.json||' | sort); do
  tar -xzOf sim/results.tgz ./$c.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("'$c':", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","elapsed_s","evict_gbps")})' 2>/dev/null
done > tables.txt
grep -h '"case"' sim/results.jsonl 2>/dev/null | python3 -c '
import json,sys
for l in sys.stdin:
    r=json.loads(l); b=r.get("bench") or {}; p=r.get("per_iter") or {}
    print(r["case"], "median_gpu_ms", b.get("median_gpu_ms"), "steady_fault_blocks", p.get("steady_mean_fault_blocks"), "daemon_faults", (r.get("daemon") or {}).get("fault_blocks"))' >> tables.txt
cp sim/results.tgz results.tgz 2>/dev/null; rm -rf sim
tail -30 sim.log | grep -v '^  \['; cat tables.txt
