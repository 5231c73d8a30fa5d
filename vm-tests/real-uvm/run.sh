#!/bin/bash
# The real-driver scenarios: the REAL nvidia-uvm (Debian's nvidia-open-kernel-source, 550 branch)
# built for the KASAN + kmemleak guest kernel on a GPU-less stub nvidia.ko, prescient.ko bound to
# it, one QEMU boot (init.sh), pass/fail from the serial markers. Then the DKMS build test.
# Env: REAL_UVM_KDIR (a kernel tree instead of VARIANT=kasan kernel.sh's), REAL_UVM_SOURCE (a
#   driver source instead of Debian's .deb: upstream kernel-open/ for 580 while developing),
#   REAL_UVM_DRIVER_DIR (prebuilt nvidia.ko + nvidia-uvm.ko), REAL_UVM_PRESCIENT_KO (a prebuilt prescient.ko instead of this tree's), REAL_UVM_TIMEOUT (s),
#   REAL_UVM_WORK (work dir), REAL_UVM_EXPECT (the markers to require; default all), REAL_UVM_NO_DKMS=1 (skip dkms-build).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); VM=$(dirname "$HERE"); ROOT=$(dirname "$VM")
WORK=${REAL_UVM_WORK:-$VM/work/real-uvm}; mkdir -p "$WORK"
T0=$(date +%s); step() { echo "[real-uvm +$(( $(date +%s) - T0 ))s] $*"; }
EXPECT=(${REAL_UVM_EXPECT:-real-uvm-cpu-fault real-uvm-migrate real-uvm-discard real-uvm-advice real-uvm-tools real-uvm-exit-attached real-uvm-rmmod-refused real-uvm-rmmod-during-faults kasan-clean})

step "kernel (VARIANT=kasan, cached by key)"
KDIR=${REAL_UVM_KDIR:-$(VARIANT=kasan "$VM/kernel.sh" | tail -1)}
step "real nvidia-uvm + stub nvidia.ko for $KDIR (cached by driver version x kernel key)"
DRV=${REAL_UVM_DRIVER_DIR:-$("$HERE/build.sh" "$KDIR" ${REAL_UVM_SOURCE:+"$REAL_UVM_SOURCE"} | tail -1)}
cat "$DRV/info" 2>/dev/null || true

KO=${REAL_UVM_PRESCIENT_KO:-}
if [ -z "$KO" ]; then
  step "prescient.ko against $KDIR (a copy of the module's sources: the worktree's own build is for the default kernel)"
  K=$WORK/kmod; mkdir -p "$K"
  # sources only (-u: kbuild sees only what changed); the paths the module's Kbuild and #[path]s name
  mkdir -p "$K/core" "$K/uapi"
  cp -pu "$ROOT/Kbuild" "$K/"
  cp -rpu "$ROOT/kmod" "$K/"; cp -rpu "$ROOT/core/src" "$K/core/"; cp -rpu "$ROOT/uapi/src" "$K/uapi/"
  [ "$(cat "$K/.kdir" 2>/dev/null)" = "$KDIR" ] || { make -s -C "$KDIR" M="$K" LLVM=-19 clean >/dev/null 2>&1 || true; echo "$KDIR" > "$K/.kdir"; }
  nice -n 10 make -s -C "$KDIR" M="$K" LLVM=-19 modules >"$WORK/kmod.log" 2>&1 || { cat "$WORK/kmod.log"; exit 1; }
  KO=$K/prescient.ko
fi

step "guest binary realuvm (static)"
(cd "$VM/guest" && RUSTFLAGS="-C target-feature=+crt-static" nice cargo build -q --release \
   --target x86_64-unknown-linux-gnu --target-dir "$VM/work/guest-target" --bin realuvm)
step "initramfs"
INIT="$HERE/init.sh" "$VM/mkinitramfs.sh" "$KDIR" "$WORK/initramfs.cpio.gz" \
  /lib/nvidia.ko="$DRV/nvidia.ko" /lib/nvidia-uvm.ko="$DRV/nvidia-uvm.ko" /lib/prescient.ko="$KO" \
  /bin/realuvm="$VM/work/guest-target/x86_64-unknown-linux-gnu/release/realuvm"
step "boot (QEMU TCG -cpu max: SMAP/SMEP; one QEMU at a time: /tmp/qemu.lock)"
LOG=$WORK/serial.log
rm -f "$LOG".hung-*
. "$VM/boot.sh"
trap qemu_stop EXIT
set +e
# BOOT_WAIT counts from the lock's wait too: another QEMU may hold it for minutes.
BOOT_WAIT=${BOOT_WAIT:-900} qemu_boot "$LOG" "VMTEST-BOOT:" flock /tmp/qemu.lock timeout "${REAL_UVM_TIMEOUT:-420}" qemu-system-x86_64 -cpu max -m 1G -smp 2 \
  -nographic -no-reboot -kernel "$KDIR/arch/x86/boot/bzImage" -initrd "$WORK/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 oops=panic loglevel=4"
wait "$QEMU_PID"
trap - EXIT
set -e
step "boot done"
grep -aE '^(VMTEST|real-uvm:|realuvm:)|BUG:|RIP:|KASAN' "$LOG" | tr -d '\r' || true

if [ "${REAL_UVM_NO_DKMS:-0}" != 1 ]; then
  step "dkms-build"
  "$ROOT/packaging/dkms/test.sh" "$KDIR" | tee -a "$LOG"
  EXPECT+=(dkms-build)
fi
pass=0; fail=0
for s in "${EXPECT[@]}"; do
  if grep -aq "^VMTEST: $s PASS" "$LOG"; then pass=$((pass+1)); else fail=$((fail+1)); echo "real-uvm: $s FAILED or missing"; fi
done
extra=$(grep -ac '^VMTEST: .* FAIL' "$LOG" || true)
grep -aq '^VMTEST-END' "$LOG" || { echo "real-uvm: the guest did not reach the end (oops, panic or timeout); tail:"; tail -40 "$LOG"; }
echo "real-uvm: $pass passed, $fail failed ($extra FAIL markers, $(( $(date +%s) - T0 ))s total${BOOT_NOTE:+; boot: $BOOT_NOTE})"
[ $fail = 0 ] && [ "$extra" = 0 ]
