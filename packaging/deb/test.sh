#!/usr/bin/env bash
# Installs out/prescient_*.deb and out/prescient-dkms_*.deb into a clean
# Debian 12 root (debootstrap minbase plus systemd, procps and dkms, cached:
# packaging/deb/root.sh) and checks them from there:
#   deb-files        the package's file list holds what it must
#   deb-install      dpkg -i succeeds; the sysusers group `prescient` exists
#   deb-check-config `prescientd service --check-config` from the package
#   deb-unit-verify  systemd-analyze verify accepts the installed unit
#   deb-man-pages    a page for every binary and subcommand
#   deb-serves       the unit's own ExecStartPre and ExecStart lines, run in
#                    the root, serve prescientctl and /metrics
#   deb-ctl-backends without prescient.ko, then with backend = "userspace"
#                    and no nvidia_uvm: `prescientctl status` names the
#                    backend in force and no module it does not use; `stats`
#                    is one line (why, what to do) and exits 0 as status does
#   dkms-files       prescient-dkms_<version>_all.deb holds the source tree
#                    under /usr/src/prescient-<version>, no build outputs, and
#                    a dkms.conf with this version whose MAKE script is there
#   dkms-install     dpkg -i: its postinst runs `dkms add` (Debian's dkms,
#                    in the root), and says why nothing is built here (no
#                    headers for the host's kernel in the root)
#   dkms-refuses     `dkms build` against a kernel tree without CONFIG_RUST:
#                    dkms runs the packaged build.sh, which refuses in one line
#   dkms-remove      dpkg -r: its prerm runs `dkms remove`; nothing is left
# Building prescient.ko from the package needs a Rust-enabled kernel tree
# and its LLVM/rustc, which a clean root does not have: the VM tests'
# `dkms-build` (packaging/dkms/test.sh, `make real-uvm`) builds it with dkms
# from this same .deb's source (DKMS_DEB, set by `make test`).
# systemd itself does not run as PID 1 here (no booted systemd, so no
# nspawn): deb-serves runs the unit's commands as written instead, which is
# the honest substitute for `systemctl start`.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/out}
VERSION=$(make -s -C "$ROOT" dkms-version)
DEB=$(ls "$OUT"/prescient_"$VERSION"_*.deb | tail -1)
DKMS_DEB=$OUT/prescient-dkms_${VERSION}_all.deb
WORK=$(mktemp -d)
R=$WORK/root
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null
  umount "$R/proc" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail=0
check() { if [ "$2" = 1 ]; then echo "package: $1 PASS${3:+ ($3)}"; else echo "package: $1 FAIL${3:+ ($3)}"; fail=1; fi; }

TAR=$("$ROOT/packaging/deb/root.sh" systemd,procps,dkms) || exit 1
mkdir -p "$R" && tar -C "$R" -xf "$TAR"

files=$(dpkg-deb -c "$DEB" | awk '{print $6}')
need=(./usr/sbin/prescientd ./usr/bin/prescientctl ./usr/bin/prescient-sim
  ./usr/lib/systemd/system/prescientd.service ./usr/lib/sysusers.d/prescient.conf
  ./etc/prescient/prescientd.toml ./usr/share/man/man8/prescientd.8.gz ./usr/share/man/man5/prescientd.toml.5.gz
  ./usr/share/man/man1/prescientctl.1.gz ./usr/share/man/man1/prescient-sim.1.gz
  ./usr/share/bash-completion/completions/prescientd ./usr/share/zsh/vendor-completions/_prescientctl
  ./usr/share/fish/vendor_completions.d/prescient-sim.fish
  ./usr/lib/prescient/libprescient_runtime.so ./usr/lib/prescient/python/sitecustomize.py
  ./usr/lib/prescient/python/prescient_torch/__init__.py ./usr/lib/prescient/python/prescient_torch/marks.cpp)
missing=$(for f in "${need[@]}"; do grep -qxF "$f" <<<"$files" || echo "$f"; done)
check deb-files $([ -z "$missing" ] && echo 1) "$(grep -vc '/$' <<<"$files") files, $(du -h "$DEB" | cut -f1)${missing:+; missing: $missing}"

cp "$DEB" "$R/tmp/"
chroot "$R" dpkg -i "/tmp/$(basename "$DEB")" >"$WORK/dpkg.log" 2>&1 && ok=1 || ok=0
group=$(chroot "$R" getent group prescient)
check deb-install $([ $ok = 1 ] && [ -n "$group" ] && echo 1) "group $group"

UNIT=$R/usr/lib/systemd/system/prescientd.service
pre=$(sed -n 's/^ExecStartPre=//p' "$UNIT" | head -1)
start=$(sed -n 's/^ExecStart=//p' "$UNIT" | head -1)
msg=$(chroot "$R" $pre 2>&1) && ok=1 || ok=0
check deb-check-config $ok "$pre: $msg"

bad=$(chroot "$R" systemd-analyze verify /usr/lib/systemd/system/prescientd.service 2>&1 |
  grep -v "Command 'man " || true)
check deb-unit-verify $([ -z "$bad" ] && echo 1) "${bad:-systemd-analyze verify: clean}"

pages=$(ls "$R/usr/share/man/man1" "$R/usr/share/man/man8" | grep -c '^prescient')
subs=0
for p in prescientctl-status prescientctl-set prescientd-service prescientd-attach prescient-sim-run; do
  ls "$R"/usr/share/man/man*/"$p".*.gz >/dev/null 2>&1 && subs=$((subs+1))
done
# prescientd.toml(5) as man shows it (the host's man; the root has none).
keys=$(MANWIDTH=100 man -l "$R/usr/share/man/man5/prescientd.toml.5.gz" 2>/dev/null | grep -cE '^ {7}[a-z_]+(\.[a-z_]+)? = ')
check deb-man-pages $([ $subs = 5 ] && [ "$keys" -gt 30 ] && echo 1) "$pages pages; prescientd.toml(5) lists $keys keys"

# The unit's commands, in the root, with a config whose port is free.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed -i "s/^listen = .*/listen = \"127.0.0.1:$port\"/" "$R/etc/prescient/prescientd.toml"
mkdir -p "$R/run/prescient" && mount -t proc proc "$R/proc"
chroot "$R" $start >"$WORK/daemon.log" 2>&1 &
PID=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$port/metrics" >"$WORK/metrics" 2>/dev/null && break; sleep 0.1; done
up=$(grep -m1 '^prescient_backend_up' "$WORK/metrics")
status=$(chroot "$R" prescientctl status 2>&1 | head -3 | tr '\n' ' ')
check deb-serves $([ -n "$up" ] && grep -q '^prescientd' <<<"$status" && echo 1) "$up; prescientctl: $status"
. "$ROOT/packaging/deb/test-backends.sh"
. "$ROOT/packaging/dkms/deb-test.sh"
[ $fail = 0 ] || { echo "--- dpkg"; tail -5 "$WORK/dpkg.log"; echo "--- daemon"; tail -5 "$WORK/daemon.log"; }
[ $fail = 0 ]
