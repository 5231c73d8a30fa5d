#!/bin/bash
# Run 169: how far each PyTorch job's traffic under its budget is from a
# clairvoyant policy's. marks.sh "foot" (this build's defaults) with every
# block logged, now with the launches read from the runtime's ring (L lines);
# bench/gpu/minevict.py replays those launches and the job's dead/alive marks
# under the same budget with dead-first Belady victims and prints the bytes
# each way next to what the run moved. 1 repetition of 6 steps each.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for spec in "lmbig 4032823296" "lm 5033164800" "resnet 3646947328"; do
  set -- $spec; job=$1
  mkdir -p "$OUT/$job"
  BLOCK_LOG=1 CASES="foot" PLAIN=0 timeout 170 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 6 1 "$2" > "$OUT/$job.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$job.marks.log"
  b=$(ls "$OUT/$job/$job.foot.1.blocks.tsv"* 2>/dev/null | head -1)
  echo "== $job $(ls -la $b | awk '{print $5}') bytes of block log" | tee -a "$OUT/minevict.txt"
  python3 "$S/bench/gpu/minevict.py" "$b" "$2" --stats "$OUT/$job/$job.foot.1.stats.json" 2>&1 | tee -a "$OUT/minevict.txt"
  python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in open(sys.argv[1]) if l.startswith("{\"step\"")])' "$OUT/$job/$job.foot.1.jsonl" | tee -a "$OUT/minevict.txt"
  gzip -c "$b" > "$OUT/$job.blocks.tsv.gz" 2>/dev/null
  rm -rf "$OUT/$job" "$OUT/$job.tgz"
  tail -2 "$OUT/$job.marks.log" | cut -c1-200
done
ls -la "$OUT"
