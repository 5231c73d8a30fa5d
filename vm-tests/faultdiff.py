#!/usr/bin/env python3
"""Diff the execution-id replay's faults, kernel by kernel, between the VM
(serial log of a boot) and hostsim (the host model, LOG=1 output).

usage: faultdiff.py SERIAL_LOG HOSTSIM_LOG [VM_TAG]

VM_TAG: the VM replay to compare, `exec` (default) or `with-prescient` (the
transparent replay; hostsim tags every replay `exec`).

Both print one `faultlog: exec iter I k K b B CAUSE [raced]` line per fault of
the second half of the iterations. Prints, per iteration, the faults both
have, those only the VM has and those only hostsim has, each by cause (why
the stand-in / the model found the block not resident), then the first
VM-only faults.
"""
import collections
import re
import sys

def pattern(tag):
    return re.compile(rf"^faultlog: {re.escape(tag)} iter (\d+) k (\d+) b (\d+) (\S+)( raced)?")


def read(path, tag="exec"):
    out = collections.defaultdict(dict)
    pat = pattern(tag)
    for line in open(path, errors="replace"):
        m = pat.match(line.replace("\r", ""))
        if m:
            it, k, b = int(m.group(1)), int(m.group(2)), int(m.group(3))
            cause = m.group(4) + (" raced" if m.group(5) else "")
            out[it][(k, b)] = cause
    return out


def main():
    vm = read(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else "exec")
    hs = read(sys.argv[2])
    only_vm_all = []
    for it in sorted(set(vm) | set(hs)):
        v, h = vm.get(it, {}), hs.get(it, {})
        both = v.keys() & h.keys()
        ov = sorted(v.keys() - h.keys())
        oh = sorted(h.keys() - v.keys())
        cv = collections.Counter(v[x] for x in ov)
        ch = collections.Counter(h[x] for x in oh)
        print(
            f"iter {it}: VM {len(v)} hostsim {len(h)}; both {len(both)}; "
            f"VM only {len(ov)} {dict(cv)}; hostsim only {len(oh)} {dict(ch)}"
        )
        only_vm_all += [(it, k, b, v[(k, b)]) for k, b in ov]
    for it, k, b, c in only_vm_all[:40]:
        print(f"  VM only: iter {it} kernel {k} block {b} ({c})")
    return 0


sys.exit(main())
