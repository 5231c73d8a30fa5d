#!/bin/bash
# BENCHMARKS-gpu.md runs 50 and 51 (issue 15's last must-shows), one
# device call each, everything under OUT and packed into one tgz.
# (Run 50 would also have run exec-id without the write's memory barrier,
# had the driver accepted that flag: it refused it, and that setting is
# gone.)
#   runs50.sh a OUT   run 50: no pressure, no daemon: what one id write
#                     costs between kernels (memop_probe.py), then the
#                     overhead's parts per model (decompose.sh, 20 steps,
#                     2 repetitions).
#   runs50.sh b OUT   run 51: under a residency budget of half the managed
#                     memory, enforced by prescientd (the only pressure:
#                     every job allocates far less managed memory than the
#                     GPU has free): the LM's attribution with execution
#                     ids (9 steps, 4800M as in run 46), then ResNet-50
#                     (3478M, as in run 46) and the encoder (half of what
#                     a probe run counts) in the four configurations of
#                     marks.sh, 2 repetitions.
set -u
what=$1; out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__)' >> "$out/gpu.txt" 2>&1
case $what in
  a)
    timeout 120 python3 "$here/memop_probe.py" 2000 5 > "$out/probe.jsonl" 2> "$out/probe.err"
    bash "$here/decompose.sh" "$out/a" 20 2 resnet plain managednoplace managed execid
    bash "$here/decompose.sh" "$out/a" 20 2 lm plain execid
    bash "$here/decompose.sh" "$out/a" 20 2 encoder plain execid
    ;;
  b)
    PLAIN=0 CASES=execid bash "$here/marks.sh" "$out/lm" lm 9 1 4800M > "$out/lm.console" 2>&1
    bash "$here/marks.sh" "$out/resnet" resnet 8 2 3478M > "$out/resnet.console" 2>&1
    bash "$here/marks.sh" "$out/encoder" encoder 8 2 > "$out/encoder.console" 2>&1
    ;;
esac
tar -C "$out" --exclude='*.tgz' -czf "$out/all-$what.tgz" .
