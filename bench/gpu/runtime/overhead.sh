#!/bin/bash
# issue 15, no pressure, no daemon: step time of each job plainly, under
# `prescientctl run --mode exec-id` (ids on every launch, no id log), and
# with ids from function and shape only (PRESCIENT_ID_ARGS=0); alternating,
# REPS repetitions. Usage: overhead.sh OUTDIR STEPS REPS MODELS...
set -u
out=$1; steps=$2; reps=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
ctl="$(cd "$here/../../.." && pwd)/target/release/prescientctl"
mkdir -p "$out"
for m in "$@"; do
  for r in $(seq 0 $((reps - 1))); do
    timeout 300 python3 "$here/jobs.py" "$m" "$steps" > "$out/$m.plain.$r.jsonl" 2> "$out/$m.plain.$r.err"
    timeout 300 "$ctl" run --mode exec-id -- python3 "$here/jobs.py" "$m" "$steps" \
      > "$out/$m.execid.$r.jsonl" 2> "$out/$m.execid.$r.err"
    PRESCIENT_ID_ARGS=0 timeout 300 "$ctl" run --mode exec-id -- python3 "$here/jobs.py" "$m" "$steps" \
      > "$out/$m.execidshape.$r.jsonl" 2> "$out/$m.execidshape.$r.err"
    timeout 300 "$ctl" run -- python3 "$here/jobs.py" "$m" "$steps" \
      > "$out/$m.auto.$r.jsonl" 2> "$out/$m.auto.$r.err"
  done
done
python3 "$here/compare.py" "$out" | tee "$out/compare.txt"
