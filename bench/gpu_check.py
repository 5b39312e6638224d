"""make gpu-check's PyTorch side: transformers' LlamaForCausalLM, offline.

usage: python bench/gpu_check.py bench --hidden_width D ... --batch_size B --steps N [--device cuda]
           the training step of the same Llama fsdpc trains: SDPA attention, bf16 autocast over
           fp32 weights (fsdpc's bf16 mode keeps fp32 masters too), fused AdamW, grad clip 1.0,
           random tokens; prints `torch tokens/sec: X` over the steps after two warmup steps
       python bench/gpu_check.py parity DIR TEXTFILE PROMPT N [--device cuda]
           fsdpc's exported weights loaded by from_pretrained: the mean next-token loss over the
           text read as bytes, cut as fsdpc's loader cuts it (T+1 tokens, stride T), in fp32
           (TF32 off) and under bf16 autocast, and PROMPT's N greedy tokens (ids past 255 print
           nothing, as with fsdpc's byte tokenizer); prints `torch loss fp32: X`,
           `torch loss bf16: Y` and `torch greedy: HEX`

Exits 3 with one `SKIP: reason` line where torch, transformers or the device is missing, so the
caller reports the stage as skipped rather than failed.
"""

import argparse
import contextlib
import os
import sys
import time

SKIP = 3


def load():
    """torch and transformers, or a skip with the reason"""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"SKIP: {e} ({sys.executable})")
        sys.exit(SKIP)
    return torch, transformers


def device(torch, name):
    if name == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(SKIP)
    return torch.device(name)


def bench(args):
    torch, tf = load()
    dev = device(torch, args.device)
    cfg = tf.LlamaConfig(vocab_size=args.vocab_size, hidden_size=args.hidden_width,
                         intermediate_size=args.intermediate_size, num_hidden_layers=args.num_layers,
                         num_attention_heads=args.num_heads, num_key_value_heads=args.num_key_value_heads,
                         max_position_embeddings=args.max_context_width, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    # built on the device (torch >= 2.0): a 1B model's host-side init would cost more than the run
    with dev if hasattr(dev, "__enter__") else contextlib.nullcontext():
        model = tf.LlamaForCausalLM(cfg).to(dev)
    model.train()
    fused = {"fused": True} if dev.type == "cuda" else {}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **fused)
    B, T, warm = args.batch_size, args.max_context_width, 2
    data = torch.randint(0, args.vocab_size, (warm + args.steps, B, T + 1), device=dev)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for s in range(warm):
        step(data[s])
    sync()
    t0 = time.perf_counter()
    for s in range(warm, warm + args.steps):
        loss = step(data[s])
    sync()
    seconds = time.perf_counter() - t0
    mem = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0
    print(f"torch: transformers {tf.__version__}, torch {torch.__version__}, attention sdpa, last loss {loss.item():.4f}, "
          f"peak {mem:.1f} GiB")
    print(f"torch tokens/sec: {B * T * args.steps / seconds:.1f}")


def parity(args):
    torch, tf = load()
    dev = device(torch, args.device)
    import numpy as np

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = tf.LlamaForCausalLM.from_pretrained(args.dir, torch_dtype=torch.float32, attn_implementation="sdpa",
                                                local_files_only=True).to(dev).eval()
    T = model.config.max_position_embeddings
    data = np.fromfile(args.text, dtype=np.uint8).astype(np.int64)
    n = (len(data) - 1) // T
    chunks = torch.from_numpy(np.stack([data[i * T:i * T + T + 1] for i in range(n)])).to(dev)

    def loss(bf16):
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=chunks[:, :-1]).logits.float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), chunks[:, 1:].reshape(-1)).item()

    print(f"torch loss fp32: {loss(False):.9g}")
    print(f"torch loss bf16: {loss(True):.9g}")
    ids = list(args.prompt.encode())
    with torch.no_grad():
        for _ in range(args.n):  # greedy without a cache: the plainest form of the model
            logits = model(input_ids=torch.tensor([ids[-T:]], device=dev)).logits
            ids.append(int(logits[0, -1].argmax()))
    print("torch greedy: " + bytes(i for i in ids if i < 256).hex())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    for name, default in (("hidden_width", 256), ("num_layers", 4), ("num_heads", 8), ("num_key_value_heads", 4),
                          ("intermediate_size", 688), ("max_context_width", 256), ("vocab_size", 256),
                          ("batch_size", 8), ("steps", 10)):
        b.add_argument("--" + name, type=int, default=default)
    b.add_argument("--device", default="cuda")
    p = sub.add_parser("parity")
    p.add_argument("dir")
    p.add_argument("text")
    p.add_argument("prompt")
    p.add_argument("n", type=int)
    p.add_argument("--device", default="cuda")
    args = ap.parse_args()
    (bench if args.cmd == "bench" else parity)(args)


if __name__ == "__main__":
    main()
