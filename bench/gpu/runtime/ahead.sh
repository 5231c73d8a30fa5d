#!/bin/bash
# Launch footprints (prescientd --footprints, BENCHMARKS-gpu.md runs 61-62):
# ResNet-50 and the encoder of jobs.py under a residency budget of half
# their managed memory (run 51's budgets; the only pressure: each job
# allocates far less managed memory than the GPU has free), each started
# with `prescientctl run` and attached with `prescientd attach`, REPS
# repetitions alternating: driver-like, execution ids + marks (run 51's
# best), the same with --footprints --footprint-window-pct 50 (run 61: the
# default then) and 25 (run 61: CONFIGS unset). CONFIGS (environment)
# picks others: driverlike marks foot foot25 foot25u (window 25%, a pointer
# with no live block known stands for its own 2 MB block only) foot10,
# foot25r3 and foot25r12 (window 25%, --reserve-pct 3 or 12), and
# foot25B: foot25 with the prescientd that PD_B (environment) names, and
# foot25nf: foot25 with the runtime's marks flusher off (PRESCIENT_MARKS_FLUSHER=0),
# foot25nn: foot25 with --no-next-use-victims (runs 108-111 ran the
# next-use order as foot25nu, when it was off by default).
# DEADLINE_S (environment, default 540): no case starts after this many seconds.
# Usage: bench/gpu/runtime/ahead.sh OUT [REPS] [STEPS]
set -u
out=$1; reps=${2:-2}; steps=${3:-8}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ctl="$root/target/release/prescientctl"; pd="$root/target/release/prescientd"
. "$here/../lib/attach.sh"
mkdir -p "$out"
t_start=$(date +%s)
log() { echo "[ahead $(date +%T)] $*" | tee -a "$out/run.log"; }
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,memory.used --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__)' >> "$out/gpu.txt" 2>&1

# case_ DIR MODEL BUDGET NAME JOB_MODE DAEMON_MODE EXEC_IDS MARKS(0/1) DAEMON_FLAGS...
case_() {
  local d=$1 model=$2 budget=$3 name=$4 jmode=$5 dmode=$6 ids=$7 marks=$8 t
  shift 8
  t=$(date +%s)
  if [ $(( t - t_start )) -gt "${DEADLINE_S:-540}" ]; then log "$name skipped (time)"; return; fi
  attach_case "$d" "$name" "$budget" "$jmode" "$dmode" "$ids" "$marks" 200 "$@" -- \
    python3 "$here/jobs.py" "$model" "$steps"
}

model_() {
  local model=$1 budget=$2 d="$out/$1"
  mkdir -p "$d"; echo "$budget" > "$d/budget.txt"
  for r in $(seq 1 "$reps"); do
    for c in ${CONFIGS:-driverlike marks foot foot25}; do
      case $c in
        driverlike) case_ "$d" "$model" "$budget" "$model.$c.$r" transparent driver-like off 0 ;;
        marks) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 ;;
        foot) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 50 ;;
        foot25) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 ;;
        foot25B) PD_CASE=${PD_B:?foot25B needs PD_B} case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 ;;
        foot10) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 10 ;;
        foot25r3) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 --reserve-pct 3 ;;
        foot25r12) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 --reserve-pct 12 ;;
        foot25nn) case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 --no-next-use-victims ;;
        foot25nf) PRESCIENT_MARKS_FLUSHER=0 case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 ;;
        foot25u) PRESCIENT_FOOTPRINT_UNKNOWN_BYTES=0 case_ "$d" "$model" "$budget" "$model.$c.$r" exec-id prescient on 1 --footprints --footprint-window-pct 25 ;;
      esac
    done
  done
  python3 "$here/ahead_summary.py" "$d" "$model" | tee "$d/summary.txt"
}

model_ resnet 3478M
model_ encoder 2189426688
tar -C "$out" --exclude='*.tgz' --exclude='*.sock' -czf "$out/all.tgz" .
