#!/bin/bash
# Run 160: discarded blocks brought back before the alive mark's reply.
# Runs 156-159: the LM's slow steps (and a fresh machine's multi-second
# step) are write-permission faults on blocks Prescient discarded that the
# GPU touched before Prescient's refetch reached them (the driver maps the
# pages a fault brings in around a discarded page read-only; none with
# --no-discard). This build populates an alive mark's discarded blocks with
# UVM_MIGRATE before it answers (alive.rs), so the allocator hands the
# memory to a kernel only once every page is writable. "foot" = this build's
# defaults, "footB" = the same build with --no-alive-populate (the refetch
# as before), interleaved, 3 repetitions of 8 steps on a fresh machine; the
# job as runs 146-159 ran it (`prescientctl run`, execution ids, marks,
# launch footprints, the 4800M cap as the budget prescientd enforces, the
# only pressure); every block, worker call and discard logged.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --no-alive-populate\n' "$S/target/release/prescientd" > "$S/pd-np.sh"; chmod +x "$S/pd-np.sh"
mkdir -p "$OUT/lm"
BLOCK_LOG=1 PD_B="$S/pd-np.sh" CASES="foot footB" PLAIN=0 timeout 480 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 3 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; rm -rf "$OUT/lm"
tail -4 "$OUT/marks.log" | cut -c1-200
for c in foot footB; do for r in 1 2 3; do
  echo "$c.$r $(tar -xzOf "$OUT/lm.tgz" lm/lm.$c.$r.jsonl 2>/dev/null | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])') $(tar -xzOf "$OUT/lm.tgz" lm/lm.$c.$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k:d.get(k) for k in ("refetched_blocks","alive_populated_blocks","discarded_blocks","fault_blocks")})')"
done; done
