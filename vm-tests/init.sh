#!/bin/sh
# Guest /init: runs every scenario in one boot, prints VMTEST markers, powers off.
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null; mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
echo "VMTEST-BOOT: cpus=$(grep -c ^processor /proc/cpuinfo) kernel $(uname -r) uptime $(cut -d' ' -f1 /proc/uptime)s"
T=/bin/vmtest; GB=24; KUS=${KUS:-1000}
# VMTEST_TRACK_EVICTIONS=0: the module ignores the driver's eviction events
# (the behaviour before they were followed; for comparison).
# VMTEST_EXEC_POLL_US: the worker's poll of execution-id pages (the module's default is 50 us;
# this guest has no high-resolution timers, so anything but 0, a busy poll, is a 4 ms tick).
P="/lib/prescient.ko gpu_blocks=$GB track_evictions=${VMTEST_TRACK_EVICTIONS:-1} exec_poll_us=${VMTEST_EXEC_POLL_US:-0}"
mark() { echo "VMTEST: $1 $2 $3"; }
t() { cut -d' ' -f1 /proc/uptime; }

# 0. no driver loaded: prescient.ko refuses, clearly
if insmod $P 2>/dev/null; then
  mark no-driver FAIL "insmod succeeded without nvidia-uvm"; rmmod prescient
else
  line=$(dmesg | grep 'prescient: /dev/nvidia-uvm not found' | tail -1)
  [ -n "$line" ] && mark no-driver PASS "${line#*] }" || mark no-driver FAIL "no clear line"
fi

insmod /lib/nvidia_uvm.ko gpu_blocks=$GB kernel_us=$KUS || mark standin-load FAIL "insmod nvidia_uvm"
echo "stand-in version: $(cat /sys/module/nvidia_uvm/version)"

# 1. load and unload 20 times
t0=$(t); ok=PASS
for i in $(seq 20); do
  insmod $P || { ok=FAIL; break; }
  rmmod prescient || { ok=FAIL; break; }
done
mark load-unload-20 $ok "from $t0 s to $(t) s"
# a malformed gpu_uuid parameter: refused with one line, nothing left loaded
if insmod $P gpu_uuid=GPU-not-a-uuid 2>/dev/null; then
  mark bad-gpu-uuid FAIL "insmod succeeded"; rmmod prescient
else
  line=$(dmesg | grep "prescient: gpu_uuid 'GPU-not-a-uuid'" | tail -1)
  if [ -n "$line" ] && ! grep -q '^prescient ' /proc/modules && rmmod nvidia_uvm && insmod /lib/nvidia_uvm.ko gpu_blocks=$GB kernel_us=$KUS; then
    mark bad-gpu-uuid PASS "${line#*] } (nvidia_uvm released)"
  else mark bad-gpu-uuid FAIL "line '$line'"; fi
fi

# 2. replay without prescient.ko
t0=$(t)
$T replay 8 noattach /tmp/base && mark replay-baseline PASS "from $t0 s to $(t) s" || mark replay-baseline FAIL ""
cat /sys/kernel/debug/nvidia_uvm_standin/stats

# VMTEST_ONLY=exec: only the execution-id replay against the baseline (diagnostics)
if [ "${VMTEST_ONLY:-all}" = exec ]; then
  insmod $P || mark prescient-load FAIL ""
  t0=$(t)
  $T replay-exec 8 /tmp/exec
  $T cut /tmp/base /tmp/exec fault-cut-exec
  echo "replay-exec: from $t0 s to $(t) s"
  cat /sys/kernel/debug/nvidia_uvm_standin/stats
  t0=$(t)
  $T replay-exec-page 8 /tmp/execpage
  $T cut /tmp/base /tmp/execpage fault-cut-exec-page
  echo "replay-exec-page: from $t0 s to $(t) s"
  t0=$(t)
  $T replay-exec-page-short 8 /tmp/execpage-short
  $T cut /tmp/base /tmp/execpage-short fault-cut-exec-page-short
  echo "replay-exec-page-short: from $t0 s to $(t) s"
  rmmod prescient
  dmesg | grep -E 'prescient|nvidia_uvm' | tail -5
  if dmesg | grep -E 'BUG:|WARNING:|Oops|possible circular|inconsistent lock|sleeping function called|lockdep: |INFO: |general protection|Call Trace|kernel panic' >/tmp/splat; then
    cat /tmp/splat; mark no-splat FAIL "see above"
  else
    mark no-splat PASS "dmesg clean"
  fi
  echo "VMTEST-END uptime=$(t)s"
  poweroff -f
fi

# VMTEST_ONLY=cpu-fault: only CPU-fault events against the module (VMTEST_KO: an older one)
if [ "${VMTEST_ONLY:-all}" = cpu-fault ]; then
  insmod $P || mark prescient-load FAIL ""
  $T cpu-fault-raw
  rmmod prescient
  echo "VMTEST-END uptime=$(t)s"
  poweroff -f
fi

# VMTEST_ONLY=security: only who-may-call-what, pid namespaces, the driver boundary and the fuzz
if [ "${VMTEST_ONLY:-all}" = security ]; then
  insmod $P || mark prescient-load FAIL ""
  for s in cpu-fault eperm slots-per-uid pidns gpu-uuid ring-share "fuzz 8" params-race; do $T $s; done
  rmmod prescient
  if dmesg | grep -E 'BUG:|WARNING:|Oops|possible circular|inconsistent lock|sleeping function called|lockdep: |INFO: |general protection|Call Trace|kernel panic' >/tmp/splat; then
    cat /tmp/splat; mark no-splat FAIL "see above"
  else
    mark no-splat PASS "dmesg clean"
  fi
  echo "VMTEST-END uptime=$(t)s"
  poweroff -f
