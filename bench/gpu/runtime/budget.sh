#!/bin/bash
# issue 15 under memory pressure: a job started with `prescientctl run`
# under a residency budget of half its managed memory, prescientd's
# user-space backend attached (`prescientd attach`, the budget the only
# pressure: the GPU has 80 GB, the job uses about 10): driver-like,
# transparent, execution-id, side by side, REPS repetitions.
# Usage: bench/gpu/runtime/budget.sh OUTDIR MODEL STEPS BUDGET [REPS]
set -u
out=$1; model=$2; steps=$3; budget=$4; reps=${5:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ctl="$root/target/release/prescientctl"; pd="$root/target/release/prescientd"
mkdir -p "$out"
# case NAME JOB_MODE DAEMON_MODE EXEC_IDS
case_() {
  local name=$1 jmode=$2 dmode=$3 ids=$4
  PRESCIENT_RUNTIME_LOG=1 "$ctl" run --budget "$budget" --mode "$jmode" -- \
    python3 "$here/jobs.py" "$model" "$steps" > "$out/$name.jsonl" 2> "$out/$name.err" &
  local cp=$! jp=
  for _ in $(seq 100); do jp=$(pgrep -P $cp | head -1); [ -n "$jp" ] && break; sleep 0.05; done
  timeout 300 "$pd" attach --pid "$jp" --mode "$dmode" --budget "$budget" --exec-ids "$ids" \
    --stats-json "$out/$name.stats.json" > "$out/$name.daemon.json" 2> "$out/$name.daemon.log" &
  local dp=$!
  wait $cp; echo "$name rc=$?" >> "$out/rc.txt"
  wait $dp
}
for r in $(seq 1 "$reps"); do
  case_ "$model.driverlike.$r" transparent driver-like off
  case_ "$model.transparent.$r" transparent prescient off
  case_ "$model.execid.$r" exec-id prescient on
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
for p in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    name = os.path.basename(p)[:-6]
    steps = [json.loads(l) for l in open(p) if l.startswith('{"step"')]
    ms = [s["ms"] for s in steps[3:]]
    d = {}
    try:
        d = json.loads(open(os.path.join(out, name + ".daemon.json")).read())
    except Exception:
        pass
    fb = d.get("fault_blocks", 0); fx = d.get("faults_with_exec_id", 0)
    print(f"{name:24s} steps={len(steps)} median_ms={statistics.median(ms) if ms else float('nan'):.1f} "
          f"losses={[round(s['loss'], 4) for s in steps[:3]]}..{round(steps[-1]['loss'], 4) if steps else None} "
          f"exec_mode={d.get('exec_mode')} fault_blocks={fb} with_id={fx} "
          f"attributed={fx / fb if fb else float('nan'):.4f} ids_seen={d.get('exec_ids_seen')} torn={d.get('exec_ids_torn')} "
          f"to_gpu_GB={d.get('migrated_to_gpu_bytes', 0) / 1e9:.1f}")
PY
