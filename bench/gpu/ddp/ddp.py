"""DDP training of lm.py's transformer LM, one process per GPU, started by
torchrun (issue 19). Each rank prints one JSON line per step and, first,
which GPU it computes on (UUID) and its pid, so that a daemon's counters
by UUID can be matched to it.

Usage: torchrun --nproc-per-node N ddp.py STEPS
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import lm


def emit(**kv):
    print(json.dumps(kv), flush=True)


def main():
    steps = int(sys.argv[1])
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo")
    lm.deterministic()
    torch.manual_seed(0)
    model = lm.stages(1)[0].to(dev)
    ddp = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = lm.data(1 + rank)
    emit(rank=rank, local_rank=local, world=world, pid=os.getpid(), uuid=lm.uuid(dev),
         visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for i in range(steps):
        sync()
        t = time.perf_counter()
        x = batches[i % len(batches)].to(dev, non_blocking=True)
        loss = lm.lm_loss(ddp(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        emit(rank=rank, step=i, loss=float(loss.item()), ms=(time.perf_counter() - t) * 1e3)
    if cuda:
        free, total = torch.cuda.mem_get_info()
        emit(rank=rank, done=True, peak_reserved=torch.cuda.max_memory_reserved(),
             peak_allocated=torch.cuda.max_memory_allocated(), mem_free=free, mem_total=total)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
