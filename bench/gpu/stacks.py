#!/usr/bin/env python3
"""Samples the kernel stacks of prescientd, the job and the UVM driver's threads.

Usage: stacks.py OUT.tsv.gz [INTERVAL_S] [SECONDS]

Counters cannot say where a thread waits; /proc/TID/stack can (root only).
Every INTERVAL_S (default 0.1) it reads, for every thread of a process named
prescientd or python*, and every kernel thread whose name starts with UVM or
nv, its state and kernel stack, and writes a line only when they changed
since that thread's last line. Every second it also writes the host's memory
counters (vmstat's compaction, reclaim and THP lines, MemFree), to tell a
stall in the driver from one in the host's page allocator.

Lines (tab-separated, after a `# stacks.py v1 unix_s=START` header):
  t_s  S  pid  tid  comm  state  frame|frame|...
  t_s  M  key=value ...
Stops after SECONDS (default: until killed; SIGTERM ends the file cleanly);
flushes every second.
"""
import gzip
import os
import signal
import sys
import time

VMSTAT_KEYS = (
    "compact_stall", "compact_fail", "compact_success", "allocstall_normal",
    "allocstall_movable", "pgmajfault", "thp_fault_alloc", "thp_fault_fallback",
    "pgscan_direct", "pgsteal_direct",
)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def wanted(pid):
    """Whether the process's threads are sampled: ours, the job, UVM's."""
    comm = (read(f"/proc/{pid}/comm") or "").strip()
    return comm == "prescientd" or comm.startswith("python") or \
        comm.startswith("UVM") or comm.startswith("nv")


def frames(text):
    """The stack's function names, without offsets or module names.

    A line reads `[<0>] name+0x1f/0x40 [module]`."""
    out = []
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) >= 2:
            out.append(words[1].split("+")[0])
    return "|".join(out)


def tasks():
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or not wanted(pid):
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            yield pid, tid


def sample(last, out, t):
    for pid, tid in tasks():
        base = f"/proc/{pid}/task/{tid}"
        stat = read(f"{base}/stat")
        if stat is None:
            continue
        # The state follows the comm's closing parenthesis.
        state = stat[stat.rfind(")") + 2:].split(" ", 1)[0]
        comm = (read(f"{base}/comm") or "?").strip().replace("\t", " ")
        stack = frames(read(f"{base}/stack"))
        key = (pid, tid)
        if last.get(key) != (state, stack):
            last[key] = (state, stack)
            out.write(f"{t:.3f}\tS\t{pid}\t{tid}\t{comm}\t{state}\t{stack}\n")


def memory(out, t):
    vm = dict(l.split() for l in (read("/proc/vmstat") or "").splitlines() if l.count(" ") == 1)
    parts = [f"{k}={vm[k]}" for k in VMSTAT_KEYS if k in vm]
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith(("MemFree:", "AnonHugePages:")):
            k, v = line.split()[:2]
            parts.append(f"{k.rstrip(':')}={v}")
    out.write(f"{t:.3f}\tM\t" + " ".join(parts) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    until = float(sys.argv[3]) if len(sys.argv) > 3 else float("inf")
    # SIGTERM ends the loop through the `with`, so the gzip stream is closed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    start = time.time()
    last, next_mem = {}, 0.0
    with gzip.open(sys.argv[1], "wt") as out:
        out.write(f"# stacks.py v1 unix_s={start:.6f}\n")
        while time.time() - start < until:
            t = time.time() - start
            sample(last, out, t)
            if t >= next_mem:
                memory(out, t)
                out.flush()
                next_mem = t + 1.0
            time.sleep(interval)


if __name__ == "__main__":
    main()
