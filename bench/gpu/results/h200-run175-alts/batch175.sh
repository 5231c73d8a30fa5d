#!/bin/bash
# Run 175: against what a user would run instead, on the H200, with launch records of 128 words (session 21; run 168 measured the build before)
# (runs 69-70 were measured with the build before run 72's ledger and
# every change since). bench/gpu/runtime/alts.sh: per job the uncapped
# plain run (the losses to match), the alternative under the same cap
# (plain PyTorch, cudaMalloc, the cap set by
# set_per_process_memory_fraction: FSDP with CPU offload and activation
# checkpointing for the two LMs, whose model states exceed the cap
# (run 59 showed plain and checkpointing alone run out of memory there);
# activation checkpointing for ResNet-50), and Prescient with the cap as
# its residency budget ("foot": prescientctl run, execution ids, dead/alive
# marks, launch footprints, the defaults). 2 repetitions of 6 steps.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
UM_CASES="foot" SHIP=$OUT DEADLINE=400 timeout 580 bash "$S/bench/gpu/runtime/alts.sh" /tmp/a175 6 2 \
  "lmbig:half:-:fsdp+ckpt" "lm:4800M:-:fsdp+ckpt" "resnet:3478M:-:ckpt" > "$OUT/alts.console" 2>&1
cat "$OUT/run.log"
