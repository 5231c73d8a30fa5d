#!/bin/bash
# Run 157: the 220M LM's slow steps (run 156: after a burst of ~1.8 GB of
# ASYNC prefetches and as much evicted in ~140 ms, ~400 ms in which no
# migration lands, no job starts or ends, the workers sit idle and the
# driver's fault thread runs while the GPU faults on the blocks in flight).
# Does issuing UVM_MIGRATE synchronously (--sync-migrate: a worker holds its
# job until the copy is done, so at most 8 are in flight) take those
# windows away? "foot" = the defaults (ASYNC), "footB" = --sync-migrate,
# interleaved per repetition, 3 repetitions of 8 steps on a fresh machine;
# the job as runs 146-156 ran it (`prescientctl run`, execution ids, marks,
# launch footprints, the 4800M cap as the budget prescientd enforces, the
# only pressure), every block and every worker call logged, kernel stacks
# every 0.1 s.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --sync-migrate\n' "$S/target/release/prescientd" > "$S/pd-sync.sh"; chmod +x "$S/pd-sync.sh"
python3 "$S/bench/gpu/stacks.py" "$OUT/stacks.tsv.gz" 0.1 500 &
SP=$!
mkdir -p "$OUT/lm"
BLOCK_LOG=1 PD_B="$S/pd-sync.sh" CASES="foot footB" PLAIN=0 timeout 480 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 3 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; rm -rf "$OUT/lm"
kill $SP; wait $SP 2>/dev/null
tail -4 "$OUT/marks.log" | cut -c1-200
for c in foot footB; do for r in 1 2 3; do echo "$c.$r $(tar -xzOf "$OUT/lm.tgz" lm/lm.$c.$r.jsonl 2>/dev/null | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])')"; done; done
ls -la "$OUT"
