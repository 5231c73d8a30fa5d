# Sourced by the QEMU harnesses (vm-tests/run.sh, real-uvm/run.sh, tests/e2e/run.sh):
# boots a guest in the background and boots it once more if it hangs before its /init runs.
#
# Why: under TCG a 2-vCPU guest can hang in early boot with one vCPU whose timer never fires
# ("rcu_sched kthread timer wakeup didn't happen", "rcu: INFO: rcu_sched detected stalls on
# CPUs/tasks: 1-...!: (0 ticks this GP) idle=..."); the CI run of 2f03526 lost its whole e2e
# boot (600 s, 23 checks) that way, with nothing of ours loaded yet. A guest that printed its
# first /init line has booted, so only the time before that line is watched; a hang or a panic
# after it is the test's business and is never retried.
#
# qemu_boot LOG MARKER CMD...: runs CMD (the QEMU command line, with its own `timeout`) in a
# new session with stdout and stderr to LOG, and waits until LOG has a line with
# MARKER (anywhere in it: the first guest line follows the firmware's terminal reset
# codes), CMD exits, or BOOT_WAIT seconds pass (default 240; the guests print their marker
# 10-60 s after QEMU starts under TCG). On that timeout it kills the session, keeps the log
# as LOG.hung-N and tries again, BOOT_TRIES times in all (default 2). Sets QEMU_PID (the
# session leader; `qemu_stop` stops everything in its session) and BOOT_NOTE (empty, or what
# happened to the tries before). Returns 0 when the marker came or CMD ended by itself (the
# caller reads LOG), 1 when every try hung (the last one is left running until its timeout).
qemu_boot() {
  local log=$1 marker=$2 try=1 t0 note stall; shift 2
  BOOT_NOTE=""
  while :; do
    t0=$(date +%s); : >"$log"
    setsid "$@" </dev/null >"$log" 2>&1 &
    QEMU_PID=$!
    while kill -0 "$QEMU_PID" 2>/dev/null && ! grep -aq -- "$marker" "$log" &&
      [ $(( $(date +%s) - t0 )) -lt "${BOOT_WAIT:-240}" ]; do
      sleep 1
    done
    if grep -aq -- "$marker" "$log" || ! kill -0 "$QEMU_PID" 2>/dev/null; then
      echo "boot: try $try: the guest reached its /init after $(( $(date +%s) - t0 ))s${BOOT_NOTE:+ ($BOOT_NOTE)}"
      return 0
    fi
    stall=$(grep -a -m1 -e 'detected stalls' -e 'timer wakeup didn' "$log" | tr -d '\r' || true)
    note="try $try printed no '$marker' in ${BOOT_WAIT:-240}s (${stall:-no RCU stall line}; log kept as $log.hung-$try)"
    BOOT_NOTE="${BOOT_NOTE:+$BOOT_NOTE; }$note"
    echo "boot: $note"
    [ "$try" -lt "${BOOT_TRIES:-2}" ] || return 1
    qemu_stop; wait "$QEMU_PID" 2>/dev/null || true
    cp "$log" "$log.hung-$try"
    try=$((try + 1))
  done
}

# Stops every process of the session qemu_boot started (QEMU, and a `timeout` or `flock`
# around it, which may sit in process groups of their own).
qemu_stop() {
  local p sid
  [ -n "${QEMU_PID:-}" ] || return 0
  for p in /proc/[0-9]*; do
    sid=$(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f4) || continue
    # `|| true`: a process that exited since its stat was read is no error
    # under a caller's `set -e`.
    [ "$sid" = "$QEMU_PID" ] && { kill "${p##*/}" 2>/dev/null || true; }
  done
  return 0
}
