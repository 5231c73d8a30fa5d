#!/bin/bash
# issue 15, no pressure, no daemon: what the runtime's overhead is made of.
# Each configuration of CONFIGS, alternating, REPS repetitions:
#   plain           the job alone (device memory, no Prescient)
#   managednoplace  `prescientctl run --mode transparent` with fresh
#                   allocations left where the driver puts them (first touch)
#   managed         the same with fresh allocations prefetched to the GPU
#                   (the runtime's default without a budget)
#   execid          `--mode exec-id`: ids on every launch
#   execidnoplace   exec-id without the prefetch of fresh allocations
#   execidshape     exec-id, ids from function and shape only
# The runtime's counters (PRESCIENT_RUNTIME_LOG=1) go to each run's .err,
# among them the wrapper's CPU time (hash_ns, mark_ns).
# Usage: decompose.sh OUTDIR STEPS REPS MODEL CONFIGS...
set -u
out=$1; steps=$2; reps=$3; model=$4; shift 4
here=$(cd "$(dirname "$0")" && pwd)
ctl="$(cd "$here/../../.." && pwd)/target/release/prescientctl"
mkdir -p "$out"
one() {
  local c=$1 r=$2 env=() mode=exec-id
  case $c in
    plain)
      timeout 300 python3 "$here/jobs.py" "$model" "$steps" \
        > "$out/$model.$c.$r.jsonl" 2> "$out/$model.$c.$r.err"
      return ;;
    managednoplace) mode=transparent; env=(PRESCIENT_PLACE_FRESH=0) ;;
    managed) mode=transparent ;;
    execid) ;;
    execidnoplace) env=(PRESCIENT_PLACE_FRESH=0) ;;
    execidshape) env=(PRESCIENT_ID_ARGS=0) ;;
    *) echo "unknown configuration $c" >&2; return ;;
  esac
  env PRESCIENT_RUNTIME_LOG=1 "${env[@]}" timeout 300 "$ctl" run --no-marks --mode "$mode" -- \
    python3 "$here/jobs.py" "$model" "$steps" > "$out/$model.$c.$r.jsonl" 2> "$out/$model.$c.$r.err"
}
for r in $(seq 0 $((reps - 1))); do
  for c in "$@"; do
    t=$(date +%s); one "$c" "$r"; echo "$model.$c.$r $(( $(date +%s) - t )) s" >> "$out/times.txt"
  done
done
python3 "$here/compare.py" "$out" | grep "^$model " | tee "$out/$model.compare.txt"
grep -h "lookups_wrapped" "$out"/$model.*.err | sed 's/.*pid [0-9]*: //' > "$out/$model.runtime.txt" || true
