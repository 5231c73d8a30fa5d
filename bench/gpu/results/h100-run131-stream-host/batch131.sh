#!/bin/bash
# Run 131: umbench stream (32 buffers of 256 MB, 8 GiB managed) with the
# first N of its buffers advised to stay in host memory, mapped to the GPU
# (STREAM_HOST, umbench.cu: what a user could do by hand), N = 17 (the
# rest, 3.75 GiB, fits the 4 GiB budget), 24 and 32: the resident run (no
# daemon: the advised buffers read and written over the link, the rest in
# GPU memory) and driver-like under the 4 GiB budget prescientd enforces
# (the only pressure), 2 repetitions of 10 iterations.
set -u
S=$(cd "$(dirname "$0")" && pwd); BIN=$S/target/release; R=$S/bench/gpu/run.sh
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
export PRESCIENTD=$BIN/prescientd PRESCIENTCTL=$BIN/prescientctl NO_PRESCIENT=1 NO_ORACLE=1
for h in 17 24 32; do
  n=host_$h; t=$(left); [ $t -gt 170 ] && t=170
  [ $t -lt 40 ] && { echo "$n skipped" >> "$OUT/run131.log"; continue; }
  export STREAM_HOST=$h
  OUT=$OUT/$n WHAT=oracle ORACLE_WL=stream REPS="1 2" ITERS=10 timeout $t bash "$R" > "$OUT/$n.log" 2>&1
  echo "$n done after $(( $(date +%s) - T0 )) s" >> "$OUT/run131.log"
done
cd "$OUT" && for n in host_17 host_24 host_32; do
  echo "== STREAM_HOST: $n"; tar -xzOf $n/results.tgz ./bw.jsonl
  for v in base driverlike_1 driverlike_2; do
    f=$n/stream_$v.bench.jsonl; [ -f $f ] || continue
    python3 -c 'import json,sys; x=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]; it=[round(e["gpu_ms"],1) for e in x if e.get("event")=="iter"]; s=[e for e in x if e.get("event")=="summary"]; print("  '$v':", sorted(it[2:])[len(it[2:])//2] if len(it)>2 else None, it, s[-1].get("checksum") if s else None)' $f
    [ -f $n/stream_$v.stats.json ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("   ", {k:d.get(k) for k in ("fault_blocks","prefetch_bytes","evict_bytes","migrated_to_gpu_bytes")})' $n/stream_$v.stats.json
  done
done > tables.txt 2>&1
tar czf run131.tgz host_17 host_24 host_32 host_*.log gpu.csv 2>/dev/null; rm -rf host_17 host_24 host_32 host_*.log
cat tables.txt run131.log
