#!/bin/sh
# Guest /init of the end-to-end test: prescient.ko + the nvidia-uvm stand-in
# + prescientd + prescientctl in the guest; Prometheus runs on the host and
# scrapes the daemon through QEMU's port forwarding. Guest-side checks print
# `E2E: <name> PASS|FAIL <detail>`; `E2E-CHECK<n> ...` lines hand values to
# the host, which checks them against Prometheus and then creates ack<n> in
# the directory it serves on $BPORT (the guest waits for it: a barrier).
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null; mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp; mkdir -p /run /etc/prescient
GB=24; KUS=${KUS:-1000}; BPORT=${BPORT:-8000}
mark() { echo "E2E: $1 $2 $3"; }
ack() { # wait for the host's ack file (60 s at most)
  i=0; while [ $i -lt 600 ]; do
    wget -q -O /dev/null "http://10.0.2.2:$BPORT/$1" 2>/dev/null && return 0
    sleep 0.1; i=$((i+1)); done
  echo "E2E-NOTE: no $1 from the host"; return 1
}
standin() { grep "^$1 " /sys/kernel/debug/nvidia_uvm_standin/stats | tr -s ' ' | cut -d' ' -f2; }
oneline() { tr -d '\n' | tr -s ' '; }

ip link set lo up; ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0; ip route add default via 10.0.2.2
echo "E2E-BOOT: $(uname -r) eth0 $(cat /sys/class/net/eth0/operstate)"

insmod /lib/nvidia_uvm.ko gpu_blocks=$GB kernel_us=$KUS || mark setup FAIL "insmod nvidia_uvm"
# The stand-in's one GPU. The first load names none: prescientd gives each
# space the GPU the driver lists for it (PRESCIENT_IOC_SET_GPU); the reload
# in 5. uses the module parameter instead.
GPU=GPU-4750552d-7374-616e-642d-696e00000001
insmod /lib/prescient.ko gpu_blocks=$GB || mark setup FAIL "insmod prescient"

cat > /etc/prescient/prescientd.toml <<CFG
poll_interval_ms = 200
[control]
socket = "/run/prescient/control.sock"
socket_mode = 0o666
idle_timeout_ms = 3000
[metrics]
listen = "0.0.0.0:9464"
[engine]
assoc = 2
succs = 4
[attach]
cmdline_patterns = ["vmtest replay-wait"]
scan_interval_ms = 100
CFG
prescientd service --config /etc/prescient/prescientd.toml > /tmp/d.log 2>&1 &
DPID=$!
i=0; while [ ! -S /run/prescient/control.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done

# 1. status through the daemon
st=$(prescientctl status 2>&1)
echo "$st"
case "$st" in *"bound to nvidia-uvm 580.159.04"*"assoc 2"*) mark ctl-status PASS "module bound, parameters applied";;
  *) mark ctl-status FAIL "$(echo "$st" | oneline)";; esac
# The guest's prescientd is linked statically (crt-static): it must say it
# cannot load NVML rather than dlopen it into a static glibc (SIGFPE seen).
case "$st" in *"statically linked and cannot load libnvidia-ml"*) mark static-nvml PASS "a static build names why it has no NVML";;
  *) mark static-nvml FAIL "$(echo "$st" | grep -i gpu | oneline)";; esac

# 2. a replay the daemon attaches by command-line pattern; counters compared
#    (ctl vs Prometheus vs the stand-in driver's own) on the host
vmtest replay-wait 8 30 && mark pattern-attach PASS "prescientd attached the replay by its command line" \
  || mark pattern-attach FAIL "not attached"
grep -q "prefetch destination set.*$GPU" /tmp/d.log && mark gpu-from-driver PASS "prescientd gave the module the GPU the driver lists ($GPU)" \
  || mark gpu-from-driver FAIL "$(grep -i 'gpu' /tmp/d.log | tail -3 | oneline)"
