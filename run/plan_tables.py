#!/usr/bin/env python3
"""plan_tables: docs/planning.md's tables that come from `fsdpc plan`, generated so they cannot go stale.

Each table sits in docs/planning.md between `<!-- plan_tables.py NAME -->` and `<!-- /plan_tables.py -->`:
  presets-h100 the 7B/13B/70B presets on 1-8 nodes of 8 x H100: predicted MFU and peak memory per rank
  calibration  the planner against the published runs of test/fixtures/plan_calibration.tsv, per
               source, and the fitted constants run/plan.c declares
  tp-70b       the llama2_70b preset on 8 nodes of 8 x H100 at tensor-parallel degrees 1/2/4/8, the same global batch,
               with and without sequence parallelism
  experts-ep   the mixtral_8x7b preset on 2 and 8 nodes of 8 x H100 at expert-parallel degrees 1/2/4/8
  finetune-lora  the 7B/13B/70B presets on 1 and 8 H100s: full finetuning, LoRA and QLoRA, per-GPU memory
  cp-7b        the llama2_7b preset at 32K and 128K context on 8 and 32 H100s at context-parallel degrees 1/2/4/8

    python3 run/plan_tables.py                     # prints the tables
    python3 run/plan_tables.py --check docs/planning.md   # exit 1 when the page's tables differ from them
    python3 run/plan_tables.py --write docs/planning.md   # puts them into the page
Standard library only.
"""
import argparse
import concurrent.futures
import difflib
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plan_fit  # noqa: E402  (beside this file)

GIB = 2.0**30
SOURCES = {"foundation-model-stack/fms-fsdp": "fms-fsdp README", "pytorch/torchtitan": "torchtitan performance.md, benchmarks/",
           "mosaicml/llm-foundry": "llm-foundry benchmarking README"}


def plan(fsdpc, args):
    p = subprocess.run([fsdpc, "plan"] + args + ["--json"], capture_output=True, text=True)
    if p.returncode:
        sys.exit("plan_tables.py: fsdpc plan %s: %s" % (" ".join(args), p.stderr.strip()[:300]))
    return json.loads(p.stdout)


def plans(fsdpc, arglists, jobs=4):
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        return list(ex.map(lambda a: plan(fsdpc, a), arglists))


def presets_h100(fsdpc):
    cases = [(m, s, ac, n) for m in ("7b", "13b", "70b") for s in ("full-shard", "hybrid-full-shard") for ac in (0, 1)
             for n in (1, 2, 4, 8)]
    args = [["--model_name", "llama2_" + m, "--precision", "bf16", "--batch_size", "1", "--max_context_width", "4096",
             "--sharding", s, "--world_size", str(8 * n), "--gpu", "h100"] + (["--activation_checkpoints"] if ac else [])
            for m, s, ac, n in cases]
    got = dict(zip(cases, plans(fsdpc, args)))
    cap = got[cases[0]]["capacity_bytes"] / GIB
    out = ["The 7B, 13B and 70B presets on nodes of 8 x H100, from `fsdpc plan --model_name llama2_Nb --precision bf16",
           "--batch_size 1 --max_context_width 4096 --sharding S [--activation_checkpoints] --world_size",
           "8*nodes --gpu h100` (reduce in fp32, 50 GB/s between nodes, the fitted efficiency). A cell is",
           "the predicted MFU and the peak memory per rank, or \"no\" and the peak that does not fit in",
           "%.1f GiB. Hybrid sharding uses a shard group of one node (8), so on one node it is full-shard." % cap,
           "",
           "| model | `--sharding` | act. ckpt | 1 node | 2 nodes | 4 nodes | 8 nodes |",
           "|---|---|---|---|---|---|---|"]
    for m in ("7b", "13b", "70b"):
        for s in ("full-shard", "hybrid-full-shard"):
            for ac in (0, 1):
                cells = []
                for n in (1, 2, 4, 8):
                    d = got[(m, s, ac, n)]
                    peak = "%.0f GiB" % (d["per_rank_bytes"]["peak"] / GIB)
                    cells.append("%.0f%% (%s)" % (100 * d["mfu"], peak) if d["fits"] else "no (%s)" % peak)
                out.append("| %s | %s | %s | %s |" % (m.upper(), s, "yes" if ac else "no", " | ".join(cells)))
    return out


