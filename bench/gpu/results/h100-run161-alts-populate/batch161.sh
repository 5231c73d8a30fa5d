#!/bin/bash
# Run 161: the two LMs against FSDP CPU offload (run 146's comparison) on
# the build that brings discarded blocks back before the alive mark's reply
# (run 160: the 220M LM 1.23x faster, no write-permission faults).
# bench/gpu/runtime/alts.sh: per job the uncapped plain run (the losses to
# match), FSDP with CPU offload and activation checkpointing under the same
# cap (plain PyTorch, cudaMalloc, set_per_process_memory_fraction), and
# Prescient with the cap as its residency budget ("foot": prescientctl run,
# execution ids, dead/alive marks, launch footprints, the defaults; the cap
# the only pressure). 2 repetitions of 6 steps.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
UM_CASES="foot" SHIP=$OUT DEADLINE=400 timeout 560 bash "$S/bench/gpu/runtime/alts.sh" /tmp/a161 6 2 \
  "lmbig:half:-:fsdp+ckpt" "lm:4800M:-:fsdp+ckpt" > "$OUT/alts.console" 2>&1
grep -E "median over|_vs_alt|^foot\.|^alt" "$OUT/run.log"
