"""Summary of bench/gpu/runtime/marks.sh (and service.sh) outputs.

Usage: python3 marks_summary.py DIR MODEL
Per run: median step time over steps WARM.., the largest loss difference
from the plain run, the daemon's counters (faults, faults with an id, dead
and alive marks, discards, migrations) and the runtime's marks line; then
per configuration the median over repetitions and the speed-ups.
"""
import glob
import json
import os
import statistics
import sys

WARM = 3
CONFIGS = ["driverlike", "transparent", "execid", "marks", "foot", "footB", "foothold", "service"]


def steps_of(path):
    out = []
    for line in open(path):
        if line.startswith('{"step"'):
            out.append(json.loads(line))
    return out


def daemon_of(path):
    try:
        return json.loads(open(path).read())
    except Exception:
        return {}


def marks_line(err):
    try:
        for line in open(err):
            if "marks: frees=" in line:
                return line.strip().split("marks: ", 1)[1]
    except Exception:
        pass
    return "-"


def runtime_line(err):
    """The runtime's counters line (launches, marked, copies_marked...)."""
    try:
        for line in open(err):
            if "lookups_wrapped=" in line:
                return line.strip().split(": ", 2)[-1]
    except Exception:
        pass
    return "-"


def tail(path, n=6):
    """The last `n` non-empty lines of a file, or none if it cannot be read."""
    try:
        lines = [x.rstrip() for x in open(path, errors="replace") if x.strip()]
    except OSError:
        return []
    return lines[-n:]


def say_why_cut(d, name):
    """A run with too few steps: the tails of the job's stderr and the
    daemon's log, so that the summary (which batch scripts keep when they
    delete the run's folder) says why (GPU run 177 lost a ResNet-50 run
    whose cause went with its folder)."""
    for suffix in ("err", "daemon.log"):
        for line in tail(os.path.join(d, f"{name}.{suffix}")):
            print(f"  {name}.{suffix}: {line[:300]}")


def main():
    d, model = sys.argv[1], sys.argv[2]
    plain_path = os.path.join(d, model + ".plain.jsonl")
    plain = steps_of(plain_path) if os.path.exists(plain_path) else []
    print(f"plain: {len(plain)} steps, losses {[round(s['loss'], 4) for s in plain]}")
    med = {}
    for p in sorted(glob.glob(os.path.join(d, model + ".*.*.jsonl"))):
        name = os.path.basename(p)[:-6]
        _, config, rep = name.split(".")
        s = steps_of(p)
        if len(s) <= WARM:
            print(f"{name}: {len(s)} steps (cut short)")
            say_why_cut(d, name)
            continue
        ms = statistics.median(x["ms"] for x in s[WARM:])
        med.setdefault(config, []).append(ms)
        dl = max((abs(a["loss"] - b["loss"]) for a, b in zip(s, plain)), default=float("nan"))
        j = daemon_of(os.path.join(d, name + ".daemon.json"))
        fb, fx = j.get("fault_blocks", 0), j.get("faults_with_exec_id", 0)
        print(f"{name:22s} steps={len(s)} median_ms={ms:.1f} max_loss_diff={dl:.3g} exec_mode={j.get('exec_mode')} "
              f"fault_blocks={fb} with_id={fx} attributed={fx / fb if fb else float('nan'):.4f} "
              f"no_page={j.get('faults_no_page')} before_first_id={j.get('faults_before_first_id')} "
              f"hub_events={j.get('hub_fault_events')} hub_with_id={j.get('hub_fault_events_with_id')} "
              f"ids_seen={j.get('exec_ids_seen')} "
              f"dead={j.get('marked_dead_blocks')} alive={j.get('marked_alive_blocks')} "
              f"discarded={j.get('discarded_blocks')} refetched={j.get('refetched_blocks')} "
              f"to_gpu_GB={j.get('migrated_to_gpu_bytes', 0) / 1e9:.1f} to_cpu_GB={j.get('migrated_to_cpu_bytes', 0) / 1e9:.1f} "
              f"| runtime {marks_line(os.path.join(d, name + '.err'))} "
              f"| {runtime_line(os.path.join(d, name + '.err'))}")
    m = {c: statistics.median(v) for c, v in med.items()}
    print("median over reps (ms): " + ", ".join(f"{c}={m[c]:.1f}" for c in CONFIGS if c in m))
    for a, b in [("execid", "transparent"), ("execid", "driverlike"), ("marks", "transparent"),
                 ("marks", "driverlike"), ("marks", "execid"), ("foot", "driverlike"), ("foot", "marks"),
                 ("footB", "driverlike"), ("foot", "footB"), ("foothold", "foot")]:
        if a in m and b in m:
            print(f"{a} vs {b}: {m[b] / m[a]:.2f}x")


if __name__ == "__main__":
    main()
