"""Reference minGPT (GPT-2 architecture) in plain PyTorch, used to check fsdpc's numbers.

Written from the model's equations, not taken from minGPT, nanoGPT or `transformers`:
    x = wte[idx] + wpe[0..T)
    per block: x += c_proj(attn(ln_1(x)));  x += mlp.c_proj(gelu_tanh(c_fc(ln_2(x))))
    logits = ln_f(x) @ wte^T            (lm_head tied to the token embedding)
with causal multi-head attention, scores scaled by 1/sqrt(head_dim), q/k/v the three row blocks
of c_attn. Parameter names are fsdpc's (and Hugging Face GPT-2's): transformer.wte.weight, ...

Two weight layouts: fsdpc stores every linear weight as (out, in), as nn.Linear does; Hugging
Face's GPT2LMHeadModel uses Conv1D, whose weight is (in, out). `GPT(cfg, conv1d=True)` builds the
second layout, so an export can be loaded by name and shape without any transposing here.

usage: /usr/bin/python3 test/ref/gpt_ref.py greedy CKPT.h5 PROMPT N OUT
           greedy continuation (float64) of PROMPT's bytes by N tokens, as bytes into OUT
       /usr/bin/python3 test/ref/gpt_ref.py hf HF_DIR CKPT.h5 [--tol X]
           the export in HF_DIR (config.json + safetensors, Conv1D layout) gives the logits the
           checkpoint gives, on a fixed batch; config.json matches the checkpoint
"""

import json
import math
import os
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# model-agnostic helpers: name-by-name h5 loading, mean cross-entropy, greedy decoding
from llama_ref import generate_greedy, load_h5_weights, loss_fn  # noqa: E402,F401


@dataclass
class GPTConfig:
    hidden_width: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    max_context_width: int
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.hidden_width // self.num_heads


def config_from_h5_attrs(attrs):
    """A GPTConfig from the root attributes of an fsdpc checkpoint or test dump."""
    ints = ("hidden_width", "num_layers", "num_heads", "intermediate_size", "vocab_size", "max_context_width")
    cfg = {k: int(attrs[k]) for k in ints}
    if "norm_eps" in attrs:
        cfg["norm_eps"] = float(attrs["norm_eps"])
    return GPTConfig(**cfg)


def config_from_hf(hf):
    """A GPTConfig from a GPT-2 config.json dict (n_inner null means 4 * n_embd)."""
    assert hf.get("activation_function", "gelu_new") == "gelu_new", hf.get("activation_function")
    D = hf["n_embd"]
    return GPTConfig(hidden_width=D, num_layers=hf["n_layer"], num_heads=hf["n_head"],
                     intermediate_size=hf.get("n_inner") or 4 * D, vocab_size=hf["vocab_size"],
                     max_context_width=hf["n_positions"], norm_eps=hf.get("layer_norm_epsilon", 1e-5))


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight (in, out), y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


def linear(n_in, n_out, conv1d):
    return Conv1D(n_in, n_out) if conv1d else nn.Linear(n_in, n_out)


def gelu_tanh(x):
    """GELU's tanh approximation ("gelu_new"), spelled out so float64 runs it in float64."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class SelfAttention(nn.Module):
    def __init__(self, cfg, conv1d):
        super().__init__()
        self.cfg = cfg
        D = cfg.hidden_width
        self.c_attn = linear(D, 3 * D, conv1d)  # q, k, v side by side
        self.c_proj = linear(D, D, conv1d)

    def forward(self, x):
        B, T, D = x.shape
        H, hd = self.cfg.num_heads, self.cfg.head_dim
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in self.c_attn(x).split(D, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, cfg, conv1d):
        super().__init__()
        self.c_fc = linear(cfg.hidden_width, cfg.intermediate_size, conv1d)
        self.c_proj = linear(cfg.intermediate_size, cfg.hidden_width, conv1d)

    def forward(self, x):
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg, conv1d):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_width, eps=cfg.norm_eps)
        self.attn = SelfAttention(cfg, conv1d)
        self.ln_2 = nn.LayerNorm(cfg.hidden_width, eps=cfg.norm_eps)
        self.mlp = MLP(cfg, conv1d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """minGPT causal LM; no lm_head parameter (tied to transformer.wte.weight)."""

    def __init__(self, cfg, conv1d=False):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.hidden_width),
            wpe=nn.Embedding(cfg.max_context_width, cfg.hidden_width),
            h=nn.ModuleList(Block(cfg, conv1d) for _ in range(cfg.num_layers)),
            ln_f=nn.LayerNorm(cfg.hidden_width, eps=cfg.norm_eps),
        ))
        # tests overwrite every weight from a file; this only keeps a fresh model finite
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        """idx (B,T) integer tokens -> logits (B,T,V)."""
        T = idx.shape[1]
        assert T <= self.cfg.max_context_width
        tr = self.transformer
        x = tr.wte(idx.long()) + tr.wpe(torch.arange(T, device=idx.device))
        for block in tr.h:
            x = block(x)
        return tr.ln_f(x) @ tr.wte.weight.t()


def adamw_for(model, lr, betas, eps, weight_decay):
    """AdamW decaying only the blocks' linear weights, as fsdpc's minGPT plan marks them (decay=1):
    not the embeddings, LayerNorms or biases."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 and name.startswith("transformer.h.") else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def load_h5(path, dtype=torch.float64):
    """The GPT (nn.Linear layout) of an fsdpc checkpoint file."""
    import h5py

    with h5py.File(path, "r") as f:
        model = GPT(config_from_h5_attrs(f.attrs))
        load_h5_weights(model, f)
    return model.to(dtype)


