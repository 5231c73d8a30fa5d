#!/usr/bin/env bash
# CI's check of deploy/: the Helm chart lints, renders with its defaults and
# with every optional part on (Helm's own engine), refuses out-of-range
# values, and every rendered manifest validates against the Kubernetes API
# schemas (kubernetes-validate) or, for ServiceMonitor and PrometheusRule,
# the prometheus-operator's (@kubernetes-models/prometheus-operator). The
# chart's copy of the alert rules is the tested one. Where `make image` has
# built the image, it runs as the DaemonSet runs it (image-run.sh). Tools: deploy/tools.sh.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CHART=$HERE/helm/prescient
read -r VENV NODE < <("$HERE/tools.sh") || { echo "deploy: tools FAIL"; exit 1; }
K8S_VERSION=1.31.0
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail=0
check() { if [ "$2" = 1 ]; then echo "deploy: $1 PASS${3:+ ($3)}"; else echo "deploy: $1 FAIL${3:+ ($3)}"; fail=1; fi; }

cmp -s "$HERE/../packaging/prometheus/prescient.rules.yml" "$CHART/files/prescient.rules.yml" && ok=1 || ok=0
check rules-copy-identical $ok "chart files/ = packaging/prometheus/"
"$VENV/bin/python" "$HERE/chart_check.py" "$CHART" "$WORK" || fail=1
# The rendered config is one prescientd accepts (make package built it).
PRESCIENTD=${PRESCIENTD:-$HERE/../target/release/prescientd}
if [ -x "$PRESCIENTD" ]; then
  out=$("$PRESCIENTD" service --check-config --config "$WORK/prescientd.toml" 2>&1) && ok=1 || ok=0
  check chart-config-accepted $ok "$out"
fi
# The image (`make image` built it) run as the DaemonSet runs it.
IMG=$HERE/../out/prescient-image_$(make -s -C "$HERE/.." dkms-version).oci.tar
if [ -f "$IMG" ]; then
  "$HERE/image-run.sh" "$IMG" "$WORK" || fail=1
fi
for case in default all; do
  "$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$K8S_VERSION" "$WORK/$case"/core-*.yaml >"$WORK/kv" 2>&1 && ok=1 || ok=0
  check "kubernetes-schemas-$case" $ok "$(ls "$WORK/$case"/core-*.yaml | wc -l) manifests, Kubernetes $K8S_VERSION: $(grep -v '^$' "$WORK/kv" | tail -1 | cut -c1-100)"
  MODULES="$NODE/node_modules" node "$HERE/validate-crds.mjs" "$WORK/$case"/crd-*.yaml >"$WORK/po" 2>&1 && ok=1 || ok=0
  check "prometheus-operator-schemas-$case" $ok "$(tail -1 "$WORK/po" | cut -c1-120)"
done
[ $fail = 0 ]
