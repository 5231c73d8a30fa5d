"""A GPT-style transformer LM in plain PyTorch (issue 19's GPU runs):
token embedding, pre-norm causal transformer layers, a vocabulary head.
Nothing of Prescient in it. `blocks(cfg)` builds it as a list of stages so
that a pipeline run can put each stage on its own GPU.

The attention runs PyTorch's math path (no flash or memory-efficient
kernels) and the job runs with torch.use_deterministic_algorithms, so two
runs of the same job give bit-identical losses: a run under Prescient can
be compared with one without it exactly.
"""
import os

import torch
from torch import nn

# A 12-layer, d=1024 LM with a 32k vocabulary, batch 8 x 512: about 10 GB
# with AdamW (the size of run 36-37's one-GPU lm job). PRESCIENT_LM_TINY=1
# (a CPU dry run) shrinks it.
TINY = os.environ.get("PRESCIENT_LM_TINY") == "1"
CFG = dict(vocab=512, d=64, heads=4, ffn=128, layers=4, batch=2, seq=32) if TINY else \
    dict(vocab=32000, d=1024, heads=16, ffn=4096, layers=12, batch=8, seq=512)


def deterministic():
    """Bit-identical runs: deterministic kernels, the math attention path."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only: an op with no deterministic kernel warns (and the loss
    # comparison then says whether it mattered) instead of stopping the job.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    for f in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(torch.backends.cuda, f):
            getattr(torch.backends.cuda, f)(False)


class Embed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok = nn.Embedding(c["vocab"], c["d"])
        self.pos = nn.Embedding(c["seq"], c["d"])

    def forward(self, x):
        return self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))


class Layers(nn.Module):
    def __init__(self, c, n):
        super().__init__()
        layer = nn.TransformerEncoderLayer(c["d"], c["heads"], c["ffn"], dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.stack = nn.TransformerEncoder(layer, n, enable_nested_tensor=False)

    def forward(self, h):
        mask = nn.Transformer.generate_square_subsequent_mask(h.shape[1], device=h.device)
        return self.stack(h, mask=mask, is_causal=True)


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c["d"])
        self.out = nn.Linear(c["d"], c["vocab"])

    def forward(self, h):
        return self.out(self.norm(h))


def stages(split):
    """The model as `split` stages (1: one module; 2: embedding and the
    first half of the layers, then the second half and the head)."""
    c, n = CFG, CFG["layers"]
    if split == 1:
        return [nn.Sequential(Embed(c), Layers(c, n), Head(c))]
    return [nn.Sequential(Embed(c), Layers(c, n // 2)), nn.Sequential(Layers(c, n - n // 2), Head(c))]


def data(seed, n=4):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, CFG["vocab"], (CFG["batch"], CFG["seq"]), generator=g) for _ in range(n)]


def lm_loss(logits, x):
    """Next-token cross entropy."""
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))


def uuid(dev):
    """The GPU's UUID as nvidia-smi prints it ("cpu" on a CPU)."""
    if dev.type != "cuda":
        return "cpu"
    return "GPU-" + str(torch.cuda.get_device_properties(dev).uuid)
