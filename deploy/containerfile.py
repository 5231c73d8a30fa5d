#!/usr/bin/env python3
"""The Containerfile's final image config, for deploy/image.sh and its check.

  umoci-flags CONTAINERFILE     ENTRYPOINT, CMD, ENV and EXPOSE as umoci config flags
  expect CONTAINERFILE          the same as JSON (what the image's config must hold)
  name-index INDEX_JSON NAME    names the layout's image NAME for docker/containerd
  image-config LAYOUT TAG       prints the config blob of LAYOUT's image TAG
"""
import json
import shlex
import sys


def instructions(path):
    """(INSTRUCTION, argument text) per logical line (continuations joined)."""
    out, cur = [], ""
    for line in open(path, encoding="utf-8"):
        s = line.rstrip("\n")
        if not cur and (not s.strip() or s.lstrip().startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def exec_form(text):
    """A JSON-array instruction; the shell form would run under /bin/sh -c."""
    v = json.loads(text)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise SystemExit(f"containerfile: {text!r} is not the exec (JSON array) form")
    return v


def expect(path):
    cfg = {"Entrypoint": [], "Cmd": [], "Env": [], "ExposedPorts": []}
    for word, rest in instructions(path):
        if word == "ENTRYPOINT":
            cfg["Entrypoint"] = exec_form(rest)
        elif word == "CMD":
            cfg["Cmd"] = exec_form(rest)
        elif word == "ENV":
            pairs = shlex.split(rest)
            if pairs and "=" not in pairs[0]:  # the legacy "ENV KEY value" form
                pairs = [f"{pairs[0]}={' '.join(pairs[1:])}"]
            cfg["Env"] += pairs
        elif word == "EXPOSE":
            cfg["ExposedPorts"] += [p if "/" in p else f"{p}/tcp" for p in rest.split()]
    return cfg


def umoci_flags(path):
    cfg = expect(path)
    flags = [f"--config.entrypoint={x}" for x in cfg["Entrypoint"]]
    flags += [f"--config.cmd={x}" for x in cfg["Cmd"]]
    flags += [f"--config.env={x}" for x in cfg["Env"]]
    flags += [f"--config.exposedports={x}" for x in cfg["ExposedPorts"]]
    return flags


def name_index(index_path, name):
    """docker load and ctr import name an OCI layout's image by this annotation."""
    idx = json.load(open(index_path))
    repo, _, tag = name.rpartition(":")
    full = name if "/" in repo else f"docker.io/library/{name}"
    for m in idx["manifests"]:
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            m["annotations"]["io.containerd.image.name"] = full
    json.dump(idx, open(index_path, "w"))


def blob(layout, digest):
    algo, hexd = digest.split(":", 1)
    return json.load(open(f"{layout}/blobs/{algo}/{hexd}"))


def image_config(layout, tag):
    idx = json.load(open(f"{layout}/index.json"))
    for m in idx["manifests"]:
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return blob(layout, blob(layout, m["digest"])["config"]["digest"])
    raise SystemExit(f"containerfile: no image tagged {tag} in {layout}")


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "umoci-flags":
        print("\n".join(umoci_flags(argv[2])))
    elif cmd == "expect":
        print(json.dumps(expect(argv[2])))
    elif cmd == "name-index":
        name_index(argv[2], argv[3])
    elif cmd == "image-config":
        print(json.dumps(image_config(argv[2], argv[3])))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
