#!/bin/bash
# Build (or take from the cache) the REAL nvidia-uvm.ko for a guest kernel tree, on a GPU-less
# stub nvidia.ko. Prints the directory holding nvidia.ko and nvidia-uvm.ko as the last line.
#
# usage: build.sh KDIR [DRIVER_SOURCE]
#   DRIVER_SOURCE: a .deb of nvidia-open-kernel-source, its .tar.xz, or an unpacked tree
#   (upstream kernel-open/); default: Debian's package, fetched by fetch-deb.sh.
# Cache: ${PRESCIENT_CACHE:-~/.cache/prescient}/real-uvm/<driver version>-<kernel key>-<recipe>/,
#   kernel key = KDIR's name (kernel-<key>, kernel.sh's cache key), recipe = hash of this
#   directory's scripts and stub sources and of the source file (a .deb) or tree listing.
# MMU_NOTIFIER: nvidia-uvm 535/550 do not build without CONFIG_MMU_NOTIFIER (they call
#   mmu_notifier_* whenever the conftest finds the ops). The kasan kernel variant has it (as every
#   distribution kernel does), so the driver builds unmodified there. On a kernel without it (the
#   default vm-tests kernel) one line is appended to uvm_linux.h at build time, turning
#   UVM_CAN_USE_MMU_NOTIFIERS() off (va_space_mm off; managed memory and CPU faults unchanged).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/tools/uvm-layouts/lib.sh"
KDIR=$(readlink -f "$1"); SRC=${2:-}
CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}
log() { echo "real-uvm: $*" >&2; }
[ -n "$SRC" ] || SRC=$("$HERE/fetch-deb.sh" | tail -1)
SRC=$(readlink -f "$SRC")
if [ -d "$SRC" ]; then srcsum=$(cd "$SRC" && find . -type f -printf '%p %s %T@\n' | sort | sha256sum | cut -c1-12)
else srcsum=$(sha256sum "$SRC" | cut -c1-12); fi
recipe=$( { cat "$HERE/build.sh" "$HERE/stub/"* "$ROOT/tools/uvm-layouts/lib.sh"; echo "$srcsum"; } | sha256sum | cut -c1-12)
WORK=$CACHE/real-uvm/work
exec 8>"$CACHE/.real-uvm.lock"; flock 8
# The work tree is kept after a failure for the same source and kernel (kbuild then resumes).
stamp="$SRC $KDIR"
if [ "$(cat "$WORK/stamp" 2>/dev/null)" = "$stamp" ] && DRV=$(driver_kbuild_dir "$WORK/drv"); then :
else
  rm -rf "$WORK"; mkdir -p "$WORK"
  DRV=$(driver_tree "$SRC" "$WORK/drv") || { log "'$SRC' holds no NVIDIA open kernel-module tree"; exit 1; }
  echo "$stamp" > "$WORK/stamp"
fi
VERSION=$(driver_version "$DRV")
OUT=$CACHE/real-uvm/$VERSION-$(basename "$KDIR")-$recipe
if [ -f "$OUT/nvidia-uvm.ko" ] && [ -f "$OUT/nvidia.ko" ]; then
  log "cached $OUT"; rm -rf "$WORK"; echo "$OUT"; exit 0
fi
log "building nvidia-uvm $VERSION for $KDIR (log: $WORK/build.log)"
mapfile -t CCARGS < <(kbuild_cc_args "$KDIR")
if ! grep -q '^CONFIG_MMU_NOTIFIER=y' "$KDIR/.config" && ! grep -q 'prescient real-uvm' "$DRV/nvidia-uvm/uvm_linux.h"; then
  log "kernel without CONFIG_MMU_NOTIFIER: UVM_CAN_USE_MMU_NOTIFIERS() off (one line in uvm_linux.h)"
  h=$DRV/nvidia-uvm/uvm_linux.h
  # before the header's closing #endif, so every user of the macro sees the redefinition
  last=$(grep -n '^#endif' "$h" | tail -1 | cut -d: -f1)
  sed -i "${last}i #undef UVM_CAN_USE_MMU_NOTIFIERS\n#define UVM_CAN_USE_MMU_NOTIFIERS() 0 /* prescient real-uvm: no CONFIG_MMU_NOTIFIER */" "$h"
fi
# nvcft: a module-less pseudo-module registering the conftests common/inc needs.
mkdir -p "$DRV/nvcft"; driver_common_conftests "$DRV" > "$DRV/nvcft/nvcft.Kbuild"
M=(make -C "$DRV" -j"${JOBS:-2}" modules SYSSRC="$(readlink -f "$KDIR/source" 2>/dev/null || echo "$KDIR")"
   SYSOUT="$KDIR" NV_KERNEL_MODULES="nvcft nvidia-uvm" ARCH=x86_64 "${CCARGS[@]}")
T0=$(date +%s)
# 1. nvidia-uvm.o (modpost only warns: its nvUvmInterface* imports are not known yet)
nice -n 10 "${M[@]}" KBUILD_MODPOST_WARN=1 >"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log" >&2; log "building nvidia-uvm failed"; exit 1; }
# 2. the stub nvidia.ko from nvidia-uvm.o's undefined symbols
S=$WORK/stub; rm -rf "$S"; mkdir -p "$S"; cp "$HERE/stub/Kbuild" "$HERE/stub/stub_core.c" "$S/"
"$HERE/stub/mkstub.sh" "$DRV/nvidia-uvm.o" "$KDIR" > "$S/stub_gen.c"
nice -n 10 make -C "$KDIR" M="$S" NV_COMMON_INC="$DRV/common/inc" "${CCARGS[@]}" modules >"$WORK/stub.log" 2>&1 ||
  { tail -30 "$WORK/stub.log" >&2; log "building the stub nvidia.ko failed"; exit 1; }
# 3. nvidia-uvm.ko again, its imports resolved against the stub
nice -n 10 "${M[@]}" KBUILD_EXTRA_SYMBOLS="$S/Module.symvers" >>"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log" >&2; log "linking nvidia-uvm against the stub failed"; exit 1; }
mkdir -p "$OUT.tmp"
cp "$DRV/nvidia-uvm.ko" "$S/nvidia.ko" "$S/stub_gen.c" "$OUT.tmp/"
echo "$VERSION $(grep -c '^NS_STUB(' "$S/stub_gen.c") generated stubs, built in $(( $(date +%s) - T0 ))s" > "$OUT.tmp/info"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"; rm -rf "$WORK"
log "$(cat "$OUT/info") -> $OUT"
echo "$OUT"