sleep 0.5
prescientctl stats
echo "E2E-CHECK1 ctl=$(prescientctl stats --json | oneline) standin_faults=$(standin faults) standin_migrated_in=$(standin migrated_in)"
ack ack1
grep -q "process exited" /tmp/d.log && mark exit-while-attached PASS "the daemon saw the replay exit and dropped it" \
  || mark exit-while-attached FAIL "no 'process exited' line"

# 3. prescientctl set while a replay runs
vmtest replay-wait 16 30 > /tmp/r2.log 2>&1 &
RP=$!
i=0; while ! grep -q "attached from outside" /tmp/r2.log && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
sleep 2
prescientctl set --assoc 4 --succs 2; rc=$?
wait $RP
[ $rc = 0 ] && mark ctl-set-during-replay PASS "assoc 2->4, succs 4->2 while replaying" || mark ctl-set-during-replay FAIL "rc=$rc"
sleep 0.5
echo "E2E-CHECK2 ctl=$(prescientctl stats --json | oneline)"
ack ack2

# 4. not root: may read, may not change (SO_PEERCRED); ctl input out of range
out=$(vmtest as-nobody /bin/prescientctl set --assoc 8 2>&1); rc=$?
case "$rc:$out" in 77:*"needs root"*) mark ctl-not-root PASS "rc 77: $out";; *) mark ctl-not-root FAIL "rc=$rc $out";; esac
out=$(vmtest as-nobody /bin/prescientctl stats 2>&1); rc=$?
[ $rc = 0 ] && mark ctl-read-not-root PASS "stats readable" || mark ctl-read-not-root FAIL "rc=$rc $out"
out=$(prescientctl set --rows 3 2>&1); rc=$?
case "$rc:$out" in 1:*"rows"*"power of two"*) mark ctl-bad-value PASS "rc 1: $out";; *) mark ctl-bad-value FAIL "rc=$rc $out";; esac
out=$(prescientctl attach 4000000 2>&1); rc=$?
case "$rc:$out" in 1:*"no such process"*) mark ctl-bad-pid PASS "rc 1: $out";; *) mark ctl-bad-pid FAIL "rc=$rc $out";; esac

# 4b. issue 17: hostile clients. A flood from nobody (200 connections, a
#     1 MB line, 2000 pipelined marks, idle connections) while root asks.
vmtest as-nobody /bin/e2e-peer flood /run/prescient/control.sock 200 > /tmp/flood.log 2>&1 &
FP=$!
# root asks while the connections are held and the mark flood runs
i=0; while ! grep -q "PEER: connections" /tmp/flood.log && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
t0=$(busybox date +%s)
st=$(busybox timeout 10 prescientctl status 2>&1); rc1=$?
mt=$(busybox timeout 10 wget -q -O - http://127.0.0.1:9464/metrics 2>/dev/null | grep -c '^prescient_'); rc2=$?
t1=$(busybox date +%s)
wait $FP
cat /tmp/flood.log
acc=$(sed -n 's/.*accepted=\([0-9]*\).*/\1/p' /tmp/flood.log); busy=$(sed -n 's/.* busy=\([0-9]*\).*/\1/p' /tmp/flood.log)
fr=$(sed -n 's/.*mark-flood replies=\([0-9]*\).*/\1/p' /tmp/flood.log)
if [ $rc1 = 0 ] && [ "$mt" -gt 0 ] && [ "$acc" -le 16 ] && [ "$busy" -ge 150 ] && [ "$fr" = 2000 ] \
   && grep -q 'long-line=.*request longer than 4096' /tmp/flood.log && ! grep -q 'idle-closed-after=no' /tmp/flood.log; then
  mark socket-flood PASS "nobody: $acc held, $busy told busy, 1 MB line refused, 2000 marks answered, idle closed; root's status and /metrics ($mt series) answered in $((t1 - t0)) s"
else
  mark socket-flood FAIL "rc=$rc1/$rc2 metrics=$mt acc=$acc busy=$busy marks=$fr $(echo "$st" | head -1)"
fi

# 4c. a connection kept after its process exited, its pid reused by a live process
out=$(e2e-peer pid-reuse /run/prescient/control.sock 2>&1); echo "$out"
held=$(echo "$out" | sed -n 's/^PEER: held=//p')
case "$held" in *'"permission"'*"has exited"*)
  mark pid-reuse PASS "$(echo "$out" | sed -n 's/^PEER: reused //p'); held connection refused: $(echo "$held" | cut -c1-140)";;
  *) mark pid-reuse FAIL "$(echo "$out" | oneline)";; esac

