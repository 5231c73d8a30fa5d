#!/usr/bin/env bash
# Builds OUT/prescient-dkms_<version>_all.deb, the DKMS source package of
# prescient.ko (packaging/deb/build.sh runs it from its EXTRA list):
#   /usr/src/prescient-<version>/   the tree `make dkms-stage` stages (the same
#                                   one `make dkms` and VMTEST dkms-build use),
#                                   with dkms.conf from packaging/dkms/
#   postinst  dkms add; then dkms build + install for the running kernel when
#             its headers are installed. A kernel prescient.ko cannot be built
#             for (no CONFIG_RUST, no NVIDIA driver source, a driver branch
#             without a layout table) does not fail the install: build.sh
#             says why in one line, and the user-space backend needs no module.
#   prerm     dkms remove --all (every kernel it was built for)
# usage: deb.sh OUT
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/out}
VERSION=$(make -s -C "$ROOT" dkms-version)
PKG=prescient-dkms
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
D=$STAGE/$PKG
SRC=/usr/src/prescient-$VERSION

make -s -C "$ROOT" dkms-stage DKMS_SRC="$D$SRC" >/dev/null
doc=$D/usr/share/doc/$PKG
install -D -m 644 "$ROOT/docs/backends.md" "$doc/backends.md"

mkdir -p "$D/DEBIAN"
cat >"$D/DEBIAN/control" <<CTL
Package: $PKG
Version: $VERSION
Architecture: all
Maintainer: Prescient maintainers <prescient@localhost>
Section: kernel
Priority: optional
Depends: dkms (>= 2.8), make, bash
Recommends: prescient (= $VERSION)
Suggests: nvidia-open-kernel-source
Installed-Size: $(du -sk "$D" | cut -f1)
Description: prescient.ko source for DKMS (prefetching for CUDA Unified Memory)
 The kernel backend of Prescient, built by DKMS for each kernel. It needs a
 kernel built with CONFIG_RUST (6.12 or later) and the LLVM and rustc that
 kernel was built with, and the installed NVIDIA open driver's kernel source,
 whose nvidia-uvm layouts are checked against the tables in this source
 before anything is compiled. Any other kernel or driver is refused in one
 line; prescientd's user-space backend needs no module.
CTL
cat >"$D/DEBIAN/postinst" <<SH
#!/bin/sh
# dkms add; build and install for the running kernel if its headers are here.
set -e
NAME=prescient
VERSION=$VERSION
SH
cat >>"$D/DEBIAN/postinst" <<'SH'
[ "$1" = configure ] || exit 0
if [ -n "$(dkms status -m $NAME -v $VERSION)" ]; then
  dkms remove -m $NAME -v $VERSION --all >/dev/null || true
fi
dkms add -m $NAME -v $VERSION
k=$(uname -r)
if [ ! -e "/lib/modules/$k/build/include" ]; then
  echo "prescient-dkms: no headers for the running kernel $k (/lib/modules/$k/build): prescient.ko is built when they are installed (dkms autoinstall)"
elif dkms build -m $NAME -v $VERSION -k "$k" && dkms install -m $NAME -v $VERSION -k "$k"; then
  echo "prescient-dkms: prescient.ko built and installed for $k; load it with 'modprobe prescient'"
else
  echo "prescient-dkms: prescient.ko was not built for $k (the 'prescient:' line above says why; /var/lib/dkms/$NAME/$VERSION/build/make.log has the rest); prescientd's user-space backend (backend = \"userspace\") needs no module" >&2
fi
SH
cat >"$D/DEBIAN/prerm" <<SH
#!/bin/sh
# Every kernel's build of this version goes with the source.
set -e
case "\$1" in
  remove|upgrade|deconfigure)
    if [ -n "\$(dkms status -m prescient -v $VERSION)" ]; then
      dkms remove -m prescient -v $VERSION --all
    fi ;;
esac
SH
chmod 755 "$D/DEBIAN/postinst" "$D/DEBIAN/prerm"
mkdir -p "$OUT"
DEB=$OUT/${PKG}_${VERSION}_all.deb
dpkg-deb --root-owner-group -Zxz --build "$D" "$DEB" >/dev/null
echo "$DEB"
