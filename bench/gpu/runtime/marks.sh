#!/bin/bash
# Dead/alive marks from PyTorch's caching allocator under a residency budget
# of half the job's managed memory (the only pressure: the job allocates
# far less managed memory than the GPU has free; the budget is what
# prescientd enforces). Side by side, REPS repetitions: driver-like,
# transparent, execution-id, and execution-id with marks, each job started
# with `prescientctl run` and attached with `prescientd attach`; the marks
# go to the attach's --marks-socket. Plus one plain run (no Prescient) whose
# losses every run must equal.
# Usage: bench/gpu/runtime/marks.sh OUTDIR MODEL STEPS REPS [BUDGET]
# (BUDGET: default half of the managed bytes a probe run counts).
# CASES (environment): the configurations to run, default all four
# ("driverlike transparent execid marks"), and "foot": marks plus launch
# footprints (prescientd --footprints), "footB" the same with the prescientd
# that PD_B (environment) names, "foot50" foot with the footprint window at
# 50%, "footnf" foot with the runtime's marks flusher off, "footnn" foot
# with --no-next-use-victims, "foothold" foot with the runtime's dead marks
# held HOLD_MS (environment, required: the runtime holds 10 ms by default,
# so foot has that hold) ms after each free; PLAIN=0 skips the plain run.
set -u
out=$1; model=$2; steps=$3; reps=$4; budget=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ctl="$root/target/release/prescientctl"; pd="$root/target/release/prescientd"
. "$here/../lib/attach.sh"
mkdir -p "$out"
log() { echo "[marks $(date +%T)] $*" | tee -a "$out/run.log"; }
job() { python3 "$here/jobs.py" "$model" "$steps"; }

t0=$(date +%s)
if [ "${PLAIN:-1}" != 0 ]; then
  timeout 200 python3 "$here/jobs.py" "$model" "$steps" > "$out/$model.plain.jsonl" 2> "$out/$model.plain.err"
  log "plain rc=$? $(( $(date +%s) - t0 )) s"
fi
if [ -z "$budget" ]; then
  # The managed bytes the runtime counted (live at exit: the allocator's cache).
  PRESCIENT_RUNTIME_LOG=1 timeout 200 "$ctl" run --mode transparent --no-marks -- \
    python3 "$here/jobs.py" "$model" 3 > "$out/$model.probe.jsonl" 2> "$out/$model.probe.err"
  live=$(grep -o 'managed_bytes_live=[0-9]*' "$out/$model.probe.err" | tail -1 | cut -d= -f2)
  budget=$(( live / 2 / 2097152 * 2097152 ))
  log "probe: managed_bytes_live=$live -> budget $budget"
fi
echo "$budget" > "$out/budget.txt"

# case_ NAME JOB_MODE DAEMON_MODE EXEC_IDS MARKS(0/1) [DAEMON_FLAGS...]
case_() {
  local name=$1 jmode=$2 dmode=$3 ids=$4 marks=$5
  shift 5
  attach_case "$out" "$name" "$budget" "$jmode" "$dmode" "$ids" "$marks" 220 "$@" -- \
    python3 "$here/jobs.py" "$model" "$steps"
}
cases=${CASES:-driverlike transparent execid marks}
for r in $(seq 1 "$reps"); do
  for c in $cases; do
    case $c in
      driverlike) case_ "$model.driverlike.$r" transparent driver-like off 0 ;;
      transparent) case_ "$model.transparent.$r" transparent prescient off 0 ;;
      execid) case_ "$model.execid.$r" exec-id prescient on 0 ;;
      marks) case_ "$model.marks.$r" exec-id prescient on 1 ;;
      foot) case_ "$model.foot.$r" exec-id prescient on 1 --footprints ;;
      foot50) case_ "$model.foot50.$r" exec-id prescient on 1 --footprints --footprint-window-pct 50 ;;
      footnn) case_ "$model.footnn.$r" exec-id prescient on 1 --footprints --no-next-use-victims ;;
      foothold) PRESCIENT_MARKS_HOLD_MS=${HOLD_MS:?foothold needs HOLD_MS} case_ "$model.foothold.$r" exec-id prescient on 1 --footprints ;;
      footnf) PRESCIENT_MARKS_FLUSHER=0 case_ "$model.footnf.$r" exec-id prescient on 1 --footprints ;;
      footB) PD_CASE=${PD_B:?footB needs PD_B} case_ "$model.footB.$r" exec-id prescient on 1 --footprints ;;
    esac
  done
done
python3 "$here/marks_summary.py" "$out" "$model" | tee "$out/summary.txt"
# One file for the device tool to bring back (it returns a limited number).
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