def tp_70b(fsdpc):
    nets = ("efa-p4d", "efa-p5")
    cases = [(net, ac, sp, tp) for net in nets for ac in (0, 1) for sp in (0, 1) for tp in (1, 2, 4, 8) if not (sp and tp == 1)]
    args = [["--model_name", "llama2_70b", "--precision", "bf16", "--batch_size", str(tp), "--max_context_width", "4096",
             "--world_size", "64", "--gpu", "h100", "--interconnect", net, "--tensor_parallel_degree", str(tp)]
            + (["--activation_checkpoints"] if ac else []) + (["--sequence_parallel"] if sp else []) for net, ac, sp, tp in cases]
    got = dict(zip(cases, plans(fsdpc, args)))
    out = ["The llama2_70b preset on 8 nodes of 8 x H100 (64 ranks), full-shard, from `fsdpc plan --model_name llama2_70b",
           "--precision bf16 --max_context_width 4096 --world_size 64 --gpu h100 --interconnect NET",
           "--tensor_parallel_degree TP --batch_size TP [--activation_checkpoints] [--sequence_parallel]`: 64 sequences",
           "of 4096 tokens per step at every degree (each tp group reads TP of them). A cell is the predicted MFU,",
           "the peak memory per rank and the tp collectives' share of the step, or \"no\" and the peak that",
           "does not fit.",
           "",
           "| interconnect | act. ckpt | seq. parallel | tp 1 | tp 2 | tp 4 | tp 8 |",
           "|---|---|---|---|---|---|---|"]
    for net in nets:
        for ac in (0, 1):
            for sp in (0, 1):
                cells = []
                for tp in (1, 2, 4, 8):
                    if sp and tp == 1:
                        cells.append("-")
                        continue
                    d = got[(net, ac, sp, tp)]
                    peak = "%.0f GiB" % (d["per_rank_bytes"]["peak"] / GIB)
                    tpt = sum(c["time_s"] for c in d["collectives"] if c["name"].startswith("tp "))
                    share = ", tp %.0f%%" % (100 * tpt / d["step_time_s"]) if tp > 1 else ""
                    cells.append("%.0f%% (%s%s)" % (100 * d["mfu"], peak, share) if d["fits"] else "no (%s)" % peak)
                out.append("| %s | %s | %s | %s |" % (net, "yes" if ac else "no", "yes" if sp else "no", " | ".join(cells)))
    return out


def mixtral_ep(fsdpc):
    cases = [(net, n, ep) for net in ("efa-p4d", "efa-p5") for n in (2, 8) for ep in (1, 2, 4, 8)]
    args = [["--model_name", "mixtral_8x7b", "--precision", "bf16", "--batch_size", "1", "--max_context_width", "4096",
             "--world_size", str(8 * n), "--gpu", "h100", "--interconnect", net, "--activation_checkpoints",
             "--expert_parallel_degree", str(ep)] for net, n, ep in cases]
    got = dict(zip(cases, plans(fsdpc, args)))
    out = ["The mixtral_8x7b preset (46.7B parameters, 12.9B active) on nodes of 8 x H100, full-shard, from `fsdpc plan",
           "--model_name mixtral_8x7b --precision bf16 --batch_size 1 --max_context_width 4096 --activation_checkpoints",
           "--world_size 8*nodes --gpu h100 --interconnect NET --expert_parallel_degree EP`. MFU counts the active",
           "parameters' FLOPs. A cell is the predicted MFU, the peak memory per rank and the all-to-alls' share of the",
           "step, or \"no\" and the peak that does not fit.",
           "",
           "| interconnect | nodes | ep 1 | ep 2 | ep 4 | ep 8 |",
           "|---|---|---|---|---|---|"]
    for net in ("efa-p4d", "efa-p5"):
        for n in (2, 8):
            cells = []
            for ep in (1, 2, 4, 8):
                d = got[(net, n, ep)]
                peak = "%.0f GiB" % (d["per_rank_bytes"]["peak"] / GIB)
                share = ", all-to-all %.0f%%" % (100 * d["all_to_all_time_s"] / d["step_time_s"]) if ep > 1 else ""
                cells.append("%.0f%% (%s%s)" % (100 * d["mfu"], peak, share) if d["fits"] else "no (%s)" % peak)
            out.append("| %s | %d | %s |" % (net, n, " | ".join(cells)))
    return out


