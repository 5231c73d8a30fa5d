#!/bin/bash
# Issue 20: beside each PyTorch job, what a user would do without Prescient
# under the same memory cap, in the same call: the job on plain device
# memory (cudaMalloc through PyTorch's caching allocator) with the cap set
# by torch.cuda.set_per_process_memory_fraction (alt.py --cap), plain, with
# activation checkpointing, or with FSDP and CPU offload; and Prescient on
# the same job with the cap as its residency budget (marks.sh: `prescientctl
# run --budget CAP`, prescientd attached, execution ids and dead/alive
# marks; and driver-like, for the ratio). The only pressure on Prescient is
# that budget: every job allocates far less managed memory than the GPU has
# free.
# Usage: bench/gpu/runtime/alts.sh OUT STEPS REPS SPEC...
#   SPEC = MODEL:CAP:ONCE:CANDIDATES
#     CAP         bytes, a size (4800M: M = MiB, as prescientctl reads it),
#                 or "half": half of what the first plain run's allocator
#                 reserved, down to 2 MiB;
#     ONCE        '/'-separated alt.py variants run once under the cap to
#                 show what does not fit (e.g. "plain/ckpt"), or "-";
#     CANDIDATES  '/'-separated variants in the order a user would try
#                 them; the first whose first run exits 0 runs REPS times.
#   A variant is '+'-joined alt.py flags without dashes: plain, ckpt,
#   fsdp+ckpt, fsdp2+ckpt.
# Per model, in OUT: plain (uncapped, jobs.py: the losses every run must
# equal), the capped variants, marks.sh's runs under OUT/MODEL-um, and
# MODEL.tgz of all of it (written as each model finishes; SHIP (env), a
# folder: each tgz and the log are copied there as they are made,
# so that a call cut short still brings back what finished). DEADLINE (env,
# seconds since the start, default 560): a model that would start later is
# skipped and said. UM_CASES (env): marks.sh's cases, default "driverlike
# marks"; "foot" adds launch footprints.
set -u
out=$1; steps=$2; reps=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
deadline=${DEADLINE:-560}; t0=$(date +%s)
mkdir -p "$out"
log() { echo "[alts $(date +%T) +$(( $(date +%s) - t0 ))s] $*" | tee -a "$out/run.log"; }
flags() { local v=$1 f=(); [ "$v" = plain ] || for x in ${v//+/ }; do f+=("--$x"); done; echo "${f[@]}"; }

# alt_ MODEL NAME VARIANT CAP: one capped run; its exit status is the result.
alt_() {
  local m=$1 name=$2 v=$3 cap=$4 t=$(date +%s) rc
  # shellcheck disable=SC2046
  timeout 200 python3 "$here/alt.py" "$m" "$steps" --cap "$cap" $(flags "$v") \
    > "$out/$m/$name.jsonl" 2> "$out/$m/$name.err"
  rc=$?; echo "$name rc=$rc" >> "$out/$m/rc.txt"
  log "$m $name ($v, cap $cap) rc=$rc $(( $(date +%s) - t )) s"
  return $rc
}
plain_() {
  local m=$1 r=$2 t=$(date +%s)
  timeout 200 python3 "$here/jobs.py" "$m" "$steps" > "$out/$m/$m.plain.$r.jsonl" 2> "$out/$m/$m.plain.$r.err"
  echo "$m.plain.$r rc=$?" >> "$out/$m/rc.txt"; log "$m plain $r $(( $(date +%s) - t )) s"
}
cap_of() {  # CAP MODEL -> bytes
  case $1 in
    half) python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"done\"")][0]["reserved"]
print(r // 2 // 2097152 * 2097152)' "$out/$2/$2.plain.1.jsonl" ;;
    *[KMGT]) python3 -c 'import sys; s=sys.argv[1]; print(int(float(s[:-1]) * 1024 ** ("KMGT".index(s[-1]) + 1)))' "$1" ;;
    *) echo "$1" ;;
  esac
}

nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,memory.used --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch, torchvision, transformers as t; print("torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", t.__version__)' >> "$out/gpu.txt" 2>&1
for spec in "$@"; do
  IFS=: read -r m capspec once cands <<< "$spec"
  if [ $(( $(date +%s) - t0 )) -gt "$deadline" ]; then log "$m skipped: past the ${deadline} s deadline"; continue; fi
  mkdir -p "$out/$m"
  plain_ "$m" 1
  cap=$(cap_of "$capspec" "$m") || { log "$m: no cap from $capspec"; continue; }
  echo "$cap" > "$out/$m/cap.txt"; log "$m cap $cap bytes"
  [ "$once" = - ] || for v in ${once//\// }; do alt_ "$m" "$m.cap-${v//+/-}.1" "$v" "$cap"; done
  chosen=
  for v in ${cands//\// }; do
    if alt_ "$m" "$m.alt-${v//+/-}.1" "$v" "$cap"; then chosen=$v; break; fi
  done
  echo "${chosen:-none}" > "$out/$m/chosen.txt"
  for r in $(seq 2 "$reps"); do
    [ -n "$chosen" ] && alt_ "$m" "$m.alt-${chosen//+/-}.$r" "$chosen" "$cap"
    plain_ "$m" "$r"
  done
  PLAIN=0 CASES="${UM_CASES:-driverlike marks}" bash "$here/marks.sh" "$out/$m/um" "$m" "$steps" "$reps" "$cap" \
    > "$out/$m/um.console" 2>&1
  python3 "$here/alts_summary.py" "$out/$m" | tee "$out/$m/summary.txt" | tee -a "$out/run.log"
  tar -C "$out" --exclude=um.tgz -czf "$out/$m.tgz" "$m"
  log "$m done"
  # The log holds every summary: one file per model plus two in all (the
  # device tool brings back at most 8).
  [ -n "${SHIP:-}" ] && mkdir -p "$SHIP" && cp "$out/$m.tgz" "$out/run.log" "$out/gpu.txt" "$SHIP/"
done
