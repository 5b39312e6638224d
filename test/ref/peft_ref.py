"""PEFT's LoRA adapter folders without PEFT: a writer of adapter_config.json and
adapter_model.safetensors as PEFT's save_pretrained writes them (tensors under
base_model.model.<name>, no adapter name), a reader of safetensors files, and the checks
test_lora_peft.sh makes of fsdpc's export.

  peft_ref.py write DIR [--r 4] [--alpha 8] [--targets q_proj,v_proj] [--hidden 128] [--kv 2]
      [--heads 4] [--layers 4] [--seed 1] [--base NAME] [--extra] [--nan] [--dtype F32|BF16|I32]
  peft_ref.py same REF OUT      the adapter folders hold the same names, shapes, config and values
  peft_ref.py merged CKPT.h5 EXPORT_DIR    the export's weights are W + s B A of the checkpoint
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_make import write_safetensors  # noqa: E402  (beside this file)


def st_read(path):
    """name -> (dtype, shape, raw bytes) of a safetensors file"""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in header.items()}


def f32(entry):
    dtype, shape, raw = entry
    assert dtype == "F32", dtype
    return np.frombuffer(raw, dtype=np.float32).reshape(shape)


def write(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--r", type=int, default=4)
    p.add_argument("--alpha", type=float, default=8)
    p.add_argument("--targets", default="q_proj,v_proj")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--base", default=None)
    p.add_argument("--extra", action="store_true")
    p.add_argument("--nan", action="store_true")
    p.add_argument("--dtype", default="F32")
    a = p.parse_args(argv)
    import os
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    D, hd = a.hidden, a.hidden // a.heads
    out = {"q_proj": D, "k_proj": a.kv * hd, "v_proj": a.kv * hd, "o_proj": D}
    targets = a.targets.split(",")
    tensors = {}
    for l in range(a.layers):
        for t in targets:
            pre = f"base_model.model.model.layers.{l}.self_attn.{t}"
            tensors[pre + ".lora_A.weight"] = rng.uniform(-1, 1, (a.r, D)) / np.sqrt(D)
            tensors[pre + ".lora_B.weight"] = rng.normal(0, 0.05, (out[t], a.r))
    if a.extra:
        tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"] = np.ones(D)
    if a.nan:
        tensors[next(iter(tensors))][0, 0] = np.nan
    write_safetensors(os.path.join(a.dir, "adapter_model.safetensors"),
                      {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, a.dtype)
    config = {"base_model_name_or_path": a.base, "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
              "init_lora_weights": True, "lora_alpha": a.alpha, "lora_dropout": 0.0, "modules_to_save": None,
              "peft_type": "LORA", "r": a.r, "revision": None, "target_modules": targets, "task_type": "CAUSAL_LM",
              "use_rslora": False}
    json.dump(config, open(os.path.join(a.dir, "adapter_config.json"), "w"), indent=2)


def same(ref, out):
    """fsdpc's export --adapter against the reference folder: names, shapes, config, values (bit for bit)"""
    r, o = st_read(ref + "/adapter_model.safetensors"), st_read(out + "/adapter_model.safetensors")
    assert sorted(r) == sorted(o), (sorted(set(r) ^ set(o)))[:4]
    for k in r:
        assert r[k][1] == o[k][1], (k, r[k][1], o[k][1])
        assert r[k][2] == o[k][2], f"{k}: values differ"
    rc, oc = json.load(open(ref + "/adapter_config.json")), json.load(open(out + "/adapter_config.json"))
    for k in ("peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "use_rslora", "bias", "fan_in_fan_out",
              "inference_mode", "init_lora_weights", "modules_to_save", "revision", "base_model_name_or_path"):
        assert k in oc and oc[k] == rc[k], (k, oc.get(k), rc[k])
    assert sorted(oc["target_modules"]) == sorted(rc["target_modules"]), oc["target_modules"]
    print(f"{len(r)} tensors and the config equal")


def merged(ckpt, out):
    """W' = W + s B A (torch, fp32) of the checkpoint's tensors, against the merged export"""
    import h5py
    import torch
    f = h5py.File(ckpt, "r")
    s = float(f.attrs["lora_alpha"]) / int(f.attrs["lora_rank"])
    e = st_read(out + "/model.safetensors")
    names = []
    f["model"].visit(lambda n: names.append(n) if isinstance(f["model"][n], h5py.Dataset) else None)
    base = [n for n in names if ".lora_" not in n]
    assert sorted(base) == sorted(e), sorted(set(base) ^ set(e))[:4]
    worst, n_merged = 0.0, 0
    for n in base:
        w = torch.from_numpy(f["model"][n][()].astype(np.float32))
        a_name = n[:-len(".weight")] + ".lora_A.weight"
        if a_name in f["model"]:
            A = torch.from_numpy(f["model"][a_name][()].astype(np.float32))
            B = torch.from_numpy(f["model"][n[:-len(".weight")] + ".lora_B.weight"][()].astype(np.float32))
            assert B.abs().max() > 0, "B is still zero: nothing was merged"
            w = w + s * (B @ A)
            n_merged += 1
        got = torch.from_numpy(f32(e[n]).copy())
        d = (got - w).abs().max().item()
        worst = max(worst, d)
        assert d <= 1e-6, f"{n}: {d}"
    print(f"{n_merged} merged weights, worst difference {worst:.1e}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2:])
    elif cmd == "same":
        same(*sys.argv[2:4])
    elif cmd == "merged":
        merged(*sys.argv[2:4])
