#!/bin/bash
# issue 15's overhead without pressure, in the default mode: prescientd runs
# as a service (backend = "userspace", no budget), and the job is started
# with `prescientctl --socket S run -- python3 jobs.py ...`, nothing else:
# mode auto (the runtime writes ids only while prescientd asks for them,
# and prescientd asks only while the job faults), marks on, fresh
# allocations left to prescientd. Alternates with the plain job (device
# memory, no Prescient), REPS repetitions per model; compare.py gives the
# median step of each and the ratio to plain. No budget: nothing is under
# pressure (each job allocates far less than the GPU has free).
# Usage: bench/gpu/runtime/auto.sh OUTDIR STEPS REPS MODEL...
set -u
out=$1; steps=$2; reps=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ctl="$root/target/release/prescientctl"; pd="$root/target/release/prescientd"
mkdir -p "$out"; S=$out/control.sock
. "$here/../lib/service.sh"
start_service "$pd" "$out/prescientd.toml" "$S" 19482 "$out/service.log" "poll_interval_ms = 200" || exit 1
DP=$SERVICE_PID
for r in $(seq 0 $((reps - 1))); do
  for m in "$@"; do
    t=$(date +%s)
    timeout 300 python3 "$here/jobs.py" "$m" "$steps" > "$out/$m.plain.$r.jsonl" 2> "$out/$m.plain.$r.err"
    PRESCIENT_RUNTIME_LOG=1 timeout 300 "$ctl" --socket "$S" run -- python3 "$here/jobs.py" "$m" "$steps" \
      > "$out/$m.auto.$r.jsonl" 2> "$out/$m.auto.$r.err"
    echo "$m rep $r: rc=$? $(( $(date +%s) - t )) s" | tee -a "$out/times.txt"
    "$ctl" --socket "$S" stats --json > "$out/$m.auto.$r.stats.json" 2>&1
  done
done
kill -TERM $DP; wait $DP
for m in "$@"; do python3 "$here/compare.py" "$out" | grep "^$m " | tee "$out/$m.compare.txt"; done
grep -h "prescient-runtime: pid" "$out"/*.auto.*.err > "$out/runtime-lines.txt" || true
tar -C "$out" --exclude='*.tgz' -czf "$out/all.tgz" .
