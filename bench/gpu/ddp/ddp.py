"""DDP training of lm.py's transformer LM, one process per GPU, started by
torchrun (issue 19). Each rank prints one JSON line per step and, first,
which GPU it computes on (UUID) and its pid, so that a daemon's counters
by UUID can be matched to it.

Usage: torchrun --nproc-per-node N ddp.py STEPS
PRESCIENT_DDP_MODEL=llama: bench/gpu/runtime/jobs.py's Hugging Face
LlamaForCausalLM instead (12 layers, d 1024, batch 8 x 512, AdamW; the
model of runs 36-37), not deterministic.
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
    llama = os.environ.get("PRESCIENT_DDP_MODEL") == "llama"
    torch.manual_seed(0)
    if llama:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                          num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
        model = LlamaForCausalLM(cfg).to(dev)
        forward = lambda x: ddp(input_ids=x, labels=x).loss  # noqa: E731
        g = torch.Generator().manual_seed(1 + rank)
        batches = [torch.randint(0, cfg.vocab_size, (8, 512), generator=g) for _ in range(4)]
    else:
        lm.deterministic()
        model = lm.stages(1)[0].to(dev)
        forward = lambda x: lm.lm_loss(ddp(x), x)  # noqa: E731
        batches = lm.data(1 + rank)
    ddp = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    emit(rank=rank, local_rank=local, world=world, pid=os.getpid(), uuid=lm.uuid(dev),
         visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for i in range(steps):
        sync()
        t = time.perf_counter()
        x = batches[i % len(batches)].to(dev, non_blocking=True)
        loss = forward(x)
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
