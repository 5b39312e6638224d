"""Writes a Hugging Face-format Llama (Mistral, Mixtral) directory with random weights, for fsdpc's import tests.

usage: /usr/bin/python3 test/ref/hf_make.py OUTDIR [--dtype fp32|bf16|fp16] [--shards N] [--tied]
       [--no_config] [--inv_freq] [--seed S] [--hidden D] [--layers L] [--heads H] [--kv_heads KV]
       [--intermediate F] [--vocab V] [--context T] [--rope_theta R] [--chat] [--sliding_window W]
       [--llama3 FACTOR,LOW,HIGH,ORIGINAL] [--rope_scaling JSON] [--experts E,K] [--drop NAME ...]

config.json plus model.safetensors, or N shards model-0000i-of-0000N.safetensors with
model.safetensors.index.json. The safetensors files are written by hand (numpy + json): the
tests must not depend on the `safetensors` package. --tied leaves lm_head.weight out and sets
tie_word_embeddings; --inv_freq adds the rotary_emb.inv_freq buffers older exports carry.
--context is config.json's max_position_embeddings. --llama3 sets rope_scaling to Llama-3's
rope_type "llama3" with those parameters; --rope_scaling sets it to any JSON (refusal tests). --chat adds what a chat model ships beside
its weights: tokenizer_config.json (a chat_template with newlines, quotes and non-ASCII text,
special tokens, added_tokens_decoder), special_tokens_map.json, generation_config.json (a list of
eos ids), chat_template.jinja, and bos/eos/pad ids in config.json. --sliding_window W makes it a
Mistral (MistralForCausalLM, model_type mistral, that window). --experts E,K makes it a Mixtral
(MixtralForCausalLM, model_type mixtral): E experts (block_sparse_moe.gate and experts.J.w1/w2/w3
in place of mlp.*), K of them per token, rope_theta 1e6 unless given, sliding_window null unless
given; --zero_router makes its routers' weights 0, so every token's probabilities tie and it goes to
experts 0..K-1 (the worst imbalance). --drop NAME (repeatable) leaves that tensor out of the
safetensors files (refusal tests).
"""

import argparse
import json
import os
import struct

import numpy as np
import torch

DTYPES = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}


