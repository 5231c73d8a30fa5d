#!/bin/bash
# Install what the VM tests need, only if missing. Idempotent; safe to re-run.
set -euo pipefail
# linux-source-6.12: PRESCIENT_KVER if set (exactly that version); otherwise the one installed;
# otherwise PIN (the version last verified here) if the archive still offers it, else the newest
# 6.12 it offers. Debian's security archive keeps only the last few point releases, so a fixed
# pin alone breaks a fresh machine within weeks. kernel.sh keys its cache on the version.
PIN=6.12.117-1~deb12u1
KVER=${PRESCIENT_KVER:-$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || true)}
BINDGEN_VER=0.73.2
PKGS=(clang-19 llvm-19 lld-19 libclang-19-dev bc flex bison libelf-dev libssl-dev cpio
      qemu-system-x86 zstd busybox-static xz-utils make python3 kmod gcc
      prometheus jq curl  # tests/e2e (a real Prometheus scrapes the guest); promtool: the alert rules
      dkms  # packaging/dkms/test.sh (dkms-build)
      debootstrap python3-venv  # make package-test (a clean root), make deploy-check (chart tools)
      systemd-container umoci)  # make systemd-test (systemd-nspawn), make image (the OCI image)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
# Node and npm (make deploy-check's CRD schemas) may come from elsewhere than
# Debian (a newer nodejs conflicts with Debian's npm): ask only when absent.
command -v npm >/dev/null || missing+=(npm)
if [ -z "$KVER" ] || ! dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null | grep -qxF "$KVER"; then
  missing+=(linux-source-6.12)
fi
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  offered=$(apt-cache madison linux-source-6.12 | awk '{print $3}' | sort -uV)
  if [ -z "$KVER" ]; then
    if grep -qxF "$PIN" <<<"$offered"; then KVER=$PIN
    else
      KVER=$(tail -1 <<<"$offered")
      [ -n "$KVER" ] || { echo "deps: ERROR: the archive offers no linux-source-6.12" >&2; exit 1; }
      echo "deps: note: linux-source-6.12=$PIN is gone from the archive; taking the newest, $KVER" >&2
    fi
  elif ! grep -qxF "$KVER" <<<"$offered"; then
    echo "deps: ERROR: the archive does not offer PRESCIENT_KVER=$KVER; it offers:" $offered >&2
    exit 1
  fi
  for i in "${!missing[@]}"; do
    [ "${missing[$i]}" = linux-source-6.12 ] && missing[$i]="linux-source-6.12=$KVER"
  done
  echo "deps: apt-get install ${missing[*]}"
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
