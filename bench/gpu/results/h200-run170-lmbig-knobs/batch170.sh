#!/bin/bash
# Run 170: lmbig moves about 2.2x the bytes a clairvoyant policy would on
# the same launches (run 169, minevict.py): do the existing victim and
# window knobs change that? marks.sh "footB" with a prescientd wrapper per
# configuration (this build plus the flags), interleaved, 2 repetitions of
# 6 steps, lmbig under half its managed memory (the only pressure: the
# budget prescientd enforces).
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
cfgs="foot:|w10:--footprint-window-pct 10|w50:--footprint-window-pct 50|nn:--no-next-use-victims|cyc:--cyclic-victims|oq:--order-queue"
for r in 1 2; do
  IFS='|'; for c in $cfgs; do IFS=' '
    name=${c%%:*}; flags=${c#*:}
    printf '#!/bin/sh\nexec %s "$@" %s\n' "$S/target/release/prescientd" "$flags" > "$S/pd-$name.sh"; chmod +x "$S/pd-$name.sh"
    d="$OUT/$name.$r"; mkdir -p "$d"
    PD_B="$S/pd-$name.sh" CASES="footB" PLAIN=0 timeout 100 bash "$S/bench/gpu/runtime/marks.sh" "$d" lmbig 6 1 4032823296 > "$d.log" 2>&1
    st="$d/lmbig.footB.1.stats.json"; js="$d/lmbig.footB.1.jsonl"
    echo "$name.$r $(python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in open(sys.argv[1]) if l.startswith("{\"step\"")])' "$js" 2>/dev/null) $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("to_cpu_GB=%.1f to_gpu_GB=%.1f fault_blocks=%d churn=%s" % (d["migrated_to_cpu_bytes"]/1e9, d["migrated_to_gpu_bytes"]/1e9, d["fault_blocks"], d.get("mechanism",{}).get("churn")))' "$st" 2>/dev/null) $(grep -o 'max_loss_diff=[^ ]*' "$d.log" | head -1)" | tee -a "$OUT/knobs.txt"
    rm -rf "$d"
  done; IFS=' '
done
