# shellcheck shell=bash
# Sourced by the GPU benchmarks that start a job under `prescientctl run` and
# attach `prescientd attach` to it (runtime/ahead.sh, runtime/marks.sh): one
# place for the start, the lookup of the job and the attach they shared.
# The sourcing script sets `ctl` and `pd` (the prescientctl and prescientd
# binaries) and defines `log MESSAGE`.
#
# attach_case DIR NAME BUDGET JOB_MODE DAEMON_MODE EXEC_IDS MARKS(0/1) LIMIT_S [DAEMON_FLAGS...] -- JOB...
#   runs JOB under `prescientctl run --budget BUDGET --mode JOB_MODE`
#   (--no-marks unless MARKS is 1), its stdout in DIR/NAME.jsonl and stderr
#   in DIR/NAME.err, and attaches prescientd (--mode DAEMON_MODE --exec-ids
#   EXEC_IDS, the marks socket DIR/NAME.sock if MARKS is 1, then
#   DAEMON_FLAGS) for at most LIMIT_S seconds: DIR/NAME.stats.json,
#   DIR/NAME.daemon.json, DIR/NAME.daemon.log. Appends "NAME rc=STATUS"
#   (the launcher's) to DIR/rc.txt and logs the seconds the case took.
# ctl and pd come from the sourcing script (see above); PD_CASE (environment)
# names another prescientd for this case (an A/B of two builds in one run);
# BLOCK_LOG=1 (environment) logs every block's movements to DIR/NAME.blocks.tsv;
# ATTACH_EXTRA (environment): more prescientd flags for every case, e.g.
# "--stats-interval 50ms" for a time series of the stats file.
# shellcheck disable=SC2154
attach_case() {
  local d=$1 name=$2 budget=$3 jmode=$4 dmode=$5 ids=$6 marks=$7 limit=$8
  shift 8
  local sock="$d/$name.sock" flags=() extra=() nm=() t cp jp='' dp
  t=$(date +%s)
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  rm -f "$sock"
  if [ "$marks" = 1 ]; then
    extra=(--marks-socket "$sock"); export PRESCIENT_MARKS_SOCKET="$sock"
  else
    unset PRESCIENT_MARKS_SOCKET; nm=(--no-marks)
  fi
  [ -n "${BLOCK_LOG:-}" ] && extra+=(--block-log "$d/$name.blocks.tsv")
  local more=(); read -ra more <<< "${ATTACH_EXTRA:-}"
  # No `timeout` around the launcher: the job must be its direct child
  # (pgrep -P below; run 45 attached `timeout`'s child, the launcher).
  PRESCIENT_RUNTIME_LOG=1 "$ctl" run --budget "$budget" --mode "$jmode" "${nm[@]}" -- \
    "$@" > "$d/$name.jsonl" 2> "$d/$name.err" &
  cp=$!
  for _ in $(seq 100); do jp=$(pgrep -P $cp | head -1); [ -n "$jp" ] && break; sleep 0.05; done
  timeout "$limit" "${PD_CASE:-$pd}" attach --pid "$jp" --mode "$dmode" --budget "$budget" --exec-ids "$ids" \
    "${extra[@]}" "${flags[@]}" "${more[@]}" \
    --stats-json "$d/$name.stats.json" > "$d/$name.daemon.json" 2> "$d/$name.daemon.log" &
  dp=$!
  wait $cp; echo "$name rc=$?" >> "$d/rc.txt"
  wait $dp
  unset PRESCIENT_MARKS_SOCKET
  log "$name $(( $(date +%s) - t )) s"
}
