#!/bin/bash
# Run 162: does populating discarded blocks before the alive reply (run 160:
# the 220M LM 1.23x faster) help the other PyTorch jobs that send marks?
# ResNet-50 under its 3478M cap and the 374M LM (lmbig) under half its
# managed memory, each as runs 146/161 ran them under Prescient
# (`prescientctl run`, execution ids, marks, launch footprints; the cap the
# budget prescientd enforces, the only pressure). "foot" = this build's
# defaults, "footB" = --no-alive-populate (the backend's refetch, as
# before), interleaved, 2 repetitions of 8 steps, every block logged.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
printf '#!/bin/sh\nexec %s "$@" --no-alive-populate\n' "$S/target/release/prescientd" > "$S/pd-np.sh"; chmod +x "$S/pd-np.sh"
for job in "resnet 3646947328" "lmbig 4032823296"; do
  set -- $job
  mkdir -p "$OUT/$1"
  BLOCK_LOG=1 PD_B="$S/pd-np.sh" CASES="foot footB" PLAIN=0 timeout 280 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/$1" "$1" 8 2 "$2" > "$OUT/$1.marks.log" 2>&1
  echo "rc=$?" >> "$OUT/$1.marks.log"; rm -rf "$OUT/$1"
  tail -3 "$OUT/$1.marks.log" | cut -c1-200
  for c in foot footB; do for r in 1 2; do
    echo "$1.$c.$r $(tar -xzOf "$OUT/$1.tgz" $1/$1.$c.$r.jsonl 2>/dev/null | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])') $(tar -xzOf "$OUT/$1.tgz" $1/$1.$c.$r.stats.json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k:d.get(k) for k in ("refetched_blocks","alive_populated_blocks","discarded_blocks","fault_blocks")})')"
  done; done
done
