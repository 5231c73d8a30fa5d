#!/bin/bash
# `VMTEST: dkms-build`: the dkms tool (Debian's package) builds prescient.ko from the
# prescient-dkms package's source (DKMS_DEB=out/prescient-dkms_<version>_all.deb) or a staged source
# tree (make dkms-stage) against a kernel tree (KDIR: vm-tests' cached one) and Debian's driver
# source package (vm-tests/real-uvm/fetch-deb.sh), in private dkms/source trees (the system's
# /var/lib/dkms and /usr/src stay untouched); and each refusal is one line: a kernel without
# CONFIG_RUST, a driver branch without a layout table, no driver source.
# usage: test.sh KDIR    (prints the marker; exit 0 iff PASS)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/tools/uvm-layouts/lib.sh"
KDIR=$(readlink -f "$1")
CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}
W=$ROOT/vm-tests/work/dkms; rm -rf "$W/src" "$W/tree" "$W/norust" "$W/deb"; mkdir -p "$W/tree"
fail() { echo "VMTEST: dkms-build FAIL ($*)"; exit 1; }
command -v dkms >/dev/null || fail "no dkms tool (vm-tests/deps.sh installs Debian's dkms)"
VER=$(make -s -C "$ROOT" dkms-version)
# The source: the prescient-dkms package's (DKMS_DEB, which `make test` sets
# after `make package`), or staged from this tree as the package stages it.
if [ -n "${DKMS_DEB:-}" ]; then
  [ -f "$DKMS_DEB" ] || fail "DKMS_DEB=$DKMS_DEB: no such package"
  mkdir -p "$W/deb" && dpkg-deb -x "$DKMS_DEB" "$W/deb" && mv "$W/deb/usr/src" "$W/src" && rm -rf "$W/deb" ||
    fail "unpack $DKMS_DEB"
  [ -d "$W/src/prescient-$VER" ] || fail "$DKMS_DEB holds no /usr/src/prescient-$VER"
  FROM="$(basename "$DKMS_DEB")'s source"
else
  make -s -C "$ROOT" dkms-stage DKMS_SRC="$W/src/prescient-$VER" >/dev/null || fail "make dkms-stage"
  FROM="make dkms-stage's source"
fi
# Debian's driver source, unpacked once per .deb (the generator's conftest is kept beside it)
DEB=$("$ROOT/vm-tests/real-uvm/fetch-deb.sh" | tail -1) || fail "no nvidia-open-kernel-source .deb"
NV=$CACHE/dkms-nvidia-src/$(basename "$DEB" .deb)
[ -f "$NV/.ok" ] || { driver_tree "$DEB" "$NV" >/dev/null && touch "$NV/.ok"; } || fail "unpack $DEB"
export UVM_LAYOUTS_WORK=$CACHE/dkms-layouts-work
D=(dkms --sourcetree "$W/src" --dkmstree "$W/tree" -m prescient -v "$VER" -k "$(cat "$KDIR/include/config/kernel.release")" --kernelsourcedir "$KDIR")
one_line() {  # $1: what, $2: expected text; the rest: the command. Exactly one "prescient:" refusal line.
  local what=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1 >/dev/null); local n; n=$(grep -c '^prescient: .*user-space backend' <<<"$out")
  [ "$n" = 1 ] && grep -q "$want" <<<"$out" || fail "$what: want one line with '$want', got: $(tail -3 <<<"$out")"
  echo "dkms-build: $what refused: $(grep '^prescient: ' <<<"$out")"
}
# refusals, straight from the build script dkms runs
mkdir -p "$W/norust"; grep -v '^CONFIG_RUST=' "$KDIR/.config" > "$W/norust/.config"
one_line "kernel without CONFIG_RUST" "without CONFIG_RUST" "$W/src/prescient-$VER/packaging/dkms/build.sh" "$W/norust"
one_line "no driver source" "no NVIDIA driver kernel source" env NVIDIA_SRC="$W/none" "$W/src/prescient-$VER/packaging/dkms/build.sh" "$KDIR"
FAKE=$W/fake-570; rm -rf "$FAKE"; mkdir -p "$FAKE/nvidia" "$FAKE/nvidia-uvm"; touch "$FAKE/conftest.sh" "$FAKE/nvidia/nvidia.Kbuild"
echo 'ccflags-y += -DNV_VERSION_STRING=\"570.86.16\"' > "$FAKE/Kbuild"
one_line "driver branch without a layout table" "branch 570" env NVIDIA_SRC="$FAKE" "$W/src/prescient-$VER/packaging/dkms/build.sh" "$KDIR"
# the build, by dkms
T0=$(date +%s)
"${D[@]}" add >"$W/dkms.log" 2>&1 || fail "dkms add: $(tail -2 "$W/dkms.log")"
NVIDIA_SRC="$NV" "${D[@]}" build >>"$W/dkms.log" 2>&1 || { tail -20 "$W/dkms.log"; find "$W/tree" -name make.log -exec tail -20 {} \; ; fail "dkms build"; }
ko=$(find "$W/tree/prescient/$VER" -name prescient.ko | head -1)
[ -n "$ko" ] || fail "dkms build made no prescient.ko"
agree=$(find "$W/tree/prescient/$VER" -name make.log -exec grep -h 'agrees with driver' {} + | sed 's/.*agrees/kmod\/layout: agrees/')
[ -n "$agree" ] || fail "dkms built without the layout check"
echo "dkms-build: $agree"
echo "VMTEST: dkms-build PASS (dkms $(dkms --version | sed 's/^dkms-//') built, from $FROM, $(modinfo -F vermagic "$ko" | cut -d' ' -f1) prescient.ko against Debian's $(basename "$DEB" .deb) in $(( $(date +%s) - T0 ))s, layouts checked; 3 refusals one line each)"
