#!/bin/bash
# Issue 19's DDP result through the service, on a machine of 2 GPUs, in
# one batch (BENCHMARKS-gpu.md runs 47-48):
#  1. plain runs (no Prescient) of ddp.py, DDP over both GPUs and one GPU
#     alone, STEPS steps each: the losses to compare with, and the
#     footprint (peak reserved per rank); the budget is half of it, per GPU
#     (the budget is the only pressure: the job allocates far less managed
#     memory than the GPU has free);
#  2. REPS repetitions of, in turn: one GPU driver-like (the worker attached
#     by `prescientd attach --mode driver-like`), one GPU Prescient through
#     the service, DDP driver-like (each worker attached by its own
#     `prescientd attach --mode driver-like`), DDP Prescient through the
#     service: `prescientd service` (backend = "userspace", every other
#     setting its default) runs throughout, and `prescientctl --socket S
#     run --budget B --mode exec-id -- torchrun --nproc-per-node N ddp.py`
#     asks it to attach each CUDA worker (torchrun's children); the
#     service's stats (per-(pid, GPU) lanes, by UUID) are read every second
#     while the job runs, and /metrics once before it ends.
# Usage: bench/gpu/ddp/svc.sh OUTDIR BINDIR [STEPS] [REPS]
set -u
out=$1; bin=$2; steps=${3:-8}; reps=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
pd=$bin/prescientd; ctl=$bin/prescientctl
mkdir -p "$out"
T0=$SECONDS
log() { echo "[svc $(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$out/run.log"; }
. "$here/common.sh"
mapfile -t U < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
log "GPUs: ${U[*]}; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') driver $(cat /sys/module/nvidia_uvm/version); $("$pd" --version)"
[ "${#U[@]}" -ge 2 ] || { log "needs 2 GPUs"; exit 2; }

# svc_case NAME NPROC VISIBLE BUDGET: Prescient through the service.
svc_case() {
  local name=$1 n=$2 vis=$3 b=$4 i=0
  CUDA_VISIBLE_DEVICES=$vis timeout 150 "$ctl" --socket "$S" run --budget "$b" --mode exec-id -- \
    torchrun --standalone --nproc-per-node "$n" "$here/ddp.py" "$steps" > "$out/$name.jsonl" 2> "$out/$name.err" &
  local jp=$!
  : > "$out/$name.stats.jsonl"
  while kill -0 $jp 2>/dev/null; do
    sleep 1; i=$((i + 1))
    "$ctl" --socket "$S" stats --json 2>/dev/null | tr -d '\n' >> "$out/$name.stats.jsonl"; echo >> "$out/$name.stats.jsonl"
    [ $((i % 10)) = 5 ] && curl -s "127.0.0.1:$PORT/metrics" | grep '^prescient_process\|^prescient_userspace' > "$out/$name.metrics.txt"
  done
  wait $jp; log "$name rc=$?"
  "$ctl" --socket "$S" status --json > "$out/$name.status.after.json" 2>&1
}

# B1 and B2 given (a batch after one that measured the footprint): no
# plain runs.
if [ -z "${B1:-}" ] || [ -z "${B2:-}" ]; then
  plain plain2 2 "${U[0]},${U[1]}" "$steps"
  plain plain1 1 "${U[0]}" "$steps"
  B2=$(half plain2); B1=$(half plain1)
  log "budgets: DDP $B2 per GPU, one GPU $B1 (half of each run's peak reserved)"
else
  log "budgets given: DDP $B2 per GPU, one GPU $B1"
fi

S=$out/svc.sock; PORT=19482
. "$here/../lib/service.sh"
start_service "$pd" "$out/svc.toml" "$S" "$PORT" "$out/svc.daemon.log"
SP=$SERVICE_PID
"$ctl" --socket "$S" status --json > "$out/svc.status.start.json" 2>&1

# PAIRS: which (driver-like, Prescient) pairs to run, in order, as
# WORLD:REP (one: one GPU, ddp: both); default: one and ddp, REPS times.
pairs=${PAIRS:-$(for r in $(seq "$reps"); do echo "one:$r ddp:$r"; done)}
# LIMIT: seconds the batch may take (the device call's limit, less a margin).
limit=${LIMIT:-450}; pair_s=0
for p in $pairs; do
  w=${p%:*}; r=${p#*:}
  # Start a pair only if one as long as the longest so far ends in time.
  [ $((SECONDS - T0 + pair_s)) -gt "$limit" ] && { log "$p skipped: out of time"; break; }
  p0=$SECONDS
  if [ "$w" = one ]; then
    attach_case "one.driverlike.$r" 1 "${U[0]}" driver-like off "$B1"
    svc_case "one.prescient.$r" 1 "${U[0]}" "$B1"
  else
    attach_case "ddp.driverlike.$r" 2 "${U[0]},${U[1]}" driver-like off "$B2"
    svc_case "ddp.prescient.$r" 2 "${U[0]},${U[1]}" "$B2"
  fi
  d=$((SECONDS - p0)); [ $d -gt $pair_s ] && pair_s=$d; log "$p took ${d}s"
done
kill -TERM $SP; wait $SP; log "service rc=$?"
python3 "$here/svc_summary.py" "$out" | tee "$out/summary.txt"
