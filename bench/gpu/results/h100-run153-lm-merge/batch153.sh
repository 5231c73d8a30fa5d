#!/bin/bash
# Run 153: as run 152 with footB = --merge-queued 0 (no merged jobs) instead of --prefetch-workers 2. Run 152: the 220M LM's slow steps (runs 150-151: 500-900 ms against
# 320-420) are faults on blocks whose prefetch was queued for the workers
# and had not started: 8-12k faults on 250-380 blocks, the driver bringing
# them in 64 KB at a time while the 2 MB jobs wait behind workers held in
# UVM_MIGRATE calls to the host (each returns only after its copy). Does
# keeping 2 of the 8 workers for prefetches only (--prefetch-workers 2,
# jobqueue.rs; run 58 found no change on the bench workloads) take those
# steps away? "foot" = this build's defaults, "footB" = the same build with
# --prefetch-workers 2 (PD_B, a wrapper), interleaved per repetition; the
# job as runs 146-151 ran it (`prescientctl run`, execution ids, marks,
# launch footprints, the 4800M cap as the budget prescientd enforces, the
# only pressure), 3 repetitions of 8 steps, every block logged.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --merge-queued 0\n' "$S/target/release/prescientd" > "$S/pd-m0.sh"; chmod +x "$S/pd-m0.sh"
mkdir -p "$OUT/lm"
BLOCK_LOG=1 PD_B="$S/pd-m0.sh" CASES="foot footB" PLAIN=0 timeout 560 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 3 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; rm -rf "$OUT/lm"
tail -9 "$OUT/marks.log"
for c in foot footB; do for r in 1 2 3; do echo "$c.$r $(tar -xzOf "$OUT/lm.tgz" ./lm/lm.$c.$r.jsonl 2>/dev/null | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])')"; done; done