def llama_tensors(a):
    """{HF name: float32 array} of a random Llama: matrices ~ N(0, 1/in), embeddings ~ N(0, 1),
    norm weights around 1, so logits spread widely and greedy decoding has no near-ties."""
    torch.manual_seed(a.seed)
    D, hd = a.hidden, a.hidden // a.heads

    def mat(rows, cols):
        return (torch.randn(rows, cols, dtype=torch.float32) / cols ** 0.5)

    def norm():
        return (1 + 0.2 * torch.randn(D, dtype=torch.float32))

    t = {"model.embed_tokens.weight": torch.randn(a.vocab, D, dtype=torch.float32)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm()
        t[p + "self_attn.q_proj.weight"] = mat(a.heads * hd, D)
        t[p + "self_attn.k_proj.weight"] = mat(a.kv_heads * hd, D)
        t[p + "self_attn.v_proj.weight"] = mat(a.kv_heads * hd, D)
        t[p + "self_attn.o_proj.weight"] = mat(D, a.heads * hd)
        t[p + "post_attention_layernorm.weight"] = norm()
        if a.experts:
            E = a.experts[0]
            t[p + "block_sparse_moe.gate.weight"] = mat(E, D) * (0 if a.zero_router else 1)
            for j in range(E):
                q = f"{p}block_sparse_moe.experts.{j}."
                t[q + "w1.weight"] = mat(a.intermediate, D)
                t[q + "w2.weight"] = mat(D, a.intermediate)
                t[q + "w3.weight"] = mat(a.intermediate, D)
        else:
            t[p + "mlp.gate_proj.weight"] = mat(a.intermediate, D)
            t[p + "mlp.up_proj.weight"] = mat(a.intermediate, D)
            t[p + "mlp.down_proj.weight"] = mat(D, a.intermediate)
        if a.inv_freq:
            t[p + "self_attn.rotary_emb.inv_freq"] = 1.0 / 10000 ** (torch.arange(0, hd, 2) / hd)
    t["model.norm.weight"] = norm()
    if not a.tied:
        t["lm_head.weight"] = mat(a.vocab, D)
    return {k: v.numpy() for k, v in t.items()}


def encode(x, st_dtype):
    """Raw little-endian bytes of a float32 array in a safetensors dtype (bf16: torch's rounding)."""
    if st_dtype == "F32":
        return x.astype("<f4").tobytes()
    if st_dtype == "F16":
        return x.astype("<f2").tobytes()
    if st_dtype == "I32":  # a dtype a loader must refuse
        return x.astype("<i4").tobytes()
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors, st_dtype):
    """tensors: {name: float32 array}, laid out in the given order."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, x in tensors.items():
        dt = "F32" if name.endswith("inv_freq") else st_dtype
        b = encode(x, dt)
        header[name] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=DTYPES, default="fp32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--no_config", action="store_true")
    ap.add_argument("--inv_freq", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv_heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--rope_theta", type=float, help="default 10000, or 1e6 for a Mixtral")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--llama3")
    ap.add_argument("--rope_scaling")
    ap.add_argument("--sliding_window", type=int, default=0, help="a Mistral (MistralForCausalLM) with this window")
    ap.add_argument("--experts", help="E,K: a Mixtral (MixtralForCausalLM), E experts, K per token")
    ap.add_argument("--zero_router", action="store_true", help="a Mixtral's routers all 0: every token to experts 0..K-1")
    ap.add_argument("--drop", action="append", default=[], metavar="NAME", help="leave this tensor out (repeatable)")
    a = ap.parse_args()
    if a.experts:
        a.experts = tuple(int(v) for v in a.experts.split(","))
        if len(a.experts) != 2 or not 0 < a.experts[1] <= a.experts[0]:
            ap.error("--experts wants E,K with 0 < K <= E")
    if a.rope_theta is None:
        a.rope_theta = 1e6 if a.experts else 10000.0
    tensors = llama_tensors(a)
    for name in a.drop:
        if name not in tensors:
            ap.error(f"--drop {name}: no such tensor")
        del tensors[name]
    os.makedirs(a.out, exist_ok=True)
    st_dtype = DTYPES[a.dtype]
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, st_dtype)
    else:
        names = list(tensors)
        weight_map, total = {}, 0
        for s in range(a.shards):
            part = {n: tensors[n] for n in names[s::a.shards]}
            fname = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
            write_safetensors(os.path.join(a.out, fname), part, st_dtype)
            weight_map.update({n: fname for n in part})
            total += sum(len(encode(x, st_dtype)) for x in part.values())
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    if not a.no_config:
        config = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.hidden,
            "intermediate_size": a.intermediate, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads, "max_position_embeddings": a.context, "rms_norm_eps": 1e-5,
            "rope_theta": a.rope_theta, "rope_scaling": None, "vocab_size": a.vocab, "tie_word_embeddings": a.tied,
            "hidden_act": "silu", "torch_dtype": {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[a.dtype],
        }
        if a.llama3:
            f, lo, hi, orig = a.llama3.split(",")
            config["rope_scaling"] = {"factor": float(f), "low_freq_factor": float(lo), "high_freq_factor": float(hi),
                                      "original_max_position_embeddings": int(orig), "rope_type": "llama3"}
        if a.rope_scaling:
            config["rope_scaling"] = json.loads(a.rope_scaling)
        if a.sliding_window:
            config.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                           "sliding_window": a.sliding_window})
        if a.experts:
            config.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                           "num_local_experts": a.experts[0], "num_experts_per_tok": a.experts[1],
                           "router_aux_loss_coef": 0.001, "output_router_logits": False,
                           "sliding_window": a.sliding_window or None})
        if a.chat:
            config.update({"bos_token_id": 1, "eos_token_id": [2, 7], "pad_token_id": 0})
        with open(os.path.join(a.out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
    if a.chat:
        write_chat_files(a)


CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% endif %}"
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{{ '[INST] ' + (\"<<SYS>>\\n\" + sys + \"\\n<</SYS>>\\n\\n\" if sys is defined and loop.first else '') "
    "+ m['content'] + ' [/INST]' }}"
    "{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
    "\n{# « héllo » — 日本語 ✓ #}\n"
)


def write_chat_files(a):
    """The tokenizer and generation files of a chat model, as transformers saves them."""
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>"}
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])}
    tok_config = {"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": decoder, "bos_token": "<s>",
                  "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "eos_token": "</s>",
                  "legacy": False, "model_max_length": a.context, "pad_token": "<unk>", "padding_side": "left",
                  "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>"}
    files = {"tokenizer_config.json": json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n",
             "special_tokens_map.json": json.dumps(special, indent=2) + "\n",
             "generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": [2, 7], "pad_token_id": 0,
                                                   "do_sample": True, "temperature": 0.6, "top_p": 0.9}, indent=2) + "\n",
             "chat_template.jinja": CHAT_TEMPLATE}
    for name, text in files.items():
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
