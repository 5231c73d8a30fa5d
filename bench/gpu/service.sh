#!/bin/bash
# prescientd as a service with backend = "userspace" on a GPU host (no
# module): the daemon attaches `umbench dnn` by its command line, prefetches
# for it, and serves /metrics and prescientctl; once with [engine]
# enabled = false (observe only: the faults "without Prescient"), once with
# prefetching on. No residency budget, no memory pressure: the 2 GiB working
# set fits the GPU; the faults come from the CPU rewriting the input each
# iteration. Needs root, nvcc, and static prescientd/prescientctl in $BIN.
# Usage: OUT=/dir BIN=/dir/with/binaries bench/gpu/service.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/prescient-service}; BIN=${BIN:-$HERE/../../target/release}
mkdir -p "$OUT"; B=$OUT/bin; mkdir -p "$B"
log() { echo "[service $(date +%T)] $*" | tee -a "$OUT/run.log"; }
. "$HERE/lib/service.sh"
nvcc -O2 -arch=sm_90 -o "$B/umbench" "$HERE/umbench.cu" 2> "$OUT/nvcc.log" || { log "nvcc failed"; cat "$OUT/nvcc.log"; exit 1; }
PD=$BIN/prescientd; CTL=$BIN/prescientctl
log "driver $(cat /sys/module/nvidia_uvm/version); $($PD --version)"
# The workload alone (no daemon), for reference.
for r in 1 2; do
  PRESCIENT_GO= "$B/umbench" dnn 12 1024 4 256 > "$OUT/base$r.bench.jsonl" 2>&1
  log "base$r (no daemon): $(grep '"summary"' "$OUT/base$r.bench.jsonl" | tail -1)"
done
for en in ${ENABLED:-false true}; do
  tag=enabled-$en; S=$OUT/$tag.sock; PORT=$((19464 + ${#en}))
  start_service "$PD" "$OUT/$tag.toml" "$S" "$PORT" "$OUT/$tag.daemon.log" "poll_interval_ms = 200" \
    "$(printf '[engine]\nenabled = %s\n[userspace]\ngpu_memory = "140G"\n[attach]\ncmdline_patterns = ["umbench dnn"]\nscan_interval_ms = 100' "$en")" \
    || log "$tag: the service did not start"
  DP=$SERVICE_PID
  go=$OUT/go.$tag; rm -f "$go"
  PRESCIENT_GO=$go "$B/umbench" dnn 12 1024 4 256 > "$OUT/$tag.bench.jsonl" 2> "$OUT/$tag.bench.err" &
  BP=$!
  i=0; until "$CTL" --socket "$S" status --json 2>/dev/null | grep -q "\"pid\": *$BP"; do
    sleep 0.1; i=$((i+1)); [ $i -gt 200 ] && { log "$tag: never attached"; break; }; done
  log "$tag: attached after $((i / 10)).$((i % 10)) s"
  touch "$go"
  n=0; while kill -0 $BP 2>/dev/null; do
    sleep 1; n=$((n+1))
    { echo "# t=$n s"; curl -s "127.0.0.1:$PORT/metrics" | grep '^prescient_'; } > "$OUT/$tag.metrics.now.txt"
    cat "$OUT/$tag.metrics.now.txt" >> "$OUT/$tag.metrics.txt"
    "$CTL" --socket "$S" stats --json | tr -d '\n' >> "$OUT/$tag.stats.jsonl"; echo >> "$OUT/$tag.stats.jsonl"
  done
  wait $BP; brc=$?
  sleep 0.5
  "$CTL" --socket "$S" status > "$OUT/$tag.status.txt" 2>&1
  curl -s "127.0.0.1:$PORT/metrics" | grep '^prescient_' > "$OUT/$tag.metrics.final.txt"
  kill -TERM $DP; wait $DP; drc=$?
  log "$tag: umbench rc=$brc, prescientd rc=$drc after SIGTERM"
  log "$tag: $(grep '"summary"' "$OUT/$tag.bench.jsonl" | tail -1)"
  log "$tag: last in-run metrics: $(grep -h -E '^prescient_(faults_total|prefetched_blocks_total|attached_processes|process_resident_bytes)' "$OUT/$tag.metrics.now.txt" | tr '\n' ' ')"
  rm -f "$OUT/$tag.metrics.now.txt" "$go" "$S"
done
