#!/bin/bash
# BENCHMARKS-gpu.md runs 59 and 60 (issue 20: what a user would pick
# instead of Prescient), one device call each. The only pressure on
# Prescient is the residency budget prescientd enforces (the cap below);
# every job allocates far less managed memory (at most about 10 GB) than
# the GPU has free.
#   runs59.sh alts OUT MODEL...  alts.sh, STEPS (default 6) steps, 2 repetitions, for each
#                                MODEL of lm, lmbig, encoder, resnet (in
#                                that order); models that would start past
#                                DEADLINE (default 420 s) are skipped.
#   runs59.sh oracle OUT         the LM's GPU oracle: oracle_lm.sh, 6 steps,
#                                4800M (as runs 46 and 51), 2 repetitions,
#                                and cudaMemcpy H2D bandwidth for its link
#                                bound.
# Wall time per model in runs 59-60 (H100, 2 repetitions, the cases that
# ran): lm 238 s and lmbig 293 s at 6 steps, encoder 140 s at 8 (plus
# 16 s of start-up: nvidia-smi and the imports for gpu.txt); the
# oracle 132 s. So one 600 s call holds two models, not four: resnet has
# not run yet.
# Work in WORK (default /tmp/runs59); results in OUT: each model's tgz and
# the log as each model finishes (at most 8 files: the device tool's limit).
set -u
what=$1; out=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/tmp/runs59}
mkdir -p "$out" "$work"
spec() {
  case $1 in
    lm) echo "lm:4800M:plain:ckpt/fsdp+ckpt/fsdp2+ckpt" ;;
    lmbig) echo "lmbig:half:plain/ckpt:fsdp/fsdp+ckpt/fsdp2/fsdp2+ckpt" ;;
    encoder) echo "encoder:2088M:plain:ckpt/fsdp+ckpt/fsdp2+ckpt" ;;
    resnet) echo "resnet:3478M:plain:ckpt/fsdp+ckpt/fsdp2+ckpt" ;;
  esac
}
h2d() {  # cudaMemcpy H2D from pinned memory, 1 GiB, best of 6 copies (GB/s)
  python3 -c 'import torch, time
h = torch.empty(1 << 30, dtype=torch.uint8).pin_memory(); d = torch.empty_like(h, device="cuda")
best = 0
for _ in range(6):
    torch.cuda.synchronize(); t = time.perf_counter(); d.copy_(h); torch.cuda.synchronize()
    best = max(best, (1 << 30) / (time.perf_counter() - t) / 1e9)
print(f"h2d_pinned_GBps={best:.2f}")'
}
case $what in
  alts)
    specs=(); for m in "$@"; do specs+=("$(spec "$m")"); done
    SHIP=$out DEADLINE=${DEADLINE:-420} bash "$here/alts.sh" "$work/a" "${STEPS:-6}" 2 "${specs[@]}"
    ;;
  oracle)
    nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,memory.used --format=csv > "$out/gpu-oracle.txt" 2>&1
    h2d > "$out/h2d.txt" 2>&1
    timeout "${ORACLE_LIMIT:-300}" bash "$here/oracle_lm.sh" "$work/o" 6 4800M 2 > "$work/o.console" 2>&1
    h2d >> "$out/h2d.txt" 2>&1
    cp "$work/o/summary.txt" "$out/oracle-summary.txt"
    tar -C "$work" -czf "$out/oracle.tgz" o o.console
    ;;
esac
