#!/bin/sh
# Guest /init of the real-driver boot (vm-tests/real-uvm/run.sh): the REAL nvidia-uvm on the
# GPU-less stub nvidia.ko, prescient.ko bound to it, the scenarios, then the sanitizer verdict.
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null; mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
echo "VMTEST-BOOT: cpus=$(grep -c ^processor /proc/cpuinfo) kernel $(uname -r) uptime $(cut -d' ' -f1 /proc/uptime)s"
mark() { echo "VMTEST: $1 $2 $3"; }
R=/bin/realuvm
KL=/sys/kernel/debug/kmemleak
# boot-time objects are not ours: forget what kmemleak holds so far
[ -e $KL ] && { echo scan > $KL; echo clear > $KL; }

insmod /lib/nvidia.ko && insmod /lib/nvidia-uvm.ko || mark real-uvm-load FAIL "insmod nvidia/nvidia-uvm"
echo "real-uvm: nvidia-uvm $(cat /sys/module/nvidia_uvm/version), $(grep -c . /proc/modules) modules"
$R nodes
insmod /lib/prescient.ko || mark real-uvm-load FAIL "insmod prescient.ko"
dmesg | grep -E 'prescient: (bound|nvidia-uvm|.*discard)' | sed 's/^[^]]*] /real-uvm: /'

$R cpu-fault
$R migrate
$R discard
$R advice
$R tools
$R exit-attached

# nvidia-uvm may not go while prescient.ko is bound to it (prescient holds a reference)
if rmmod nvidia_uvm 2>/dev/null; then
  mark real-uvm-rmmod-refused FAIL "rmmod nvidia_uvm succeeded under a bound prescient.ko"
  insmod /lib/nvidia-uvm.ko
else
  mark real-uvm-rmmod-refused PASS "(rmmod nvidia_uvm refused while prescient.ko is bound)"
fi

# rmmod of prescient.ko while another process takes CPU faults on managed memory, then again.
# The faulting process opens /dev/prescient for a moment every round (to attach): an rmmod
# that lands in that moment is refused with EAGAIN ("Resource temporarily unavailable": the
# module is in use), which is the right answer; it is tried again, at most 20 times, 0.1 s
# apart, and the refusals are counted. Any other failure is not retried.
RETRIES=0
rmmod_prescient() {
  n=0
  while ! rmmod prescient 2> /tmp/rmmod.err; do
    n=$((n + 1))
    if [ $n -ge 20 ] || ! grep -q "temporarily unavailable" /tmp/rmmod.err; then
      cat /tmp/rmmod.err; return 1
    fi
    RETRIES=$((RETRIES + 1)); sleep 0.1
  done
}
$R fault-loop 8 > /tmp/loop.out 2>&1 &
sleep 3
rmmod_prescient; rc1=$?
sleep 1
insmod /lib/prescient.ko; rc2=$?
sleep 1
rmmod_prescient; rc3=$?
wait $!; rcl=$?
cat /tmp/loop.out
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ $rc3 = 0 ] && [ $rcl = 0 ]; then
  mark real-uvm-rmmod-during-faults PASS "(rmmod, insmod, rmmod of prescient.ko during CPU faults; the faulting process finished; $RETRIES rmmod refused as in use and tried again)"
else
  mark real-uvm-rmmod-during-faults FAIL "(rmmod $rc1, insmod $rc2, rmmod $rc3, fault loop $rcl; $RETRIES refused as in use before)"
fi
rmmod nvidia_uvm && rmmod nvidia && echo "real-uvm: nvidia-uvm and the stub unloaded" || mark real-uvm-unload FAIL ""

# sanitizers: no KASAN/lockdep/BUG report in dmesg, and nothing kmemleak finds unreferenced
if ! dmesg | grep -q 'KernelAddressSanitizer initialized' || [ ! -e $KL ]; then
  mark kasan-clean FAIL "(not a KASAN + kmemleak kernel: build it with VARIANT=kasan vm-tests/kernel.sh)"
else
  sleep 6   # kmemleak reports only objects older than 5 s
  echo scan > $KL; echo scan > $KL
  cat $KL > /tmp/leaks
  dmesg | grep -E 'BUG:|KASAN|WARNING:|Oops|possible circular|possible recursive|inconsistent lock|sleeping function called|general protection|kernel panic|kmemleak: [0-9]+ new' | grep -v 'KernelAddressSanitizer initialized' > /tmp/splat
  if [ -s /tmp/splat ] || [ -s /tmp/leaks ]; then
    cat /tmp/splat; head -60 /tmp/leaks
    mark kasan-clean FAIL "($(wc -l < /tmp/splat) report lines in dmesg, $(grep -c '^unreferenced object' /tmp/leaks) kmemleak objects)"
  else
    mark kasan-clean PASS "(KASAN generic + lockdep: no report in dmesg; kmemleak scan: 0 unreferenced objects)"
  fi
fi
echo "VMTEST-END uptime=$(cut -d' ' -f1 /proc/uptime)s"
poweroff -f
