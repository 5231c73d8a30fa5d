#!/bin/bash
# issue 15 on the GPU machine: each job of jobs.py plainly and under the
# runtime, alternating, REPS repetitions; then compare.py and idstats.py.
# Usage: bench/gpu/runtime/run.sh OUTDIR [STEPS] [REPS] [MODELS...]
# Needs: target/release/libprescient_runtime.so and prescientctl (carried).
set -u
out=$1; steps=${2:-25}; reps=${3:-2}; shift 3 || true
models=${*:-lm resnet encoder}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ctl="$root/target/release/prescientctl"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt"
python3 -c 'import torch,transformers,torchvision;print(torch.__version__,transformers.__version__,torchvision.__version__)' >> "$out/gpu.txt"
for m in $models; do
  for r in $(seq 0 $((reps - 1))); do
    timeout 300 python3 "$here/jobs.py" "$m" "$steps" > "$out/$m.plain.$r.jsonl" 2> "$out/$m.plain.$r.err"
    timeout 300 "$ctl" run --mode transparent -- python3 "$here/jobs.py" "$m" "$steps" \
      > "$out/$m.managed.$r.jsonl" 2> "$out/$m.managed.$r.err"
    PRESCIENT_RUNTIME_LOG=1 PRESCIENT_ID_LOG="$out/$m.ids.$r" timeout 300 "$ctl" run --mode exec-id -- \
      python3 "$here/jobs.py" "$m" "$steps" > "$out/$m.execid.$r.jsonl" 2> "$out/$m.execid.$r.err"
  done
done
python3 "$here/compare.py" "$out" | tee "$out/compare.txt"
for f in "$out"/*.ids.0.*; do
  echo "$(basename "$f") $(python3 "$here/idstats.py" "$f" "$steps")"
done | tee "$out/idstats.txt"
grep -h "prescient" "$out"/*.err | sort | uniq -c | head -40 | tee "$out/runtime-lines.txt"
