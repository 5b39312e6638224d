#!/usr/bin/python3
"""Training curves from fsdpc --metrics_file JSON lines, as one PNG.

    python3 run/plot.py a.jsonl b.jsonl -o curves.png [--label A --label B]

Panels: train and validation loss, learning rate, tokens/s (and MFU when the run had a GPU),
memory (by category when the lines carry the memory tracker's "mem"); against tokens seen (steps for files written before lines carried "tokens"). Several
runs are overlaid, labelled by file name unless --label names them. A file that cannot be read
or parsed ends the program with one line naming it.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402


def fail(msg):
    print(f"plot.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_run(path):
    """The file's step lines as a list of dicts, in file order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read '{path}': {e.strerror if isinstance(e, OSError) else e}")
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"'{path}' line {n} is not JSON ({e.msg}): is it an fsdpc --metrics_file?")
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            fail(f"'{path}' line {n} has no integer \"step\": is it an fsdpc --metrics_file?")
        rows.append(row)
    if not rows:
        fail(f"'{path}' holds no metrics lines")
    return rows


def series(rows, x, key):
    """(xs, ys) of the rows that carry a number under key."""
    pts = [(r[x], r[key]) for r in rows if x in r and isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return [p[0] for p in pts], [p[1] for p in pts]


def mem_series(rows, x, key):
    """(xs, MiB) of the largest rank's peak of a memory tracker row (mem: [now min, now max, peak min, peak max])."""
    pts = [(r[x], r["mem"][key][3] / 2**20) for r in rows if x in r and isinstance(r.get("mem"), dict) and len(r["mem"].get(key, [])) == 4]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    ap = argparse.ArgumentParser(description="Plot fsdpc --metrics_file runs into one PNG.")
    ap.add_argument("files", nargs="+", help="--metrics_file JSON lines, one per run")
    ap.add_argument("-o", "--output", default="curves.png", help="PNG to write (default: curves.png)")
    ap.add_argument("--label", action="append", default=[], help="a run's legend label, in file order (default: file name)")
    ap.add_argument("--title", default="", help="a title over the panels")
    args = ap.parse_args()
    if len(args.label) > len(args.files):
        fail(f"{len(args.label)} --label for {len(args.files)} file(s)")
    runs = [(args.label[i] if i < len(args.label) else os.path.basename(p), read_run(p)) for i, p in enumerate(args.files)]
    # tokens seen when every trained step of every run has them (a skipped step's line does not),
    # so runs of different batch sizes line up
    x = "tokens" if all("tokens" in r for _, rows in runs for r in rows if not r.get("skipped")) else "step"
    xlabel = "tokens seen" if x == "tokens" else "step"

    fig, ax = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    (loss_ax, lr_ax), (speed_ax, mem_ax) = ax
    mfu_ax = None
    by_category, held_ax = False, None
    for i, (label, rows) in enumerate(runs):
        color = f"C{i % 10}"
        xs, ys = series(rows, x, "loss")
        loss_ax.plot(xs, ys, color=color, lw=1.2, label=f"{label} train")
        xs, ys = series(rows, x, "val_loss")
        if xs:
            loss_ax.plot(xs, ys, color=color, lw=1, ls="--", marker="o", ms=6, mfc="white", zorder=3, label=f"{label} validation")
        lr_ax.plot(*series(rows, x, "lr"), color=color, lw=1.2, label=label)
        speed_ax.plot(*series(rows, x, "tokens_per_s"), color=color, lw=1.2, marker=".", label=f"{label} tokens/s")
        xs, ys = series(rows, x, "mfu")
        if xs:  # only GPU runs log it
            mfu_ax = mfu_ax or speed_ax.twinx()
            mfu_ax.plot(xs, [100 * y for y in ys], color=color, lw=1, ls=":", label=f"{label} MFU")
        keys = next((list(r["mem"]) for r in rows if isinstance(r.get("mem"), dict)), [])
        if not keys:  # lines without the tracker: the peak alone
            mem_ax.plot(*series(rows, x, "mem_mib"), color=color, lw=1.2, marker=".", label=label)
        # by category: a colour per category, a line style per run; categories never used are left
        # out; the process's view (CPU resident memory, GPU allocator reserved) holds fixed costs
        # that would flatten the categories, so it gets the right-hand axis
        for j, key in enumerate(keys):
            xs, ys = mem_series(rows, x, key)
            if not any(ys):
                continue
            held = key in ("rss", "reserved")
            if held:
                held_ax = held_ax or mem_ax.twinx()
            (held_ax if held else mem_ax).plot(xs, ys, color=f"C{j % 10}", lw=1 if held else 1.2,
                                               ls=":" if held else ["-", "--", "-.", (0, (5, 1))][i % 4], marker=".",
                                               label=key if len(runs) == 1 else f"{label} {key}")
        by_category = by_category or bool(keys)

    loss_ax.set_title("loss")
    lr_ax.set_title("learning rate")
    speed_ax.set_title("throughput" + (" and MFU (dotted)" if mfu_ax else ""))
    speed_ax.set_ylabel("tokens/s")
    if mfu_ax:
        mfu_ax.set_ylabel("MFU %")
    mem_ax.set_title("peak memory per rank (largest rank)" + (", by category" if by_category else ""))
    if by_category:
        lines = mem_ax.lines + (held_ax.lines if held_ax else [])
        mem_ax.legend(lines, [l.get_label() for l in lines], fontsize=7, ncol=2)
    if held_ax:
        held_ax.set_ylabel("MiB, process (dotted)")
        held_ax.set_ylim(0, 1.1 * max(max(l.get_ydata()) for l in held_ax.lines))
    mem_ax.set_ylabel("MiB")
    for a in (speed_ax, mem_ax):  # from zero: a few MiB or a slow interval should not look like a cliff
        top = max((max(l.get_ydata(), default=0) for l in a.lines), default=0)
        if top > 0:
            a.set_ylim(0, 1.1 * top)
    for a in ax.flat:
        a.grid(alpha=0.3)
        if not a.lines:
            a.text(0.5, 0.5, "not in these metrics files", ha="center", va="center", transform=a.transAxes, color="gray")
    for a in ax[1]:
        a.set_xlabel(xlabel)
        a.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, 1.5M, 3G tokens
    loss_ax.legend(fontsize=8)
    if len(runs) > 1:
        lr_ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    try:
        fig.savefig(args.output, format="png", dpi=90)
    except OSError as e:
        fail(f"cannot write '{args.output}': {e.strerror}")


if __name__ == "__main__":
    main()
