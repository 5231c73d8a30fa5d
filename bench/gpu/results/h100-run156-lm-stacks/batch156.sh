#!/bin/bash
# Run 156 (run 155 again on another fresh machine; the sampler now names the
# driver's functions and ends its file cleanly, 2 repetitions):
# Run 155: where do prescientd's workers, the job and the driver's fault
# thread wait during the 220M LM's multi-second stall (runs 149, 153, 154:
# a fresh machine's first repetition; prescientd's counters show no
# UVM_MIGRATE finishing and no migration by the driver for 3-4 s while
# fault events climb)? bench/gpu/stacks.py samples every 0.1 s the kernel
# stack of every thread of prescientd (its workers now named migrate-*),
# of the job (python3) and of UVM's kernel threads, and the host's
# compaction/reclaim counters every second; the block log now has a J line
# per worker call (its duration and status). The job as runs 146-154 ran it
# (`prescientctl run`, execution ids, marks, launch footprints, the 4800M
# cap as the budget prescientd enforces, the only pressure), 3 repetitions
# of 8 steps on a fresh machine, every block logged, the stats every 50 ms.
set -u
S=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
uptime > "$OUT/host.txt"; cat /proc/sys/kernel/kptr_restrict >> "$OUT/host.txt"; head -3 /proc/self/stack >> "$OUT/host.txt" 2>&1
grep -E "MemTotal|MemFree|HugePages_Total|AnonHuge" /proc/meminfo >> "$OUT/host.txt"
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag >> "$OUT/host.txt" 2>&1
python3 "$S/bench/gpu/stacks.py" "$OUT/stacks.tsv.gz" 0.1 400 &
SP=$!
mkdir -p "$OUT/lm"
BLOCK_LOG=1 ATTACH_EXTRA="--stats-interval 50ms" CASES=foot PLAIN=0 timeout 400 bash "$S/bench/gpu/runtime/marks.sh" "$OUT/lm" lm 8 2 5033164800 > "$OUT/marks.log" 2>&1
echo "rc=$?" >> "$OUT/marks.log"; rm -rf "$OUT/lm"
kill $SP; wait $SP 2>/dev/null
dmesg 2>/dev/null | tail -50 > "$OUT/dmesg.txt"
cat "$OUT/host.txt" | cut -c1-200
tail -3 "$OUT/marks.log" | cut -c1-200
for r in 1 2; do
  tar -xzOf "$OUT/lm.tgz" lm/lm.foot.$r.jsonl | python3 -c 'import json,sys; print([round(json.loads(l)["ms"]) for l in sys.stdin if l.startswith("{\"step\"")])'
done
ls -la "$OUT"
