#!/usr/bin/env python3
"""Host-side check `sim-agree`: the VM's fault counts against prescient-sim's
on the same trace and parameters.

usage: simcheck.py SERIAL_LOG SIM_JSON

SERIAL_LOG is the guest's serial log (lines `replay: baseline iter I faults N`
and `replay: exec-id iter I faults N`); SIM_JSON is `prescient-sim run --json`
with policies driver,prescient on the same scaled trace (mktrace.py --native),
GPU 24 blocks, instant transfers, the module's execution-id parameters.

Steady state = mean of the second half of the iterations, as the VM's
fault-cut check. The models are not the same program, so they are compared
with tolerances, and the differences are printed:
  - baseline: the stand-in services a kernel's faults one access at a time and
    may evict (FIFO) a block the running kernel already used; the simulator
    classifies a kernel's blocks at its start and never evicts one of the
    running kernel's blocks. Both are FIFO by first residency, so the counts
    must agree within BASE_TOL (relative).
  - execution-id mode: the simulator's Prescient runs to completion at every
    kernel start and fault (never late) and keeps resident <= 24 - free target;
    prescient.ko runs asynchronously in its own thread and also keeps resident
    <= the 90% watermark (21 blocks). The cuts against each model's own
    baseline must agree within CUT_TOL percentage points.
"""
import json
import re
import sys

BASE_TOL = 0.05
CUT_TOL = 5.0


def steady(v):
    t = v[len(v) // 2:]
    return sum(t) / max(len(t), 1)


def vm_series(log, tag):
    out = {}
    pat = re.compile(rf"^replay: {tag} iter (\d+) faults (\d+)")
    for line in log:
        m = pat.match(line)
        if m:
            out[int(m.group(1))] = int(m.group(2))
    return [out[i] for i in sorted(out)]


def main():
    log = open(sys.argv[1], errors="replace").read().replace("\r", "").splitlines()
    sim = json.load(open(sys.argv[2]))
    pol = {p["name"]: p for p in sim["policies"]}
    vb, ve = vm_series(log, "baseline"), vm_series(log, "exec-id")
    sb, se = pol["driver"]["faults"], pol["prescient"]["faults"]
    if not vb or not ve:
        print("VMTEST: sim-agree FAIL missing VM replay results")
        return 1
    vbs, ves, sbs, ses = steady(vb), steady(ve), steady(sb), steady(se)
    vcut, scut = 100 * (1 - ves / vbs), 100 * (1 - ses / sbs)
    bdiff = (vbs - sbs) / sbs
    print(f"sim-compare: baseline faults/iter VM {vb} sim {sb}")
    print(f"sim-compare: exec-id  faults/iter VM {ve} sim {se}")
    e = pol["prescient"].get("extra", {}).get("engine", {})
    print(
        f"sim-compare: sim engine: demand evictions {e.get('demand_evictions')}, "
        f"free target at end {e.get('free_target')}, late prefetches "
        f"{sum(pol['prescient']['late_prefetches'])}"
    )
    ok = abs(bdiff) <= BASE_TOL and abs(vcut - scut) <= CUT_TOL
    print(
        f"VMTEST: sim-agree {'PASS' if ok else 'FAIL'} steady baseline VM {vbs:.1f} sim {sbs:.1f} "
        f"({100 * bdiff:+.1f}%, tolerance {100 * BASE_TOL:.0f}%); execution-id VM {ves:.1f} "
        f"sim {ses:.1f}, cut VM {vcut:.1f}% sim {scut:.1f}% ({vcut - scut:+.1f} points, "
        f"tolerance {CUT_TOL:.0f})"
    )
    return 0


sys.exit(main())
