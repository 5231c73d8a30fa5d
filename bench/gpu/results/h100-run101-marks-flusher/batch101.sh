#!/bin/bash
# Run 101: the runtime's marks flusher thread (runtime/src/marks/mod.rs
# start_flusher): dead marks whose fence passed are sent every 1 ms even
# while the job makes no allocator call. "new" = this build's runtime,
# "oldrt" = main's runtime (d9e2dac), the same prescientctl, prescientd
# (this build, with the thrash guard) and flags (ahead.sh foot25: ids,
# marks, footprints 25%), alternating, 2 repetitions of 8 steps each, on
# ResNet-50 and the encoder; driver-like once. Pressure only from the
# budget prescientd enforces (half of each job's managed memory).
set -u
S=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for r in 1 2; do
  c="foot25"; [ $r = 1 ] && c="driverlike foot25"
  CONFIGS="$c" DEADLINE_S=500 timeout 250 bash $S/bench/gpu/runtime/ahead.sh $OUT/new$r 1 8 > $OUT/new$r.console 2>&1
  echo "new $r done after $(( $(date +%s) - T0 )) s" >> "$OUT/run101.log"
  CONFIGS="foot25" DEADLINE_S=500 timeout 250 bash $S/oldrt/bench/gpu/runtime/ahead.sh $OUT/oldrt$r 1 8 > $OUT/oldrt$r.console 2>&1
  echo "oldrt $r done after $(( $(date +%s) - T0 )) s" >> "$OUT/run101.log"
done
cd $OUT
for d in new1 oldrt1 new2 oldrt2; do
  for m in resnet encoder; do
    grep -h '"config"' $d/$m/summary.txt 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    j=json.loads(l); print(sys.argv[1], sys.argv[2], j["config"], j["ms"], "faults", j["faults"], "toGPU", j["to_gpu_gb"], "loss", j.get("loss_maxdiff_vs_driverlike"))' $d $m
    for f in $d/$m/*.foot25.*.daemon.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("   ", {k:d.get(k) for k in ("evict_bytes","migrated_to_gpu_bytes","host_discarded_blocks","discarded_blocks","refetched_blocks","marked_dead_blocks","mark_requests","engine_thrash_guards")})' $f; done
    grep -h "marks: frees" $d/$m/*.err 2>/dev/null | cut -c1-250
  done
done > results.txt 2>&1
tar czf run101.tgz --exclude='*.sock' new1 new2 oldrt1 oldrt2 *.console 2>/dev/null; rm -rf new1 new2 oldrt1 oldrt2
cat results.txt run101.log
