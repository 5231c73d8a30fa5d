# Sourced by uvm-layouts.sh, vm-tests/real-uvm/build.sh and packaging/dkms: what building against
# an NVIDIA open kernel-module tree needs.

# The make arguments naming the compiler KDIR was built with: NVIDIA's Makefile guesses it from
# CONFIG_CC_VERSION_TEXT, which fails for "Debian clang version ...". Prints one per line.
kbuild_cc_args() {
  local kdir=$1 cv cmaj
  if grep -q '^CONFIG_CC_IS_CLANG=y' "$kdir/.config"; then
    cv=$(sed -n 's/^CONFIG_CLANG_VERSION=\([0-9]*\)/\1/p' "$kdir/.config"); cmaj=$((cv / 10000))
    if command -v "clang-$cmaj" >/dev/null; then printf '%s\n' "LLVM=-$cmaj" "CC=clang-$cmaj" "LD=ld.lld-$cmaj"
    else printf '%s\n' LLVM=1 CC=clang LD=ld.lld; fi
  else
    printf '%s\n' "CC=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\).*/\1/p' "$kdir/.config")"
  fi
}

# Unpack or copy a driver source (a .deb of nvidia-open-kernel-source, its .tar.xz, or a tree)
# into DEST; prints the directory that holds Kbuild, conftest.sh, nvidia/ and nvidia-uvm/.
driver_tree() {
  local src=$1 dest=$2 k
  rm -rf "$dest"; mkdir -p "$dest"
  case "$src" in
    *.deb) dpkg-deb --fsys-tarfile "$src" | tar -C "$dest" -xf - ./usr/src/nvidia-open-kernel.tar.xz
           tar -C "$dest" -xf "$dest/usr/src/nvidia-open-kernel.tar.xz"; rm -rf "$dest/usr" ;;
    *.tar.xz) tar -C "$dest" -xf "$src" ;;
    *) cp -a "$src/." "$dest/" ;;
  esac
  driver_kbuild_dir "$dest"
}

# The directory under $1 that holds the driver's Kbuild (empty and 1 if none).
driver_kbuild_dir() {
  local k; k=$(find "$1" -maxdepth 3 -name conftest.sh -printf '%h\n' | head -1)
  [ -n "$k" ] && [ -d "$k/nvidia-uvm" ] && [ -f "$k/nvidia/nvidia.Kbuild" ] || return 1
  echo "$k"
}

# The driver's version string (NV_VERSION_STRING in its Kbuild), e.g. 550.163.01 or 580.142.
driver_version() {
  sed -n 's/.*-DNV_VERSION_STRING=\\"\([0-9.]*\)\\".*/\1/p' "$1/Kbuild" | head -1
}

# The conftests common/inc needs, which only nvidia.Kbuild registers (nvidia.ko is not built).
driver_common_conftests() {
  grep '^NV_CONFTEST_.*+=' "$1/nvidia/nvidia.Kbuild"
}
