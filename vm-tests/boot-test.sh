#!/bin/bash
# Tests boot.sh's qemu_boot with stand-in QEMU command lines (no QEMU): a guest that hangs
# before /init (as CI's did: an RCU stall line, then silence) is booted again and the hung
# log kept; one that boots is not; one that exits before /init is not retried; a hang on
# every try returns 1; qemu_stop leaves nothing of a session behind (a `flock` and a
# `timeout` around the command sit in process groups of their own).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); . "$HERE/boot.sh"
D=$(mktemp -d); trap 'qemu_stop; rm -rf "$D"' EXIT
pass=0; fail=0
check() { if [ "$2" = 1 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "boot-test: $1 FAILED: $3"; fi; }
# A guest: hangs (first N calls) with the stall line CI printed, else boots like vm-tests' init.
cat > "$D/guest" <<'G'
#!/bin/bash
n=$(cat "$1/calls" 2>/dev/null || echo 0); echo $((n + 1)) > "$1/calls"
if [ "$n" -lt "$2" ]; then
  echo "rcu: INFO: rcu_sched detected stalls on CPUs/tasks:"; exec sleep 300; fi
[ "$2" = exit ] && { echo "Kernel panic - not syncing"; exit 0; }
printf '\033c\033[?7l\033[2JVMTEST-BOOT: cpus=2 kernel 6.12 uptime 9.1s\n'; echo "VMTEST-END"
G
chmod +x "$D/guest"
alive() { # 1 while a hung guest's `sleep 300` runs (from /proc: no procps needed)
  local c; for c in /proc/[0-9]*/cmdline; do
    [ "$({ tr '\0' ' ' <"$c"; } 2>/dev/null)" = "sleep 300 " ] && { echo 1; return; }; done; echo 0; }

BOOT_WAIT=2 qemu_boot "$D/log" VMTEST-BOOT: flock "$D/lock" timeout 60 "$D/guest" "$D" 1 >"$D/out"; rc=$?; out=$(cat "$D/out")
wait "$QEMU_PID" 2>/dev/null
check hang-then-boot "$([ $rc = 0 ] && grep -q VMTEST-END "$D/log" && grep -q 'detected stalls' "$D/log.hung-1" && [ "$(cat "$D/calls")" = 2 ] && [ "$(alive)" = 0 ] && echo 1)" "rc $rc, calls $(cat "$D/calls"), out: $out"
rm -f "$D"/calls "$D"/log*
BOOT_WAIT=2 qemu_boot "$D/log" VMTEST-BOOT: timeout 60 "$D/guest" "$D" 0 >"$D/out"; rc=$?; out=$(cat "$D/out")
check boots-once "$([ $rc = 0 ] && [ "$(cat "$D/calls")" = 1 ] && [ ! -e "$D/log.hung-1" ] && echo 1)" "rc $rc, out: $out"
rm -f "$D"/calls "$D"/log*
BOOT_WAIT=2 qemu_boot "$D/log" VMTEST-BOOT: timeout 60 "$D/guest" "$D" exit >"$D/out"; rc=$?; out=$(cat "$D/out")
check exit-not-retried "$([ $rc = 0 ] && [ "$(cat "$D/calls")" = 1 ] && grep -q panic "$D/log" && echo 1)" "rc $rc, out: $out"
rm -f "$D"/calls "$D"/log*
BOOT_WAIT=1 BOOT_TRIES=2 qemu_boot "$D/log" VMTEST-BOOT: flock "$D/lock" timeout 60 "$D/guest" "$D" 5 >/dev/null; rc=$?
a=$(alive); qemu_stop; sleep 0.3
check all-hung "$([ $rc = 1 ] && [ "$(cat "$D/calls")" = 2 ] && [ "$a" = 1 ] && [ "$(alive)" = 0 ] && echo 1)" "rc $rc, calls $(cat "$D/calls"), running before/after qemu_stop $a/$(alive)"
echo "boot-test: $pass passed, $fail failed"
[ $fail = 0 ]
