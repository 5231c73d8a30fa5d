"""Polls prescientd's --stats-json file and appends one line per new snapshot:
unix_s fault_events fault_blocks prefetch_bytes gate_closed_s evict_bytes
resident_bytes engine_refaults engine_windows engine_free_target
migrated_to_gpu_bytes. Stops when PID exits.
Usage: python3 sampler.py STATS_JSON PID OUT_TSV"""
import json
import os
import sys
import time

path, pid, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
last = None
with open(out, "w") as f:
    while True:
        try:
            os.kill(pid, 0)
            alive = True
        except OSError:
            alive = False
        try:
            with open(path) as s:
                d = json.load(s)
            key = d.get("unix_s")
            if key != last:
                last = key
                g = d.get("gate") or {}
                extra = [d.get(k, 0) for k in ("evict_bytes", "resident_bytes", "engine_refaults", "engine_windows", "engine_free_target", "migrated_to_gpu_bytes")]
                f.write(f"{d['unix_s']:.6f}\t{d['fault_events']}\t{d['fault_blocks']}\t{d['prefetch_bytes']}\t{g.get('closed_s', 0):.6f}\t" + "\t".join(map(str, extra)) + "\n")
                f.flush()
        except (OSError, ValueError, KeyError):
            pass
        if not alive:
            break
        time.sleep(0.003)
