#!/usr/bin/env bash
# Issue 19 on a machine of 2 or more GPUs: every process's prefetches go to
# the GPU it computes on, never to the first GPU of its processor table.
#
# Two umbench workers run at once, each seeing both GPUs (so both are in
# its VA space's processor table) but computing on a different one:
# worker A has CUDA_VISIBLE_DEVICES=<gpu0>,<gpu1> (computes on gpu0),
# worker B has <gpu1>,<gpu0> (computes on gpu1; its table's first GPU is
# still gpu0, where the old backend sent everything). Each is attached by
# its own `prescientd attach` under a residency budget of half its working
# set. Passes when each worker's prefetched bytes (stats JSON,
# prefetch_bytes_by_gpu) all went to its own GPU's UUID.
# Needs root (pidfd_getfd), nvcc, nvidia-smi. Results under $OUT (./out).
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
B=/tmp/umb-multi; mkdir -p $B
PD=${PRESCIENTD:-$ROOT/target/release/prescientd}
[ -x "$PD" ] || (cd "$ROOT" && cargo build --release -p prescientd) || exit 1
nvcc -O2 -arch=sm_90 -o $B/umbench "$HERE/umbench.cu" || exit 1
mapfile -t U < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
[ "${#U[@]}" -ge 2 ] || { echo "multigpu: needs 2 GPUs, found ${#U[@]}"; exit 2; }
A=(stream 10 32 256)   # 8 GiB working set; budget 4 GiB
run_worker() { # NAME VISIBLE
  local name=$1 go=$B/go.$1; rm -f "$go"
  CUDA_VISIBLE_DEVICES=$2 PRESCIENT_GO=$go $B/umbench "${A[@]}" > "$OUT/$name.bench.jsonl" 2> "$OUT/$name.bench.err" &
  local bp=$!
  "$PD" attach --pid $bp --mode prescient --budget 4G --duration 120 \
    --stats-json "$OUT/$name.stats.json" --ready-file "$go" > "$OUT/$name.daemon.json" 2> "$OUT/$name.daemon.log" &
  local dp=$!
  wait $bp; echo "$name: umbench rc $?"
  kill -INT $dp 2>/dev/null; wait $dp
}
run_worker a "${U[0]},${U[1]}" & wa=$!
run_worker b "${U[1]},${U[0]}" & wb=$!
wait $wa $wb
python3 - "$OUT" "${U[0]}" "${U[1]}" <<'PY'
import json, sys
out, ua, ub = sys.argv[1], sys.argv[2].lower(), sys.argv[3].lower()
ok = True
for name, own in (("a", ua), ("b", ub)):
    s = json.load(open(f"{out}/{name}.stats.json"))
    by = {k.lower(): v for k, v in s.get("prefetch_bytes_by_gpu", {}).items()}
    print(f"worker {name}: own GPU {own}; table {s.get('gpu_uuids')}; "
          f"prefetched by GPU {by}; no GPU {s.get('prefetch_no_gpu')}; "
          f"unknown-GPU faults {s.get('faults_unknown_gpu')}")
    if not by or set(by) != {own}:
        ok = False
    if len(s.get("gpu_uuids") or []) < 2:
        print(f"note: worker {name}'s table has one GPU: this run cannot tell "
              "per-fault routing from 'the first GPU of the table'")
print("multigpu:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
