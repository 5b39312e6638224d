"""LoRA (Hu et al. 2021) on a reference model, from PEFT's published formulas: an adapted
nn.Linear computes y = x W^T + s * (x A^T) B^T with A (r, in) and B (out, r) held as
<module>.lora_A.weight and <module>.lora_B.weight (PEFT's saved names), s = alpha / r, or
alpha / sqrt(r) with rsLoRA; the base weights are frozen. (Dropout on the adapter input is
fsdpc's masks, not reproduced here: parity runs without it.)
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class LoraLinear(nn.Linear):
    """An nn.Linear whose class is switched in place, so its weight keeps its name."""

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) + self.lora_scale * self.lora_B(self.lora_A(x))


def scale_from_attrs(attrs):
    r, alpha = int(attrs["lora_rank"]), float(attrs["lora_alpha"])
    return alpha / math.sqrt(r) if int(attrs.get("use_rslora", 0)) else alpha / r


def attach(model, names, r, scale):
    """Adapts the modules whose <module>.lora_A.weight is in names (a checkpoint's tensors) and
    freezes every other parameter."""
    for p in model.parameters():
        p.requires_grad_(False)
    modules = dict(model.named_modules())
    adapted = sorted(n[: -len(".lora_A.weight")] for n in names if n.endswith(".lora_A.weight"))
    for m in adapted:
        lin = modules[m]
        assert isinstance(lin, nn.Linear), f"{m} is not a linear layer"
        lin.lora_A = nn.Linear(lin.in_features, r, bias=False)
        lin.lora_B = nn.Linear(r, lin.out_features, bias=False)
        lin.lora_scale = scale
        lin.__class__ = LoraLinear
    return adapted


def attach_from_h5(model, f):
    """attach() with a dump's or checkpoint's attributes and /model tensors; no-op without LoRA."""
    if int(f.attrs.get("lora_rank", 0)) == 0:
        return []
    return attach(model, list(f["model"].keys()), int(f.attrs["lora_rank"]), scale_from_attrs(f.attrs))
