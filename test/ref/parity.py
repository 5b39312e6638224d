"""PyTorch parity check of a dump written by fsdpc's parity test.

usage: /usr/bin/python3 test/ref/parity.py DUMP.h5 [--tol_logits X] [--tol_grad X] [--tol_loss X] [--tol_steps X]

Recomputes logits, loss, gradients and S training-step losses from the dump's initial
weights and batches with the reference of the file's model_type attribute (llama_v2 and
mixtral: llama_ref, mingpt: gpt_ref, gpt_neox: neox_ref), and prints one TAP-style line per
comparison. The loss is the training loss (a mixture of experts adds its router losses). The reference is a
float64 run: it is (nearly) exact, so the reported error is the C side's own error. The
torch fp32 error against the same reference is shown next to it as the scale that fp32 with
a different summation order is expected to reach. Exits 1 if any comparison failed.
"""

import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_ref  # noqa: E402
import llama_ref  # noqa: E402
import lora_ref  # noqa: E402
import neox_ref  # noqa: E402
from llama_ref import load_h5_weights, total_loss  # noqa: E402

# model_type attribute -> (reference module, its model class); each module has config_from_h5_attrs
# and adamw_for (whose param groups follow that family's decay flags)
REFS = {"llama_v2": (llama_ref, llama_ref.Llama), "mixtral": (llama_ref, llama_ref.Llama),
        "mingpt": (gpt_ref, gpt_ref.GPT), "gpt_neox": (neox_ref, neox_ref.NeoX)}


def rel_err(got, ref):
    """max |got - ref| / max |ref|: scale-free, and not blown up by elements near zero."""
    got = torch.as_tensor(np.asarray(got), dtype=torch.float64)
    ref = ref.detach().to(torch.float64)
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def load_model(ref, f, cfg, dtype):
    model = REFS[ref][1](cfg)
    lora_ref.attach_from_h5(model, f)  # LoRA: adapters on, every other weight frozen
    load_h5_weights(model, f)
    return model.to(dtype)


def batch_forward_backward(model, inputs, targets):
    """Logits, loss and {name: grad} for one batch at the model's current weights. The loss is the
    training loss: cross-entropy, plus the router losses of a mixture of experts."""
    model.zero_grad(set_to_none=True)
    logits = model(inputs)
    loss = total_loss(model, logits, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def train_losses(ref, model, f, hp):
    """Losses of S AdamW steps over /train, in the order fsdpc does them."""
    opt = REFS[ref][0].adamw_for(model, hp["lr"], (hp["beta1"], hp["beta2"]), hp["eps"], hp["weight_decay"])
    inputs = torch.from_numpy(f["train/inputs"][()])
    targets = torch.from_numpy(f["train/targets"][()])
    losses = []
    for s in range(inputs.shape[0]):
        opt.zero_grad(set_to_none=True)
        loss = total_loss(model, model(inputs[s]), targets[s])
        loss.backward()
        if hp["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp["grad_clip"])
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


class Report:
    def __init__(self):
        self.failed = 0

    def check(self, what, got, ref64, ref32, tol):
        if tuple(got.shape) != tuple(ref64.shape):
            return self.fail(what, f"shape {tuple(got.shape)}, expected {tuple(ref64.shape)}")
        err = rel_err(got, ref64)
        ok = err <= tol
        self.failed += not ok
        print(f"{'ok' if ok else 'not ok'} - parity {what} (max rel err {err:.3g}; "
              f"torch fp32 {rel_err(ref32.detach().numpy(), ref64):.3g}; tol {tol:g})")

    def fail(self, what, why):
        self.failed += 1
        print(f"not ok - parity {what} ({why})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    # Defaults suit fp32 everywhere; TF32/bf16 kernels need looser ones, passed explicitly.
    ap.add_argument("--tol_logits", type=float, default=1e-4)
    ap.add_argument("--tol_grad", type=float, default=1e-3)
    ap.add_argument("--tol_loss", type=float, default=1e-5)
    ap.add_argument("--tol_steps", type=float, default=1e-4)
    args = ap.parse_args()

    rep = Report()
    with h5py.File(args.dump, "r") as f:
        ref = f.attrs.get("model_type", b"llama_v2")  # dumps from before minGPT had no family attribute
        ref = ref.decode() if isinstance(ref, bytes) else str(ref)
        if ref not in REFS:
            sys.exit(f"{args.dump}: model_type {ref!r} has no reference (known: {', '.join(REFS)})")
        cfg = REFS[ref][0].config_from_h5_attrs(f.attrs)
        hp = {k: float(f.attrs[k]) for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")}
        inputs = torch.from_numpy(f["batch/inputs"][()])
        targets = torch.from_numpy(f["batch/targets"][()])

        out = {dt: batch_forward_backward(load_model(ref, f, cfg, dt), inputs, targets)
               for dt in (torch.float32, torch.float64)}
        (lg32, ls32, gr32), (lg64, ls64, gr64) = out[torch.float32], out[torch.float64]

        rep.check("logits", f["out/logits"][()], lg64, lg32, args.tol_logits)
        rep.check("loss", np.asarray(f["out/loss"][()]).reshape(()), ls64, ls32, args.tol_loss)
        for name in gr64:
            if f"grad/{name}" not in f:
                rep.fail(f"grad {name}", "missing from dump")
                continue
            rep.check(f"grad {name}", f[f"grad/{name}"][()], gr64[name], gr32[name], args.tol_grad)

        steps64 = train_losses(ref, load_model(ref, f, cfg, torch.float64), f, hp)
        steps32 = train_losses(ref, load_model(ref, f, cfg, torch.float32), f, hp)
        rep.check(f"train losses ({len(steps64)} steps)", f["train/losses"][()], steps64, steps32,
                  args.tol_steps)
    sys.exit(1 if rep.failed else 0)


if __name__ == "__main__":
    main()