fi

# 3. the ioctl surface; who may call what; pid namespaces; the driver boundary
insmod $P || mark prescient-load FAIL ""
$T ioctl
$T eperm
$T slots-per-uid
$T pidns
$T cpu-fault
$T gpu-uuid
$T multi-gpu
$T alive-populate

# 4. replay with prescient.ko attached
t0=$(t)
$T replay 8 attach /tmp/with && mark replay-prescient PASS "from $t0 s to $(t) s" || mark replay-prescient FAIL ""
cat /sys/kernel/debug/nvidia_uvm_standin/stats
$T cut /tmp/base /tmp/with

# 4a. DeepUM's path: execution-id mode, the runtime reports each kernel
t0=$(t)
$T replay-exec 8 /tmp/exec
$T cut /tmp/base /tmp/exec fault-cut-exec
echo "replay-exec: from $t0 s to $(t) s"
cat /sys/kernel/debug/nvidia_uvm_standin/stats

# 4a'. the same, but the ids come only from the runtime's page (SET_EXEC_PAGE); bad input to it
t0=$(t)
$T replay-exec-page 8 /tmp/execpage
$T cut /tmp/base /tmp/execpage fault-cut-exec-page
echo "replay-exec-page: from $t0 s to $(t) s"
t0=$(t)
$T replay-exec-page-short 8 /tmp/execpage-short
$T cut /tmp/base /tmp/execpage-short fault-cut-exec-page-short
echo "replay-exec-page-short: from $t0 s to $(t) s"
$T exec-page-bad

# 4b. two address spaces at once; a fault burst larger than the ring
$T two
$T overflow
$T ring-share

# 4c. several processes fuzzing ioctl sequences while faults run (bounded: 8 s)
$T fuzz 8
# 4d. eight processes asking SET_PARAMS for big tables at once
$T params-race

# 5. rmmod while a replay runs, and while a process has an execution-id page registered
$T replay 6 attach /tmp/rm > /tmp/rm.log 2>&1 &
pid=$!
$T exec-page-hold 4 > /tmp/hold.log 2>&1 &
hpid=$!
sleep 1
if rmmod prescient; then r=ok; else r=failed; fi
wait $hpid; hrc=$?
if [ $hrc = 0 ] && grep -q 'registered true' /tmp/hold.log && [ "$r" = ok ]; then
  mark rmmod-with-exec-page PASS "rmmod while a page was registered and written"
else cat /tmp/hold.log; mark rmmod-with-exec-page FAIL "hold rc=$hrc rmmod $r"; fi
wait $pid; rc=$?
grep -q '^prescient ' /proc/modules && r="$r,still-loaded"
[ "$r" = ok ] && [ $rc = 0 ] && mark rmmod-during-replay PASS "replay rc=$rc" || { cat /tmp/rm.log; mark rmmod-during-replay FAIL "rmmod $r replay rc=$rc"; }

# 6. a driver version the module does not know
rmmod nvidia_uvm || echo "rmmod nvidia_uvm failed"
insmod /lib/nvidia_uvm_unknown.ko gpu_blocks=$GB
echo "stand-in version: $(cat /sys/module/nvidia_uvm/version)"
if insmod $P 2>/tmp/insmod.err; then
  mark unknown-version FAIL "insmod succeeded"; rmmod prescient
else
  line=$(dmesg | grep 'prescient: nvidia-uvm version' | tail -1)
  n=$(dmesg | grep -c 'prescient: nvidia-uvm version')
  case "$line" in *"'999.1.2'"*"refusing to bind"*) mark unknown-version PASS "($n line) ${line#*] }";;
    *) mark unknown-version FAIL "no clear line: $line";; esac
fi
rmmod nvidia_uvm

# 6b. driver branch 550 (stand-in with 550's layouts, no uvm_api_discard, the
# 96-byte thread-context wrapper in use) and prescient.ko told no GPU size
insmod /lib/nvidia_uvm_550.ko gpu_blocks=$GB kernel_us=$KUS uvm_enable_builtin_tests=1 || mark branch-550 FAIL "insmod stand-in 550"
if insmod /lib/prescient.ko track_evictions=${VMTEST_TRACK_EVICTIONS:-1}; then
  line=$(dmesg | grep 'prescient: bound to nvidia-uvm 550' | tail -1)
  case "$line" in *"branch 550, discard off"*"size unknown"*) echo "branch-550: ${line#*] }";;
    *) mark branch-550 FAIL "bind line: $line";; esac
  $T branch-550
  rmmod prescient
else
  mark branch-550 FAIL "insmod prescient.ko against 550 refused"
fi
rmmod nvidia_uvm

# 7. nothing went wrong in the kernel
if dmesg | grep -E 'BUG:|WARNING:|Oops|possible circular|inconsistent lock|sleeping function called|lockdep: |INFO: |general protection|Call Trace|kernel panic' >/tmp/splat; then
  cat /tmp/splat; mark no-splat FAIL "see above"
else
  mark no-splat PASS "lockdep (PROVE_LOCKING) and DEBUG_ATOMIC_SLEEP on, dmesg clean"
fi
dmesg | grep -E 'prescient|nvidia_uvm' | tail -20
echo "VMTEST-END uptime=$(t)s"
poweroff -f
