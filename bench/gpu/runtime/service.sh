#!/bin/bash
# The service path of `prescientctl run`: prescientd running as a service
# (backend = "userspace", its own control socket), and a job started with
# `prescientctl --socket S run --budget B --mode exec-id` that the launcher
# asks the service to attach (no hand-started daemon): the launcher sets
# the service's residency budget, attaches the job once its execution-id
# page exists, and names the service's socket for the job's dead/alive
# marks. The budget is the only pressure (the job allocates far less
# managed memory than the GPU has free). Needs root (the service's
# SET_PARAMS, pidfd_getfd).
# Usage: bench/gpu/runtime/service.sh OUTDIR MODEL STEPS BUDGET [RUN-FLAGS...]
set -u
out=$1; model=$2; steps=$3; budget=$4; shift 4
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ctl="$root/target/release/prescientctl"; pd="$root/target/release/prescientd"
mkdir -p "$out"; S=$out/control.sock; PORT=19481
log() { echo "[service $(date +%T)] $*" | tee -a "$out/run.log"; }
. "$here/../lib/service.sh"
start_service "$pd" "$out/prescientd.toml" "$S" "$PORT" "$out/service.log" "poll_interval_ms = 200" \
  || { log "the service did not start"; exit 1; }
DP=$SERVICE_PID
name=$model.service.1
PRESCIENT_RUNTIME_LOG=1 timeout 200 "$ctl" --socket "$S" run --budget "$budget" --mode exec-id "$@" -- \
  python3 "$here/jobs.py" "$model" "$steps" > "$out/$name.jsonl" 2> "$out/$name.err" &
JP=$!
while kill -0 $JP 2>/dev/null; do
  sleep 1
  "$ctl" --socket "$S" status --json 2>/dev/null | tr -d '\n' >> "$out/status.jsonl"; echo >> "$out/status.jsonl"
  curl -s "127.0.0.1:$PORT/metrics" | grep '^prescient_' > "$out/metrics.last.txt"
done
wait $JP; log "$name rc=$?"
"$ctl" --socket "$S" stats --json > "$out/stats.final.json" 2>&1
curl -s "127.0.0.1:$PORT/metrics" | grep '^prescient_' > "$out/metrics.final.txt"
kill -TERM $DP; wait $DP; log "service rc=$?"
grep "prescientctl run:" "$out/$name.err" | tee -a "$out/run.log"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
