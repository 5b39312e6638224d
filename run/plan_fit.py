#!/usr/bin/env python3
"""plan_fit: fits fsdpc plan's compute efficiency to published FSDP runs.

Reads test/fixtures/plan_calibration.tsv (one published run per row: the fsdpc plan flags that
describe it and its tokens/s per GPU), plans every row with `fsdpc plan --json`, and fits

    efficiency = E[arch] * D / (D + K * peak / hbm) * m / (m + M0)

(D the model width, m the micro-batch's tokens, peak and hbm the GPU's bf16 FLOP/s and memory
bytes/s) with recomputation charged at RHO of its FLOPs, to the rows without torch.compile, by
least squares on log(planned / published). The plan's step time around it is fsdpc's own:
compute, the collectives that do not overlap it, and AdamW. Prints the constants as run/plan.c
declares them, each row's error and the error per source, and each source's error when the
constants are fitted to the other sources only.

    python3 run/plan_fit.py                      # plans with ./fsdpc, fits, prints
    python3 run/plan_fit.py --plans DIR          # reads DIR/<id>.json instead of planning
    python3 run/plan_fit.py --check run/plan.c   # exit 1 unless plan.c holds these constants (2%)
Standard library only.
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import statistics
import subprocess
import sys

NAMES = ["FIT_E_A100", "FIT_E_H100", "FIT_K", "FIT_M0", "FIT_RHO"]


def load_table(path):
    rows, header = [], None
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        cells = line.rstrip("\n").split("\t")
        if header is None:
            header = cells
            continue
        if len(cells) != len(header):
            sys.exit("plan_fit.py: %s: row '%s' has %d cells, the header %d" % (path, cells[0], len(cells), len(header)))
        rows.append(dict(zip(header, cells)))
    return rows


def plan_rows(rows, fsdpc, jobs):
    def one(r):
        p = subprocess.run([fsdpc, "plan"] + r["flags"].split() + ["--json"], capture_output=True, text=True)
        if p.returncode:
            sys.exit("plan_fit.py: row %s: fsdpc plan failed: %s" % (r["id"], p.stderr.strip()[:300]))
        return json.loads(p.stdout)
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        return list(ex.map(one, rows))


def arch(plan):
    name = plan["device"]
    for a in ("A100", "H100", "H200"):
        if a in name:
            return 0 if a == "A100" else 1
    sys.exit("plan_fit.py: no fitted architecture for device '%s'" % name)


def planned(c, plan):
    """tokens/s per GPU that fsdpc plan gives with the constants c (NAMES' order)"""
    e_arch, k, m0, rho = c[arch(plan)], c[2], c[3], c[4]
    width = plan["model"]["hidden_width"]
    micro = plan["batch_size"] * plan["model"]["max_context_width"]
    eff = e_arch * width / (width + k * plan["peak_flops"] / plan["hbm_bytes_s"]) * micro / (micro + m0)
    tokens = plan["tokens_per_step_per_rank"]
    compute = tokens * (plan["flops_per_token"] + rho * plan["recompute_flops_per_token"]) / (plan["peak_flops"] * eff)
    edge, comm = plan["unhidden_comm_s"], plan["comm_time_s"]
    step = compute + edge + max(0.0, comm - edge - compute) + plan["optimizer_time_s"]
    return tokens / step


def nelder_mead(f, x0, iters=4000):
    n = len(x0)
    pts = [list(x0)] + [[x * 1.25 if j == i else x for j, x in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] <= 1e-13 * (1 + abs(vals[0])):
            break
        mid = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        at = lambda t: [mid[j] + t * (pts[-1][j] - mid[j]) for j in range(n)]
        xr = at(-1)
        fr = f(xr)
        if fr < vals[0]:
            xe = at(-2)
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = at(0.5)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:  # shrink toward the best
                for i in range(1, n + 1):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(n)]
                    vals[i] = f(pts[i])
    i = min(range(n + 1), key=lambda i: vals[i])
    return pts[i]


def fit(data):
    def loss(c):
        if min(c) <= 0 or c[4] > 2:
            return 1e30
        return sum(math.log(planned(c, p) / float(r["tokens_per_s_gpu"])) ** 2 for r, p in data)
    c = [0.7, 0.55, 3.0, 1000.0, 0.7]
    for _ in range(6):  # restarts: Nelder-Mead stalls on a collapsed simplex
        c = nelder_mead(loss, c)
    return c


def errors(c, data):
    return [planned(c, p) / float(r["tokens_per_s_gpu"]) - 1 for r, p in data]


def summary(errs):
    a = [abs(e) for e in errs]
    return "median %.1f%%, worst %.1f%%" % (100 * statistics.median(a), 100 * max(a))


def source_of(row):
    return row["source"].split()[0]


def main():
    ap = argparse.ArgumentParser(description="fit fsdpc plan's compute efficiency to published runs")
    ap.add_argument("--table", default="test/fixtures/plan_calibration.tsv")
    ap.add_argument("--fsdpc", default="./fsdpc")
    ap.add_argument("--plans", help="a folder of <id>.json plans to read instead of planning")
    ap.add_argument("--check", metavar="PLAN_C", help="exit 1 unless PLAN_C declares these constants (within 2%%)")
    ap.add_argument("--jobs", type=int, default=4)
    args = ap.parse_args()
    rows = load_table(args.table)
    if args.plans:
        plans = [json.load(open(os.path.join(args.plans, r["id"] + ".json"))) for r in rows]
    else:
        plans = plan_rows(rows, args.fsdpc, args.jobs)
    data = [(r, p) for r, p in zip(rows, plans) if r["compile"] == "no"]
    c = fit(data)
    print("/* run/plan_fit.py over %d published runs without torch.compile (%s) */" % (len(data), args.table))
    print("static const double FIT_E_A100 = %.3g, FIT_E_H100 = %.3g, FIT_K = %.3g, FIT_M0 = %.4g, FIT_RHO = %.3g;" % tuple(c))
    print()
    print("%-28s %-8s %10s %10s %7s" % ("run", "compile", "published", "fitted", "error"))
    for r, p in zip(rows, plans):
        pub = float(r["tokens_per_s_gpu"])
        print("%-28s %-8s %10.0f %10.0f %+6.1f%%" % (r["id"], r["compile"], pub, planned(c, p), 100 * (planned(c, p) / pub - 1)))
    print()
    print("without torch.compile, %d runs: %s" % (len(data), summary(errors(c, data))))
    comp = [(r, p) for r, p in zip(rows, plans) if r["compile"] != "no"]
    if comp:
        print("with torch.compile (not fitted), %d runs: %s, planned/published %.2f (median)" % (
            len(comp), summary(errors(c, comp)), 1 + statistics.median(errors(c, comp))))
    for src in sorted({source_of(r) for r, _ in data}):
        own = [(r, p) for r, p in data if source_of(r) == src]
        rest = [(r, p) for r, p in data if source_of(r) != src]
        print("%-36s %2d runs: %s; fitted to the other sources only: %s" % (
            src, len(own), summary(errors(c, own)), summary(errors(fit(rest), own))))
    if args.check:
        text = open(args.check).read()
        ok = True
        for name, value in zip(NAMES, c):
            m = re.search(r"\b%s = ([0-9.eE+-]+)" % name, text)
            have = float(m.group(1)) if m else None
            if have is None or abs(have - value) > 0.02 * abs(value):
                ok = False
                print("plan_fit.py: %s: %s = %s, the fit gives %.4g" % (args.check, name, have, value), file=sys.stderr)
        if not ok:
            print("plan_fit.py: %s's constants are not the fit of %s: paste the 'static const double FIT_...' line this "
                  "prints into it" % (args.check, args.table), file=sys.stderr)
            return 1
        print("%s holds the fit's constants (within 2%%)" % args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
