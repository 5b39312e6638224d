"""NF4 storage with double quantisation (QLoRA, Dettmers et al. 2023; bitsandbytes' layout),
rendered from the published algorithm, against fsdpc's kernels (kernels.h kern_nf4_*).

usage: /usr/bin/python3 test/ref/nf4_ref.py [TEST_KERNELS]   the checks, one TAP-style line each
       /usr/bin/python3 test/ref/nf4_ref.py --c-tables       prints kernels/nf4.h's two tables

The checks write random tensors (normal, with outliers, lengths off the block and group sizes,
n = 1, zero blocks, values on the code midpoints, real-shaped N(0, 0.02) weights) to a temporary
folder, run TEST_KERNELS (default build/test_kernels) --nf4 on them, and compare bit for bit: the
C tables with this rendering's, the packed bytes, kern_nf4_dequantize_host's fp32 values and
kern_nf4_dequantize's on the CPU device. Exits 1 if any check failed.
"""

import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

BLOCK, GROUP = 64, 256

# the 16 NF4 values as the QLoRA paper and bitsandbytes publish them, as fp32
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
# the decision tree's thresholds: fp32 (a + b) / 2 of adjacent values (bitsandbytes hard-codes these)
NF4_MID = (NF4[:-1] + NF4[1:]) / np.float32(2)


def dynamic_map(max_exponent_bits=7, total_bits=8):
    """bitsandbytes' create_dynamic_map(signed=True, ...): for each exponent i, the midpoints of
    2^i + 1 points spaced evenly over [0.1, 1] (torch.linspace, fp32) scaled by
    10^(i - (max_exponent_bits - 1)), and their negatives; then 0 and 1, sorted"""
    non_sign_bits = total_bits - 1
    # the linear region's extra items: 2^(non_sign_bits - max_exponent_bits) - 1, none for 8 and 7 bits
    assert non_sign_bits == max_exponent_bits
    data = []
    for i in range(max_exponent_bits):
        bounds = torch.linspace(0.1, 1, 2 ** (i + non_sign_bits - max_exponent_bits) + 1)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += (10 ** (-(max_exponent_bits - 1) + i) * means).tolist()
        data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data += [0.0, 1.0]
    assert len(data) == 2 ** total_bits
    data.sort()
    return torch.tensor(data, dtype=torch.float32).numpy()


DYN = dynamic_map()
# nearest value, ties to the lower index: the midpoints of adjacent values in fp64, where they are exact
DYN_MID = (DYN[:-1].astype(np.float64) + DYN[1:].astype(np.float64)) / 2.0