# 4d. a client dies holding dead marks (the marks server of the daemon library)
out=$(e2e-peer revoke 2>&1); rc=$?; echo "$out"
[ $rc = 0 ] && mark mark-revoke PASS "$(echo "$out" | sed -n 's/^PEER: //p')" || mark mark-revoke FAIL "$(echo "$out" | oneline)"

# 4d'. a process's own dead and alive marks, through prescientd to prescient.ko
#      (MARK_DEAD / MARK_ALIVE on its space), and a connection that closes
#      holding dead marks (marked alive again: no discard afterwards)
out=$(busybox timeout 60 e2e-peer module-marks /run/prescient/control.sock 2>&1); rc=$?; echo "$out"
[ $rc = 0 ] && mark module-marks PASS "$(echo "$out" | sed -n 's/^PEER: //p' | head -1)" || mark module-marks FAIL "$(echo "$out" | oneline)"

# 4e. the user-space backend given a target whose "/dev/nvidia-uvm" fd is a FIFO
mkdir -p /run/pus
cat > /tmp/us.toml <<CFG
backend = "userspace"
[control]
socket = "/run/pus/control.sock"
[metrics]
enabled = false
CFG
prescientd service --config /tmp/us.toml > /tmp/us.log 2>&1 &
UP=$!
i=0; while [ ! -S /run/pus/control.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
busybox mv /dev/nvidia-uvm /dev/nvidia-uvm.real; busybox mkfifo /dev/nvidia-uvm
sh -c 'exec sleep 120 3<>/dev/nvidia-uvm' &
FT=$!; sleep 0.3
t0=$(busybox date +%s)
out=$(PRESCIENT_SOCKET=/run/pus/control.sock busybox timeout 20 prescientctl attach $FT 2>&1); rc=$?
st=$(PRESCIENT_SOCKET=/run/pus/control.sock busybox timeout 10 prescientctl status 2>&1); rc2=$?
t1=$(busybox date +%s)
rm -f /dev/nvidia-uvm; busybox mv /dev/nvidia-uvm.real /dev/nvidia-uvm
kill $FT; kill -TERM $UP; wait $UP
case "$rc:$rc2:$out" in 1:0:*"not nvidia-uvm's character device (a FIFO"*)
  mark fd-not-uvm PASS "refused in $((t1 - t0)) s, daemon still answers: $(echo "$out" | oneline | cut -c1-220)";;
  *) mark fd-not-uvm FAIL "rc=$rc/$rc2 $(echo "$out" | oneline)"; cat /tmp/us.log;; esac

