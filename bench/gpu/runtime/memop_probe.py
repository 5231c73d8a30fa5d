"""What one stream-ordered id write costs between kernels (issue 15, item (a)).

Plain PyTorch kernels (x.add_(1) on N floats, back to back on the current
stream) with, before each, nothing or one memop from libcuda through ctypes
(entry points asked at CUDA 13.0, as prescient-runtime asks them):
  none      the kernels alone
  w64       cuStreamWriteValue64 into pinned host memory, flags 0 (what the
            runtime does: the write is preceded by a memory barrier)
  w64nb     the same with CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (1)
  w32       cuStreamWriteValue32 into pinned host memory, flags 0
  w64dev    cuStreamWriteValue64 into device memory, flags 0
GPU time per iteration from CUDA events around ITERS iterations (the loop is
GPU-bound: each kernel is longer than the host's enqueue of kernel + write),
median of REPS alternating repetitions; plus the host's enqueue time of the
memop alone (ctypes call included). A variant the driver refuses is reported
with its return code and not timed. Prints one JSON line per measurement.

Usage: python3 memop_probe.py [ITERS] [REPS]
"""
import ctypes
import json
import statistics
import sys
import time

import torch

ITERS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SIZES = {"k12us": 4 << 20, "k45us": 16 << 20}  # floats: ~12 and ~45 us add_ on an H100

cu = ctypes.CDLL("libcuda.so.1")
gpa = cu.cuGetProcAddress_v2
gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                ctypes.POINTER(ctypes.c_int)]


def entry(name, *argtypes):
    p, st = ctypes.c_void_p(), ctypes.c_int()
    rc = gpa(name.encode(), ctypes.byref(p), 13000, 0, ctypes.byref(st))
    if rc != 0 or not p.value:
        raise SystemExit(f"{name}: rc {rc}")
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)


w64 = entry("cuStreamWriteValue64", ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint)
w32 = entry("cuStreamWriteValue32", ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
host_dev_ptr = entry("cuMemHostGetDevicePointer", ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint)


def emit(**kv):
    print(json.dumps(kv), flush=True)


def main():
    torch.cuda.init()
    stream = torch.cuda.current_stream()
    s = ctypes.c_void_p(stream.cuda_stream)
    pinned = torch.zeros(512, dtype=torch.int64, pin_memory=True)
    host = ctypes.c_uint64()
    rc = host_dev_ptr(ctypes.byref(host), ctypes.c_void_p(pinned.data_ptr()), 0)
    if rc != 0:
        raise SystemExit(f"cuMemHostGetDevicePointer: rc {rc}")
    dev = torch.zeros(512, dtype=torch.int64, device="cuda")
    variants = {
        "none": None,
        "w64": lambda v: w64(s, host.value, v, 0),
        "w64nb": lambda v: w64(s, host.value, v, 1),
        "w32": lambda v: w32(s, host.value + 8, v & 0xFFFFFFFF, 0),
        "w64dev": lambda v: w64(s, dev.data_ptr(), v, 0),
    }
    usable = {}
    for name, f in variants.items():
        rc = 0 if f is None else f(1)
        torch.cuda.synchronize()
        usable[name] = rc == 0
        emit(variant=name, rc=rc)
    emit(check_host_value=int(pinned[0]), check_dev_value=int(dev[0].item()))
    for kname, n in SIZES.items():
        x = torch.zeros(n, device="cuda")
        per = {k: [] for k in variants if usable[k]}
        for _ in range(REPS):
            for name in per:
                f = variants[name]
                for i in range(50):  # warm
                    if f:
                        f(i)
                    x.add_(1)
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for i in range(ITERS):
                    if f:
                        f(i)
                    x.add_(1)
                b.record()
                b.synchronize()
                per[name].append(a.elapsed_time(b) * 1e3 / ITERS)
        base = statistics.median(per["none"])
        for name, v in per.items():
            m = statistics.median(v)
            emit(kernel=kname, variant=name, us_per_iter=round(m, 3), extra_us=round(m - base, 3),
                 reps=[round(t, 3) for t in v])
    # Host enqueue cost of the memop alone (ctypes call included).
    for name in ("w64", "w64nb", "w32"):
        if not usable[name]:
            continue
        f = variants[name]
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(ITERS):
            f(i)
        dt = (time.perf_counter() - t) * 1e6 / ITERS
        torch.cuda.synchronize()
        emit(host_enqueue=name, us_per_call=round(dt, 3))
    t = time.perf_counter()
    for _ in range(ITERS):
        host_dev_ptr(ctypes.byref(host), ctypes.c_void_p(pinned.data_ptr()), 0)
    emit(host_ctypes_call_us=round((time.perf_counter() - t) * 1e6 / ITERS, 3))


if __name__ == "__main__":
    main()
