"""PyTorch eager training throughput for the same Llama fsdpc trains: the speed baseline.

AdamW (lr 3e-4, betas 0.9/0.95, wd 0.1 on 2-D tensors), grad clip 1.0, random tokens.
No torch.compile. fp32 unless --bf16 (autocast); on a GPU with torch >= 2.0 attention runs
through scaled_dot_product_attention, as a tuned PyTorch user would have it: in bf16 restricted
to the cuDNN and flash kernels where this torch can say so (torch.nn.attention.sdpa_kernel from
2.3, torch.backends.cuda.sdp_kernel before), falling back to torch's own choice when they
cannot run the model. Prints `torch tokens/sec: X`, counting only the steps after warmup, and
on stderr which attention kernels were asked for.
"""

import argparse
import contextlib
import os
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model_type", default="llama_v2", help="llama_v2 or mingpt (GPT-2 as minGPT builds it)")
    ap.add_argument("--hidden_width", type=int, default=256)
    ap.add_argument("--num_layers", type=int, default=4)
    ap.add_argument("--num_heads", type=int, default=8)
    ap.add_argument("--num_key_value_heads", type=int, default=4)
    ap.add_argument("--intermediate_size", type=int, default=688)
    ap.add_argument("--max_context_width", type=int, default=256)
    ap.add_argument("--vocab_size", type=int, default=256)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup_steps", type=int, default=2, help="untimed steps before them")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--bf16", action="store_true", help="autocast matmuls to bf16 (the GPU baseline)")
    return ap.parse_args()


def sdpa_backends(torch):
    """A context that limits scaled_dot_product_attention to the cuDNN and flash kernels, and
    their names; None where this torch has no such switch (older than 2.0)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3
        names = [n for n in ("CUDNN_ATTENTION", "FLASH_ATTENTION") if hasattr(SDPBackend, n)]
        return sdpa_kernel([getattr(SDPBackend, n) for n in names]), "/".join(n.lower() for n in names)
    except ImportError:
        pass
    if hasattr(torch.backends.cuda, "sdp_kernel"):  # torch 2.0 - 2.2
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False), \
            "flash_attention"
    return None


def main():
    args = parse_args()
    # Debian's torch runs GEMMs on OpenBLAS's own pthread pool and the rest on OpenMP. Both size
    # themselves when loaded, so --threads must reach them before torch is imported to bound all
    # compute threads; PASSIVE keeps idle OpenMP workers from spinning on the cores a GEMM needs.
    for var, val in (("OMP_NUM_THREADS", args.threads), ("OPENBLAS_NUM_THREADS", args.threads),
                     ("OMP_WAIT_POLICY", "PASSIVE")):
        os.environ.setdefault(var, str(val))
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref"))
    from llama_ref import Llama, LlamaConfig, adamw_for, loss_fn
    import gpt_ref

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    if args.model_type == "mingpt":
        cfg = gpt_ref.GPTConfig(args.hidden_width, args.num_layers, args.num_heads, args.intermediate_size,
                                args.vocab_size, args.max_context_width)
        cfg.sdpa = False
        model = gpt_ref.GPT(cfg).to(dev)
        adamw_for = gpt_ref.adamw_for
    else:
        cfg = LlamaConfig(args.hidden_width, args.num_layers, args.num_heads, args.num_key_value_heads,
                          args.intermediate_size, args.vocab_size, args.max_context_width,
                          sdpa=args.device == "cuda" and hasattr(torch.nn.functional, "scaled_dot_product_attention"))
        model = Llama(cfg).to(dev)
    opt = adamw_for(model, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    B, T = args.batch_size, args.max_context_width
    # Drawn up front so the timed loop holds only the training step.
    data = torch.randint(0, args.vocab_size, (args.warmup_steps + args.steps, B, T + 1), device=dev)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_fn(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    # bf16 attention on the GPU through the cuDNN or flash kernels, where this torch can ask for
    # them and they take the model (an untimed first step tells); else torch's default choice
    attention = "torch's default" if cfg.sdpa else "math (no scaled_dot_product_attention)"
    with contextlib.ExitStack() as scope:
        pick = sdpa_backends(torch) if cfg.sdpa and args.bf16 else None
        if pick:
            try:
                with pick[0]:
                    step(data[0])
                scope.enter_context(sdpa_backends(torch)[0])  # a context is entered once: a new one
                attention = pick[1]
            except RuntimeError as e:
                print(f"torch sdpa: {pick[1]} cannot run this model ({str(e).splitlines()[0]})", file=sys.stderr)
        print(f"torch attention kernels: {attention}", file=sys.stderr)
        for s in range(args.warmup_steps):
            step(data[s])
        sync()
        t0 = time.perf_counter()
        for s in range(args.warmup_steps, args.warmup_steps + args.steps):
            step(data[s])
        sync()
        seconds = time.perf_counter() - t0
    print(f"torch tokens/sec: {B * T * args.steps / seconds:.1f}")


if __name__ == "__main__":
    main()
