#!/bin/bash
# Install what the VM tests need, only if missing. Idempotent; safe to re-run.
set -euo pipefail
KVER=${PRESCIENT_KVER:-6.12.117-1~deb12u1}
BINDGEN_VER=0.73.2
PKGS=(clang-19 llvm-19 lld-19 libclang-19-dev bc flex bison libelf-dev libssl-dev cpio
      qemu-system-x86 zstd busybox-static xz-utils make python3 kmod gcc
      prometheus jq curl)  # the last three: tests/e2e (a real Prometheus scrapes the guest)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if ! dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null | grep -qxF "$KVER"; then
  missing+=("linux-source-6.12=$KVER")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if ! apt-cache madison linux-source-6.12 | grep -qF "$KVER"; then
    echo "deps: ERROR: the archive no longer offers linux-source-6.12=$KVER." >&2
    echo "deps: pick one that it does (apt-cache madison linux-source-6.12) and set PRESCIENT_KVER" >&2
    exit 1
  fi
  # qemu-utils from bookworm-backports is on some machines: take qemu-system-x86 from there
  # too, or apt would remove qemu-utils to satisfy 7.2's qemu-system-common.
  BPO=()
  if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo12; then
    if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "deb http://deb.debian.org/debian bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
      apt-get update -qq
    fi
    BPO=(-t bookworm-backports)
  fi
  apt-get install -y -qq --no-install-recommends "${BPO[@]}" "${missing[@]}" >/dev/null
fi
[ -f /usr/src/linux-source-6.12.tar.xz ] || { echo "deps: /usr/src/linux-source-6.12.tar.xz missing" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rust-src' || rustup component add rust-src
if ! bindgen --version 2>/dev/null | grep -qF "$BINDGEN_VER"; then
  CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}
  if [ ! -x "$CACHE/bindgen-$BINDGEN_VER/bin/bindgen" ]; then
    echo "deps: cargo install bindgen-cli@$BINDGEN_VER"
    cargo install -q --locked --root "$CACHE/bindgen-$BINDGEN_VER" "bindgen-cli@$BINDGEN_VER"
  fi
  install -D "$CACHE/bindgen-$BINDGEN_VER/bin/bindgen" "$HOME/.cargo/bin/bindgen"
fi
echo "deps: ok ($(bindgen --version), $(clang-19 --version | head -1), $(rustc --version))"
