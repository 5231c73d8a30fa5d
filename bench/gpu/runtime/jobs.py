"""Plain PyTorch training jobs with nothing of Prescient in them (issue 15):
run them plainly and under `prescientctl run`, and compare.

Usage: python3 jobs.py MODEL STEPS
MODEL: "lm"      a Hugging Face transformers causal LM (Llama architecture)
                 built from a config, random init, random tokens;
       "resnet"  torchvision ResNet-50, random images, SGD;
       "encoder" bench/gpu/torch/train.py's transformer encoder with its
                 allocator code removed (plain torch).
Prints one JSON line per step ({"step", "loss", "ms"}) and a last line with
torch.cuda.memory_stats() and mem_get_info(), so that a run's losses can be
compared with another run's. cudnn.benchmark is on.
"""
import json
import sys
import time

import torch


def emit(**kv):
    print(json.dumps(kv), flush=True)


def lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, cfg.vocab_size, (8, 512), generator=g) for _ in range(4)]

    def step(i):
        x = data[i % len(data)].cuda(non_blocking=True)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def resnet():
    import torchvision

    model = torchvision.models.resnet50(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(64, 3, 224, 224, generator=g), torch.randint(0, 1000, (64,), generator=g)) for _ in range(4)]
    lossf = torch.nn.CrossEntropyLoss()

    def step(i):
        x, y = data[i % len(data)]
        loss = lossf(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def encoder():
    d = 1024
    layer = torch.nn.TransformerEncoderLayer(d, 16, 4 * d, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)).cuda()
    head = torch.nn.Linear(d, 16).cuda()
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(32, 256, d, generator=g), torch.randint(0, 16, (32,), generator=g)) for _ in range(4)]
    lossf = torch.nn.CrossEntropyLoss()

    def step(i):
        x, y = data[i % len(data)]
        loss = lossf(head(model(x.cuda()).mean(dim=1)), y.cuda())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def main():
    kind, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    step = {"lm": lm, "resnet": resnet, "encoder": encoder}[kind]()
    for i in range(steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = step(i)
        torch.cuda.synchronize()
        emit(step=i, loss=float(loss.item()), ms=(time.perf_counter() - t) * 1e3)
    st = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    emit(done=kind, peak_allocated=st["allocated_bytes.all.peak"], reserved=st["reserved_bytes.all.current"],
         num_alloc_retries=st["num_alloc_retries"], mem_free=free, mem_total=total,
         backend=torch.cuda.get_allocator_backend(), cudnn_benchmark=torch.backends.cudnn.benchmark)


if __name__ == "__main__":
    main()
