"""What a PyTorch user would do without Prescient (issue 20): jobs.py's
jobs on plain device memory (cudaMalloc through PyTorch's caching
allocator), under a memory cap, with the usual ways to fit a job in less.

Usage: python3 alt.py MODEL STEPS [--cap BYTES] [--ckpt] [--fsdp]
  --cap BYTES  torch.cuda.set_per_process_memory_fraction(BYTES / the
               GPU's total memory) before anything is allocated: the
               allocator then refuses to hold more than BYTES (what a user
               sets to share a GPU; the same bytes as Prescient's budget).
  --ckpt       activation checkpointing: Hugging Face's
               gradient_checkpointing_enable() for the LMs; for the others
               PyTorch's apply_activation_checkpointing
               (torch.utils.checkpoint, non-reentrant) around every
               repeated block (jobs.Job.block: ResNet-50's 16 bottleneck
               blocks, the encoder's 6 layers).
  --fsdp       FullyShardedDataParallel with CPUOffload(offload_params=True)
               in this one process (world size 1, the process group made
               here: nccl on a GPU, gloo on the CPU), one FSDP unit per
               block: parameters, gradients and the optimizer (run on the
               CPU) live in host memory, each unit's parameters are copied
               to the GPU for its forward and backward.
  --fsdp2      the same with FSDP2: fully_shard(offload_policy=
               CPUOffloadPolicy()) on every block, then on the model.
  --device D   where to train (default cuda; cpu for tests).
Prints jobs.py's lines: one per step, then the memory line. A step that
runs out of memory prints {"oom": STEP, "error": ...} and the memory line,
and the process exits 3.
"""
import argparse
import sys

import torch

import jobs


def checkpointed(job, model):
    """Activation checkpointing as a user would turn it on."""
    if hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable()
        return "hf gradient_checkpointing_enable()"
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, job.block))
    return f"apply_activation_checkpointing({job.block.__name__})"


def fsdp_offload(job, model, dev):
    """FSDP with parameters and gradients offloaded to the CPU, one unit per block."""
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    kw = {"device_id": dev} if dev.type == "cuda" else {}
    return FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({job.block}),
                                    cpu_offload=CPUOffload(offload_params=True), **kw)


def fsdp2_offload(job, model, dev):
    """FSDP2 (fully_shard) with CPUOffloadPolicy, one unit per block and one for the rest."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh(dev.type, (1,))
    policy = CPUOffloadPolicy(pin_memory=dev.type == "cuda")
    for m in [m for m in model.modules() if isinstance(m, job.block)]:
        fully_shard(m, mesh=mesh, offload_policy=policy)
    return fully_shard(model, mesh=mesh, offload_policy=policy)


def parse(argv):
    p = argparse.ArgumentParser(description="jobs.py's jobs as a user would fit them without Prescient")
    p.add_argument("model", choices=sorted(jobs.BUILDERS))
    p.add_argument("steps", type=int)
    p.add_argument("--cap", type=int, help="bytes the caching allocator may hold")
    p.add_argument("--ckpt", action="store_true")
    shard = p.add_mutually_exclusive_group()
    shard.add_argument("--fsdp", action="store_true")
    shard.add_argument("--fsdp2", action="store_true")
    p.add_argument("--device", default="cuda")
    return p.parse_args(argv)


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and dev.index is None:  # FSDP wants the GPU's index
        dev = torch.device("cuda", torch.cuda.current_device())
    if a.cap is not None:
        if not cuda:
            sys.exit("--cap needs --device cuda")
        total = torch.cuda.get_device_properties(dev).total_memory
        if not 0 < a.cap <= total:
            sys.exit(f"--cap {a.cap}: must be above 0 and at most the GPU's {total} bytes")
        torch.cuda.set_per_process_memory_fraction(a.cap / total, dev)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    job = jobs.BUILDERS[a.model]()
    model = job.model
    how = []
    if a.fsdp:
        model = fsdp_offload(job, model, dev)
        how.append("fsdp CPUOffload(offload_params=True)")
    elif a.fsdp2:
        model = fsdp2_offload(job, model, dev)
        how.append("fsdp2 CPUOffloadPolicy()")
    else:
        model = model.to(dev)
    if a.ckpt:
        how.append(checkpointed(job, model))
    opt = job.make_opt(model.parameters())
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    at = [0]  # the step running, for the line an out-of-memory error prints

    def step(i):
        at[0] = i
        loss = job.loss(model, i, dev)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    extra = dict(cap=a.cap, how=how)
    try:
        jobs.train(step, a.steps, sync)
    except torch.OutOfMemoryError as e:
        jobs.emit(oom=at[0], error=str(e).splitlines()[0][:300])
        if cuda:
            jobs.done(a.model, **extra)
        sys.exit(3)
    if cuda:
        jobs.done(a.model, **extra)
    else:
        jobs.emit(done=a.model, **extra)


if __name__ == "__main__":
    main()
