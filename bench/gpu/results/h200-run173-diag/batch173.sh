#!/bin/bash
# Run 173: where lmbig's bytes go, with the GPU's position logged (block log
# K lines). marks.sh "footB" with a prescientd wrapper per configuration:
# on (this build: farthest victims on), off (--no-farthest-victims), w1
# (--window-blocks 1: the engine's own predictions at their fewest), each
# with every block logged, 1 repetition of 6 steps, lmbig under half its
# managed memory (the only pressure: the budget prescientd enforces).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
cfgs="on:|off:--no-farthest-victims|w1:--window-blocks 1"
IFS='|'; for c in $cfgs; do IFS=' '
  name=${c%%:*}; flags=${c#*:}
  printf '#!/bin/sh\nexec %s "$@" %s\n' "$S/target/release/prescientd" "$flags" > "$S/pd-$name.sh"; chmod +x "$S/pd-$name.sh"
  d="$OUT/$name"; mkdir -p "$d"
  BLOCK_LOG=1 PD_B="$S/pd-$name.sh" CASES="footB" PLAIN=0 timeout 110 bash "$S/bench/gpu/runtime/marks.sh" "$d" lmbig 6 1 4032823296 > "$d.log" 2>&1
  st="$d/lmbig.footB.1.stats.json"; js="$d/lmbig.footB.1.jsonl"
  echo "$name $(python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in open(sys.argv[1]) if l.startswith("{\"step\"")])' "$js" 2>/dev/null) $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("to_cpu_GB=%.1f to_gpu_GB=%.1f fault_blocks=%d" % (d["migrated_to_cpu_bytes"]/1e9, d["migrated_to_gpu_bytes"]/1e9, d["fault_blocks"]))' "$st" 2>/dev/null)" | tee -a "$OUT/diag.txt"
  cp "$st" "$OUT/$name.stats.json"
  b=$(ls "$d"/lmbig.footB.1.blocks.tsv* 2>/dev/null | head -1)
  gzip -c "$b" > "$OUT/$name.blocks.tsv.gz"
  rm -rf "$d"
done; IFS=' '
ls -la "$OUT"
