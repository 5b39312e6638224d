"""Reference Llama (Llama-2, and Llama-3's scaled RoPE; Mistral's sliding window; Mixtral's sparse
mixture-of-experts MLP) in plain PyTorch, used to check fsdpc's numbers.

Written from the model definition in DESIGN.md rather than taken from Hugging Face
`transformers`, so it has no dependencies beyond torch. Parameter names equal the HF
`LlamaForCausalLM` names (`MixtralForCausalLM` names with num_experts > 0), which are also the
names in fsdpc checkpoints and test dumps.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    hidden_width: int
    num_layers: int
    num_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_context_width: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    # Llama-3.1/3.2's RoPE scaling (Hugging Face rope_type "llama3"): (factor, low_freq_factor,
    # high_freq_factor, original_max_position_embeddings), or None for plain RoPE
    rope_llama3: tuple = None
    # Mistral: a query at position i sees keys j with i - sliding_window < j <= i (0: all j <= i),
    # the mask of transformers' Mistral (its own token and the sliding_window - 1 before it)
    sliding_window: int = 0
    # fused attention (torch >= 2.0, flash kernels on a GPU) for speed baselines; the parity
    # tests keep the explicit softmax below
    sdpa: bool = False
    # Mixtral: num_experts > 0 replaces each block's MLP by a sparse mixture of that many experts,
    # num_experts_per_tok of them per token; the training loss (total_loss) adds the router's
    # load-balancing loss (Switch Transformer) and z-loss (ST-MoE) with these coefficients
    num_experts: int = 0
    num_experts_per_tok: int = 2
    router_aux_loss_coef: float = 0.0
    router_z_loss_coef: float = 0.0

    @property
    def head_dim(self):
        return self.hidden_width // self.num_heads


def config_from_h5_attrs(attrs):
    """Build a LlamaConfig from HDF5 root attributes (checkpoint or test dump)."""
    ints = ("hidden_width", "num_layers", "num_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size", "max_context_width")
    cfg = {k: int(attrs[k]) for k in ints}
    # Optional in the file: absent means the Llama-2 defaults.
    for k in ("rope_theta", "norm_eps"):
        if k in attrs:
            cfg[k] = float(attrs[k])
    if float(attrs.get("rope_scaling_factor", 1.0)) != 1.0:
        cfg["rope_llama3"] = tuple(float(attrs[k]) for k in ("rope_scaling_factor", "rope_low_freq_factor",
                                                             "rope_high_freq_factor", "rope_original_context"))
    if "sliding_window" in attrs:
        cfg["sliding_window"] = int(attrs["sliding_window"])
    # Mixtral (absent: a dense MLP, and no router losses)
    for k in ("num_experts", "num_experts_per_tok"):
        if k in attrs:
            cfg[k] = int(attrs[k])
    for k in ("router_aux_loss_coef", "router_z_loss_coef"):
        if k in attrs:
            cfg[k] = float(attrs[k])
    return LlamaConfig(**cfg)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # At least fp32 (as HF does for half inputs); fp64 stays fp64 for the reference run.
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_cos_sin(cfg, T, dtype, device=None):
    """cos/sin tables (T, head_dim) in the HF layout: the hd/2 frequencies repeated twice."""
    hd = cfg.head_dim
    # Angles in float64 so the reference itself adds no rounding beyond the final cast.
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    if cfg.rope_llama3:
        inv_freq = llama3_scale(inv_freq, *cfg.rope_llama3)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype=dtype, device=device), angles.sin().to(dtype=dtype, device=device)


def llama3_scale(inv_freq, factor, low, high, original):
    """Llama-3's frequency bands, from Meta's published description: wavelengths above
    original/low are slowed by factor, below original/high kept, and in between a linear blend
    of the two in original/wavelength."""
    out = []
    for f in inv_freq.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            s = (original / wavelen - low) / (high - low)
            out.append((1 - s) * f / factor + s * f)
    return torch.tensor(out, dtype=torch.float64)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D, H, KV, hd = cfg.hidden_width, cfg.num_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(D, H * hd, bias=False)
        self.k_proj = nn.Linear(D, KV * hd, bias=False)
        self.v_proj = nn.Linear(D, KV * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, D, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, KV, hd = self.cfg.num_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_proj(x).view(B, T, H, hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Grouped-query attention: query head h reads kv head h // (H // KV).
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        # masked: the future, and under a sliding window keys sliding_window or more positions back
        hidden = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        if self.cfg.sliding_window > 0:
            hidden |= torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-self.cfg.sliding_window)
        if self.cfg.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=~hidden)
            return self.o_proj(y.transpose(1, 2).reshape(B, T, H * hd))
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        att = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, F_ = cfg.hidden_width, cfg.intermediate_size
        self.gate_proj = nn.Linear(D, F_, bias=False)
        self.up_proj = nn.Linear(D, F_, bias=False)
        self.down_proj = nn.Linear(F_, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """One Mixtral expert: the Llama MLP under the names w1 (gate), w3 (up), w2 (down)."""

    def __init__(self, cfg):
        super().__init__()
        D, F_ = cfg.hidden_width, cfg.intermediate_size
        self.w1 = nn.Linear(D, F_, bias=False)
        self.w2 = nn.Linear(F_, D, bias=False)
        self.w3 = nn.Linear(D, F_, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def route(router_logits, k):
    """(N, E) router logits -> probs (N, E), the top-k experts (N, k) by probability (equal
    probabilities: the lower expert index first) and their probabilities renormalised to sum 1."""
    probs = router_logits.softmax(dim=-1)
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
    top = order[:, :k]
    w = probs.gather(1, top)
    return probs, top, w / w.sum(dim=-1, keepdim=True)


class SparseMoE(nn.Module):
    """Mixtral's block_sparse_moe: a linear router (gate) over num_experts experts, each token the
    weighted sum of its top num_experts_per_tok experts. Keeps the last forward's router logits
    (N, E) in self.router_logits for the router losses."""

    def __init__(self, cfg):
        super().__init__()
        self.k = cfg.num_experts_per_tok
        self.gate = nn.Linear(cfg.hidden_width, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(cfg) for _ in range(cfg.num_experts))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        self.router_logits = self.gate(x)
        _, top, w = route(self.router_logits, self.k)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            hit = top == e                                     # (N, k); at most one True per row
            rows = hit.any(dim=-1).nonzero().squeeze(-1)
            # run even with no rows, so an idle expert's gradient is zeros rather than None
            y = expert(x.index_select(0, rows)) * (w * hit).sum(dim=-1).index_select(0, rows).unsqueeze(-1)
            out = out.index_add(0, rows, y)
        return out.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_width, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_width, cfg.norm_eps)
        if cfg.num_experts > 0:
            self.block_sparse_moe = SparseMoE(cfg)
        else:
            self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        ffn = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        return x + ffn(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_width)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_width, cfg.norm_eps)


class Llama(nn.Module):
    """Llama-2 causal LM; `model.*` and `lm_head` give the HF parameter names."""

    def __init__(self, cfg, init_std=0.02):
        super().__init__()
        assert cfg.hidden_width % cfg.num_heads == 0 and cfg.num_heads % cfg.num_key_value_heads == 0
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_width, cfg.vocab_size, bias=False)
        # Tests overwrite these from a dump; the init only matters for benchmarks and fakes.
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=init_std)

    def forward(self, idx):
        """idx (B,T) integer tokens -> logits (B,T,V). With experts, self.router_logits is then
        the list over layers of that forward's (B*T, E) router logits (empty for a dense model)."""
        T = idx.shape[1]
        assert T <= self.cfg.max_context_width
        x = self.model.embed_tokens(idx.long())
        cos, sin = rope_cos_sin(self.cfg, T, x.dtype, x.device)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        self.router_logits = [layer.block_sparse_moe.router_logits for layer in self.model.layers
                              if hasattr(layer, "block_sparse_moe")]
        return self.lm_head(self.model.norm(x))


