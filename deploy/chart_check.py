"""Lints and renders deploy/helm/prescient with Helm's own engine
(helm-python-sdk: libhelm_c over Helm's Go SDK), checks that out-of-range
values are refused by values.schema.json, and writes every rendered
manifest to OUT/<case>/{core,crd}-N-Kind.yaml for the schema validators.

usage: chart_check.py CHART OUT    (prints `deploy: NAME PASS|FAIL (...)`)
"""
import json
import os
import sys

import yaml
from helm_python import chart as helm_chart

CHART, OUT = sys.argv[1], sys.argv[2]
failed = False


def check(name, ok, note=""):
    global failed
    failed |= not ok
    print(f"deploy: {name} {'PASS' if ok else 'FAIL'}" + (f" ({note})" if note else ""))


report = helm_chart.lint(CHART, strict=True, kube_version="v1.31.0")
problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2] + report.get("errors", [])
check("helm-lint", not problems, f"{len(problems)} warnings or errors: {problems[:2]}")

c = helm_chart.Chart.load(CHART)
cases = {
    "default": {},
    "all": {
        "runtimeClassName": "nvidia",
        "priorityClassName": "system-node-critical",
        "config": {"cmdlinePatterns": ["python.*train", "torchrun"], "residencyBudget": "24G"},
        "serviceMonitor": {"labels": {"release": "kube-prometheus"}},
    },
}
for case, values in cases.items():
    try:
        rendered = c.render(values=values, name="prescient", namespace="gpu-ops", is_install=True)
    except Exception as e:  # a template that does not render
        check(f"render-{case}", False, str(e)[:200])
        continue
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    os.makedirs(f"{OUT}/{case}", exist_ok=True)
    for i, d in enumerate(docs):
        group = "crd" if d["apiVersion"].startswith("monitoring.coreos.com/") else "core"
        with open(f"{OUT}/{case}/{group}-{i}-{d['kind']}.yaml", "w") as f:
            yaml.safe_dump(d, f)
    kinds = sorted(d["kind"] for d in docs)
    check(f"render-{case}", {"DaemonSet", "ConfigMap", "Service", "ServiceMonitor", "PrometheusRule"} <= set(kinds), ", ".join(kinds))
    if case == "all":
        cm = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["prescientd.toml"]
        check("config-rendered", 'cmdline_patterns = ["python.*train", "torchrun"]' in cm and 'residency_budget = "24G"' in cm)
        with open(f"{OUT}/prescientd.toml", "w") as f:
            f.write(cm)
        ds = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
        sc = ds["containers"][0]["securityContext"]
        # What deploy/image-run.sh runs the image with: the container as the chart specifies it.
        ctr = ds["containers"][0]
        with open(f"{OUT}/container.json", "w") as f:
            json.dump({"args": ctr["args"], "capabilities": sc["capabilities"]["add"],
                       "readOnlyRootFilesystem": sc["readOnlyRootFilesystem"],
                       "mounts": [m["mountPath"] for m in ctr["volumeMounts"]],
                       "env": [f"{e['name']}={e['value']}" for e in ctr["env"]]}, f)
        check("daemonset-minimal-privileges",
              ds["hostPID"] and not sc["privileged"] and sc["capabilities"]["drop"] == ["ALL"]
              and set(sc["capabilities"]["add"]) == {"SYS_PTRACE", "SYS_ADMIN", "DAC_READ_SEARCH"},
              f"hostPID, drop ALL, add {sc['capabilities']['add']}")

# Out-of-range values: refused before anything renders, naming the value.
for path, bad in [
    (("metrics", "port"), 70000),
    (("config", "workers"), 0),
    (("config", "residencyBudget"), "lots"),
    (("image", "pullPolicy"), "Sometimes"),
    (("config", "gpuIndex"), -1),
]:
    values = {path[0]: {path[1]: bad}}
    try:
        c.validate_schema(values)
        c.render(values=values, name="prescient")
        check(f"refuses-{'.'.join(path)}={bad}", False, "accepted")
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        check(f"refuses-{'.'.join(path)}={bad}", path[1] in str(e), msg[:120])
sys.exit(1 if failed else 0)
