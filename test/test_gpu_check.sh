#!/usr/bin/env bash
# make gpu-check's dry run on the CPU emulator: every stage runs its bookkeeping (the GPU suite's
# quick form, the short sanitizer run, the cuDNN list, the benchmark's and parity's fsdpc side;
# compute-sanitizer and transformers skip with their reasons here), and the table, its file and
# the JSON name every stage with a sane status; the benchmark's row has fsdpc's measured compute
# efficiency in the form fsdpc plan --compute_efficiency takes. Then a refused cuDNN graph, a
# stage over its limit and a spent budget, each in the table as it should be. Not its timings.
cd "$(dirname "$0")/.."
source test/lib.sh
PREFIX="gpu-check dry run: "
STAGES="tests sanitizer cudnn bench parity"

GPU_CHECK_DRY=1 GPU_CHECK_OUT="$W/gc.txt" timeout 300 bash run/gpu_check.sh >"$W/gc.out" 2>&1
rc=$?
check "exits 0 with no failed stage" $rc "$(tail -c 600 "$W/gc.out")"
# row STAGE FILE: the stage's table row
row() { grep -E "^$1 +(pass|fail|skip) +[0-9]+  " "$2"; }
for f in gc.out gc.txt; do
    ok=0
    for s in $STAGES; do [ "$(row $s "$W/$f" | wc -l)" = 1 ] || ok=1; done
    grep -Eq '^stage +status +s +result$' "$W/$f" && grep -Eq '^overall: pass \([0-9] pass, 0 fail, [0-9] skip\)$' "$W/$f" || ok=1
    check "$f: the table names each of the 5 stages once, with a status and seconds, and the overall line" $ok "$(head -9 "$W/$f")"
done
row tests "$W/gc.txt" | grep -qE ' pass +[0-9]+  [1-9][0-9]* passed, 0 failed$'
check "the GPU suite's stage passes with its count" $? "$(row tests "$W/gc.txt")"
row sanitizer "$W/gc.txt" | grep -q ' skip .*dry run: compute-sanitizer needs a GPU; the 2-step run passed'
check "compute-sanitizer skips with its reason after the short run" $? "$(row sanitizer "$W/gc.txt")"
n=$(grep -c '^ok - cudnn ' "$W/gc.txt")
row cudnn "$W/gc.txt" | grep -q " pass .* $n/$n graphs accepted" && [ "$n" -ge 20 ] &&
    [ "$(grep -c '^ok - cudnn forward' "$W/gc.txt")" = "$(grep -c '^ok - cudnn backward' "$W/gc.txt")" ] &&
    grep -q 'document-masked .* hd=128' "$W/gc.txt" && grep -q 'causal B=4 T=2048 H=16 KV=8 hd=128' "$W/gc.txt"
check "every cuDNN graph listed and accepted, forward and backward ($n graphs)" $? "$(row cudnn "$W/gc.txt")"
row bench "$W/gc.txt" | grep -qE ' (pass|skip) .*native [0-9]+ tok/s; auto \(cuDNN [^)]*\) [0-9]+ tok/s; (torch sdpa [0-9]+ tok/s; fsdpc/torch [0-9.]+x|torch skipped: .+)'
check "the benchmark row has fsdpc's native and cuDNN tokens/s, and torch's or why not" $? "$(row bench "$W/gc.txt")"
# fsdpc's own efficiency, in the form fsdpc plan takes (the dry run's value is the emulator's, tiny)
e=$(row bench "$W/gc.txt" | sed -nE 's/.*fsdpc compute efficiency [0-9.e+-]+ of the H100 SXM 80GB bf16 peak: fsdpc plan --gpu h100 --compute_efficiency ([0-9.e+-]+) \(fitted: 0\.[0-9]+\).*/\1/p')
[ -n "$e" ] && build/fsdpc_emu plan --device cuda --precision bf16 --gpu h100 --compute_efficiency "$e" --json >"$W/eff.json" &&
    /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["efficiency_source"] == "--compute_efficiency" and d["compute_efficiency"] > 0, d' "$W/eff.json"
check "the benchmark row prints fsdpc's measured compute efficiency as fsdpc plan --compute_efficiency takes it, beside the fitted one; plan accepts it ($e)" $? \
    "$(row bench "$W/gc.txt")"
row parity "$W/gc.txt" | grep -qE ' pass .*fp32 rel diff [0-9.e+-]+ .*greedy [0-9]+/[0-9]+ bytes equal| skip +[0-9]+  fsdpc loss fp32 [0-9.]+, bf16 [0-9.]+ .*torch skipped: .+'
check "the parity row has fsdpc's losses of the exported model, and torch's comparison or why not" $? "$(row parity "$W/gc.txt")"
/usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["dry_run"] is True and [s["stage"] for s in j["stages"]] == sys.argv[2].split(), j["stages"]
assert all(s["status"] in ("pass", "skip") and s["seconds"] >= 0 and s["result"] for s in j["stages"])
assert len(j["cudnn_graphs"]) == int(sys.argv[3]) and all(g["accepted"] for g in j["cudnn_graphs"])
' "$W/gc.json" "$STAGES" "$n" 2>"$W/json.err"
check "gc.json beside the table: the same stages in order, and the cuDNN list" $? "$(tail -c 300 "$W/json.err")"

# a refusal: the stage fails with cuDNN's own words, the run exits 1, the JSON carries the message
FSDPC_EMU_CUDNN=nofinalize GPU_CHECK_DRY=1 GPU_CHECK_ONLY=cudnn GPU_CHECK_OUT="$W/no.txt" timeout 60 bash run/gpu_check.sh >"$W/no.out" 2>&1
rc=$?
[ $rc = 1 ] && row cudnn "$W/no.txt" | grep -q ' fail .*0/26 graphs accepted (exit 1); first refusal: .*finalizes into a plan' &&
    grep -q '^not ok - cudnn forward causal B=2 T=96' "$W/no.txt" && row bench "$W/no.txt" | grep -q ' skip .*not in GPU_CHECK_ONLY' &&
    grep -q '^overall: FAIL (0 pass, 1 fail, 4 skip)$' "$W/no.txt" &&
    /usr/bin/python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["cudnn_graphs"]; assert not g[0]["accepted"] and "plan" in g[0]["message"]' "$W/no.json"
check "a graph cuDNN refuses fails its stage with cuDNN's message, in the table, the list and the JSON (exit $rc)" $? "$(head -9 "$W/no.txt")"

# limits: a stage past its limit fails as such; one the spent budget leaves no time is skipped
GPU_CHECK_DRY=1 GPU_CHECK_ONLY="tests cudnn" GPU_CHECK_BUDGET=8 GPU_CHECK_OUT="$W/lim.txt" timeout 60 bash run/gpu_check.sh >"$W/lim.out" 2>&1
rc=$?
[ $rc = 1 ] && row tests "$W/lim.txt" | grep -q ' fail .*over its 8 s limit' &&
    row cudnn "$W/lim.txt" | grep -q ' skip .*the 8 s budget was spent before this stage' && grep -q '^tests log (last 30 lines):' "$W/lim.txt"
check "a stage over its limit fails, the next is skipped once the budget is spent, the failed stage's log is kept (exit $rc)" $? "$(head -9 "$W/lim.txt")"
