#!/bin/bash
# In the booted guest of tests/systemd/run.sh, as a oneshot unit, with
# systemd as PID 1: drives the installed prescientd.service with systemctl
# and writes one "systemd: <check> PASS|FAIL (...)" line per check into
# DIR/log, then DIR/done. run.sh's header lists the checks.
set -u
D=${1:?usage: check.sh DIR}
mkdir -p "$D"
exec >"$D/log" 2>&1
U=prescientd.service
mark() { if [ "$2" = 1 ]; then echo "systemd: $1 PASS ($3)"; else echo "systemd: $1 FAIL ($3)"; fi; }
prop() { systemctl show -P "$1" "$U"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

t0=$(now)
systemctl start "$U"; rc=$?
t1=$(now)
state="$(prop ActiveState) ($(prop SubState))"
mark systemd-start "$([ $rc = 0 ] && [ "$state" = "active (running)" ] && [ "$(prop Type)" = notify ] && echo 1)" \
  "systemctl start rc $rc in $(secs "$t0" "$t1") s; $state; Type=$(prop Type), NotifyAccess=$(prop NotifyAccess)"

status=$(systemctl status "$U" --no-pager -l -n 3); rs=$?
pid=$(prop MainPID)
comm=$(cat "/proc/$pid/comm" 2>/dev/null)
mark systemd-status "$([ $rs = 0 ] && grep -q 'Active: active (running)' <<<"$status" && [ "$comm" = prescientd ] && echo 1)" \
  "rc $rs; $(grep -m1 'Active:' <<<"$status" | sed 's/^ *//'); main pid $pid ($comm)"
echo "$status" | sed 's/^/  | /'

g=$(getent group prescient)
gid=$(cut -d: -f3 <<<"$g")
mark systemd-sysusers "$([ -n "$g" ] && [ "$gid" -lt 1000 ] && echo 1)" "getent: ${g:-none} (a system group)"

sock=$(stat -c '%U:%G %a %F' /run/prescient/control.sock 2>&1)
mark systemd-socket "$([ "$sock" = "root:prescient 660 socket" ] && echo 1)" "/run/prescient/control.sock: $sock"

st=$(prescientctl status 2>&1); rcs=$?
exec 3<>/dev/tcp/127.0.0.1/9836 && printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && m=$(cat <&3) || m=
exec 3<&- 2>/dev/null
up=$(grep -m1 '^prescient_backend_up' <<<"$m")
mark systemd-serves "$([ $rcs = 0 ] && grep -q '^prescientd ' <<<"$st" && [ -n "$up" ] && echo 1)" \
  "prescientctl status rc $rcs: $(sed -n 1,2p <<<"$st" | paste -sd' '); /metrics: ${up:-nothing}"

systemctl restart "$U"; rc=$?
pid2=$(prop MainPID)
mark systemd-restart "$([ $rc = 0 ] && [ "$(prop ActiveState)" = active ] && [ "$pid2" != "$pid" ] && [ "$pid2" != 0 ] && echo 1)" \
  "rc $rc; main pid $pid -> $pid2; $(prop ActiveState); NRestarts=$(prop NRestarts)"

systemctl stop "$U"; rc=$?
mark systemd-stop "$([ $rc = 0 ] && [ "$(prop ActiveState)" = inactive ] && [ "$(prop ExecMainStatus)" = 0 ] && [ "$(prop Result)" = success ] && [ ! -e /run/prescient/control.sock ] && echo 1)" \
  "rc $rc; $(prop ActiveState), Result=$(prop Result), exit status $(prop ExecMainStatus); socket $([ -e /run/prescient/control.sock ] && echo left || echo removed)"
echo "--- journal"
journalctl -b -u "$U" --no-pager -o cat | tail -12 | sed 's/^/  | /'
touch "$D/done"
