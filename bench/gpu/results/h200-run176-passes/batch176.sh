#!/bin/bash
# Run 176: the next-use pass every 256th of a step instead of every 32nd
# (queue.rs NextUses::update; a replay of run 174's lmbig launches predicts
# 18% fewer blocks to the host). footB = this build with that one constant
# changed (prescientd-p256, built from this commit with `period / 256`).
# marks.sh "foot footB" interleaved, 2 repetitions of 6 steps, lmbig and the
# 220M LM under their budgets (the only pressure: the budget prescientd
# enforces).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for spec in "lmbig 4032823296 175" "lm 5033164800 135"; do
  set -- $spec; job=$1
  mkdir -p "$OUT/$job"
  PD_B="$S/prescientd-p256" CASES="foot footB" PLAIN=0 timeout "$3" bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$job" "$job" 6 2 "$2" > "$OUT/$job.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$job.marks.log"
  for c in foot footB; do for r in 1 2; do
    st="$OUT/$job/$job.$c.$r.stats.json"; js="$OUT/$job/$job.$c.$r.jsonl"
    echo "$job.$c.$r $(python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in open(sys.argv[1]) if l.startswith("{\"step\"")], [round(json.loads(l)["loss"],4) for l in open(sys.argv[1]) if l.startswith("{\"step\"")])' "$js" 2>/dev/null) $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("to_cpu_GB=%.1f to_gpu_GB=%.1f fault_blocks=%d" % (d["migrated_to_cpu_bytes"]/1e9, d["migrated_to_gpu_bytes"]/1e9, d["fault_blocks"]))' "$st" 2>/dev/null)" | tee -a "$OUT/p256.txt"
  done; done
  rm -rf "$OUT/$job" "$OUT/$job.tgz"
  tail -2 "$OUT/$job.marks.log" | cut -c1-200
done
ls -la "$OUT"
