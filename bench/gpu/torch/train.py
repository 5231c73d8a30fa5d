"""An unmodified-style PyTorch training loop on CUDA Unified Memory (issue 5).

Every tensor PyTorch puts on the GPU comes from cudaMallocManaged, through the
pluggable allocator in managed_alloc.cu. A zero-copy input pipeline: each
iteration the CPU writes the next batch straight into the managed input
tensor (as a loader writing into UM would), so the GPU faults the input back
every iteration; weights, optimizer state and activations stay on the GPU.
Prescient attaches from outside (prescientd --pid, or the service).

Usage: python3 train.py ITERS BATCH FEATURES HIDDEN   (prints JSON lines like umbench)
If PRESCIENT_GO is set, waits for that file after the first iteration's
allocations (so an attaching daemon sees every later allocation's faults).
If PRESCIENT_MARKS_SOCKET is set, the allocator marks freed blocks dead and
reused ones alive on that socket (managed_alloc.cu).
"""
import ctypes
import hashlib
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def emit(**kv):
    print(json.dumps(kv), flush=True)


def main():
    iters, batch, feat, hidden = (int(a) for a in sys.argv[1:5])
    so = os.environ.get("UM_ALLOC_SO", os.path.join(HERE, "managed_alloc.so"))
    alloc = torch.cuda.memory.CUDAPluggableAllocator(so, "prescient_um_malloc", "prescient_um_free")
    torch.cuda.memory.change_current_allocator(alloc)
    lib = ctypes.CDLL(so)
    lib.prescient_um_bytes.restype = ctypes.c_size_t
    free, total = torch.cuda.mem_get_info()
    # Input + 3 layers of weights with Adam (x4) + activations: refuse what
    # would not fit in half the free memory (never oversubscribe a shared GPU).
    need = 4 * (batch * feat + 4 * (feat * hidden + hidden * hidden + hidden * 16) + 6 * batch * hidden)
    if need > free // 2:
        print(f"refusing: about {need} managed bytes > half of free GPU memory {free}", file=sys.stderr)
        sys.exit(3)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(feat, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 16),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.empty(batch, feat, device="cuda")
    y = torch.empty(batch, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    # CPU views of the managed input: the "loader" writes through them.
    xv = np.ctypeslib.as_array(ctypes.cast(x.data_ptr(), ctypes.POINTER(ctypes.c_float)), shape=(batch, feat))
    yv = np.ctypeslib.as_array(ctypes.cast(y.data_ptr(), ctypes.POINTER(ctypes.c_int64)), shape=(batch,))
    rng = np.random.default_rng(0)
    pool = [rng.standard_normal((batch, feat), dtype=np.float32) for _ in range(2)]
    labels = [rng.integers(0, 16, batch) for _ in range(2)]
    emit(event="alloc", managed_bytes=int(lib.prescient_um_bytes()), gpu_free=int(free), gpu_total=int(total), pid=os.getpid(),
         torch=torch.__version__)
    go = os.environ.get("PRESCIENT_GO")
    losses, gpu, tot = [], [], []
    for it in range(iters):
        w0, t0 = time.time(), time.perf_counter()
        np.copyto(xv, pool[it % 2])
        yv[:] = labels[it % 2]
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        losses.append(float(loss.item()))
        gpu.append((t2 - t1) * 1e3)
        tot.append((t2 - t0) * 1e3)
        emit(event="iter", bench="torch", iter=it, cpu_ms=round((t1 - t0) * 1e3, 3), gpu_ms=round((t2 - t1) * 1e3, 3),
             loss=losses[-1], w0=w0, w1=time.time())
        if it == 0 and go:
            for _ in range(6000):
                if os.path.exists(go):
                    break
                time.sleep(0.01)
    steady = slice(2, None)
    # Same seed, same inputs: the loss sequence must not depend on Prescient.
    ck = hashlib.sha256(json.dumps([round(v, 4) for v in losses]).encode()).hexdigest()[:16]
    marks = (ctypes.c_uint64 * 6)()
    lib.prescient_um_mark_stats(marks)
    emit(event="summary", bench="torch", iters=iters, steady_iters=len(gpu[steady]),
         median_gpu_ms=statistics.median(gpu[steady]), median_iter_ms=statistics.median(tot[steady]),
         mean_gpu_ms=statistics.mean(gpu[steady]), mean_iter_ms=statistics.mean(tot[steady]),
         checksum=ck, managed_bytes=int(lib.prescient_um_bytes()),
         marks=dict(dead_blocks=marks[0], alive_blocks=marks[1], requests=marks[2],
                    alive_wait_ms=round(marks[3] / 1e6, 3), refused=marks[4], on=bool(marks[5])))


if __name__ == "__main__":
    main()