def loss_fn(logits, targets):
    """Mean next-token cross-entropy over all B*T positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


def load_balancing_loss(router_logits, k):
    """Switch Transformer's auxiliary loss with top-k routing, the mean over layers of
    E * sum_e f_e * P_e: f_e the (token, slot) assignments to expert e over the N tokens, divided
    by N (a count: no gradient), P_e the mean router probability of e. router_logits: list of (N, E)."""
    per_layer = []
    for lg in router_logits:
        N, E = lg.shape
        probs, top, _ = route(lg, k)
        f = torch.zeros(E, dtype=probs.dtype, device=probs.device).index_add_(
            0, top.reshape(-1), torch.ones(top.numel(), dtype=probs.dtype, device=probs.device)) / N
        per_layer.append(E * (f * probs.mean(dim=0)).sum())
    return torch.stack(per_layer).mean()


def router_z_loss(router_logits):
    """ST-MoE's router z-loss, the mean over layers of mean_t (logsumexp_e logits[t, e])^2."""
    return torch.stack([lg.logsumexp(dim=-1).pow(2).mean() for lg in router_logits]).mean()


def router_losses(model):
    """(aux, z): the load-balancing loss and router z-loss of the model's last forward (0-dim
    tensors), or (None, None) for a model without experts."""
    lgs = getattr(model, "router_logits", None)
    if not lgs:
        return None, None
    return load_balancing_loss(lgs, model.cfg.num_experts_per_tok), router_z_loss(lgs)


