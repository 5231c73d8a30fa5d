#!/bin/bash
# Run 163: the populate on the 374M LM (lmbig) with 4 repetitions (run 162:
# 0.92x on 2, within the spread), and the first block logs with mark lines
# (`M`, blocklog.rs) for bench/gpu/markgaps.py: how soon freed blocks come
# back, and what holding dead marks back would save. lmbig under half its
# managed memory (4032823296 B, the budget prescientd enforces: the only
# pressure), `prescientctl run` with execution ids, marks and footprints;
# "foot" = defaults (populate), "footB" = --no-alive-populate (refetch),
# interleaved, 4 repetitions of 8 steps, every block logged.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --no-alive-populate\n' "$S/target/release/prescientd" > "$S/pd-np.sh"; chmod +x "$S/pd-np.sh"
job=lmbig; budget=4032823296
mkdir -p "$OUT/$job"
BLOCK_LOG=1 PD_B="$S/pd-np.sh" CASES="foot footB" PLAIN=0 timeout 500 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 8 4 "$budget" > "$OUT/$job.marks.log" 2>&1
echo "rc=$?" >> "$OUT/$job.marks.log"
for f in "$OUT/$job"/*.blocks.tsv; do
  echo "$(basename "$f") $(python3 "$S/bench/gpu/markgaps.py" "$f" --json)" >> "$OUT/markgaps.txt"
done
rm -rf "$OUT/$job"
tail -4 "$OUT/$job.marks.log" | cut -c1-200
for c in foot footB; do for r in 1 2 3 4; do
  echo "$job.$c.$r $(tar -xzOf "$OUT/$job.tgz" $job/$job.$c.$r.jsonl 2>/dev/null | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])') $(tar -xzOf "$OUT/$job.tgz" $job/$job.$c.$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k:d.get(k) for k in ("refetched_blocks","alive_populated_blocks","discarded_blocks","fault_blocks")})')"
done; done
cut -c1-400 "$OUT/markgaps.txt"