def layout(n):
    """(blocks, groups, byte offset of absmax2, total bytes) of a packed tensor of n values"""
    nb = -(-n // BLOCK)
    ng = -(-nb // GROUP)
    at = (nb * BLOCK // 2 + nb + 3) // 4 * 4
    return nb, ng, at, at + 4 * ng + 4


def quantize(x):
    """the packed bytes of fp32 x"""
    n = x.size
    nb, ng, at, total = layout(n)
    blocks = np.zeros(nb * BLOCK, np.float32)
    blocks[:n] = x
    blocks = blocks.reshape(nb, BLOCK)
    absmax = np.abs(blocks).max(axis=1)
    # bitsandbytes multiplies by the fp32 reciprocal of the absmax (kQuantizeBlockwise), here and below
    inv = np.zeros_like(absmax)
    np.divide(np.float32(1), absmax, out=inv, where=absmax != 0)
    v = blocks * inv[:, None]
    codes = np.searchsorted(NF4_MID, v.ravel(), side="left").astype(np.uint8)  # how many v is strictly above
    packed = (codes[0::2] << 4) | codes[1::2]
    # double quantisation: the scales less their mean, in groups of 256 on the dynamic map
    offset = np.float32(np.add.accumulate(absmax.astype(np.float64))[-1] / nb)
    c = absmax - offset
    absmax2 = np.array([np.abs(c[g * GROUP:(g + 1) * GROUP]).max() for g in range(ng)], np.float32)
    scale2 = np.repeat(absmax2, GROUP)[:nb]
    inv2 = np.zeros_like(scale2)
    np.divide(np.float32(1), scale2, out=inv2, where=scale2 != 0)
    w = c * inv2
    qabsmax = np.searchsorted(DYN_MID, w.astype(np.float64), side="left").astype(np.uint8)
    out = bytearray(total)
    out[:nb * BLOCK // 2] = packed.tobytes()
    out[nb * BLOCK // 2:nb * BLOCK // 2 + nb] = qabsmax.tobytes()
    out[at:at + 4 * ng] = absmax2.astype("<f4").tobytes()
    out[at + 4 * ng:] = np.array([offset], "<f4").tobytes()
    return bytes(out)


def dequantize(packed, n):
    """n fp32 values from the packed bytes: NF4[code] * (dyn[qabsmax] * absmax2 + offset), each
    step rounded to fp32"""
    nb, ng, at, _ = layout(n)
    raw = np.frombuffer(packed, np.uint8)
    codes = np.empty(nb * BLOCK, np.uint8)
    codes[0::2] = raw[:nb * BLOCK // 2] >> 4
    codes[1::2] = raw[:nb * BLOCK // 2] & 15
    qabsmax = raw[nb * BLOCK // 2:nb * BLOCK // 2 + nb]
    absmax2 = np.frombuffer(packed, "<f4", ng, at)
    offset = np.frombuffer(packed, "<f4", 1, at + 4 * ng)[0]
    scale = DYN[qabsmax] * np.repeat(absmax2, GROUP)[:nb] + offset
    return (NF4[codes] * np.repeat(scale, BLOCK))[:n]


def dyn_ties():
    """four blocks whose scales fall on midpoints of the dynamic map, +-m: absmaxes 1.5, 0.5, 1 + m/2 and
    1 - m/2 (offset 1, absmax2 0.5) for the largest midpoint m < 1 that keeps them exact in fp32"""
    for m in DYN_MID[::-1]:
        h = np.float32(m / 2)
        if 0 < m < 1 and h == m / 2 and np.float32(1 + h) - 1 == h and 1 - np.float32(1 - h) == h:
            break
    absmax = np.array([1.5, 0.5, 1 + h, 1 - h], np.float32)
    x = np.linspace(-0.9, 0.9, BLOCK, dtype=np.float32) * absmax[:, None]
    x[:, 0] = absmax
    return x


def cases():
    """(name, fp32 tensor) for each check"""
    rng = np.random.default_rng(20230523)
    out = [("n=1", np.array([0.37], np.float32)),
           ("n=1 negative", np.array([-2.5], np.float32)),
           ("normal n=1000", rng.standard_normal(1000).astype(np.float32))]
    x = rng.standard_normal(2 * BLOCK * GROUP + 100).astype(np.float32)  # three groups, the last partial
    x[rng.integers(0, x.size, 40)] *= 300.0  # outliers
    out.append(("normal with outliers n=2*64*256+100", x))
    x = rng.standard_normal(BLOCK * GROUP).astype(np.float32)  # whole blocks and one whole group
    x[5 * BLOCK:6 * BLOCK] = 0.0
    x[7 * BLOCK:8 * BLOCK] = -0.0
    out.append(("zero blocks n=64*256", x))
    out.append(("n=63", rng.uniform(-3, 3, 63).astype(np.float32)))
    out.append(("n=65 (a second block of one)", rng.uniform(-3, 3, 65).astype(np.float32)))
    out.append(("all zeros n=200", np.zeros(200, np.float32)))
    out.append(("equal blocks (absmax2 0) n=640", np.tile(np.linspace(-1, 1, BLOCK, dtype=np.float32), 10)))
    # each block's absmax 1 or a power of two, and every element a midpoint: the ties go to the lower code
    ties = np.concatenate([NF4_MID, NF4, -NF4_MID, [np.float32(1.0)]] * 2).astype(np.float32)
    ties = np.concatenate([ties[:BLOCK], 4 * ties[:BLOCK], -0.25 * ties[:BLOCK]])
    out.append(("values on the NF4 midpoints n=192", ties))
    out.append(("scales on the dynamic map's midpoints n=256", dyn_ties()))
    out.append(("real-shaped 688x256 N(0, 0.02)", (0.02 * rng.standard_normal((688, 256))).astype(np.float32)))
    out.append(("real-shaped 4096x64 N(0, 0.02)", (0.02 * rng.standard_normal((4096, 64))).astype(np.float32)))
    return out


def first_diff(a, b):
    """index of the first differing element of two equal-length arrays, or -1"""
    d = np.flatnonzero(a != b)
    return int(d[0]) if d.size else -1


def where_in(n, i):
    """which part of the packed layout byte i is in"""
    nb, ng, at, _ = layout(n)
    return "codes" if i < nb * BLOCK // 2 else "qabsmax" if i < nb * BLOCK // 2 + nb else \
        "padding" if i < at else "absmax2" if i < at + 4 * ng else "offset"


failures = 0


def report(ok, name, detail=""):
    global failures
    print(("ok - " if ok else "not ok - ") + name + ("" if ok else f" ({detail})"))
    failures += not ok


def check_case(name, x, path):
    n = x.size
    ref = quantize(x.ravel())
    with open(path + ".nf4", "rb") as f:
        got = f.read()
    if len(got) != len(ref):
        return report(False, f"nf4 quantize {name}: packed bytes", f"{len(got)} bytes, expected {len(ref)}")
    i = first_diff(np.frombuffer(got, np.uint8), np.frombuffer(ref, np.uint8))
    report(i < 0, f"nf4 quantize {name}: packed bytes equal", f"first difference at byte {i} ({where_in(n, i)}): "
           f"{got[i] if i >= 0 else 0:#04x} vs {ref[i] if i >= 0 else 0:#04x}")
    want = dequantize(ref, n).view(np.uint32)
    for suffix, what in ((".deq", "kern_nf4_dequantize_host"), (".dev", "kern_nf4_dequantize (CPU)")):
        vals = np.fromfile(path + suffix, "<f4")
        j = first_diff(vals.view(np.uint32), want) if vals.size == n else 0
        report(vals.size == n and j < 0, f"nf4 dequantize {name}: {what} equal bit for bit",
               f"{vals.size} values; first difference at {j}: {vals[j] if j < vals.size else 0:.9g} vs "
               f"{want.view(np.float32)[j]:.9g}")
    # the format itself: within a block, NF4's widest gap (0.28) of its scale, plus the scale's own error
    err = np.abs(dequantize(ref, n) - x.ravel()).max() / max(np.abs(x).max(), 1e-30)
    report(err < 0.2, f"nf4 round trip {name}: max error / max |x| < 0.2", f"{err:.3g}")


def main():
    if sys.argv[1:] == ["--c-tables"]:
        for name, table in (("NF4_VALUES", NF4), ("NF4_DYNAMIC_MAP", DYN)):
            lits = [re.sub(r"0+p", "p", float(v).hex()).replace(".p", "p") + "f" for v in table]
            print(f"#define {name} \\")
            for k in range(0, len(lits), 6):
                print("    " + ", ".join(lits[k:k + 6]) + (", \\" if k + 6 < len(lits) else ""))
        return 0
    exe = sys.argv[1] if len(sys.argv) > 1 else "build/test_kernels"
    report(bool(np.all(np.diff(DYN) > 0)), "nf4 dynamic map: 256 values, strictly increasing",
           "repeated values")
    with tempfile.TemporaryDirectory() as tmp:
        todo = cases()
        paths = [os.path.join(tmp, f"case{k}") for k in range(len(todo))]
        for (_, x), p in zip(todo, paths):
            x.astype("<f4").tofile(p + ".f32")
        tables = os.path.join(tmp, "tables.bin")
        run = subprocess.run([exe, "--nf4", tables] + [p + ".f32" for p in paths], capture_output=True, text=True)
        report(run.returncode == 0, f"nf4: {exe} --nf4 ran", run.stderr.strip()[-300:])
        if run.returncode != 0:
            return 1
        c_tables = np.fromfile(tables, "<f4")
        for what, table, part in (("NF4 values", NF4, c_tables[:16]), ("dynamic map", DYN, c_tables[16:])):
            j = first_diff(part.view(np.uint32), table.view(np.uint32)) if part.size == table.size else 0
            report(part.size == table.size and j < 0, f"nf4 tables: the C {what} equal the Python rendering's",
                   f"first difference at {j}")
        for (name, x), p in zip(todo, paths):
            check_case(name, x, p)
    print(f"{'FAIL' if failures else 'PASS'}: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
