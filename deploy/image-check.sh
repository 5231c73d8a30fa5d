#!/usr/bin/env bash
# Checks the image deploy/image.sh built (`make image-test`), from the
# image itself (unpacked by umoci, not the tree it was made from):
#   image-config      its entrypoint, cmd, env and ports are the Containerfile's
#   image-name        it is named as the chart pulls it (values.yaml
#                     image.repository:tag), and that tag, the chart's
#                     appVersion and the package are one version
#   image-files       the package is installed: the binaries, the runtime the
#                     `run` subcommand preloads, the config, the man pages
#   image-check-config  the entrypoint and cmd, with --check-config, exit 0
#                     on the shipped config and 78 on a bad one (the run the
#                     kubelet makes, chroot instead of a container runtime)
#   image-userspace   the chart's backend (userspace) config is accepted
# usage: image-check.sh [OUT]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=${1:-$ROOT/out}
VERSION=$(make -s -C "$ROOT" dkms-version)
IMG=$OUT/prescient-image_$VERSION.oci.tar
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
check() { if [ "$2" = 1 ]; then echo "image: $1 PASS${3:+ ($3)}"; else echo "image: $1 FAIL${3:+ ($3)}"; fail=1; fi; }
[ -f "$IMG" ] || { echo "image: no $IMG (make image)"; exit 1; }
mkdir -p "$W/layout" && tar -C "$W/layout" -xf "$IMG"
py() { python3 "$HERE/containerfile.py" "$@"; }

cfg=$(py image-config "$W/layout" "$VERSION") || exit 1
want=$(py expect "$HERE/Containerfile")
msg=$(python3 - "$cfg" "$want" <<'PY'
import json, sys
c, w = json.loads(sys.argv[1])["config"], json.loads(sys.argv[2])
bad = [k for k in ("Entrypoint", "Cmd") if c.get(k) != w[k]]
bad += [e for e in w["Env"] if e not in c.get("Env", [])]
bad += [p for p in w["ExposedPorts"] if p not in c.get("ExposedPorts", {})]
print("differs: " + ", ".join(bad) if bad else
      f"entrypoint {c['Entrypoint']}, cmd {c['Cmd']}, ports {sorted(c['ExposedPorts'])}")
PY
)
check image-config "$([[ $msg != differs* ]] && echo 1)" "$msg"

values=$HERE/helm/prescient/values.yaml
repo=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$values")
tag=$(sed -n '/^image:/,/^[^ ]/s/^  tag: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$values")
app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$HERE/helm/prescient/Chart.yaml")
name=$(python3 -c 'import json,sys; print(*[m.get("annotations",{}).get("io.containerd.image.name","") for m in json.load(open(sys.argv[1]))["manifests"]])' "$W/layout/index.json")
ok=0; [ "$name" = "docker.io/library/$repo:$tag" ] && [ "$tag" = "$VERSION" ] && [ "$app" = "$VERSION" ] && ok=1
check image-name $ok "image $name; chart $repo:$tag, appVersion $app; package $VERSION"

umoci unpack --image "$W/layout:$VERSION" "$W/bundle" >/dev/null || { echo "image: umoci unpack failed"; exit 1; }
R=$W/bundle/rootfs
missing=""
for f in usr/sbin/prescientd usr/bin/prescientctl usr/bin/prescient-sim usr/lib/prescient/libprescient_runtime.so \
  etc/prescient/prescientd.toml usr/share/man/man5/prescientd.toml.5.gz usr/share/man/man8/prescientd.8.gz; do
  [ -s "$R/$f" ] || missing+=" $f"
done
pkg=$(chroot "$R" dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}' prescient 2>&1)
check image-files "$([ -z "$missing" ] && [[ $pkg == "prescient $VERSION ii"* ]] && echo 1)" \
  "dpkg: $pkg; $(du -sh "$IMG" | cut -f1) archive${missing:+; missing:$missing}"

# The process the runtime would start (bundle config.json), --check-config added.
mapfile -t ARGS < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))["process"]["args"]]' "$W/bundle/config.json")
mapfile -t ENVS < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))["process"]["env"]]' "$W/bundle/config.json")
run() { chroot "$R" /usr/bin/env -i "${ENVS[@]}" "$@"; }
out=$(run "${ARGS[@]}" --check-config 2>&1); rc=$?
printf '[engine]\nassoc = 0\n' >"$R/tmp/bad.toml"
bad=$(run "${ARGS[0]}" service --check-config --config /tmp/bad.toml 2>&1); rcb=$?
check image-check-config "$([ $rc = 0 ] && [ $rcb = 78 ] && echo 1)" "${ARGS[*]} --check-config: rc $rc, $out; a bad file: rc $rcb, $bad"

# The chart's config (configmap.yaml's shape): the user-space backend.
printf 'backend = "userspace"\n[attach]\nall_uvm_processes = true\n[metrics]\nlisten = ":9836"\n' >"$R/tmp/chart.toml"
out=$(run "${ARGS[0]}" service --check-config --config /tmp/chart.toml 2>&1); rc=$?
check image-userspace "$([ $rc = 0 ] && echo 1)" "$out"
[ $fail = 0 ]