def load_hf(path, dtype=torch.float64):
    """(model in the Conv1D layout, config.json dict) of a Hugging Face GPT-2 directory, read by
    hf_read (numpy + json: safetensors parsed by hand)."""
    from hf_read import read_source

    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    model = GPT(config_from_hf(hf), conv1d=True)
    tensors = read_source(path)
    params = dict(model.named_parameters())
    tied = hf.get("tie_word_embeddings", True)
    assert tied and "lm_head.weight" not in tensors, "expected lm_head tied to wte and not stored"
    missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
    assert not missing and not extra, f"missing {missing}, unexpected {extra}"
    with torch.no_grad():
        for name, p in params.items():
            src = torch.from_numpy(tensors[name])
            assert tuple(src.shape) == tuple(p.shape), f"{name}: file {tuple(src.shape)} vs model {tuple(p.shape)}"
            p.copy_(src)
    return model.to(dtype), hf


def end_of_text(tokenizer):
    """The <|endoftext|> id of a checkpoint's tokenizer attribute: GPT-2 names it for both bos and
    eos; None for the byte tokenizer (or any without one)."""
    tok = tokenizer.decode() if isinstance(tokenizer, bytes) else str(tokenizer)
    if not tok.endswith(".json"):
        return None
    with open(tok) as f:
        j = json.load(f)
    if not isinstance(j.get("model"), dict):  # encoder.json / vocab.json: the vocabulary itself
        return j.get("<|endoftext|>")
    for t in j.get("added_tokens", []):
        if t.get("content") == "<|endoftext|>":
            return t["id"]
    return j["model"].get("vocab", {}).get("<|endoftext|>")


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check_hf(hf_dir, ckpt, tol):
    """Logits of the export (Conv1D layout) against the checkpoint's (nn.Linear layout), and the
    config.json fields against the checkpoint's attributes. Returns the problems found."""
    import h5py

    with h5py.File(ckpt, "r") as f:
        attrs = dict(f.attrs)
    ref = load_h5(ckpt)
    got, hf = load_hf(hf_dir)
    cfg = ref.cfg
    problems = []
    want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": cfg.hidden_width,
            "n_layer": cfg.num_layers, "n_head": cfg.num_heads, "n_positions": cfg.max_context_width,
            "n_ctx": cfg.max_context_width, "vocab_size": cfg.vocab_size, "activation_function": "gelu_new",
            "tie_word_embeddings": True,
            "n_inner": None if cfg.intermediate_size == 4 * cfg.hidden_width else cfg.intermediate_size}
    for k, v in want.items():
        if k not in hf or hf[k] != v:
            problems.append(f"config.json {k} = {hf.get(k, '(absent)')!r}, expected {v!r}")
    if float(torch.tensor(hf.get("layer_norm_epsilon", -1.0), dtype=torch.float32)) != \
            float(torch.tensor(float(attrs["norm_eps"]), dtype=torch.float32)):
        problems.append(f"config.json layer_norm_epsilon = {hf.get('layer_norm_epsilon')!r}, checkpoint {attrs['norm_eps']}")
    end = end_of_text(attrs.get("tokenizer", b"byte"))
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(hf_dir, name)
        if not os.path.exists(path):
            problems.append(f"no {name}")
            continue
        with open(path) as f:
            c = json.load(f)
        for k in ("bos_token_id", "eos_token_id"):
            if k not in c or c[k] != end:
                problems.append(f"{name} {k} = {c.get(k, '(absent)')!r}, expected {end!r} (GPT-2's <|endoftext|>, null without one)")
    if hf.get("torch_dtype") == "float32":  # fp32: every tensor is the checkpoint's, bit for bit
        with h5py.File(ckpt, "r") as f:
            for name, p in got.named_parameters():
                want = f["model"][name][()]
                if isinstance(dict(got.named_modules())[name.rsplit(".", 1)[0]], Conv1D) and want.ndim == 2:
                    want = want.T  # Conv1D (in, out) against nn.Linear (out, in)
                if not torch.equal(p.detach().float(), torch.from_numpy(want.copy())):
                    problems.append(f"{name}: differs from the checkpoint's tensor")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.max_context_width), generator=g)
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
        _, ckpt, prompt, n, out = args
        ids = list(prompt.encode()) or [ord("\n")]  # the byte tokenizer's start: no BOS, "\n" for ""
        gen = generate_greedy(load_h5(ckpt), ids, int(n))
        text = prompt.encode() + bytes(gen[len(ids):])
        with open(out, "wb") as f:
            f.write(text)
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
