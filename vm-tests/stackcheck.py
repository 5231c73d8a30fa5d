#!/usr/bin/env python3
"""Host-side check `stack-frames`: the largest stack frame of any function in
prescient.ko, read from the `sub $N,%rsp` of its prologue (objdump). The
kernel stack is 16 KB and an ioctl or the worker reaches the module already
a few KB deep (lockdep adds more), so a frame over LIMIT bytes fails: that is
how an array of engines built on the stack in SET_PARAMS (11 KB) oopsed on
the stack guard page. Usage: stackcheck.py prescient.ko [LIMIT]"""
import re
import subprocess
import sys

ko = sys.argv[1]
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", ko],
                     capture_output=True, text=True, check=True).stdout
frames = {}
fn = None
for line in dis.splitlines():
    m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
    if m:
        fn = m.group(1)
        continue
    m = re.search(r"sub +\$0x([0-9a-f]+),%rsp", line)
    if m and fn:
        frames[fn] = max(frames.get(fn, 0), int(m.group(1), 16))
if not frames:
    print(f"VMTEST: stack-frames FAIL no function prologues found in {ko}")
    sys.exit(1)
top = sorted(frames.items(), key=lambda kv: -kv[1])[:3]
desc = ", ".join(f"{n} B {f[:60]}" for f, n in top)
verdict = "PASS" if top[0][1] <= limit else "FAIL"
print(f"VMTEST: stack-frames {verdict} largest frames (limit {limit} B): {desc}")
sys.exit(0 if verdict == "PASS" else 1)
