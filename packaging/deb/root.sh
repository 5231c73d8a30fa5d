#!/usr/bin/env bash
# A clean Debian 12 root (debootstrap minbase plus the packages INCLUDE
# names), built once and cached as a tarball under
# ${PRESCIENT_CACHE:-~/.cache/prescient}, keyed by INCLUDE; prints its path.
# Used by packaging/deb/test.sh (systemd,procps,dkms), tests/systemd/run.sh
# (the same root, booted) and deploy/image.sh (procps: the image's base).
# usage: root.sh INCLUDE        e.g. root.sh systemd,procps,dkms
set -euo pipefail
INCLUDE=${1:?usage: root.sh INCLUDE}
CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}
TAR=$CACHE/debroot-bookworm-minbase-$(echo "$INCLUDE" | tr , -)-v1.tar
mkdir -p "$CACHE"
exec 9>"$TAR.lock"
flock 9  # one debootstrap per key, whoever asks first
if [ ! -f "$TAR" ]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
  echo "root.sh: building a clean Debian 12 root with $INCLUDE (debootstrap, once; cached as $TAR)" >&2
  W=$(mktemp -d)
  trap 'rm -rf "$W"' EXIT
  nice debootstrap --variant=minbase --include="$INCLUDE" bookworm "$W/new" \
    http://deb.debian.org/debian >"$W/debootstrap.log" 2>&1 ||
    { tail -20 "$W/debootstrap.log" >&2; exit 1; }
  tar -C "$W/new" -cf "$TAR.tmp" . && mv "$TAR.tmp" "$TAR"
fi
echo "$TAR"