def finetune_lora(fsdpc):
    kinds = (("full finetune", []), ("LoRA r=16", ["--lora_rank", "16", "--lora_target_modules", "all-linear"]),
             ("QLoRA r=16", ["--lora_rank", "16", "--lora_target_modules", "all-linear", "--quantize_base", "nf4"]))
    cases = [(m, k, n) for m in ("7b", "13b", "70b") for k in range(len(kinds)) for n in (1, 8)]
    args = [["--model_name", "llama2_" + m, "--precision", "bf16", "--batch_size", "1", "--max_context_width", "4096",
             "--activation_checkpoints", "--world_size", str(n), "--gpu", "h100"] + kinds[k][1] for m, k, n in cases]
    got = dict(zip(cases, plans(fsdpc, args)))
    cap = got[cases[0]]["capacity_bytes"] / GIB
    out = ["Finetuning the 7B, 13B and 70B presets on 1 and 8 H100s, full-shard, from `fsdpc plan --model_name llama2_Nb",
           "--precision bf16 --batch_size 1 --max_context_width 4096 --activation_checkpoints --world_size 1|8 --gpu h100",
           "[--lora_rank 16 --lora_target_modules all-linear [--quantize_base nf4]]`. A cell is the peak memory per GPU",
           "(\"no\" and the peak when it does not fit in %.1f GiB) and the parameters', gradients' (their buffers" % cap,
           "included) and AdamW moments' bytes per parameter of the rank's shard.",
           "",
           "| model | kind | 1 x H100 | 8 x H100 |",
           "|---|---|---|---|"]
    for m in ("7b", "13b", "70b"):
        for k, (name, _) in enumerate(kinds):
            cells = []
            for n in (1, 8):
                d = got[(m, k, n)]
                b = d["per_rank_bytes"]
                shard_params = d["model"]["num_params"] / n
                peak = "%.1f GiB" % (b["peak"] / GIB)
                state = "%.2f B/param" % ((b["master"] + b["grads"] + b["optimizer"]) / shard_params)
                cells.append("%s, %s" % (peak, state) if d["fits"] else "no (%s)" % peak)
            out.append("| %s | %s | %s |" % (m.upper(), name, " | ".join(cells)))
    return out


