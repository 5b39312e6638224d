"""Reads Hugging Face safetensors weights with numpy + json only, and checks `fsdpc export` output.

usage: /usr/bin/python3 test/ref/hf_read.py export OUTDIR CKPT.h5 fp32|bf16|fp16
           an export directory against the checkpoint it came from: layout, headers, index,
           config.json, tokenizer copy, and every tensor (fp32 exact, bf16 the round-to-nearest-
           even of the fp32, fp16 numpy's float16 cast)
       /usr/bin/python3 test/ref/hf_read.py same A B
           two weight sources (HF directory, index, .safetensors or fsdpc .h5) hold bit-identical
           fp32 values under every name (a tied source's lm_head is its embedding)
       /usr/bin/python3 test/ref/hf_read.py kept SOURCE OUTDIR
           what an export keeps of the Hugging Face directory a finetune started from: config.json's
           sizes, max_position_embeddings, rope_theta, rms_norm_eps and bos/eos/pad ids field for
           field; its tokenizer and generation files byte for byte, or without a
           tokenizer_config.json, Llama 2's SentencePiece one with model_max_length the length
Prints what differs and exits 1 on a mismatch.
"""

import json
import os
import struct
import sys

import numpy as np

ELEMENT = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
ST_DTYPE = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}
TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def read_header(path):
    """(header dict without __metadata__, header length) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, n


def read_raw(path):
    """{name: (dtype, array of the stored elements)}; bf16 as its uint16 bit patterns."""
    header, n = read_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        x = np.frombuffer(data[b:e].tobytes(), dtype=ELEMENT[h["dtype"]]).reshape(h["shape"])
        out[name] = (h["dtype"], x)
    return out


def to_f32(dtype, x):
    if dtype == "BF16":
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)


def bf16_bits(x):
    """Round-to-nearest-even of float32 to bf16 bit patterns (finite values)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def weight_files(path):
    """The safetensors files of a directory, index or file, and the index (or None)."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        path = index if os.path.exists(index) else os.path.join(path, "model.safetensors")
    if not path.endswith(".json"):
        return [path], None
    with open(path) as f:
        index = json.load(f)
    names = sorted(set(index["weight_map"].values()))
    return [os.path.join(os.path.dirname(path), n) for n in names], index


def read_source(path):
    """{name: float32 array} of an HF source or the /model group of an fsdpc checkpoint."""
    if path.endswith(".h5"):
        import h5py

        with h5py.File(path, "r") as f:
            return {k: f["model"][k][()] for k in f["model"]}
    out = {}
    for p in weight_files(path)[0]:
        out.update({k: to_f32(dt, x) for k, (dt, x) in read_raw(p).items()})
    return out


def check_same(a_path, b_path):
    a, b = read_source(a_path), read_source(b_path)
    problems = []
    for side in (a, b):  # a tied source stores the pair once; rotary buffers are not weights
        if "lm_head.weight" not in side and "model.embed_tokens.weight" in side:
            side["lm_head.weight"] = side["model.embed_tokens.weight"]
        for k in [k for k in side if k.endswith("rotary_emb.inv_freq")]:
            del side[k]
    if set(a) != set(b):
        problems.append(f"names differ: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}")
    for k in sorted(set(a) & set(b)):
        if a[k].shape != b[k].shape or not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)):
            problems.append(f"{k}: differs")
    return problems


SOURCE_FILES = ["generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                "chat_template.jinja"]
KEPT = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "bos_token_id", "eos_token_id",
        "pad_token_id"]


def check_kept(src, out):
    problems = []
    with open(os.path.join(src, "config.json")) as f:
        a = json.load(f)
    with open(os.path.join(out, "config.json")) as f:
        b = json.load(f)
    for k in KEPT:
        if k in a and a.get(k) != b.get(k):
            problems.append(f"config.json {k}: source {a.get(k)!r}, export {b.get(k)!r}")
    for name in SOURCE_FILES:
        p, q = os.path.join(src, name), os.path.join(out, name)
        if os.path.exists(p) and (not os.path.exists(q) or open(p, "rb").read() != open(q, "rb").read()):
            problems.append(f"{name} is not the source's, byte for byte")
    if not os.path.exists(os.path.join(src, "tokenizer_config.json")):
        with open(os.path.join(out, "tokenizer_config.json")) as f:
            t = json.load(f)
        want = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                "add_bos_token": True, "add_eos_token": False, "model_max_length": b["max_position_embeddings"]}
        for k, v in want.items():
            if t.get(k) != v:
                problems.append(f"tokenizer_config.json {k} = {t.get(k)!r}, expected {v!r}")
    return problems


def source_positions(f, context):
    """max_position_embeddings as export gives it: the recorded source's, never below the
    checkpoint's context."""
    if "source" not in f or "config.json" not in f["source"]:
        return context
    c = json.loads(f["source"]["config.json"][()].tobytes())
    n = c.get("max_position_embeddings") or 0
    return max(n, context)


