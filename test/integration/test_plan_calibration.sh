#!/usr/bin/env bash
# fsdpc plan against published FSDP runs (test/fixtures/plan_calibration.tsv): each row's flags
# describe its run; planned tokens/s per GPU within a median 10% and a worst 30% of the published
# figure over the runs without torch.compile; every Llama run fits, and 90% of the MPT runs;
# run/plan.c holds run/plan_fit.py's fit of the table; --compute_efficiency overrides it; the
# docs/planning.md's plan tables are what run/plan_tables.py makes of fsdpc plan.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
PREFIX="plan calibration: "
T=test/fixtures/plan_calibration.tsv

if ./fsdpc plan --model_name llama2_7b --device cuda --json 2>&1 | grep -q "no CUDA backend"; then
    check "(skipped: this build has no CUDA backend, whose buffers a GPU plan counts)" 0
    exit 0
fi

# every row planned, 4 at a time (each plan is a short MPI start-up): $W/plans/<id>.json
mkdir -p "$W/plans"
$PY - "$T" "$W/plans" >"$W/failed" 2>&1 <<'PY'
import concurrent.futures, subprocess, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("#") and l.strip()][1:]
def one(r):
    with open("%s/%s.json" % (sys.argv[2], r[0]), "w") as out:
        p = subprocess.run(["./fsdpc", "plan"] + r[11].split() + ["--json"], stdout=out, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        print("%s: %s" % (r[0], p.stderr.strip()[:300]))
    return r[0]
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    print(len(list(ex.map(one, rows))), "rows", file=sys.stderr)
PY
n=$(grep -v '^#' "$T" | tail -n +2 | grep -c .)
[ "$(cat "$W/failed")" = "$n rows" ]
check "fsdpc plan --json runs for every row ($n rows)" $? "$(head -3 "$W/failed")"

# verdicts: "check NAME STATUS DETAIL" lines from the rows and their plans
$PY - "$T" "$W/plans" >"$W/verdicts" 2>&1 <<'PY'
import json, os, statistics, sys
sys.path.insert(0, "run")
from plan_fit import load_table  # the table's one reader
rows = load_table(sys.argv[1])
plans = {r["id"]: json.load(open(os.path.join(sys.argv[2], r["id"] + ".json"))) for r in rows}

def verdict(name, ok, detail=""):
    print("%d\t%s\t%s" % (0 if ok else 1, name, detail))

# the descriptive columns and the flags agree: what the plan planned is the published run
DEVICE = {"a100-80g": "A100 SXM 80GB", "a100-40g": "A100 SXM 40GB", "h100": "H100 SXM 80GB"}
SHARDING = {"full": ("full-shard", None), "hybrid": ("hybrid-full-shard", 8), "grad": ("grad-shard", None)}
EVERY = {"none": 0, "full": 1, "every2": 2, "op": 2}
WIDTH = {"llama2-7b": 4096, "llama2-13b": 5120, "llama2-70b": 8192, "llama-34b": 8192, "llama3-8b": 4096, "llama3-70b": 8192,
         "mpt-125m": 768, "mpt-350m": 1024, "mpt-760m": 1536, "mpt-1b": 2048, "mpt-3b": 2560, "mpt-7b": 4096, "mpt-13b": 5120,
         "mpt-30b": 7168, "mpt-70b": 8192}
bad = []
for r in rows:
    d = plans[r["id"]]
    sh, group = SHARDING[r["sharding"]]
    want = [(d["device"], DEVICE[r["gpu"]]), (d["world_size"], int(r["gpus"])), (d["sharding"], sh),
            (d["batch_size"], int(r["micro_batch"])), (d["grad_accum"], int(r["grad_accum"])),
            (d["model"]["max_context_width"], int(r["seq_len"])), (d["checkpoint_every"], EVERY[r["ac"]]),
            (d["precision"], "bf16"), (d["model"]["hidden_width"], WIDTH[r["model"]]),
            (d["model"]["model_type"], "mingpt" if r["model"].startswith("mpt") else "llama_v2")]
    if group:
        want.append((d["shard_group"], group))
    off = ["%s != %s" % w for w in want if w[0] != w[1]]
    if off or r["compile"] not in ("yes", "no") or float(r["tokens_per_s_gpu"]) <= 0 or not r["source"]:
        bad.append("%s: %s" % (r["id"], ", ".join(off) or "compile/tokens/source column"))
n = len([r for r in rows if r["compile"] == "no"])
verdict("every row's flags plan its published run (GPU and its memory, world size, sharding and hybrid group, micro-batch, "
        "accumulation, context, checkpointing, bf16, width, model type); %d rows, %d without torch.compile" % (len(rows), n),
        not bad and n >= 30, "; ".join(bad[:5]))

# speed: planned tokens/s per GPU against the published figure
errs = []
for r in rows:
    d = plans[r["id"]]
    e = d["tokens_per_s"] / d["world_size"] / float(r["tokens_per_s_gpu"]) - 1
    if r["compile"] == "no":
        errs.append((abs(e), r["id"], e, d["efficiency_source"]))
errs.sort()
med, worst = statistics.median(e[0] for e in errs), errs[-1]
verdict("planned tokens/s per GPU within a median 10%% (%.1f%%) and a worst 30%% (%.1f%%, %s) of the published, over the %d runs "
        "without torch.compile, with the fitted efficiency" % (100 * med, 100 * worst[0], worst[1], len(errs)),
        med <= 0.10 and worst[0] <= 0.30 and all(e[3] == "fit" for e in errs),
        "worst: " + ", ".join("%s %+.0f%%" % (i, 100 * e) for _, i, e, _ in errs[-5:]))

# memory: every Llama run fits, and 90% of the MPT runs (all of them ran under PyTorch FSDP)
def misses(fam):
    rs = [r for r in rows if r["model"].startswith(fam)]
    out = []
    for r in rs:
        d = plans[r["id"]]
        if not d["fits"]:
            b = d["per_rank_bytes"]
            out.append("%s %.1f/%.1f GiB (%s)" % (r["id"], b["peak"] / 2**30, d["capacity_bytes"] / 2**30, ", ".join(
                "%s %.1f" % (k, b[k] / 2**30) for k in ("params", "gathered", "grads", "optimizer", "activations", "buffers"))))
    return rs, out
rs, out = misses("llama")
verdict("plan says fits for every published Llama run (%d of %d)" % (len(rs) - len(out), len(rs)), not out, "; ".join(out))
rs, out = misses("mpt")
verdict("plan says fits for at least 90%% of the published MPT runs (%d of %d)" % (len(rs) - len(out), len(rs)),
        len(rs) - len(out) >= 0.9 * len(rs), "; ".join(out))
PY
while IFS=$'\t' read -r st name detail; do
    check "$name" "$st" "$detail"
done < <(grep -E '^[01]'$'\t' "$W/verdicts")
grep -qE '^[01]'$'\t' "$W/verdicts"
check "the verdicts were computed" $? "$(tail -c 600 "$W/verdicts")"

# run/plan.c's constants are the fit of the table (its output names the line to paste)
$PY run/plan_fit.py --plans "$W/plans" --check run/plan.c >"$W/fit.out" 2>"$W/fit.err"
ok=$?  # before the message's $(...), which would set $? again
check "run/plan.c holds run/plan_fit.py's fit of the table ($(grep -m1 -o 'without torch.compile, [0-9]* runs: .*' "$W/fit.out"))" $ok \
    "$(cat "$W/fit.err")"

# --compute_efficiency overrides the fit; float32 and CPU plans are not fitted
F="--model_name llama2_7b --precision bf16 --batch_size 2 --max_context_width 4096 --world_size 8 --json"
./fsdpc plan $F >"$W/fit.json" && ./fsdpc plan $F --compute_efficiency 0.25 >"$W/over.json" &&
    ./fsdpc plan $F --precision float32 >"$W/fp32.json" &&
    ./fsdpc plan --device cpu --world_size 2 --gpu_tflops 1 --json >"$W/cpu.json"
$PY - "$W/fit.json" "$W/over.json" "$W/fp32.json" "$W/cpu.json" <<'PY'
import json, sys
fit, over, fp32, cpu = (json.load(open(p)) for p in sys.argv[1:])
assert fit["efficiency_source"] == "fit" and 0.2 < fit["compute_efficiency"] < 0.6, fit
assert over["efficiency_source"] == "--compute_efficiency" and over["compute_efficiency"] == 0.25, over
assert abs(over["compute_time_s"] / fit["compute_time_s"] - fit["compute_efficiency"] / 0.25) < 1e-3, (over, fit)
assert fp32["efficiency_source"] == cpu["efficiency_source"] == "unfitted" and fp32["compute_efficiency"] == 0.5, (fp32, cpu)
assert fit["recompute_cost"] < 1 and fp32["recompute_cost"] == 1, (fit, fp32)
PY
check "--compute_efficiency 0.25 replaces the fitted efficiency (compute time scales by it); float32 and CPU plans take 0.5, unfitted" $?
expect_error "--compute_efficiency is a fraction" "compute_efficiency expects a fraction in \(0, 1\]" ./fsdpc plan --compute_efficiency 1.5

# docs/planning.md's tables from fsdpc plan: regenerated, they equal the page's
$PY run/plan_tables.py --check docs/planning.md --plans "$W/plans" >"$W/tables.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q '^docs/planning.md: the plan tables (presets-h100, tp-70b, experts-ep, cp-7b, finetune-lora, calibration) are what fsdpc plan gives$' "$W/tables.out"
check "docs/planning.md's plan tables (Llama-2 on H100 nodes, 70B at tp 1-8, Mixtral's ep, 7B at 32K/128K x cp 1-8, LoRA and QLoRA, the calibration) are what run/plan_tables.py makes of fsdpc plan" $? \
    "$(tail -c 1200 "$W/tables.out")"
# and the check can fail: a stale cell is found, and the command that regenerates it named
sed -n '/^<!-- plan_tables.py calibration -->$/,/^<!-- \/plan_tables.py -->$/p' docs/planning.md |
    sed 's/^| all, without torch.compile | [0-9]* |/| all, without torch.compile | 7 |/' >"$W/planning.md"
$PY run/plan_tables.py --check "$W/planning.md" --plans "$W/plans" >"$W/stale.out" 2>&1
[ $? = 1 ] && grep -q '^-| all, without torch.compile | 7 |' "$W/stale.out" &&
    grep -q "regenerate: python3 run/plan_tables.py --write" "$W/stale.out"
check "a stale docs/planning.md table fails the check, with the difference and the command that regenerates it" $? "$(tail -c 400 "$W/stale.out")"
