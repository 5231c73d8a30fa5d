#!/bin/bash
# Issue 20: the GPU oracle on jobs.py's Hugging Face Llama LM, its memory
# managed through `prescientctl run`, under a residency budget that
# prescientd enforces (the only pressure; the job manages about 8 GB):
# a plain resident run (no daemon), then per repetition driver-like
# recording a plan (`--record-plan`) and the oracle replaying it.
# Usage: bench/gpu/runtime/oracle_lm.sh OUTDIR STEPS BUDGET [REPS] [BIN]
# BIN: the folder of prescientctl, prescientd, libprescient_runtime.so
# (default target/release).
set -u
out=$1; steps=$2; budget=$3; reps=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${5:-$root/target/release}
ctl="$bin/prescientctl"; pd="$bin/prescientd"
mkdir -p "$out"
# case NAME DAEMON_MODE(none|driver-like|oracle) [prescientd flags...]
case_() {
  local name=$1 dmode=$2; shift 2
  PRESCIENT_RUNTIME_LOG=1 "$ctl" run --budget "$budget" --mode transparent -- \
    python3 "$here/jobs.py" lm "$steps" > "$out/$name.jsonl" 2> "$out/$name.err" &
  local cp=$! jp= dp=
  if [ "$dmode" != none ]; then
    for _ in $(seq 100); do jp=$(pgrep -P $cp | head -1); [ -n "$jp" ] && break; sleep 0.05; done
    timeout 200 "$pd" attach --pid "$jp" --mode "$dmode" --budget "$budget" --exec-ids off \
      --stats-json "$out/$name.stats.json" "$@" > "$out/$name.daemon.json" 2> "$out/$name.daemon.log" &
    dp=$!
  fi
  wait $cp; echo "$name rc=$?" >> "$out/rc.txt"
  [ -n "$dp" ] && wait $dp
  echo "[$(date +%T)] $name done"
}
case_ lm_base none
for r in $(seq 1 "$reps"); do
  case_ lm_driverlike_$r driver-like --record-plan "$out/lm_$r.plan"
  case_ lm_oracle_$r oracle --plan "$out/lm_$r.plan"
done
gzip -f "$out"/lm_*.plan
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
for p in sorted(glob.glob(os.path.join(out, "lm_*.jsonl"))):
    name = os.path.basename(p)[:-6]
    steps = [json.loads(l) for l in open(p) if l.startswith('{"step"')]
    ms = [s["ms"] for s in steps[3:]]
    d = {}
    try:
        d = json.loads(open(os.path.join(out, name + ".daemon.json")).read())
    except Exception:
        pass
    o = d.get("oracle") or {}
    print(f"{name:18s} steps={len(steps)} median_ms={statistics.median(ms) if ms else float('nan'):.1f} "
          f"losses={[round(s['loss'], 4) for s in steps]} fault_blocks={d.get('fault_blocks')} "
          f"to_gpu_GB={d.get('migrated_to_gpu_bytes', 0) / 1e9:.1f} "
          f"oracle applied_after_s={o.get('applied_after_s')} at={o.get('applied_at')} cursor={o.get('cursor')} "
          f"entries={o.get('plan_entries')} ahead={o.get('faults_ahead')} far={o.get('faults_far')} "
          f"unplanned={o.get('faults_unplanned')}")
PY
