"""Reference GPT-NeoX (GPTNeoXForCausalLM's architecture) in plain PyTorch, to check fsdpc's numbers.

Written from the published architecture (the GPT-NeoX paper and the Hugging Face model card's
description), not taken from `transformers` or EleutherAI's code:
    x = embed_in[idx]
    per block (parallel residual): x = x + dense(attn(ln1(x))) + mlp(ln2(x))
        mlp(y) = dense_4h_to_h(gelu(dense_h_to_4h(y)))        gelu: hidden_act (exact erf, or tanh)
    logits = final_layer_norm(x) @ embed_out^T                  (untied)
Attention: query_key_value's output, per token, is H groups of (q, k, v), each head_dim wide;
the first rotary_ndims = int(head_dim * rotary_pct) dimensions of every q and k head are rotated
(rotate_half over those dimensions: angle t * base^(-2i/rotary_ndims)), the rest pass through;
causal softmax with scores scaled by 1/sqrt(head_dim). LayerNorms and linears have biases.
Parameter names are Hugging Face's (and fsdpc's): gpt_neox.embed_in.weight, ...

usage: /usr/bin/python3 test/ref/neox_ref.py greedy HF_DIR PROMPT N OUT
           greedy continuation (float64) of PROMPT's bytes by N tokens, as bytes into OUT (the
           byte tokenizer: V = 256)
       /usr/bin/python3 test/ref/neox_ref.py hf HF_DIR CKPT.h5 [--tol X]
           the export in HF_DIR (config.json + safetensors) gives the logits the checkpoint
           gives on a fixed batch, and config.json matches the checkpoint
       /usr/bin/python3 test/ref/neox_ref.py logits HF_DIR TOKENS_FILE OUT.npy
           logits (float64) of the model in HF_DIR on the int32 tokens of TOKENS_FILE (one row)
"""

import json
import math
import os
import sys
from dataclasses import dataclass

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import generate_greedy, load_h5_weights, loss_fn  # noqa: E402,F401  (model-agnostic helpers)


@dataclass
class NeoXConfig:
    hidden_width: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    max_context_width: int
    rope_theta: float = 10000.0
    rotary_pct: float = 0.25
    norm_eps: float = 1e-5
    hidden_act: str = "gelu"  # or gelu_new / gelu_fast / gelu_pytorch_tanh: the tanh approximation

    @property
    def head_dim(self):
        return self.hidden_width // self.num_heads

    @property
    def rotary_ndims(self):
        return int(self.head_dim * self.rotary_pct)


def config_from_h5_attrs(attrs):
    """A NeoXConfig from the root attributes of an fsdpc checkpoint or test dump."""
    ints = ("hidden_width", "num_layers", "num_heads", "intermediate_size", "vocab_size", "max_context_width")
    cfg = {k: int(attrs[k]) for k in ints}
    for k in ("rope_theta", "rotary_pct", "norm_eps"):
        if k in attrs:
            # the file holds float32: the value as fsdpc uses it
            cfg[k] = float(torch.tensor(float(attrs[k]), dtype=torch.float32))
    # hidden_act is stored as its number in fsdpc's list (absent: gelu)
    cfg["hidden_act"] = HIDDEN_ACTS[int(attrs.get("hidden_act", 0))]
    return NeoXConfig(**cfg)


def config_from_hf(hf):
    """A NeoXConfig from a GPTNeoXConfig config.json dict (GPTNeoXConfig's defaults when absent)."""
    assert hf.get("hidden_act", "gelu") in HIDDEN_ACTS, hf.get("hidden_act")
    assert hf.get("use_parallel_residual", True), "sequential residual"
    return NeoXConfig(hidden_width=hf["hidden_size"], num_layers=hf["num_hidden_layers"],
                      num_heads=hf["num_attention_heads"], intermediate_size=hf["intermediate_size"],
                      vocab_size=hf["vocab_size"], max_context_width=hf.get("max_position_embeddings", 2048),
                      rope_theta=float(hf.get("rotary_emb_base", 10000.0)), rotary_pct=float(hf.get("rotary_pct", 0.25)),
                      norm_eps=float(hf.get("layer_norm_eps", 1e-5)), hidden_act=hf.get("hidden_act", "gelu"))


HIDDEN_ACTS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh")


