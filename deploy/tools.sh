#!/usr/bin/env bash
# Installs what deploy/check.sh needs, cached under
# ${PRESCIENT_CACHE:-~/.cache/prescient}/tools by version:
#   a venv (PyPI) with helm-python-sdk, which bundles libhelm_c, a C ABI
#     over Helm's own Go SDK (Helm v4): the chart is linted and rendered by
#     Helm's engine without a helm binary (none is on the registries this
#     project may use), and kubernetes-validate, the Kubernetes API schemas;
#   @kubernetes-models/prometheus-operator (npm), the ServiceMonitor and
#     PrometheusRule schemas, with js-yaml.
# Prints the tools directory.
set -euo pipefail
HELM_SDK_VERSION=0.2.2
KV_VERSION=1.37.0
PO_VERSION=6.0.0
CACHE=${PRESCIENT_CACHE:-$HOME/.cache/prescient}/tools
VENV=$CACHE/venv-helm$HELM_SDK_VERSION-kv$KV_VERSION
NODE=$CACHE/po-$PO_VERSION
log() { echo "deploy/tools.sh: $*" >&2; }
mkdir -p "$CACHE"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  log "installing helm-python-sdk $HELM_SDK_VERSION and kubernetes-validate $KV_VERSION (PyPI)"
  python3 -c 'import venv' 2>/dev/null && python3 -m venv "$VENV" >&2 ||
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2; python3 -m venv "$VENV" >&2; }
  "$VENV/bin/pip" install -q "helm-python-sdk==$HELM_SDK_VERSION" "kubernetes-validate==$KV_VERSION" pyyaml >&2
fi
if [ ! -d "$NODE/node_modules/@kubernetes-models/prometheus-operator" ]; then
  command -v npm >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >&2
  log "installing @kubernetes-models/prometheus-operator $PO_VERSION (npm)"
  mkdir -p "$NODE"
  (cd "$NODE" && npm install --silent --no-audit --no-fund \
    "@kubernetes-models/prometheus-operator@$PO_VERSION" js-yaml@4 >&2)
fi
echo "$VENV $NODE"
