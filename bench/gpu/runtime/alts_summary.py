"""Summary of one model's folder from bench/gpu/runtime/alts.sh.

Usage: python3 alts_summary.py DIR [DIR...]   (DIR = alts.sh's OUT/MODEL)
Per run: the median step time over steps WARM.. (ms), how far its losses are
from plain repetition 1's (the uncapped job on device memory), and its
memory line; a run that ran out of memory says at which step. Then per
configuration the median over repetitions, and the ratios issue 20 asks
for: Prescient (execution ids + marks) against the user's alternative under
the same cap, and against driver-like. The last line per model is JSON
({"model", "cap", "chosen", "ms": {config: median}, "ratios": {...}}).
"""
import glob
import json
import os
import statistics
import sys

WARM = 2


def load(path):
    """Steps, the memory ("done") line and the out-of-memory line of a run."""
    steps, done, oom = [], None, None
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return steps, done, oom
    for line in lines:
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "step" in d:
            steps.append(d)
        elif "done" in d:
            done = d
        elif "oom" in d:
            oom = d
    return steps, done, oom


def runs(d):
    """{config: {rep: path}} for the plain, capped and alternative runs and marks.sh's."""
    out = {}
    for p in glob.glob(os.path.join(d, "*.jsonl")) + glob.glob(os.path.join(d, "um", "*.jsonl")):
        parts = os.path.basename(p)[:-6].split(".")
        if len(parts) != 3:
            continue
        _, config, rep = parts
        out.setdefault(config, {})[rep] = p
    return out


def median_ms(steps):
    return statistics.median(s["ms"] for s in steps[WARM:]) if len(steps) > WARM else None


def loss_diff(steps, base):
    return max((abs(a["loss"] - b["loss"]) for a, b in zip(steps, base)), default=None)


def daemon(path):
    try:
        return json.loads(open(path[:-6] + ".daemon.json").read())
    except (OSError, ValueError):
        return {}


def exit_codes(d):
    """{run name: exit status} from alts.sh's and marks.sh's rc.txt files."""
    out = {}
    for p in (os.path.join(d, "rc.txt"), os.path.join(d, "um", "rc.txt")):
        try:
            for line in open(p):
                name, _, rc = line.strip().rpartition(" rc=")
                out[name] = int(rc)
        except (OSError, ValueError):
            pass
    return out


def describe(name, path, base, rc=0):
    """One line for one run, and its median step (None if it failed, was
    cut short or ran out of memory)."""
    steps, done, oom = load(path)
    ms = median_ms(steps) if oom is None and not rc else None
    words = [f"{name:28s} steps={len(steps)}"]
    if rc and oom is None:
        words.append(f"FAILED rc={rc}")
    if oom is not None:
        words.append(f"OUT OF MEMORY at step {oom['oom']}: {oom.get('error', '')[:120]}")
    elif ms is None:
        words.append("cut short")
    else:
        words.append(f"median_ms={ms:.1f} steps_ms={[round(s['ms'], 1) for s in steps]}")
    dl = loss_diff(steps, base) if base else None
    words.append(f"max_loss_diff={dl:.3g}" if dl is not None else "max_loss_diff=-")
    if done:
        words.append(f"peak_allocated={done.get('peak_allocated', 0) / 1e9:.2f}GB "
                     f"peak_reserved={done.get('peak_reserved', done.get('reserved', 0)) / 1e9:.2f}GB "
                     f"ooms={done.get('num_ooms')} retries={done.get('num_alloc_retries')} how={done.get('how')}")
    j = daemon(path)
    if j:
        words.append(f"to_gpu_GB={j.get('migrated_to_gpu_bytes', 0) / 1e9:.1f} "
                     f"to_cpu_GB={j.get('migrated_to_cpu_bytes', 0) / 1e9:.1f} fault_blocks={j.get('fault_blocks')}")
    return " ".join(words), ms


def read(d, name, default="-"):
    try:
        return open(os.path.join(d, name)).read().strip()
    except OSError:
        return default


def ratios(m, chosen):
    """Issue 20's comparisons: A_vs_B are speed-ups (B's step over A's: > 1,
    A is faster); prescient_time_over_B is Prescient's step over B's."""
    r = {}
    alt = "alt-" + chosen.replace("+", "-")
    alt = alt if alt in m else None
    # Prescient: ids + marks ("prescient_"), and with launch footprints
    # ("foot_") where marks.sh ran them.
    for case, key in (("marks", "prescient"), ("foot", "foot")):
        if case not in m:
            continue
        if alt:
            r[f"{key}_vs_{alt}"] = m[alt] / m[case]
            # the target's own terms: "within 1.5x of" is this time ratio
            r[f"{key}_time_over_{alt}"] = m[case] / m[alt]
        if "driverlike" in m:
            r[f"{key}_vs_driverlike"] = m["driverlike"] / m[case]
        if "plain" in m:
            r[f"{key}_vs_resident"] = m["plain"] / m[case]
    if alt and "plain" in m:
        r[alt + "_vs_resident"] = m["plain"] / m[alt]
    return r


def summarize(d):
    model = os.path.basename(os.path.normpath(d))
    cap, chosen = read(d, "cap.txt"), read(d, "chosen.txt")
    print(f"== {model}: cap {cap} bytes, alternative chosen: {chosen}")
    rs = runs(d)
    base = load(rs.get("plain", {}).get("1", ""))[0]
    print(f"plain.1 losses (every run's are compared with these): {[round(x['loss'], 4) for x in base]}")
    rcs = exit_codes(d)
    meds = {}
    for config in sorted(rs):
        for rep in sorted(rs[config]):
            line, ms = describe(f"{config}.{rep}", rs[config][rep], base, rcs.get(f"{model}.{config}.{rep}", 0))
            print(line)
            if ms is not None:
                meds.setdefault(config, []).append(ms)
    m = {c: statistics.median(v) for c, v in meds.items() if not c.startswith("cap-")}
    print("median over repetitions (ms): " + ", ".join(f"{c}={v:.1f} ({len(meds[c])} reps)" for c, v in sorted(m.items())))
    r = ratios(m, chosen)
    for k, v in r.items():
        print(f"{k}: {v:.2f}x")
    print(json.dumps({"model": model, "cap": cap, "chosen": chosen, "ms": m, "ratios": r}))


def main():
    for d in sys.argv[1:]:
        summarize(d)


if __name__ == "__main__":
    main()