# 5. the module unloaded under the daemon, then loaded again; a process
#    attached meanwhile marks its memory across it (e2e-peer reload-marks)
mkdir -p /tmp/rl
e2e-peer reload-marks /run/prescient/control.sock /tmp/rl > /tmp/rl.log 2>&1 &
RLP=$!
i=0; while ! grep -q "PEER: ready" /tmp/rl.log && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
if rmmod prescient; then
  sleep 1
  grep -q "prescient.ko is not loaded" /tmp/d.log && mark module-unloaded PASS "daemon logged it and keeps running" \
    || mark module-unloaded FAIL "no log line"
  touch /tmp/rl/unloaded
  i=0; while ! grep -q "PEER: unavailable-seen" /tmp/rl.log && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  echo "E2E-CHECK3 down"
  ack ack3
  insmod /lib/prescient.ko gpu_blocks=$GB gpu_uuid=$GPU
  sleep 1
  mp=$(prescientctl status --json | oneline)
  case "$mp" in *'"module_params": { "rows": 512, "assoc": 4, "succs": 2'*) mark module-reloaded PASS "parameters re-applied: assoc 4, succs 2";;
    *) mark module-reloaded FAIL "$mp";; esac
  grep "is back" /tmp/d.log | tail -1
  touch /tmp/rl/reloaded
  busybox timeout 60 sh -c "while kill -0 $RLP 2>/dev/null; do sleep 0.2; done"
  wait $RLP; rc=$?; cat /tmp/rl.log
  [ $rc = 0 ] && mark reload-marks PASS "$(sed -n 's/^PEER: marks taken/marks taken/p' /tmp/rl.log)" \
    || mark reload-marks FAIL "rc=$rc $(oneline < /tmp/rl.log)"
  echo "E2E-CHECK4 up"
  ack ack4
else
  mark module-unloaded FAIL "rmmod failed while the daemon runs"
  touch /tmp/rl/unloaded /tmp/rl/reloaded; wait $RLP
fi

# 6. SIGTERM: clean exit, socket removed, attachments dropped
vmtest replay-wait 40 30 > /tmp/r3.log 2>&1 &
RP=$!
i=0; while ! grep -q "attached from outside" /tmp/r3.log && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
kill -TERM $DPID; wait $DPID; rc=$?
n=$(vmtest stats | sed 's/.*n_spaces: \([0-9]*\).*/\1/')
[ $rc = 0 ] && [ ! -e /run/prescient/control.sock ] && [ "$n" = 0 ] \
  && mark sigterm PASS "exit 0, socket removed, replay detached" || mark sigterm FAIL "rc=$rc spaces=$n"
wait $RP

# 6b. the shipped unit (packaging/prescientd.service) with the shipped config.
#     systemd cannot run in this guest (its kernel has no cgroups, namespaces
#     or seccomp); the unit's own lines run as systemd would run them: its
#     ExecStartPre, then ExecStart under its UMask with NOTIFY_SOCKET
#     (Type=notify), and its DeviceAllow classes checked against the
#     devices' majors in /proc/devices.
U=/lib/prescientd.service
mkdir -p /usr/sbin /etc/prescient /run/prescient
cat /bin/prescientd > /usr/sbin/prescientd; chmod 755 /usr/sbin/prescientd
cat /lib/prescientd.toml > /etc/prescient/prescientd.toml
pre=$(sed -n 's/^ExecStartPre=//p' $U); start=$(sed -n 's/^ExecStart=//p' $U); um=$(sed -n 's/^UMask=//p' $U)
$pre > /tmp/unit-pre.log 2>&1; rcp=$?
e2e-peer notify-listen /run/notify.sock 15 > /tmp/notify.log 2>&1 &
NL=$!; sleep 0.2
(umask $um; export NOTIFY_SOCKET=/run/notify.sock; exec $start) > /tmp/unit.log 2>&1 &
SP=$!
i=0; while ! grep -q "NOTIFY: READY=1" /tmp/notify.log && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
ready=$(grep -c "NOTIFY: READY=1" /tmp/notify.log)
st=$(busybox timeout 10 prescientctl status 2>&1); rcs=$?
perm=$(busybox stat -c %A /run/prescient/control.sock)
misc=$(sed -n 's/^ *\([0-9]*\) misc$/\1/p' /proc/devices); pmaj=$(busybox stat -c %t /dev/prescient); pmaj=$((0x$pmaj))
umaj=$(busybox stat -c %t /dev/nvidia-uvm); umaj=$((0x$umaj))
dev_ok=0; [ "$pmaj" = "$misc" ] && [ "$umaj" = "$misc" ] && grep -q '^DeviceAllow=char-misc rw' $U && grep -q '^DeviceAllow=char-nvidia-uvm rw' $U && dev_ok=1
noret=$(sed -n 's/^RestartPreventExitStatus=//p' $U)
kill -TERM $SP; wait $SP; rct=$?; kill $NL 2>/dev/null
case "$noret" in *77*) dev_ok=0;; esac
if [ $rcp = 0 ] && [ "$ready" -ge 1 ] && [ $rcs = 0 ] && [ "$perm" = "srw-rw----" ] && [ $dev_ok = 1 ] && [ $rct = 0 ]; then
  mark systemd-unit PASS "substitute (no systemd in this kernel): ExecStartPre rc 0; ExecStart under UMask=$um sent READY=1; status answered; socket $perm; /dev/prescient and /dev/nvidia-uvm are char-misc ($misc), allowed; 77 restarts; SIGTERM exit 0"