def cp_7b(fsdpc):
    cases = [(t, g, cp) for t in (32768, 131072) for g in (8, 32) for cp in (1, 2, 4, 8)]
    args = [["--model_name", "llama2_7b", "--precision", "bf16", "--batch_size", "1", "--max_context_width", str(t),
             "--activation_checkpoints", "--world_size", str(g), "--gpu", "h100", "--context_parallel_degree", str(cp)]
            for t, g, cp in cases]
    got = dict(zip(cases, plans(fsdpc, args)))
    cap = got[cases[0]]["capacity_bytes"] / GIB
    out = ["The llama2_7b preset, full-shard over every GPU, from `fsdpc plan --model_name llama2_7b --precision bf16",
           "--batch_size 1 --max_context_width T --activation_checkpoints --world_size G --gpu h100 --cp N` (nodes",
           "of 8, 50 GB/s between them, the fitted efficiency): a cp group of N GPUs shares each sequence, so",
           "G / N sequences make a step. Memory is the peak per GPU (fits: within %.1f GiB); the ring's time" % cap,
           "is what its shifts expose beyond the attention blocks they overlap, per step; beside it one backward",
           "ring step's shift (k/v and their gradients, both bf16) against its block's attention. At cp > 1 the",
           "activations include the scratch of cuDNN's SDPA for the ring's blocks (head dim 128, bf16: `--attention",
           "auto` takes cuDNN where it loads and accepts the graphs, which the plan assumes), 0.38 GiB at 128K and cp 8.",
           "",
           "| context | GPUs | cp | activations | peak per GPU | fits | ring exposed (bwd shift / block) | step time | tokens/s | MFU |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for t, g, cp in cases:
        d = got[(t, g, cp)]
        b = d["per_rank_bytes"]
        r = d["cp_ring"]
        ring = "%.1f ms (%.1f / %.1f ms)" % (1e3 * r["exposed_s"], 1e3 * r["bwd_shift_s"], 1e3 * r["bwd_block_s"]) if cp > 1 else "-"
        out.append("| %dK | %d | %d | %.1f GiB | %.1f GiB | %s | %s | %.2f s | %.0f | %.0f%% |" % (
            t // 1024, g, cp, b["activations"] / GIB, b["peak"] / GIB, "yes" if d["fits"] else "**no**", ring,
            d["step_time_s"], d["tokens_per_s"], 100 * d["mfu"]))
    return out


def calibration(fsdpc, table, plan_c, plans_dir):
    rows = plan_fit.load_table(table)
    if plans_dir:
        got = [json.load(open(os.path.join(plans_dir, r["id"] + ".json"))) for r in rows]
    else:
        got = plans(fsdpc, [r["flags"].split() for r in rows])
    err = lambda r, d: d["tokens_per_s"] / d["world_size"] / float(r["tokens_per_s_gpu"]) - 1
    fmt = lambda es: "%.1f%% | %.1f%%" % (100 * statistics.median(abs(e) for e in es), 100 * max(abs(e) for e in es))
    out = ["| source | runs | models | GPUs | planned vs published: median error | worst | fitted to the other sources only |",
           "|---|---|---|---|---|---|---|"]
    groups = [(src, [(r, d) for r, d in zip(rows, got) if r["source"].startswith(src + " ") and r["compile"] == "no"])
              for src in SOURCES]
    for src, rd in groups:
        sizes = {}  # family: its sizes, smallest first
        for r, d in sorted(rd, key=lambda rd: rd[1]["model"]["num_params"]):
            fam, size = r["model"].rsplit("-", 1)
            sizes.setdefault(fam, [])
            if size.upper() not in sizes[fam]:
                sizes[fam].append(size.upper())
        models = "; ".join("%s %s" % (f, "/".join(s)) for f, s in sorted(sizes.items()))  # as the table names them
        gpus = ", ".join(sorted({r["gpu"] for r, _ in rd}))
        others = plan_fit.fit([(r, d) for r, d in zip(rows, got) if r["compile"] == "no" and (r, d) not in rd])
        out.append("| %s | %d | %s | %s | %s | %s |" % (SOURCES[src], len(rd), models, gpus, fmt([err(r, d) for r, d in rd]),
                                                    plan_fit.summary(plan_fit.errors(others, rd))))
    every = [(r, d) for r, d in zip(rows, got) if r["compile"] == "no"]
    out.append("| all, without torch.compile | %d | | | %s | |" % (len(every), fmt([err(r, d) for r, d in every])))
    comp = [(r, d) for r, d in zip(rows, got) if r["compile"] != "no"]
    if comp:
        ratio = statistics.median(1 + err(r, d) for r, d in comp)
        out.append("| with torch.compile (not fitted; planned %.2f x published) | %d | | | %s | |" % (
            ratio, len(comp), fmt([err(r, d) for r, d in comp])))
    text = open(plan_c).read()
    c = {k: re.search(r"\b%s = ([0-9.eE+-]+)" % k, text).group(1) for k in
         ("FIT_E_A100", "FIT_E_H100", "FIT_K", "FIT_M0", "FIT_RHO")}
    out += ["", "The constants in `run/plan.c`: E = %s (A100), %s (H100; the H100 PCIe and H200 take it too);" % (
        c["FIT_E_A100"], c["FIT_E_H100"]),
            "K = %s; M0 = %s tokens; recomputation at %s of its FLOPs." % (c["FIT_K"], c["FIT_M0"], c["FIT_RHO"])]
    return out


def blocks(args, names):
    make = {"presets-h100": lambda: presets_h100(args.fsdpc), "tp-70b": lambda: tp_70b(args.fsdpc),
            "experts-ep": lambda: mixtral_ep(args.fsdpc), "finetune-lora": lambda: finetune_lora(args.fsdpc),
            "cp-7b": lambda: cp_7b(args.fsdpc),
            "calibration": lambda: calibration(args.fsdpc, args.table, args.plan_c, args.plans)}
    unknown = [n for n in names if n not in make]
    if unknown:
        sys.exit("plan_tables.py: no table named %s" % ", ".join(unknown))
    return {n: make[n]() for n in names}


TABLES = ["presets-h100", "calibration", "tp-70b", "experts-ep", "finetune-lora", "cp-7b"]


BEGIN = re.compile(r"^<!-- plan_tables\.py ([a-z0-9-]+) -->$")
END = "<!-- /plan_tables.py -->"


def marked(text, path):
    """the names of the tables text marks, each checked for its closing mark"""
    names, open_name = [], None
    for line in text.split("\n"):
        m = BEGIN.match(line)
        if m:
            if open_name:
                sys.exit("plan_tables.py: %s: the table '%s' has no closing %s" % (path, open_name, END))
            if m.group(1) not in TABLES:
                sys.exit("plan_tables.py: %s marks a table '%s' this script does not make" % (path, m.group(1)))
            open_name = m.group(1)
            names.append(open_name)
        elif line == END:
            open_name = None
    if open_name:
        sys.exit("plan_tables.py: %s: the table '%s' has no closing %s" % (path, open_name, END))
    return names


def splice(text, made):
    """text with each marked block replaced by its generated lines"""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if m:
            while lines[i] != END:
                i += 1
            out += made[m.group(1)]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description="docs/planning.md's tables from fsdpc plan")
    ap.add_argument("--fsdpc", default="./fsdpc")
    ap.add_argument("--table", default="test/fixtures/plan_calibration.tsv")
    ap.add_argument("--plan_c", default="run/plan.c")
    ap.add_argument("--plans", help="a folder of the calibration rows' <id>.json plans to read instead of planning")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", metavar="PAGE")
    g.add_argument("--write", metavar="PAGE")
    args = ap.parse_args()
    if not args.check and not args.write:
        for name, lines in blocks(args, TABLES).items():
            print("<!-- plan_tables.py %s -->\n%s\n%s\n" % (name, "\n".join(lines), END))
        return 0
    path = args.check or args.write
    text = open(path).read()
    seen = marked(text, path)
    new = splice(text, blocks(args, seen))
    if args.write:
        if new != text:
            open(path, "w").write(new)
        return 0
    if new != text:
        for line in difflib.unified_diff(text.split("\n"), new.split("\n"), path, "generated", lineterm="", n=0):
            print(line)
        print("\nplan_tables.py: %s's plan tables are stale; regenerate: python3 run/plan_tables.py --write %s" % (path, path),
              file=sys.stderr)
        return 1
    print("%s: the plan tables (%s) are what fsdpc plan gives" % (path, ", ".join(seen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
