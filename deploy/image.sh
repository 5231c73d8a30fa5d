#!/usr/bin/env bash
# The container image of deploy/Containerfile, built without a container
# daemon or registry (`make image`): an OCI image assembled with umoci.
#   base     Debian 12 minbase + procps by debootstrap (what debian:12-slim
#            is), cached (packaging/deb/root.sh)
#   layer    the Containerfile's RUN: out/prescient_<version>_<arch>.deb
#            installed with dpkg; apt's lists and caches, the .deb and
#            translations removed
#   config   the Containerfile's ENTRYPOINT, CMD, ENV and EXPOSE, read from
#            it (one definition for both builds)
# Writes OUT/prescient-image_<version>.oci.tar (an OCI image layout, tagged
# <version>; `docker load`, `podman load`, `skopeo copy oci-archive:...` and
# containerd's `ctr images import` take it) and prints its path. With a
# daemon and a registry, `docker build -f deploy/Containerfile out/` makes
# the same image from debian:12-slim.
# usage: image.sh [OUT]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=${1:-$ROOT/out}
VERSION=$(make -s -C "$ROOT" dkms-version)
DEB=$(ls "$OUT"/prescient_"$VERSION"_*.deb 2>/dev/null | tail -1)
[ -n "$DEB" ] || { echo "image: no $OUT/prescient_${VERSION}_*.deb (make package first)" >&2; exit 1; }
for t in umoci python3; do
  command -v $t >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $t >&2
done
BASE=$("$ROOT/packaging/deb/root.sh" procps) || exit 1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The Containerfile's final config, as umoci flags.
mapfile -t CONFIG < <(python3 "$HERE/containerfile.py" umoci-flags "$HERE/Containerfile")

L=$WORK/layout
umoci init --layout "$L"
umoci new --image "$L:$VERSION"
umoci unpack --image "$L:$VERSION" "$WORK/bundle" >/dev/null
R=$WORK/bundle/rootfs
tar -C "$R" -xf "$BASE"
cp "$DEB" "$R/tmp/"
# RUN: install the package (its Depends, libc6 and procps, are in the base).
chroot "$R" dpkg -i "/tmp/$(basename "$DEB")" >"$WORK/dpkg.log" 2>&1 ||
  { tail -20 "$WORK/dpkg.log" >&2; exit 1; }
# What debian:12-slim leaves out too: debootstrap's downloaded .debs, apt's
# lists, translations.
rm -rf "$R"/tmp/*.deb "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb \
  "$R"/var/log/dpkg.log "$R"/usr/share/locale/* "$R"/usr/share/info/*
umoci repack --image "$L:$VERSION" "$WORK/bundle"
umoci config --image "$L:$VERSION" "${CONFIG[@]}" \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.title=prescient" \
  --config.label "org.opencontainers.image.source=deploy/Containerfile"
umoci gc --layout "$L"
# The name the chart pulls (values.yaml image.repository:tag), for docker/containerd.
python3 "$HERE/containerfile.py" name-index "$L/index.json" "prescient:$VERSION"
IMG=$OUT/prescient-image_$VERSION.oci.tar
tar -C "$L" -cf "$IMG.tmp" . && mv "$IMG.tmp" "$IMG"
echo "$IMG"