else
  mark systemd-unit FAIL "pre=$rcp ready=$ready status=$rcs perm=$perm dev=$dev_ok($pmaj/$umaj/$misc) noret=$noret term=$rct"
  cat /tmp/unit-pre.log /tmp/unit.log
fi

# 7. the device node with wrong permissions, daemon not root
chmod 600 /dev/prescient
# (the socket's directory must belong to the daemon's user: issue 17)
mkdir -p /tmp/nobody; busybox chown 65534 /tmp/nobody
cat > /tmp/nobody.toml <<CFG
[control]
socket = "/tmp/nobody/nobody.sock"
[metrics]
enabled = false
CFG
chmod 644 /tmp/nobody.toml
out=$(vmtest as-nobody /bin/prescientd service --config /tmp/nobody.toml 2>&1); rc=$?
case "$rc:$out" in 77:*"permission denied"*) mark device-permissions PASS "rc 77: $(echo "$out" | tail -1 | cut -c1-200)";;
  *) mark device-permissions FAIL "rc=$rc $out";; esac

# 7b. sizes: the config takes "1.5G" like the flags; a size the grammar
# refuses is one line naming the key (exit 78), or the flag (exit 2)
printf '[engine]\nresidency_budget = "1.5G"\n' > /tmp/size-ok.toml
printf '[engine]\nresidency_budget = "4X"\n' > /tmp/size-bad.toml
ok=$(prescientd service --check-config --config /tmp/size-ok.toml 2>&1); rc1=$?
bad=$(prescientd service --check-config --config /tmp/size-bad.toml 2>&1); rc2=$?
flag=$(prescientd attach --pid 1 --budget 4X 2>&1); rc3=$?
flag=$(echo "$flag" | grep -m1 "^error")
case "$rc1:$rc2:$rc3:$bad" in
  0:78:2:*'engine.residency_budget: "4X" is not a size: use bytes'*)
    case "$flag" in *"'--budget <BUDGET>'"*"is not a size: use bytes"*)
      mark size-grammar PASS "1.5G ok; $(echo "$bad" | cut -c1-80); $(echo "$flag" | cut -c1-60)";;
    *) mark size-grammar FAIL "flag: $flag";; esac;;
  *) mark size-grammar FAIL "rc=$rc1/$rc2/$rc3 ok=$ok bad=$bad";;
esac

# 8. nothing went wrong in the kernel
if dmesg | grep -E 'BUG:|WARNING:|Oops|possible circular|inconsistent lock|sleeping function called|general protection|Call Trace|kernel panic' >/tmp/splat; then
  cat /tmp/splat; mark no-splat FAIL "see above"
else
  mark no-splat PASS "dmesg clean (lockdep and DEBUG_ATOMIC_SLEEP on)"
fi
echo "--- prescientd log"; cat /tmp/d.log
echo "E2E-END"
poweroff -f