def total_loss(model, logits, targets):
    """The training loss of logits = model(inputs): loss_fn, plus router_aux_loss_coef * aux +
    router_z_loss_coef * z for a mixture of experts (router losses of that same forward). Exactly
    loss_fn for dense models, including the other families (gpt_ref, neox_ref)."""
    loss = loss_fn(logits, targets)
    aux, z = router_losses(model)
    if aux is not None:
        if model.cfg.router_aux_loss_coef:
            loss = loss + model.cfg.router_aux_loss_coef * aux
        if model.cfg.router_z_loss_coef:
            loss = loss + model.cfg.router_z_loss_coef * z
    return loss


def load_h5_weights(model, h5file, group="model"):
    """Copy /<group>/<name> datasets of an open h5py.File into the parameters of the same name."""
    g = h5file[group]
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(g.keys()))
    extra = sorted(set(g.keys()) - set(params))
    assert not missing and not extra, f"/{group}: missing {missing}, unexpected {extra}"
    with torch.no_grad():
        for name, p in params.items():
            src = torch.from_numpy(g[name][()])
            assert tuple(src.shape) == tuple(p.shape), f"{name}: file {tuple(src.shape)} vs model {tuple(p.shape)}"
            p.copy_(src)


def adamw_for(model, lr, betas, eps, weight_decay):
    """AdamW with weight decay on 2-D tensors (matrices, embeddings) and none on 1-D (norm weights)."""
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def config_from_hf(cfg):
    """A LlamaConfig from a Hugging Face config.json dict (transformers' defaults when absent).
    model_type mixtral (or a MixtralForCausalLM) gives the experts, and Mixtral's defaults."""
    moe = cfg.get("model_type") == "mixtral" or "MixtralForCausalLM" in (cfg.get("architectures") or [])
    extra = {}
    if moe:
        # MixtralConfig's defaults; no z-loss in transformers' Mixtral
        extra = dict(num_experts=cfg.get("num_local_experts", 8), num_experts_per_tok=cfg.get("num_experts_per_tok", 2),
                     router_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.001)))
    return LlamaConfig(
        hidden_width=cfg["hidden_size"], num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg.get("num_key_value_heads", 8 if moe else cfg["num_attention_heads"]),
        intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
        max_context_width=cfg.get("max_position_embeddings", 2048),
        rope_theta=cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 1e6 if moe else 10000.0),
        norm_eps=cfg.get("rms_norm_eps", 1e-5 if moe else 1e-6), rope_llama3=llama3_from_hf(cfg),
        sliding_window=cfg.get("sliding_window") or 0, **extra)


def llama3_from_hf(cfg):
    """rope_scaling (or rope_parameters) of rope_type llama3 as LlamaConfig.rope_llama3, else None"""
    for key in ("rope_scaling", "rope_parameters"):
        r = cfg.get(key) or {}
        if r.get("rope_type", r.get("type")) == "llama3":
            return (r["factor"], r["low_freq_factor"], r["high_freq_factor"], r["original_max_position_embeddings"])
    return None


def load_hf(path, dtype=torch.float32):
    """The Llama (or Mistral, Mixtral) of a Hugging Face directory (config.json + safetensors), read
    by hf_read (numpy only)."""
    import json
    import os

    from hf_read import read_source

    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    model = Llama(config_from_hf(hf))
    tensors = read_source(path)
    if hf.get("tie_word_embeddings", False) or "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(tensors[name]))
    return model.to(dtype)


@torch.no_grad()
def generate_greedy(model, ids, n):
    """ids followed by n argmax tokens, each from a full forward over the sequence so far."""
    ids = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([ids]))
        ids.append(int(logits[0, -1].argmax()))
    return ids
