#!/bin/bash
# Run 174: launch records of 128 words (123 ranges; the runtime keeps up to
# 1024 extents a launch) instead of 32 (27 ranges, 256 extents): run 173
# found lmbig's faults in the 400 launches of a step whose records were
# truncated. First lmbig once with every block logged (its truncated
# records and faults), then marks.sh "foot footB" interleaved, footB =
# --no-farthest-victims, 2 repetitions of 6 steps, on lmbig and the 220M LM,
# each under its budget (the only pressure: the budget prescientd enforces).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --no-farthest-victims\n' "$S/target/release/prescientd" > "$S/pd-off.sh"; chmod +x "$S/pd-off.sh"
d="$OUT/log"; mkdir -p "$d"
BLOCK_LOG=1 CASES="foot" PLAIN=0 timeout 100 bash "$S/bench/gpu/runtime/marks.sh" "$d" lmbig 6 1 4032823296 > "$d.log" 2>&1
gzip -c "$(ls "$d"/lmbig.foot.1.blocks.tsv* | head -1)" > "$OUT/lmbig.blocks.tsv.gz"
cp "$d/lmbig.foot.1.stats.json" "$OUT/lmbig.stats.json"
rm -rf "$d" "$d.tgz"
for spec in "lmbig 4032823296 175" "lm 5033164800 135"; do
  set -- $spec; job=$1
  mkdir -p "$OUT/$job"
  PD_B="$S/pd-off.sh" CASES="foot footB" PLAIN=0 timeout "$3" bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 6 2 "$2" > "$OUT/$job.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$job.marks.log"
  for c in foot footB; do for r in 1 2; do
    st="$OUT/$job/$job.$c.$r.stats.json"; js="$OUT/$job/$job.$c.$r.jsonl"
    echo "$job.$c.$r $(python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in open(sys.argv[1]) if l.startswith("{\"step\"")], [round(json.loads(l)["loss"],4) for l in open(sys.argv[1]) if l.startswith("{\"step\"")])' "$js" 2>/dev/null) $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); a=d.get("ahead") or {}; print("to_cpu_GB=%.1f to_gpu_GB=%.1f fault_blocks=%d truncated=%s launches=%s demoted=%s" % (d["migrated_to_cpu_bytes"]/1e9, d["migrated_to_gpu_bytes"]/1e9, d["fault_blocks"], a.get("truncated"), a.get("launches"), a.get("farthest_demoted")))' "$st" 2>/dev/null)" | tee -a "$OUT/wide.txt"
  done; done
  rm -rf "$OUT/$job" "$OUT/$job.tgz"
  tail -2 "$OUT/$job.marks.log" | cut -c1-200
done
ls -la "$OUT"
