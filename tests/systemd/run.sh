#!/usr/bin/env bash
# `make systemd-test`: the .deb under a real systemd. systemd-nspawn --boot
# starts Debian 12's systemd as PID 1 in the package-test root (debootstrap
# minbase + systemd, procps, dkms; cached by packaging/deb/root.sh) with
# out/prescient_<version>_<arch>.deb installed by dpkg (its postinst runs
# systemd-sysusers), and a private network. A oneshot unit in the guest
# (check.sh) then drives the installed unit with systemctl and writes its
# findings, and powers the container off; this script reads them:
#   systemd-start     `systemctl start prescientd` returns and the unit is
#                     active (running): Type=notify, so only after READY=1
#   systemd-status    `systemctl status` shows it active, with the daemon as
#                     its main process
#   systemd-sysusers  the group `prescient` exists (created by the postinst)
#   systemd-socket    /run/prescient/control.sock is root:prescient 0660
#                     (RuntimeDirectory, UMask, control.socket_group)
#   systemd-serves    prescientctl status and /metrics answer under the
#                     unit's sandbox (IPAddressAllow=localhost, ...)
#   systemd-restart   `systemctl restart`: a new main process, active again
#   systemd-stop      `systemctl stop`: inactive, the daemon's exit status 0
#                     (SIGTERM is a clean exit), the socket removed
# usage: run.sh [OUT]    needs root and systemd-nspawn (systemd-container).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/out}
VERSION=$(make -s -C "$ROOT" dkms-version)
DEB=$(ls "$OUT"/prescient_"$VERSION"_*.deb 2>/dev/null | tail -1)
[ -n "$DEB" ] || { echo "systemd: no $OUT/prescient_${VERSION}_*.deb (make package)"; exit 1; }
command -v systemd-nspawn >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container >&2
TAR=$("$ROOT/packaging/deb/root.sh" systemd,procps,dkms) || exit 1
W=$(mktemp -d)
R=$W/root
trap 'rm -rf "$W"' EXIT
T0=$(date +%s)
mkdir -p "$R" && tar -C "$R" -xf "$TAR"
cp "$DEB" "$R/tmp/"
chroot "$R" dpkg -i "/tmp/$(basename "$DEB")" >"$W/dpkg.log" 2>&1 || { tail -20 "$W/dpkg.log"; exit 1; }
install -D -m 755 "$HERE/check.sh" "$R/usr/local/sbin/prescient-check"
cat >"$R/etc/systemd/system/prescient-check.service" <<'UNIT'
[Unit]
Description=prescient systemd test (tests/systemd)
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/prescient-check /var/tmp/prescient-check
ExecStartPost=/usr/bin/systemctl poweroff --no-block
UNIT
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -s ../prescient-check.service "$R/etc/systemd/system/multi-user.target.wants/prescient-check.service"
# The guest has no console to wait on, nor a getty to start.
ln -sf /dev/null "$R/etc/systemd/system/console-getty.service"
T1=$(date +%s)
timeout 150 systemd-nspawn --quiet --boot --register=no --keep-unit --private-network --console=pipe \
  --machine="prescient-$$" -D "$R" </dev/null >"$W/boot.log" 2>&1
rc=$?
T2=$(date +%s)
res=$R/var/tmp/prescient-check
if [ ! -f "$res/done" ]; then
  echo "systemd: the guest did not finish (nspawn rc $rc)"; tail -30 "$W/boot.log"
  cat "$res/log" 2>/dev/null | tail -20
  exit 1
fi
cat "$res/log"
grep '^systemd: ' "$res/log" >/dev/null || { echo "systemd: no result lines"; exit 1; }
echo "systemd: booted and checked in $((T2 - T1)) s (root and package $((T1 - T0)) s; nspawn rc $rc)"
! grep -q '^systemd: .* FAIL' "$res/log"
