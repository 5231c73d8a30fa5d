"""How many launches a "write the marker only when the id changes" path
would skip: the share of launches whose execution id equals the previous
launch's, from the runtime's id logs (PRESCIENT_ID_LOG; one stream in these
jobs, so the previous launch is the same stream's).

Usage: python3 repeats.py IDLOG...
"""
import struct
import sys

for path in sys.argv[1:]:
    data = open(path, "rb").read()
    ids = struct.unpack(f"<{len(data) // 8}Q", data)
    same = sum(1 for i in range(1, len(ids)) if ids[i] == ids[i - 1])
    print(f"{path}: launches={len(ids)} same_as_previous={same} ({100 * same / max(1, len(ids)):.1f}%)")