def gelu(x, act):
    """GELU, spelled out so float64 runs it in float64: exact (x * Phi(x)) for "gelu"; the tanh
    approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) for each of its three names."""
    if act == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rotate(x, t, rot, base):
    """x (B, H, T, hd): its first rot dimensions rotated by position (rotate_half convention)."""
    half = rot // 2
    inv = 1.0 / base ** (torch.arange(0, half, dtype=torch.float64) * 2.0 / rot)
    ang = t.to(torch.float64)[:, None] * inv[None, :]  # (T, half)
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1).to(x.dtype)
    xr, rest = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., :half], xr[..., half:]
    turned = torch.cat([-x2, x1], dim=-1)
    return torch.cat([xr * cos + turned * sin, rest], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D = cfg.hidden_width
        self.query_key_value = nn.Linear(D, 3 * D)
        self.dense = nn.Linear(D, D)

    def forward(self, x):
        B, T, D = x.shape
        H, hd = self.cfg.num_heads, self.cfg.head_dim
        fused = self.query_key_value(x).view(B, T, H, 3 * hd).transpose(1, 2)  # (B, H, T, 3hd)
        q, k, v = fused[..., :hd], fused[..., hd:2 * hd], fused[..., 2 * hd:]
        t = torch.arange(T)
        q = rotate(q, t, self.cfg.rotary_ndims, self.cfg.rope_theta)
        k = rotate(k, t, self.cfg.rotary_ndims, self.cfg.rope_theta)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        return self.dense((att @ v).transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(cfg.hidden_width, cfg.intermediate_size)
        self.dense_4h_to_h = nn.Linear(cfg.intermediate_size, cfg.hidden_width)
        self.act = cfg.hidden_act

    def forward(self, x):
        return self.dense_4h_to_h(gelu(self.dense_h_to_4h(x), self.act))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_width, eps=cfg.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_width, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x):
        return x + self.attention(self.input_layernorm(x)) + self.mlp(self.post_attention_layernorm(x))


class NeoX(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.gpt_neox = nn.ModuleDict(dict(
            embed_in=nn.Embedding(cfg.vocab_size, cfg.hidden_width),
            layers=nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers)),
            final_layer_norm=nn.LayerNorm(cfg.hidden_width, eps=cfg.norm_eps),
        ))
        self.embed_out = nn.Linear(cfg.hidden_width, cfg.vocab_size, bias=False)

    def forward(self, idx):
        """idx (B,T) integer tokens -> logits (B,T,V)."""
        m = self.gpt_neox
        x = m.embed_in(idx.long())
        for layer in m.layers:
            x = layer(x)
        return self.embed_out(m.final_layer_norm(x))


def adamw_for(model, lr, betas, eps, weight_decay):
    """AdamW decaying the 2-D tensors (embeddings, linear weights) as fsdpc's plan marks them; not
    the LayerNorms or biases."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def load_h5(path, dtype=torch.float64):
    import h5py

    with h5py.File(path, "r") as f:
        model = NeoX(config_from_h5_attrs(f.attrs))
        load_h5_weights(model, f)
    return model.to(dtype)


def load_hf(path, dtype=torch.float64):
    """(model, config.json dict) of a Hugging Face GPT-NeoX directory, read by hf_read."""
    from hf_read import read_source

    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    model = NeoX(config_from_hf(hf))
    tensors = {k: v for k, v in read_source(path).items() if not k.endswith(".rotary_emb.inv_freq")}
    params = dict(model.named_parameters())
    missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
    assert not missing and not extra, f"missing {missing}, unexpected {extra}"
    with torch.no_grad():
        for name, p in params.items():
            src = torch.from_numpy(tensors[name])
            assert tuple(src.shape) == tuple(p.shape), f"{name}: file {tuple(src.shape)} vs model {tuple(p.shape)}"
            p.copy_(src)
    return model.to(dtype), hf


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def f32(x):
    return float(torch.tensor(float(x), dtype=torch.float32))


def check_hf(hf_dir, ckpt, tol):
    """Logits of the export against the checkpoint's, and config.json against the checkpoint's
    attributes. Returns the problems found."""
    import h5py

    with h5py.File(ckpt, "r") as f:
        attrs = dict(f.attrs)
    ref = load_h5(ckpt)
    got, hf = load_hf(hf_dir)
    cfg = ref.cfg
    problems = []
    want = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": cfg.hidden_width,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size, "hidden_act": cfg.hidden_act,
            "use_parallel_residual": True, "tie_word_embeddings": False}
    for k, v in want.items():
        if k not in hf or hf[k] != v:
            problems.append(f"config.json {k} = {hf.get(k, '(absent)')!r}, expected {v!r}")
    for key, attr in (("rotary_pct", "rotary_pct"), ("rotary_emb_base", "rope_theta"), ("layer_norm_eps", "norm_eps")):
        if key not in hf or f32(hf[key]) != f32(attrs[attr]):
            problems.append(f"config.json {key} = {hf.get(key, '(absent)')!r}, checkpoint {attr} {attrs[attr]}")
    if hf.get("torch_dtype") == "float32":  # fp32: every tensor is the checkpoint's, bit for bit
        with h5py.File(ckpt, "r") as f:
            for name, p in got.named_parameters():
                if not torch.equal(p.detach().float(), torch.from_numpy(f["model"][name][()])):
                    problems.append(f"{name}: differs from the checkpoint's tensor")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (2, min(cfg.max_context_width, 64)), generator=g)
    with torch.no_grad():
        a, b = got(idx), ref(idx)
    err = rel_err(a, b)
    print(f"export logits vs checkpoint logits: max rel err {err:.3g} (tol {tol:g})")
    if not err <= tol:
        problems.append(f"logits differ: max rel err {err:.3g} > {tol:g}")
    return problems


def main():
    args = sys.argv[1:]
    if len(args) == 5 and args[0] == "greedy":
        _, hf_dir, prompt, n, out = args
        ids = list(prompt.encode()) or [ord("\n")]  # the byte tokenizer's start: no BOS, "\n" for ""
        with torch.no_grad():
            gen = generate_greedy(load_hf(hf_dir)[0], ids, int(n))
        with open(out, "wb") as f:
            f.write(prompt.encode() + bytes(gen[len(ids):]))
    elif len(args) in (3, 5) and args[0] == "hf":
        tol = float(args[4]) if len(args) == 5 and args[3] == "--tol" else 1e-5
        problems = check_hf(args[1], args[2], tol)
        for p in problems[:20]:
            print(p, file=sys.stderr)
        sys.exit(1 if problems else 0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
