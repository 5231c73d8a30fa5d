"""One process over two GPUs (issue 19): lm.py's transformer LM split in a
pipeline, the embedding and the first half of the layers on cuda:0, the
second half and the head on cuda:1. Deterministic (lm.deterministic), so
the losses of a run under Prescient must equal a run without it bit for
bit. Prints one JSON line per step and the two GPUs' UUIDs first.

Usage: python3 pipe.py STEPS
"""
import json
import sys
import time

import torch

import lm


def emit(**kv):
    print(json.dumps(kv), flush=True)


def main():
    steps = int(sys.argv[1])
    lm.deterministic()
    torch.manual_seed(0)
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= 2
    devs = [torch.device("cuda", i) for i in (0, 1)] if cuda else [torch.device("cpu")] * 2
    parts = [s.to(d) for s, d in zip(lm.stages(2), devs)]
    params = [p for s in parts for p in s.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    batches = lm.data(7)
    emit(gpus=[lm.uuid(d) for d in devs], pid=__import__("os").getpid())
    sync = (lambda: [torch.cuda.synchronize(d) for d in devs]) if cuda else (lambda: None)
    for i in range(steps):
        sync()
        t = time.perf_counter()
        x = batches[i % len(batches)]
        h = parts[0](x.to(devs[0]))
        logits = parts[1](h.to(devs[1]))
        loss = lm.lm_loss(logits, x.to(devs[1]))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        emit(step=i, loss=float(loss.item()), loss_hex=float(loss.item()).hex(), ms=(time.perf_counter() - t) * 1e3)
    if cuda:
        emit(done=True, peak_reserved=[torch.cuda.max_memory_reserved(d) for d in devs],
             peak_allocated=[torch.cuda.max_memory_allocated(d) for d in devs])


if __name__ == "__main__":
    main()
