# Sourced by run.sh and svc.sh (set `here`, `bin`, `out`, `pd`, `ctl`,
# `steps` and a `log` function first): the environment of the DDP jobs and
# the cases both scripts run.

export PRESCIENT_RUNTIME=$bin/libprescient_runtime.so PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# NCCL's own buffers through cuMem (passed through by the runtime, never
# made managed: cudaIpcGetMemHandle refuses managed memory).
export NCCL_CUMEM_ENABLE=1 NCCL_DEBUG=WARN
export OMP_NUM_THREADS=4 PYTHONPATH=$here

# plain NAME NPROC VISIBLE STEPS: torchrun without Prescient.
plain() {
  CUDA_VISIBLE_DEVICES=$3 timeout 90 torchrun --standalone --nproc-per-node "$2" "$here/ddp.py" "$4" \
    > "$out/$1.jsonl" 2> "$out/$1.err"; log "$1 rc=$?"
}
# workers N: the pids of the N torchrun workers now running, by rank (W).
workers() {
  local want=$1 i p r
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
# attach_case NAME NPROC VISIBLE MODE IDS BUDGET: torchrun under
# prescientctl run (no daemon socket for the launcher), each worker
# attached by its own prescientd attach --mode MODE --exec-ids IDS.
attach_case() {
  local name=$1 n=$2 vis=$3 mode=$4 ids=$5 b=$6 jmode=transparent dps=() r p
  [ "$ids" = on ] && jmode=exec-id
  CUDA_VISIBLE_DEVICES=$vis timeout 150 "$ctl" --socket "$out/none.sock" run --budget "$b" --mode "$jmode" -- \
    torchrun --standalone --nproc-per-node "$n" "$here/ddp.py" "$steps" > "$out/$name.jsonl" 2> "$out/$name.err" &
  local cp=$!
  if workers "$n"; then
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
# half NAME: half of run NAME's peak reserved memory, in whole 2 MiB blocks,
# as a size in MiB. The ranks share one stdout: their lines may
# interleave, so every JSON object is read wherever it starts.
half() { python3 - "$here" "$out/$1.jsonl" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from svc_summary import objects
peak = max(o.get("peak_reserved", 0) for o in objects(sys.argv[2]))
print(f"{peak // 2 >> 21 << 1}M")  # half, whole 2 MiB blocks, in MiB
PY
}
