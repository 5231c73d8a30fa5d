#!/usr/bin/env bash
# Issue 5's bad-input and fault cases against prescientd attach on a real GPU
# machine (root, nvcc, static prescientd in $PD). Each case prints
# "BAD: name PASS|FAIL what was seen"; results of the workloads are checked
# against a run with no daemon. No memory pressure beyond the 4 GiB residency
# budget of the mid-migration case (Prescient's own pre-eviction).
# Usage: OUT=/dir PD=path/to/prescientd bash bench/gpu/badinput.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/prescient-bad}; mkdir -p "$OUT"
PD=${PD:-$HERE/devbin/prescientd}
B=/tmp/umb-bad; mkdir -p $B
log() { echo "$*" | tee -a "$OUT/bad.log"; }
verdict() { # name ok(0/1) text
  if [ "$2" = 0 ]; then log "BAD: $1 PASS $3"; else log "BAD: $1 FAIL $3"; fi
}
nvcc -O2 -arch=sm_90 -o $B/umbench "$HERE/umbench.cu" 2> "$OUT/nvcc.log" || { log "nvcc failed"; exit 1; }
ck() { grep '"summary"' "$1" | sed 's/.*"checksum":"\([0-9a-f]*\)".*/\1/'; }

# Reference result with no daemon.
$B/umbench dnn 12 1024 4 256 > "$OUT/ref.jsonl" 2>&1
REF=$(ck "$OUT/ref.jsonl"); log "reference dnn checksum $REF"

# 1. A pid without CUDA.
sleep 30 & SP=$!
timeout 20 "$PD" attach --pid $SP --attach-wait 1 > /dev/null 2> "$OUT/nocuda.err"; rc=$?
kill $SP 2>/dev/null
grep -q "not a CUDA process" "$OUT/nocuda.err"; verdict not-cuda $(( rc == 0 || $? )) "rc=$rc: $(grep -m1 -A2 "^Error" "$OUT/nocuda.err" | tr "\n" " ")"

# 2. A pid that does not exist.
timeout 20 "$PD" attach --pid 999999 --attach-wait 0 > /dev/null 2> "$OUT/nopid.err"; rc=$?
verdict no-such-pid $(( rc == 0 )) "rc=$rc: $(grep -m1 -A2 "^Error" "$OUT/nopid.err" | tr "\n" " ")"

# 2b. Sizes and durations the grammar refuses: exit 2, one line naming the
# flag and the accepted forms (issue 14); and --budget on the service.
for fv in "--budget 4X" "--gpu-memory 1.5" "--attach-wait 1x" "--stats-interval 500"; do
  set -- $fv
  timeout 20 "$PD" attach --pid 999999 "$1" "$2" > /dev/null 2> "$OUT/units.err"; rc=$?
  grep -q -- "'$1 <.*is not a \(size\|duration\): use" "$OUT/units.err"
  verdict "bad-value$1" $(( rc != 2 || $? )) "rc=$rc: $(grep -m1 "^error" "$OUT/units.err")"
done
timeout 20 "$PD" service --budget 4G > /dev/null 2> "$OUT/units.err"; rc=$?
grep -q "unexpected argument '--budget'" "$OUT/units.err"
verdict service-refuses-budget $(( rc != 2 || $? )) "rc=$rc: $(grep -m1 "^error" "$OUT/units.err")"

# A long-running CUDA target for 3 and 4.
$B/umbench dnn 12 1024 4 256 > "$OUT/two.jsonl" 2>&1 & TP=$!
sleep 1.5

# 3. No permission: not root (and so no ptrace right over a root process).
if command -v setpriv > /dev/null; then
  timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups "$PD" attach --pid $TP --attach-wait 0 \
    > /dev/null 2> "$OUT/noperm.err"; rc=$?
  grep -qi "needs root\|not permitted" "$OUT/noperm.err"
  verdict no-permission $(( rc == 0 || $? )) "rc=$rc: $(grep -m1 -A2 "^Error" "$OUT/noperm.err" | tr "\n" " ")"
else
  log "BAD: no-permission SKIP (no setpriv)"
fi

# 4. Two daemons on one process: the second is refused, naming the first.
"$PD" attach --pid $TP --mode prescient --no-gate > "$OUT/first.json" 2> "$OUT/first.err" & D1=$!
sleep 1.5
timeout 20 "$PD" attach --pid $TP --attach-wait 0 > /dev/null 2> "$OUT/second.err"; rc=$?
grep -q "already served by another prescientd" "$OUT/second.err"
verdict two-daemons $(( rc == 0 || $? )) "rc=$rc: $(grep -m1 -A2 "^Error" "$OUT/second.err" | tr "\n" " ")"
wait $TP; wait $D1; d1=$?
C=$(ck "$OUT/two.jsonl")
verdict two-daemons-result $([ "$C" = "$REF" ] && [ $d1 = 0 ]; echo $?) "first daemon rc=$d1, checksum $C (reference $REF)"

# 5. The target is killed mid-migration (prefetch and pre-eviction under a
# 4 GiB budget in flight): the daemon must notice, end cleanly and leave
# nothing behind (GPU memory back to what it was).
used0=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
$B/umbench stream 30 32 256 > "$OUT/kill.jsonl" 2>&1 & KP=$!
"$PD" attach --pid $KP --mode prescient --budget 4G --attach-wait 30 > "$OUT/kill.json" 2> "$OUT/kill.err" & D2=$!
sleep 12   # allocation and CPU initialisation take a few seconds; then 2+ iterations
kill -9 $KP; t0=$(date +%s%N)
timeout 30 tail --pid=$D2 -f /dev/null; t1=$(date +%s%N)
wait $D2; rc=$?
sleep 1
used1=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
pf=$(grep -o '"prefetch_ops":[0-9]*' "$OUT/kill.json"); ev=$(grep -o '"evict_ops":[0-9]*' "$OUT/kill.json")
grep -q "target exited" "$OUT/kill.err"; seen=$?
verdict killed-mid-migration $(( rc != 0 || seen != 0 )) "daemon rc=$rc $(( (t1 - t0) / 1000000 )) ms after SIGKILL, $pf $ev, GPU memory used $used0 -> $used1 MiB"

# 6. Tools queue overflow: a 1024-entry queue drops events; they are
# counted, prefetching goes on from the events that arrive, results unchanged.
$B/umbench dnn 12 1024 4 256 > "$OUT/ovf.jsonl" 2>&1 & OP=$!
"$PD" attach --pid $OP --mode prescient --no-gate --queue-entries 1024 > "$OUT/ovf.json" 2> "$OUT/ovf.err" & D3=$!
wait $OP; wait $D3; rc=$?
dr=$(grep -o '"dropped_events":[0-9]*' "$OUT/ovf.json" | cut -d: -f2)
fb=$(grep -o '"fault_blocks":[0-9]*' "$OUT/ovf.json" | cut -d: -f2)
pb=$(grep -o '"prefetch_bytes":[0-9]*' "$OUT/ovf.json" | cut -d: -f2)
C=$(ck "$OUT/ovf.jsonl")
verdict queue-overflow $([ "${dr:-0}" -gt 0 ] && [ "$C" = "$REF" ] && [ $rc = 0 ]; echo $?) \
  "dropped_events=$dr fault_blocks=$fb prefetch_bytes=$pb rc=$rc checksum $C; $(grep '"summary"' "$OUT/ovf.jsonl" | cut -c1-160)"
log "done"
