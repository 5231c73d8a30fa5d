#!/bin/bash
# Run 159: are the 220M LM's slow steps the driver's write-permission faults
# on blocks Prescient discarded? Run 158's block log (each fault's page,
# access and fault type): the slow steps' extra faults are writes to pages
# mapped read-only (UvmFaultTypeWrite), ~350 per block on 28-200 blocks that
# Prescient had brought back (refetched) a step earlier and that were dead
# again; the driver maps a discarded page read-only when it comes in with a
# fault's prefetch region (uvm_va_block.c: "discarded pages are only mapped
# as RO on read faults"), so each page then takes its own write fault.
# "foot" = the defaults (dead victims discarded with UVM_DISCARD+UNMAP),
# "footB" = --no-discard (dead victims evicted like live ones), interleaved,
# 3 repetitions of 8 steps on a fresh machine; the job as runs 146-158 ran
# it (`prescientctl run`, execution ids, marks, launch footprints, the 4800M
# cap as the budget prescientd enforces, the only pressure); every block,
# worker call and discard logged (D lines, new).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --no-discard\n' "$S/target/release/prescientd" > "$S/pd-nd.sh"; chmod +x "$S/pd-nd.sh"
mkdir -p "$OUT/lm"
BLOCK_LOG=1 PD_B="$S/pd-nd.sh" CASES="foot footB" PLAIN=0 timeout 480 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 3 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; rm -rf "$OUT/lm"
tail -4 "$OUT/marks.log" | cut -c1-200
for c in foot footB; do for r in 1 2 3; do echo "$c.$r $(tar -xzOf "$OUT/lm.tgz" lm/lm.$c.$r.jsonl 2>/dev/null | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])')"; done; done
