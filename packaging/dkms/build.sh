#!/bin/bash
# DKMS's MAKE (dkms.conf): build prescient.ko in this source tree for the kernel at KDIR, after
# regenerating the nvidia-uvm layout table from the installed driver's source and checking it
# against the committed kmod/layout/uvm<branch>.h. Every refusal is ONE line on stderr, naming
# the reason and the user-space backend; exit 1. Nothing is built or loaded then.
# usage: build.sh [--clean] KDIR
# Env: NVIDIA_SRC (the driver's kernel source: a tree or a nvidia-open-kernel-source .deb/.tar.xz;
#   default: the newest /usr/src/nvidia-*), UVM_LAYOUTS_WORK (keep the generator's conftest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); TOP=$(cd "$HERE/../.." && pwd)
. "$TOP/tools/uvm-layouts/lib.sh"
ALT='use the user-space backend instead (prescientd with backend = "userspace"; README.md)'
refuse() { echo "prescient: $*; $ALT" >&2; exit 1; }
clean=0; [ "${1:-}" = --clean ] && { clean=1; shift; }
KDIR=${1:?usage: build.sh [--clean] KDIR}
mapfile -t CCARGS < <(kbuild_cc_args "$KDIR" 2>/dev/null)
if [ $clean = 1 ]; then make -C "$KDIR" M="$TOP" "${CCARGS[@]}" clean; exit 0; fi
krel=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null || basename "$KDIR")
[ -f "$KDIR/.config" ] || refuse "no configured kernel tree at $KDIR (kernel headers for $krel missing)"
grep -q '^CONFIG_RUST=y' "$KDIR/.config" || refuse "kernel $krel is built without CONFIG_RUST, which prescient.ko needs"

src=${NVIDIA_SRC:-}
if [ -z "$src" ]; then
  for c in $(ls -d /usr/src/nvidia-* 2>/dev/null | sort -V -r); do
    if { [ -d "$c" ] && driver_kbuild_dir "$c" >/dev/null; } || [[ "$c" == *.tar.xz ]]; then src=$c; break; fi
  done
fi
[ -n "$src" ] && [ -e "$src" ] || refuse "no NVIDIA driver kernel source in /usr/src/nvidia-* (install the driver's kernel source, e.g. Debian's nvidia-open-kernel-source, or set NVIDIA_SRC) to check the layouts against"
if [ ! -d "$src" ]; then  # a .deb or .tar.xz: unpacked for the generator
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  src=$(driver_tree "$src" "$tmp") || refuse "$src holds no NVIDIA open kernel-module source"
fi
d=$(driver_kbuild_dir "$src") || refuse "$src is not an NVIDIA open kernel-module source (no conftest.sh, nvidia/, nvidia-uvm/)"
ver=$(driver_version "$d")
branch=${ver%%.*}
header=$TOP/kmod/layout/uvm$branch.h
known=$(cd "$TOP/kmod/layout" && ls uvm*.h 2>/dev/null | sed 's/uvm\(.*\)\.h/\1/' | paste -sd' ')
[ -n "$branch" ] && [ -f "$header" ] || refuse "nvidia-uvm ${ver:-of unknown version} (branch ${branch:-?}) has no layout table in this prescient (known branches: $known)"
echo "prescient: checking kmod/layout/uvm$branch.h against $src ($ver) for $krel"
if ! "$TOP/tools/uvm-layouts/uvm-layouts.sh" --source "$src" --kdir "$KDIR" --check "$header"; then
  refuse "nvidia-uvm $ver's layouts differ from kmod/layout/uvm$branch.h (generated from $(sed -n 's/#define UVM_L_TAG "\(.*\)"/\1/p' "$header")): not building a module that would misread the driver"
fi
make -C "$KDIR" M="$TOP" "${CCARGS[@]}" modules || refuse "compiling prescient.ko for $krel failed (see the log above)"
