#!/bin/bash
# Build (or restore from cache) the Rust-enabled 6.12 guest kernel.
# Prints the build tree path (KDIR) as the last line of stdout.
# Cache: ${PRESCIENT_CACHE:-$HOME/.cache/prescient}/kernel-<key>.tar.zst, key = kernel version
# + config fragment + `rustc -vV` + bindgen + clang versions. The source is unpacked once per
# version under the cache dir, so the build tree's absolute paths stay valid across runs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# The linux-source-6.12 that deps.sh installed (PRESCIENT_KVER to insist on one).
KVER=${PRESCIENT_KVER:-$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || true)}
CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}
JOBS=${JOBS:-$(nproc)}
# PRESCIENT_KCONFIG: another fragment (kernel-nolockdep.config: the lockdep cost measurement).
FRAG=${PRESCIENT_KCONFIG:-$HERE/kernel.config}
# VARIANT=kasan: the same fragment plus kernel-kasan.config (KASAN, kmemleak, MMU_NOTIFIER), for
# the real-driver scenarios (vm-tests/real-uvm/); its own cache key, since the key hashes both.
FRAGS=("$FRAG")
case "${VARIANT:-}" in
  '') ;;
  kasan) FRAGS+=("$HERE/kernel-kasan.config") ;;
  *) echo "kernel: unknown VARIANT '$VARIANT' (known: kasan)" >&2; exit 1 ;;
esac
mkdir -p "$CACHE"
have=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || true)
[ -n "$have" ] || { echo "kernel: no linux-source-6.12 installed (run vm-tests/deps.sh)" >&2; exit 1; }
[ "$have" = "$KVER" ] || { echo "kernel: need linux-source-6.12=$KVER, have '${have:-none}' (run vm-tests/deps.sh)" >&2; exit 1; }
KEY=$( { echo "$KVER"; cat "${FRAGS[@]}"; rustc -vV; bindgen --version; clang-19 --version | head -1; } | sha256sum | cut -c1-16)
SRC=$CACHE/src-$KVER/linux-source-6.12
KB=$CACHE/kernel-$KEY
TAR=$CACHE/kernel-$KEY.tar.zst
log() { echo "kernel: $*" >&2; }
if [ "${1:-}" = --print-kdir ]; then [ -f "$KB/.prescient-ok" ] && echo "$KB"; exit 0; fi
# One kernel build at a time per cache dir (2-core machines): wait for another run.
exec 9>"$CACHE/.lock"
flock 9
if [ ! -f "$SRC/Makefile" ]; then
  log "unpacking source $KVER"
  rm -rf "$CACHE/src-$KVER"; mkdir -p "$CACHE/src-$KVER"
  tar -C "$CACHE/src-$KVER" -xf /usr/src/linux-source-6.12.tar.xz
fi
if [ -f "$KB/.prescient-ok" ]; then
  log "cached build tree $KB (key $KEY)"
elif [ -f "$TAR" ]; then
  log "restoring $TAR"
  rm -rf "$KB"; mkdir -p "$KB"; zstd -dc "$TAR" | tar -C "$KB" -xf -
  touch "$KB/.prescient-ok"
else
  log "building key $KEY with LLVM=-19 -j$JOBS (log: $KB.log)"
  rm -rf "$KB"; mkdir -p "$KB"
  M="make -s -C $SRC O=$KB LLVM=-19"
  $M rustavailable >&2
  $M tinyconfig >/dev/null
  "$SRC/scripts/kconfig/merge_config.sh" -m -O "$KB" "$KB/.config" "${FRAGS[@]}" >/dev/null
  $M olddefconfig >/dev/null
  # every line of the fragment must have stuck
  bad=0
  while read -r l; do
    case "$l" in CONFIG_*=*) grep -qxF "$l" "$KB/.config" || { log "did not stick: $l"; bad=1; };; esac
  done < <(cat "${FRAGS[@]}")
  [ $bad = 0 ] || exit 1
  # One kernel build on the machine at a time (/tmp/kbuild.lock), whatever the cache dir.
  if ! flock /tmp/kbuild.lock nice -n 10 make -C "$SRC" O="$KB" LLVM=-19 -j"$JOBS" all > "$KB.log" 2>&1; then
    tail -40 "$KB.log" >&2; exit 1
  fi
  log "saving $TAR"
  tar -C "$KB" -cf - . | zstd -T0 -3 -q -o "$TAR.tmp" && mv "$TAR.tmp" "$TAR"
  touch "$KB/.prescient-ok"
fi
echo "$KB"
