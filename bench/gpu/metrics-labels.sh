#!/bin/bash
# /metrics of a user-space-backend service carries the GPU labels nvidia-smi
# reports (issue 18). Usage on a GPU machine, as root: BIN=target/release bash bench/gpu/metrics-labels.sh
# (OUT: where the results go, default /tmp/metrics-labels).
OUT=${OUT:-/tmp/metrics-labels}; mkdir -p "$OUT"
set -x
S=${BIN:-$(cd "$(dirname "$0")" && pwd)}  # where prescientd and prescientctl are (BIN=target/release)
printf 'backend = "userspace"\n[control]\nsocket = "/tmp/p/control.sock"\n[metrics]\nlisten = "127.0.0.1:9836"\n' > /tmp/p.toml
mkdir -p /tmp/p && chmod 755 /tmp/p
id; nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader
$S/prescientd service --check-config --config /tmp/p.toml
$S/prescientd service --config /tmp/p.toml 2>/tmp/p.log & D=$!
sleep 4
curl -s 127.0.0.1:9836/metrics > $OUT/metrics.txt; grep -E '^prescient_(backend_up|residency_budget_bytes|gpu)' $OUT/metrics.txt | head -5
PRESCIENT_SOCKET=/tmp/p/control.sock $S/prescientctl status | tee $OUT/status.txt
PRESCIENT_SOCKET=/tmp/p/control.sock $S/prescientctl status --json > $OUT/status.json
kill $D; wait $D; cp /tmp/p.log $OUT/daemon.log; tail -5 /tmp/p.log
