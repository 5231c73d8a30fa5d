#!/bin/bash
# Run 154: are the 220M LM's slow steps (runs 149-153: faults on blocks whose
# prefetch was queued and had not landed, up to 160k in a 4.6 s step on a
# fresh machine's first repetition, with no migration seen for 3.7 s) the
# driver's thrashing mitigation throttling those pages? This build enables
# the UVM tools events ThrashingDetected and ThrottlingStart/End (counted in
# the stats as driver_thrashing_* / driver_throttle_*, and in the block log
# as T and H lines). The job as runs 146-153 ran it (`prescientctl run`,
# execution ids, marks, launch footprints, the 4800M cap as the budget
# prescientd enforces, the only pressure), 3 repetitions of 8 steps on a
# fresh machine, every block logged, the stats every 50 ms.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
mkdir -p "$OUT/lm"
BLOCK_LOG=1 ATTACH_EXTRA="--stats-interval 50ms" CASES=foot PLAIN=0 timeout 560 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 3 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; rm -rf "$OUT/lm"
tail -5 "$OUT/marks.log" | cut -c1-300
for r in 1 2 3; do
  tar -xzOf "$OUT/lm.tgz" lm/lm.foot.$r.stats.json | python3 -c 'import json,sys; d=json.load(sys.stdin); print("'$r'", {k:d.get(k) for k in ("fault_blocks","driver_thrashing_events","driver_thrashing_bytes","driver_throttle_starts","driver_throttle_ends","other_events","events")})'
  tar -xzOf "$OUT/lm.tgz" lm/lm.foot.$r.jsonl | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])'
  tar -xzOf "$OUT/lm.tgz" lm/lm.foot.$r.daemon.log | grep -i "warn\|error" | head -3
done
