"""Plain PyTorch training jobs with nothing of Prescient in them (issue 15):
run them plainly and under `prescientctl run`, and compare.

Usage: python3 jobs.py MODEL STEPS
MODEL: "lm"      a Hugging Face transformers causal LM (Llama architecture)
                 built from a config, random init, random tokens;
       "lmbig"   the same, 24 layers at batch 4 x 256 (374M parameters):
                 its parameters, gradients and Adam state alone (6.0 GB)
                 exceed half of its memory (issue 20's FSDP case);
       "resnet"  torchvision ResNet-50, random images, SGD;
       "encoder" bench/gpu/torch/train.py's transformer encoder with its
                 allocator code removed (plain torch).
Prints one JSON line per step ({"step", "loss", "ms", "end_s": its end, Unix seconds}) and a last line with
torch.cuda.memory_stats() and mem_get_info(), so that a run's losses can be
compared with another run's. cudnn.benchmark is on.

Each model is built on the CPU by a builder (`BUILDERS`) that returns a
`Job`; this file moves it to the GPU and trains it as is. alt.py trains the
same `Job`s the way a user would without Prescient (a memory cap,
activation checkpointing, FSDP with CPU offload): one builder for both keeps
the weights, the data and so the losses the same.
"""
import json
import sys
import time
from typing import Callable, NamedTuple

import torch


class Job(NamedTuple):
    model: torch.nn.Module  # on the CPU, initialised
    make_opt: Callable  # parameters -> optimizer
    loss: Callable  # (model, step, device) -> loss of that step's batch
    block: type  # the repeated layer: what checkpointing and FSDP wrap


def emit(**kv):
    print(json.dumps(kv), flush=True)


LM_SIZES = {
    # layers, batch, sequence
    "lm": (12, 8, 512),
    "lmbig": (24, 4, 256),
}
# hidden size, MLP size, vocabulary (module constants: tests shrink them)
LM_DIMS = (1024, 2816, 32000)
RESNET_INPUT = (64, 224)  # batch, image side
ENCODER_DIMS = (1024, 32, 256)  # d_model, batch, sequence


def lm(kind="lm"):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    layers, batch, seq = LM_SIZES[kind]
    hidden, inter, vocab = LM_DIMS
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, cfg.vocab_size, (batch, seq), generator=g) for _ in range(4)]

    def loss(m, i, dev):
        x = data[i % len(data)].to(dev, non_blocking=True)
        return m(input_ids=x, labels=x).loss
    return Job(model, lambda p: torch.optim.AdamW(p, lr=1e-4), loss, LlamaDecoderLayer)


def resnet():
    import torchvision
    from torchvision.models.resnet import Bottleneck

    model = torchvision.models.resnet50(num_classes=1000)
    g = torch.Generator().manual_seed(2)
    b, side = RESNET_INPUT
    data = [(torch.randn(b, 3, side, side, generator=g), torch.randint(0, 1000, (b,), generator=g)) for _ in range(4)]
    lossf = torch.nn.CrossEntropyLoss()

    def loss(m, i, dev):
        x, y = data[i % len(data)]
        return lossf(m(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True))
    return Job(model, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), loss, Bottleneck)


class Encoder(torch.nn.Module):
    """The encoder and its head as one module (the head was a second module
    with its parameters in the same optimizer: the same arithmetic)."""

    def __init__(self, d):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, 16, 4 * d, dropout=0.0, batch_first=True)
        self.body = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False))
        self.head = torch.nn.Linear(d, 16)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=1))


def encoder():
    d, b, seq = ENCODER_DIMS
    model = Encoder(d)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(b, seq, d, generator=g), torch.randint(0, 16, (b,), generator=g)) for _ in range(4)]
    lossf = torch.nn.CrossEntropyLoss()

    def loss(m, i, dev):
        x, y = data[i % len(data)]
        return lossf(m(x.to(dev)), y.to(dev))
    return Job(model, lambda p: torch.optim.Adam(p, lr=1e-4), loss, torch.nn.TransformerEncoderLayer)


BUILDERS = {"lm": lm, "lmbig": lambda: lm("lmbig"), "resnet": resnet, "encoder": encoder}


def train(step, steps, sync=torch.cuda.synchronize):
    """Runs `step(i)` STEPS times, one JSON line each with its loss and time."""
    for i in range(steps):
        sync()
        t = time.perf_counter()
        loss = step(i)
        sync()
        emit(step=i, loss=float(loss.item()), ms=(time.perf_counter() - t) * 1e3, end_s=time.time())


def done(kind, **extra):
    st = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    emit(done=kind, peak_allocated=st["allocated_bytes.all.peak"], reserved=st["reserved_bytes.all.current"],
         peak_reserved=st["reserved_bytes.all.peak"], num_alloc_retries=st["num_alloc_retries"],
         num_ooms=st["num_ooms"], mem_free=free, mem_total=total,
         backend=torch.cuda.get_allocator_backend(), cudnn_benchmark=torch.backends.cudnn.benchmark, **extra)


def main():
    kind, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    job = BUILDERS[kind]()
    model = job.model.cuda()
    opt = job.make_opt(model.parameters())

    def step(i):
        loss = job.loss(model, i, "cuda")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    train(step, steps)
    done(kind)


if __name__ == "__main__":
    main()
