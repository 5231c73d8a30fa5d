"""An unmodified-style PyTorch training loop on CUDA Unified Memory (issue 5).

Every tensor PyTorch puts on the GPU comes from cudaMallocManaged, through the
pluggable allocator in managed_alloc.cu. A zero-copy input pipeline: each
iteration the CPU writes the next batch straight into the managed input
tensor (as a loader writing into UM would), so the GPU faults the input back
every iteration; weights, optimizer state and activations stay on the GPU.
Prescient attaches from outside (prescientd attach --pid, or the service).

Usage: python3 train.py ITERS BATCH FEATURES HIDDEN [MODEL]   (prints JSON lines like umbench)
MODEL "mlp" (default): a 3-layer MLP, FEATURES inputs, HIDDEN units.
MODEL "transformer": a 6-layer transformer encoder (16 heads, feed-forward
4 x HIDDEN, no dropout) over sequences of FEATURES tokens of HIDDEN
dimensions, mean-pooled into 16 classes; the CPU writes the token
embeddings (BATCH x FEATURES x HIDDEN) into managed memory each iteration.
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


XF_LAYERS = 6
XF_HEADS = 16


class Encoder(torch.nn.Module):
    """A ViT/BERT-like encoder: token embeddings in, 16 classes out."""

    def __init__(self, d):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, XF_HEADS, 4 * d, dropout=0.0, batch_first=True)
        self.layers = torch.nn.TransformerEncoder(layer, XF_LAYERS, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, 16)

    def forward(self, x):
        return self.head(self.layers(x).mean(dim=1))


def main():
    iters, batch, feat, hidden = (int(a) for a in sys.argv[1:5])
    kind = sys.argv[5] if len(sys.argv) > 5 else "mlp"
    if kind not in ("mlp", "transformer"):
        print(f"unknown MODEL {kind!r}: mlp or transformer", file=sys.stderr)
        sys.exit(2)
    so = os.environ.get("UM_ALLOC_SO", os.path.join(HERE, "managed_alloc.so"))
    alloc = torch.cuda.memory.CUDAPluggableAllocator(so, "prescient_um_malloc", "prescient_um_free")
    torch.cuda.memory.change_current_allocator(alloc)
    lib = ctypes.CDLL(so)
    lib.prescient_um_bytes.restype = ctypes.c_size_t
    free, total = torch.cuda.mem_get_info()
    # Input + 3 layers of weights with Adam (x4) + activations: refuse what
    # would not fit in half the free memory (never oversubscribe a shared GPU).
    if kind == "mlp":
        need = 4 * (batch * feat + 4 * (feat * hidden + hidden * hidden + hidden * 16) + 6 * batch * hidden)
    else:
        # Per layer: 12 d^2 weights x4 (Adam); about 16 saved (B, S, d)
        # activations and 3 (B, heads, S, S) attention tensors.
        tokens = batch * feat
        need = 4 * (tokens * hidden + XF_LAYERS * (48 * hidden * hidden + 16 * tokens * hidden
                                                   + 3 * batch * XF_HEADS * feat * feat))
    if need > free // 2:
        print(f"refusing: about {need} managed bytes > half of free GPU memory {free}", file=sys.stderr)
        sys.exit(3)
    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(feat, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, 16),
        ).cuda()
        shape = (batch, feat)
    else:
        model = Encoder(hidden).cuda()
        shape = (batch, feat, hidden)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.empty(*shape, device="cuda")
    y = torch.empty(batch, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    # CPU views of the managed input: the "loader" writes through them.
    xv = np.ctypeslib.as_array(ctypes.cast(x.data_ptr(), ctypes.POINTER(ctypes.c_float)), shape=shape)
    yv = np.ctypeslib.as_array(ctypes.cast(y.data_ptr(), ctypes.POINTER(ctypes.c_int64)), shape=(batch,))
    rng = np.random.default_rng(0)
    pool = [rng.standard_normal(shape, dtype=np.float32) for _ in range(2)]
    labels = [rng.integers(0, 16, batch) for _ in range(2)]
    emit(event="alloc", managed_bytes=int(lib.prescient_um_bytes()), gpu_free=int(free), gpu_total=int(total), pid=os.getpid(),
         torch=torch.__version__)
    go = os.environ.get("PRESCIENT_GO")
    bench = "torch" if kind == "mlp" else "torch-transformer"
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
        emit(event="iter", bench=bench, iter=it, cpu_ms=round((t1 - t0) * 1e3, 3), gpu_ms=round((t2 - t1) * 1e3, 3),
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
    emit(event="summary", bench=bench, iters=iters, steady_iters=len(gpu[steady]),
         median_gpu_ms=statistics.median(gpu[steady]), median_iter_ms=statistics.median(tot[steady]),
         mean_gpu_ms=statistics.mean(gpu[steady]), mean_iter_ms=statistics.mean(tot[steady]),
         checksum=ck, managed_bytes=int(lib.prescient_um_bytes()),
         marks=dict(dead_blocks=marks[0], alive_blocks=marks[1], requests=marks[2],
                    alive_wait_ms=round(marks[3] / 1e6, 3), refused=marks[4], on=bool(marks[5])))


if __name__ == "__main__":
    main()
