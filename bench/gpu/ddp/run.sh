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
export PRESCIENT_RUNTIME=$bin/libprescient_runtime.so PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# NCCL's own buffers through cuMem (passed through by the runtime, never
# made managed: cudaIpcGetMemHandle refuses managed memory).
export NCCL_CUMEM_ENABLE=1 NCCL_DEBUG=WARN
export OMP_NUM_THREADS=4 PYTHONPATH=$here
mkdir -p "$out"
log() { echo "[ddp $(date +%T)] $*" | tee -a "$out/run.log"; }
mapfile -t U < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
log "GPUs: ${U[*]}; driver $(cat /sys/module/nvidia_uvm/version); $("$pd" --version)"
[ "${#U[@]}" -ge 2 ] || { log "needs 2 GPUs"; exit 2; }

# plain NAME NPROC VISIBLE STEPS: torchrun without Prescient.
plain() {
  CUDA_VISIBLE_DEVICES=$3 timeout 90 torchrun --standalone --nproc-per-node "$2" "$here/ddp.py" "$4" \
    > "$out/$1.jsonl" 2> "$out/$1.err"; log "$1 rc=$?"
}
# workers CMDPID N: the pids of the N torchrun workers under CMDPID, by rank.
workers() {
  local want=$2 i p
  for i in $(seq 300); do
    W=()
    for p in $(pgrep -f "ddp.py"); do
      r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^LOCAL_RANK=//p')
      [ -n "$r" ] && W[$r]=$p
    done
    [ "${#W[@]}" -ge "$want" ] && return 0
    sleep 0.1
  done
  return 1
}
# case NAME NPROC VISIBLE MODE IDS BUDGET: torchrun under prescientctl run,
# each worker attached by prescientd attach.
case_() {
  local name=$1 n=$2 vis=$3 mode=$4 ids=$5 b=$6 jmode=transparent dps=() r
  [ "$ids" = on ] && jmode=exec-id
  CUDA_VISIBLE_DEVICES=$vis timeout 150 "$ctl" --socket "$out/none.sock" run --budget "$b" --mode "$jmode" -- \
    torchrun --standalone --nproc-per-node "$n" "$here/ddp.py" "$steps" > "$out/$name.jsonl" 2> "$out/$name.err" &
  local cp=$!
  if workers $cp "$n"; then
    for r in "${!W[@]}"; do
      timeout 160 "$pd" attach --pid "${W[$r]}" --mode "$mode" --budget "$b" --exec-ids "$ids" \
        --stats-json "$out/$name.w$r.stats.json" > "$out/$name.w$r.daemon.json" 2> "$out/$name.w$r.daemon.log" &
      dps+=($!)
    done
  else
    log "$name: workers not found"
  fi
  wait $cp; log "$name rc=$?"
  for p in "${dps[@]}"; do wait "$p"; done
}

# PLAIN_STEPS: 1 is enough for the peak (AdamW's state comes at step 0).
plain plain2 2 "${U[0]},${U[1]}" "${PLAIN_STEPS:-2}"
plain plain1 1 "${U[0]}" "${PLAIN_STEPS:-2}"
half() { python3 - "$out/$1.jsonl" <<'PY'
import json, sys
peak = max(json.loads(l).get("peak_reserved", 0) for l in open(sys.argv[1]) if l.startswith("{"))
print(f"{peak // 2 >> 21 << 1}M")  # half, whole 2 MiB blocks, in MiB
PY
}
B2=$(half plain2); B1=$(half plain1)
log "budgets: DDP $B2 per GPU, one GPU $B1 (half of each run's peak reserved)"
case_ ddp.driverlike 2 "${U[0]},${U[1]}" driver-like off "$B2"
case_ ddp.prescient 2 "${U[0]},${U[1]}" prescient on "$B2"
case_ one.driverlike 1 "${U[0]}" driver-like off "$B1"
case_ one.prescient 1 "${U[0]}" prescient on "$B1"

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
