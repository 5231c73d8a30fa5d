# Sourced by packaging/deb/test.sh after deb-serves (the daemon $PID runs the
# unit's ExecStart in the root $R, module backend, no /dev/prescient there).
# deb-ctl-backends: what prescientctl says of each backend when it is not
# loaded, from the installed binaries: status names the backend in force and
# no module it does not use; stats is one line, why and what to do, exit 0
# as status (issue 18: stats exited 69, status said "prescient.ko: ABI 2"
# under the user-space backend).
ctl() { chroot "$R" prescientctl "$@" 2>&1; }
one_line() { [ -n "$1" ] && [ "$(wc -l <<<"$1")" = 1 ]; }
st=$(ctl status); rs=$?
sl=$(ctl stats); rt=$?
ok=0
[ $rs = 0 ] && [ $rt = 0 ] && grep -q '^prescient.ko: not loaded' <<<"$st" && one_line "$sl" &&
  [[ $sl == "prescient.ko is not loaded"*'backend = "userspace" in /etc/prescient/prescientd.toml' ]] && ok=1
kill "$PID"; wait "$PID" 2>/dev/null
cfg=$R/etc/prescient/prescientd.toml
sed -i 's/^backend = .*/backend = "userspace"/' "$cfg"
chroot "$R" $start >"$WORK/daemon-us.log" 2>&1 &
PID=$!
for _ in $(seq 100); do ctl status >/dev/null && break; sleep 0.1; done
st2=$(ctl status); rs2=$?
sl2=$(ctl stats); rt2=$?
[ $rs2 = 0 ] && [ $rt2 = 0 ] && grep -q '^backend: user-space .*nvidia_uvm is not loaded' <<<"$st2" &&
  ! grep -q '^prescient.ko' <<<"$st2" && one_line "$sl2" && [[ $sl2 == "nvidia_uvm is not loaded"*"modprobe nvidia-uvm"* ]] || ok=0
kill "$PID"; wait "$PID" 2>/dev/null; PID=
sed -i 's/^backend = .*/backend = "module"/' "$cfg"
check deb-ctl-backends $ok "module: status rc $rs '$(sed -n 2p <<<"$st")', stats rc $rt '$(cut -c1-60 <<<"$sl")...'; userspace: status rc $rs2 '$(sed -n 2p <<<"$st2")', stats rc $rt2 '$(cut -c1-60 <<<"$sl2")...'"