def check_export(out, ckpt, dtype):
    import h5py

    problems = []
    leftovers = [n for n in os.listdir(out) if n.endswith(".tmp")]
    if leftovers:
        problems.append(f"temporary files left: {leftovers}")
    files, index = weight_files(out)
    with h5py.File(ckpt, "r") as f:
        attrs = dict(f.attrs)
        ref = {k: f["model"][k][()] for k in f["model"]}
        positions = source_positions(f, int(attrs["max_context_width"]))
    seen, total = {}, 0
    for p in files:
        header, n = read_header(p)
        if n % 8:
            problems.append(f"{p}: header length {n} leaves the data unaligned")
        end = 0
        for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            b, e = h["data_offsets"]
            if b != end:
                problems.append(f"{p}: {name} starts at {b}, not {end}")
            end = e
            if h["dtype"] != ST_DTYPE[dtype]:
                problems.append(f"{p}: {name} has dtype {h['dtype']}")
        if os.path.getsize(p) != 8 + n + end:
            problems.append(f"{p}: {os.path.getsize(p)} bytes, header and data need {8 + n + end}")
        total += end
        for name, (dt, x) in read_raw(p).items():
            seen[name] = (os.path.basename(p), dt, x)
    if index is not None:
        if index["metadata"]["total_size"] != total:
            problems.append(f"index total_size {index['metadata']['total_size']} != {total}")
        wrong = [k for k, v in index["weight_map"].items() if k not in seen or seen[k][0] != v]
        if wrong or set(index["weight_map"]) != set(seen):
            problems.append(f"index weight_map disagrees with the shards on {wrong[:5]}")
    if set(seen) != set(ref):
        problems.append(f"tensor names differ: only exported {sorted(set(seen) - set(ref))}, "
                        f"only in the checkpoint {sorted(set(ref) - set(seen))}")
    for name in sorted(set(seen) & set(ref)):
        _, dt, x = seen[name]
        r = ref[name]
        if x.shape != r.shape:
            problems.append(f"{name}: shape {x.shape}, checkpoint {r.shape}")
            continue
        want = {"F32": lambda: r.view(np.uint32), "BF16": lambda: bf16_bits(r),
                "F16": lambda: r.astype(np.float16).view(np.uint16)}[dt]()
        got = x.view(np.uint32) if dt == "F32" else x.view(np.uint16)
        if not np.array_equal(got, want):
            problems.append(f"{name}: {int((got != want).sum())} elements differ from the checkpoint")
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": attrs["hidden_width"],
            "intermediate_size": attrs["intermediate_size"], "num_hidden_layers": attrs["num_layers"],
            "num_attention_heads": attrs["num_heads"], "num_key_value_heads": attrs["num_key_value_heads"],
            "max_position_embeddings": positions, "vocab_size": attrs["vocab_size"],
            "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": TORCH_DTYPE[dtype]}
    for k, v in want.items():
        if cfg.get(k) != v:
            problems.append(f"config.json {k} = {cfg.get(k)!r}, expected {v!r}")
    for k, a in (("rms_norm_eps", "norm_eps"), ("rope_theta", "rope_theta")):
        if np.float32(cfg.get(k, -1)) != np.float32(attrs[a]):
            problems.append(f"config.json {k} = {cfg.get(k)!r}, checkpoint {attrs[a]}")
    tok = attrs.get("tokenizer", b"byte")
    tok = tok.decode() if isinstance(tok, bytes) else str(tok)
    if tok == "byte":
        if cfg.get("bos_token_id") is not None or cfg.get("eos_token_id") is not None:
            problems.append("byte tokenizer, yet config.json names bos/eos ids")
    else:
        copy = os.path.join(out, os.path.basename(tok))
        if not os.path.exists(copy) or open(copy, "rb").read() != open(tok, "rb").read():
            problems.append(f"tokenizer {tok} not copied to {copy}")
    if not os.path.exists(os.path.join(out, "generation_config.json")):
        problems.append("no generation_config.json")
    return problems


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "export":
        problems = check_export(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "same":
        problems = check_same(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "kept":
        problems = check_kept(*sys.argv[2:])
    else:
        sys.exit(__doc__)
    for p in problems[:20]:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
