# Sourced by the GPU benchmarks that run `prescientd service` with the
# user-space backend (service.sh, runtime/service.sh, runtime/auto.sh, ddp/run.sh,
# ddp/svc.sh): one place for the config they share.
#
# start_service PRESCIENTD CONFIG SOCKET PORT LOG [TOP] [TABLES]
#   writes CONFIG (backend = "userspace", the control socket SOCKET with
#   mode 0600, /metrics on 127.0.0.1:PORT; TOP: more top-level lines, e.g.
#   "poll_interval_ms = 200"; TABLES: more [sections]), starts the service
#   with its output in LOG, sets SERVICE_PID and waits up to 10 s for the
#   socket. Returns 1, with the log on stderr, if it did not appear.
start_service() {
  local pd=$1 cfg=$2 sock=$3 port=$4 log=$5 top=${6:-} tables=${7:-} i=0
  cat > "$cfg" <<CFG
backend = "userspace"
$top
[control]
socket = "$sock"
socket_mode = 0o600
[metrics]
listen = "127.0.0.1:$port"
$tables
CFG
  "$pd" service --config "$cfg" > "$log" 2>&1 &
  SERVICE_PID=$!
  while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  [ -S "$sock" ] && return 0
  echo "prescientd service did not start:" >&2; cat "$log" >&2
  return 1
}
