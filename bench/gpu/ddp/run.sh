#!/bin/bash
# Issue 19 on a machine of 2 GPUs, in one batch:
#  1. plain runs (no Prescient) of lm.py's LM: DDP over both GPUs and one
#     GPU alone, 2 steps each, for the footprint (peak reserved per rank);
#     the budget is half of it, per GPU (the budget is the only pressure:
#     the job allocates about 10 GB of the GPU's 80, never more managed
#     memory than is free);
#  2. DDP under `prescientctl run --budget B -- torchrun --nproc-per-node 2`
#     with each worker attached by its own `prescientd attach --budget B`
#     (--mode driver-like, then --mode prescient with execution ids), and
#     the same on one GPU (`torchrun --nproc-per-node 1`): each worker's
#     speed-up over driver-like against the one-GPU one; every worker's
#     stats JSON has its prefetched and pre-evicted bytes by GPU UUID;
#  3. one process over both GPUs (pipe.py), plainly and then under
#     `prescientd service` (user-space backend) + `prescientctl run
#     --budget GPU-<uuid0>=P,1=P`: per-GPU lanes, status, stats and
#     /metrics per (pid, GPU), losses bit for bit against the plain run.
# Usage: bench/gpu/ddp/run.sh OUTDIR BINDIR [STEPS]
set -u
out=$1; bin=$2; steps=${3:-8}
here=$(cd "$(dirname "$0")" && pwd)
pd=$bin/prescientd; ctl=$bin/prescientctl
mkdir -p "$out"
log() { echo "[ddp $(date +%T)] $*" | tee -a "$out/run.log"; }
. "$here/common.sh"
mapfile -t U < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
log "GPUs: ${U[*]}; driver $(cat /sys/module/nvidia_uvm/version); $("$pd" --version)"
[ "${#U[@]}" -ge 2 ] || { log "needs 2 GPUs"; exit 2; }

# PLAIN_STEPS: 1 is enough for the peak (AdamW's state comes at step 0).
plain plain2 2 "${U[0]},${U[1]}" "${PLAIN_STEPS:-2}"
plain plain1 1 "${U[0]}" "${PLAIN_STEPS:-2}"
B2=$(half plain2); B1=$(half plain1)
log "budgets: DDP $B2 per GPU, one GPU $B1 (half of each run's peak reserved)"
attach_case ddp.driverlike 2 "${U[0]},${U[1]}" driver-like off "$B2"
attach_case ddp.prescient 2 "${U[0]},${U[1]}" prescient on "$B2"
attach_case one.driverlike 1 "${U[0]}" driver-like off "$B1"
attach_case one.prescient 1 "${U[0]}" prescient on "$B1"

# The pipeline: plain, then under the service (PIPE=0: not run).
if [ "${PIPE:-1}" = 0 ]; then
  python3 "$here/summary.py" "$out" "${U[@]}" | tee "$out/summary.txt"
  exit 0
fi
CUDA_VISIBLE_DEVICES="${U[0]},${U[1]}" timeout 90 python3 "$here/pipe.py" "$steps" > "$out/pipe.plain.jsonl" 2> "$out/pipe.plain.err"
log "pipe.plain rc=$?"
PB=$(python3 - "$out/pipe.plain.jsonl" <<'PY'
import json, sys
peak = [json.loads(l) for l in open(sys.argv[1]) if '"done"' in l][0]["peak_reserved"]
print(",".join(f"{p // 2 >> 21 << 1}M" for p in peak))
PY
)
P0=${PB%,*}; P1=${PB#*,}
S=$out/svc.sock
. "$here/../lib/service.sh"
start_service "$pd" "$out/svc.toml" "$S" 19481 "$out/svc.daemon.log" "poll_interval_ms = 200" \
  "$(printf '[engine]\nenabled = true\n[attach]\nscan_interval_ms = 100')"
SP=$SERVICE_PID
log "pipeline budgets: ${U[0]}=$P0, index 1=$P1 (half of each GPU's peak reserved)"
CUDA_VISIBLE_DEVICES="${U[0]},${U[1]}" timeout 150 "$ctl" --socket "$S" run --budget "${U[0]}=$P0,1=$P1" --mode exec-id -- \
  python3 "$here/pipe.py" "$steps" > "$out/pipe.prescient.jsonl" 2> "$out/pipe.prescient.err" &
JP=$!
while kill -0 $JP 2>/dev/null; do
  sleep 2
  "$ctl" --socket "$S" status > "$out/pipe.status.txt.new" 2>&1 && grep -q "GPU-" "$out/pipe.status.txt.new" && mv "$out/pipe.status.txt.new" "$out/pipe.status.txt"
  "$ctl" --socket "$S" stats > "$out/pipe.stats.txt.new" 2>&1 && grep -q "PRE-EVICTED" "$out/pipe.stats.txt.new" && mv "$out/pipe.stats.txt.new" "$out/pipe.stats.txt"
  "$ctl" --socket "$S" stats --json > "$out/pipe.stats.json.new" 2>&1 && mv "$out/pipe.stats.json.new" "$out/pipe.stats.json"
  curl -s 127.0.0.1:19481/metrics | grep '^prescient_process_gpu\|^prescient_userspace_prefetch\|^prescient_process_faults' > "$out/pipe.metrics.txt.new" && mv "$out/pipe.metrics.txt.new" "$out/pipe.metrics.txt"
done
wait $JP; log "pipe.prescient rc=$?"
kill -TERM $SP; wait $SP
python3 "$here/summary.py" "$out" "${U[@]}" | tee "$out/summary.txt"
