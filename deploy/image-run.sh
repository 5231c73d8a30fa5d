#!/usr/bin/env bash
# `deploy: image-runs-as-chart` (deploy/check.sh, when `make image` has built
# the image): the image's entrypoint with the DaemonSet's args, env and
# config (the chart's rendered ConfigMap), as the chart runs it: root with
# only the capabilities the chart adds (setpriv), a read-only root file
# system with the chart's writable /run/prescient, its own PID namespace
# being the node's (hostPID) left as is. Without nvidia_uvm (CI) the daemon
# must still start, answer prescientctl (naming the user-space backend) and
# serve /metrics, as the chart's probes expect.
# usage: image-run.sh IMAGE_TAR RENDERED_DIR   (RENDERED_DIR: chart_check.py's
#   OUT, with prescientd.toml and container.json); prints one check line.
set -uo pipefail
IMG=$1 IN=$2
VERSION=$(basename "$IMG" .oci.tar); VERSION=${VERSION#prescient-image_}
W=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  for m in run/prescient etc/prescient proc ""; do umount "$W/ro/$m" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
say() { echo "deploy: image-runs-as-chart $1${2:+ ($2)}"; [ "$1" = PASS ]; }
mkdir -p "$W/layout" && tar -C "$W/layout" -xf "$IMG"
umoci unpack --image "$W/layout:$VERSION" "$W/bundle" >/dev/null || { say FAIL "umoci unpack"; exit 1; }
R=$W/bundle/rootfs
c=$IN/container.json
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(*(v if isinstance(v, list) else [v]), sep="\n")' "$c" "$1"; }
mapfile -t ARGS < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))["process"]["args"][:1]]' "$W/bundle/config.json")
mapfile -t -O 1 ARGS < <(field args)
mapfile -t ENVS < <(field env)
caps=$(field capabilities | tr 'A-Z' 'a-z' | sed 's/^/+/' | paste -sd,)
# The ConfigMap at /etc/prescient (its listen port moved to a free one),
# /run/prescient writable, everything else read-only.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$W/etc" "$W/run" "$W/ro"
sed "s/^listen = .*/listen = \"127.0.0.1:$port\"/" "$IN/prescientd.toml" >"$W/etc/prescientd.toml"
mkdir -p "$R/run/prescient" "$R/etc/prescient"  # mount points, as the runtime makes them
mount --bind "$R" "$W/ro" && mount -o remount,bind,ro "$W/ro" &&
  mount --bind "$W/etc" "$W/ro/etc/prescient" && mount --bind "$W/run" "$W/ro/run/prescient" &&
  mount -t proc proc "$W/ro/proc" || { say FAIL "mounts"; exit 1; }
[ "$(field readOnlyRootFilesystem)" = True ] && ! touch "$W/ro/usr/x" 2>/dev/null || { say FAIL "the root file system is not read-only"; exit 1; }
chroot "$W/ro" /usr/bin/env -i "${ENVS[@]}" setpriv --bounding-set "-all,$caps" --inh-caps -all \
  "${ARGS[@]}" >"$W/log" 2>&1 &
PID=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$port/metrics" >"$W/metrics" 2>/dev/null && break; sleep 0.1; done
up=$(grep -m1 '^prescient_backend_up' "$W/metrics")
st=$(chroot "$W/ro" prescientctl status 2>&1); rc=$?
sock=$(stat -c '%U:%G %a' "$W/run/control.sock" 2>&1)
if [ -n "$up" ] && [ $rc = 0 ] && grep -q '^backend: user-space' <<<"$st" && kill -0 "$PID" 2>/dev/null; then
  say PASS "${ARGS[*]} with capabilities $caps, read-only root: /metrics $up; prescientctl: $(sed -n 2p <<<"$st" | cut -c1-70); socket $sock"
else
  say FAIL "metrics '${up}', prescientctl rc $rc: $(head -2 <<<"$st" | paste -sd' '); daemon: $(tail -2 "$W/log" | paste -sd' ')"
fi
