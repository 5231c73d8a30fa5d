#!/bin/bash
# Fetch Debian's nvidia-open-kernel-source (trixie contrib: NVIDIA's open kernel modules, the
# 550 branch) with a PRIVATE apt state under the cache dir: the system's apt sources and lists
# stay as they are. Prints the .deb's path as the last line. A .deb already in the cache is
# used without asking the archive again (REAL_UVM_REFRESH=1 asks). Env: REAL_UVM_SUITE (trixie),
# REAL_UVM_MIRROR (the Debian archive the system's sources name, else deb.debian.org).
set -euo pipefail
CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}
A=$CACHE/apt; D=$CACHE/debs; mkdir -p "$A/etc" "$A/lists/partial" "$A/cache/archives/partial" "$D"
have=$(ls "$D"/nvidia-open-kernel-source_*.deb 2>/dev/null | sort -V | tail -1 || true)
if [ -n "$have" ] && [ "${REAL_UVM_REFRESH:-0}" != 1 ]; then echo "$have"; exit 0; fi
mirror=${REAL_UVM_MIRROR:-$(grep -rhoE 'https?://[^ ]*debian[^ ]*' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
  grep -v -e security -e backports | head -1 || true)}
mirror=${mirror:-http://deb.debian.org/debian}
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror ${REAL_UVM_SUITE:-trixie} contrib" > "$A/etc/sources.list"
o=(-o Dir::Etc::SourceList="$A/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
   -o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o APT::Sandbox::User=root)
apt-get "${o[@]}" update -qq >&2
(cd "$D" && apt-get "${o[@]}" download -qq nvidia-open-kernel-source >&2)
ls "$D"/nvidia-open-kernel-source_*.deb | sort -V | tail -1
