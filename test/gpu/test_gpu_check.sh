#!/usr/bin/env bash
# make gpu-check's dry run on the CPU emulator: every stage runs its bookkeeping (stage 0's ldd,
# versions and one step; the GPU suite's quick form, the cuDNN list, the benchmark's fsdpc side
# with its GPU time per op and test_gpu --bench at a tiny shape, parity's fsdpc side, the short
# sanitizer run; compute-sanitizer and transformers skip with their reasons here), and the table,
# the versions and attention lines, the JSON and the logs archive in the output folder name every
# stage with a sane status; the benchmark's row has fsdpc's measured compute efficiency in the
# form fsdpc plan --compute_efficiency takes. Then: a missing library stops everything after
# stage 0 by name; compute-sanitizer refusing the device ("Device not supported", error 999) is a
# skip, and one that runs gets --attention native and both tools; a refused cuDNN graph; a stage
# over its limit and a spent budget; GPU_CHECK_ONLY=failed reruns what failed or did not run and
# keeps the other rows. Not its timings.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="gpu-check dry run: "
STAGES="load tests cudnn bench parity sanitizer"

GPU_CHECK_DRY=1 GPU_CHECK_OUT_DIR="$W/gc" timeout 900 bash run/gpu_check.sh >"$W/gc.out" 2>&1
rc=$?
check "exits 0 with no failed stage" $rc "$(tail -c 600 "$W/gc.out")"
T=$W/gc/gpu-check.txt
# row STAGE FILE: the stage's table row
row() { grep -E "^$1 +(pass|fail|skip) +[0-9]+  " "$2"; }
for f in "$W/gc.out" "$T"; do
    ok=0
    for s in $STAGES; do [ "$(row $s "$f" | wc -l)" = 1 ] || ok=1; done
    grep -Eq '^stage +status +s +result$' "$f" && grep -Eq '^overall: pass \([0-9] pass, 0 fail, [0-9] skip\)$' "$f" || ok=1
    check "${f##*/}: the table names each of the 6 stages once, with a status and seconds, and the overall line" $ok "$(head -9 "$f")"
done
row load "$T" | grep -qE ' pass .*ldd finds every library; both binaries start; one step of a tiny model on cuda:0 \(CPU emulation\): loss [0-9.]+'
check "stage 0: ldd, both binaries' --version and one step on the (emulated) GPU" $? "$(row load "$T")"
grep -qx 'versions: NVIDIA driver emulated (CUDA 13.0); CUDA runtime 13.0; cuBLASLt 13.1.0; cuDNN 9.19.0; NCCL 2.27.7; Open MPI v4.1.4' "$T"
check "the versions line: driver, CUDA runtime, cuBLASLt, cuDNN, NCCL and MPI as the binaries loaded them" $? "$(grep '^versions' "$T")"
grep -qx 'attention: bench_native: the native flash kernel (--attention native)' "$T" &&
    grep -qE '^attention: bench_auto: cuDNN 9\.19\.0 fused flash attention' "$T" &&
    grep -qx 'attention: sanitizer: the native flash kernel (--attention native)' "$T"
check "the attention path each benchmark run and the sanitizer's run took" $? "$(grep '^attention' "$T")"
row tests "$T" | grep -qE ' pass +[0-9]+  [1-9][0-9]* passed, 0 failed$'
check "the GPU suite's stage passes with its count" $? "$(row tests "$T")"
row sanitizer "$T" | grep -q ' skip .*dry run: compute-sanitizer needs a GPU; the 2-step run passed'
check "compute-sanitizer skips with its reason after the short run" $? "$(row sanitizer "$T")"
n=$(grep -c '^ok - cudnn ' "$T")
row cudnn "$T" | grep -q " pass .* $n/$n graphs accepted" && [ "$n" -ge 20 ] &&
    [ "$(grep -c '^ok - cudnn forward' "$T")" = "$(grep -c '^ok - cudnn backward' "$T")" ] &&
    grep -q 'document-masked .* hd=128' "$T" && grep -q 'causal B=4 T=2048 H=16 KV=8 hd=128' "$T"
check "every cuDNN graph listed and accepted, forward and backward ($n graphs)" $? "$(row cudnn "$T")"
row bench "$T" | grep -qE ' (pass|skip) .*native [0-9]+ tok/s; auto \(cuDNN [^)]*\) [0-9]+ tok/s; (torch sdpa [0-9]+ tok/s; fsdpc/torch [0-9.]+x|torch skipped: .+)'
check "the benchmark row has fsdpc's native and cuDNN tokens/s, and torch's or why not" $? "$(row bench "$T")"
# where the time goes: test_gpu --bench's summaries and the costliest ops under the table, the tables below
grep -qE "^kernels: gemm: [0-9.]+ of cuBLASLt's best over the model's GEMMs" "$T" &&
    grep -qE '^kernels: attention TFLOP/s: native_fp32 fwd [0-9]+ bwd [0-9]+; native fwd [0-9]+ bwd [0-9]+; cudnn fwd [0-9]+ bwd [0-9]+$' "$T" &&
    grep -qE '^kernels: bandwidth: copy [0-9]+ GB/s; elementwise kernels ' "$T" &&
    grep -qE '^  lm head \(64 -> 64\) .* algorithms timed\)$' "$T" && grep -qE '^  cuDNN bf16, bf16 activations +[0-9.]+ ' "$T" &&
    grep -qE '^gpu time, --attention auto: [a-z_0-9]+ [0-9.]+%, ' "$T" &&
    [ "$(sed -n '/^fsdpc --attention auto, GPU time per op/,/^$/p' "$T" | grep -cE '^  [a-z_0-9]+ +[0-9.]+ ms +[0-9.]+% +[0-9.]+ calls$')" -ge 10 ]
check "test_gpu --bench (GEMMs against cuBLASLt's best, attention native and cuDNN, bandwidth against the copy) and the GPU time per op" $? \
    "$(grep -E '^(kernels|gpu time)' "$T")"
# fsdpc's own efficiency, in the form fsdpc plan takes (the dry run's value is the emulator's, tiny)
e=$(row bench "$T" | sed -nE 's/.*fsdpc compute efficiency [0-9.e+-]+ of the H100 SXM 80GB bf16 peak: fsdpc plan --gpu h100 --compute_efficiency ([0-9.e+-]+) \(fitted: 0\.[0-9]+\).*/\1/p')
[ -n "$e" ] && build/fsdpc_emu plan --device cuda --precision bf16 --gpu h100 --compute_efficiency "$e" --json >"$W/eff.json" &&
    /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["efficiency_source"] == "--compute_efficiency" and d["compute_efficiency"] > 0, d' "$W/eff.json"
check "the benchmark row prints fsdpc's measured compute efficiency as fsdpc plan --compute_efficiency takes it, beside the fitted one; plan accepts it ($e)" $? \
    "$(row bench "$T")"
row parity "$T" | grep -qE ' pass .*fp32 rel diff [0-9.e+-]+ .*greedy [0-9]+/[0-9]+ bytes equal| skip +[0-9]+  fsdpc loss fp32 [0-9.]+, bf16 [0-9.]+ .*torch skipped: .+'
check "the parity row has fsdpc's losses of the exported model, and torch's comparison or why not" $? "$(row parity "$T")"
/usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["dry_run"] is True and [s["stage"] for s in j["stages"]] == sys.argv[2].split(), j["stages"]
assert all(s["status"] in ("pass", "skip") and s["seconds"] >= 0 and s["result"] for s in j["stages"])
assert len(j["cudnn_graphs"]) == int(sys.argv[3]) and all(g["accepted"] for g in j["cudnn_graphs"])
v = j["versions"]
assert (v["cuda_runtime"], v["cublaslt"], v["cudnn"], v["nccl"]) == ("13.0", "13.1.0", "9.19.0", "2.27.7"), v
assert j["attention"]["bench_native"].startswith("the native") and j["attention"]["bench_auto"].startswith("cuDNN"), j["attention"]
assert set(j["bench_kernels"]) == {"gemm", "attention", "bandwidth"}, j["bench_kernels"]
' "$W/gc/gpu-check.json" "$STAGES" "$n" 2>"$W/json.err"
check "gpu-check.json beside the table: the same stages in order, the versions, attention paths, kernel summaries and the cuDNN list" $? \
    "$(tail -c 300 "$W/json.err")"
# the logs: three files in the folder (the device tool brings back 8), every stage's whole log in the archive
ok=0
[ "$(ls "$W/gc" | sort | paste -sd' ')" = "gpu-check-logs.tar.gz gpu-check.json gpu-check.txt" ] || ok=1
tar -tzf "$W/gc/gpu-check-logs.tar.gz" >"$W/logs.list" 2>&1 || ok=1
for f in $STAGES; do grep -qx "gpu-check-logs/$f.log" "$W/logs.list" || ok=1; done
for f in bench_kernels.txt bench_fsdpc_auto.log versions.txt ldd.txt cudnn_shapes.txt; do grep -qx "gpu-check-logs/$f" "$W/logs.list" || ok=1; done
tar -xzf "$W/gc/gpu-check-logs.tar.gz" -O gpu-check-logs/tests.log | grep -qE '^[1-9][0-9]* passed, 0 failed$' || ok=1
check "gpu-check.txt, gpu-check.json and gpu-check-logs.tar.gz in GPU_CHECK_OUT_DIR; the archive holds every stage's whole log" $ok \
    "$(ls "$W/gc"; head -5 "$W/logs.list")"

# stage 0: a library the binary needs and cannot find stops everything after it, by name
printf 'int fsdpc_gone(void) { return 0; }\n' >"$W/gone.c" && printf 'int fsdpc_gone(void);\nint main(void) { return fsdpc_gone(); }\n' >"$W/m.c" &&
    gcc -shared -fPIC -o "$W/libfsdpc_gone.so" "$W/gone.c" && gcc -o "$W/fsdpc_gone" "$W/m.c" -L"$W" -lfsdpc_gone && rm "$W/libfsdpc_gone.so"
GPU_CHECK_DRY=1 GPU_CHECK_FSDPC="$W/fsdpc_gone" GPU_CHECK_OUT_DIR="$W/gone" timeout 60 bash run/gpu_check.sh >"$W/gone.out" 2>&1
rc=$?
ok=0
[ $rc = 1 ] && row load "$W/gone/gpu-check.txt" | grep -q ' fail .*missing libraries: libfsdpc_gone.so ' || ok=1
for s in tests cudnn bench parity sanitizer; do
    row $s "$W/gone/gpu-check.txt" | grep -q ' skip .*stage load found libraries missing: libfsdpc_gone.so$' || ok=1
done
check "stage 0 names a missing library and every later stage is skipped with that reason (exit $rc)" $ok "$(head -9 "$W/gone/gpu-check.txt")"
# cuBLASLt, opened at run time, is missing (the emulator's dlopen fails): ldd cannot see it, --version can
FSDPC_EMU_CUBLASLT=missing GPU_CHECK_DRY=1 GPU_CHECK_OUT_DIR="$W/nolt" timeout 120 bash run/gpu_check.sh >"$W/nolt.out" 2>&1
rc=$?
ok=0
[ $rc = 1 ] && row load "$W/nolt/gpu-check.txt" | grep -q ' fail .*cuBLASLt: none (cannot load libcublasLt' || ok=1
row tests "$W/nolt/gpu-check.txt" | grep -q ' skip .*stage load: cuBLASLt cannot be loaded$' || ok=1
check "stage 0 fails on a cuBLASLt that cannot be loaded, and later stages are skipped (exit $rc)" $ok "$(head -9 "$W/nolt/gpu-check.txt")"

# compute-sanitizer that refuses the device, as on the gVisor machines: a skip with its words
mkdir -p "$W/bin"
cat >"$W/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
# a stand-in: FAKE_CS=refuse or 999 answers as a runtime that cannot be instrumented; else runs
# the command after the options and prints the tool's summary
echo "$*" >>"$FAKE_CS_LOG"
tool=$2
shift 4
case ${FAKE_CS:-} in
refuse) echo "========= COMPUTE-SANITIZER"; echo "========= Error: Device not supported. You can use NVIDIA Nsight Tools"; exit 1 ;;
999) echo "========= COMPUTE-SANITIZER"; echo "fsdpc: error: cudaMalloc failed: unknown error, error 999 (kernels/cuda/memory.cu:40)"; exit 1 ;;
esac
"$@"
rc=$?
[ "$tool" = memcheck ] && echo "========= ERROR SUMMARY: 0 errors" || echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
exit $rc
EOF
chmod +x "$W/bin/compute-sanitizer"
# (its "Device not supported" in the GPU_CHECK_ONLY=failed run below)
: >"$W/cs.log"
FAKE_CS=999 FAKE_CS_LOG="$W/cs.log" GPU_CHECK_SANITIZER="$W/bin/compute-sanitizer" GPU_CHECK_DRY=1 GPU_CHECK_ONLY=sanitizer \
    GPU_CHECK_OUT_DIR="$W/cs_999" timeout 120 bash run/gpu_check.sh >"$W/cs.out" 2>&1
rc=$?
[ $rc = 0 ] && row sanitizer "$W/cs_999/gpu-check.txt" | grep -q " skip .*compute-sanitizer cannot run here: .*error 999" &&
    [ "$(wc -l <"$W/cs.log")" = 1 ] && grep -q '^--tool memcheck .* --attention native ' "$W/cs.log"
check "compute-sanitizer's error 999 is a skip with its words, not a failure; racecheck is not tried after it (exit $rc)" $? \
    "$(row sanitizer "$W/cs_999/gpu-check.txt"; cat "$W/cs.log")"
: >"$W/cs.log"
FAKE_CS_LOG="$W/cs.log" GPU_CHECK_SANITIZER="$W/bin/compute-sanitizer" GPU_CHECK_DRY=1 GPU_CHECK_ONLY=sanitizer \
    GPU_CHECK_OUT_DIR="$W/cs_ok" timeout 300 bash run/gpu_check.sh >"$W/cs.out" 2>&1
rc=$?
[ $rc = 0 ] && row sanitizer "$W/cs_ok/gpu-check.txt" | grep -q ' pass .*memcheck 0 errors; racecheck 0 errors (2 bf16 steps, --attention native' &&
    [ "$(grep -c -- '--attention native' "$W/cs.log")" = 2 ]
check "a compute-sanitizer that runs: memcheck and racecheck on fsdpc's own kernels (--attention native), their counts (exit $rc)" $? \
    "$(row sanitizer "$W/cs_ok/gpu-check.txt"; cat "$W/cs.log")"

# a refusal: the stage fails with cuDNN's own words, the run exits 1, the JSON carries the message
FSDPC_EMU_CUDNN=nofinalize GPU_CHECK_DRY=1 GPU_CHECK_ONLY=cudnn GPU_CHECK_OUT_DIR="$W/no" timeout 120 bash run/gpu_check.sh >"$W/no.out" 2>&1
rc=$?
[ $rc = 1 ] && row cudnn "$W/no/gpu-check.txt" | grep -q ' fail .*0/[0-9]* graphs accepted (exit 1); first refusal: .*finalizes into a plan' &&
    grep -q '^not ok - cudnn forward causal B=2 T=96' "$W/no/gpu-check.txt" && row bench "$W/no/gpu-check.txt" | grep -q ' skip .*not in GPU_CHECK_ONLY' &&
    grep -q '^overall: FAIL (1 pass, 1 fail, 4 skip)$' "$W/no/gpu-check.txt" &&
    /usr/bin/python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["cudnn_graphs"]; assert not g[0]["accepted"] and "plan" in g[0]["message"]' "$W/no/gpu-check.json"
check "a graph cuDNN refuses fails its stage with cuDNN's message, in the table, the list and the JSON (exit $rc)" $? "$(head -9 "$W/no/gpu-check.txt")"

# limits: a stage past its limit (one that never ends) fails as such; one the spent budget leaves
# no time is skipped (stage 0 runs first, inside the budget)
GPU_CHECK_DRY=1 GPU_CHECK_DRY_STALL=tests GPU_CHECK_ONLY="tests cudnn" GPU_CHECK_BUDGET=40 GPU_CHECK_OUT_DIR="$W/lim" timeout 120 bash run/gpu_check.sh >"$W/lim.out" 2>&1
rc=$?
[ $rc = 1 ] && row tests "$W/lim/gpu-check.txt" | grep -qE ' fail .*over its [0-9]+ s limit' &&
    row cudnn "$W/lim/gpu-check.txt" | grep -q ' skip .*the 40 s budget was spent before this stage' && grep -q '^tests log (last 30 lines):' "$W/lim/gpu-check.txt"
check "a stage over its limit fails, the next is skipped once the budget is spent, the failed stage's log is kept (exit $rc)" $? "$(head -9 "$W/lim/gpu-check.txt")"

# GPU_CHECK_ONLY=failed: the previous JSON's failed stages and those that did not run (for the
# budget), with the others' rows kept, marked, with their seconds
# (GPU_CHECK_PREVIOUS: a device run's $OUT starts empty, so the JSON that came back travels)
cat >"$W/previous.json" <<'EOF'
{"device": "x", "dry_run": true, "budget_s": 345, "seconds": 345, "stages": [
  {"stage": "load", "status": "pass", "seconds": 3, "result": "ldd finds every library"},
  {"stage": "tests", "status": "pass", "seconds": 61, "result": "140 passed, 0 failed"},
  {"stage": "cudnn", "status": "fail", "seconds": 7, "result": "0/26 graphs accepted"},
  {"stage": "bench", "status": "pass", "seconds": 150, "result": "native 9000 tok/s"},
  {"stage": "parity", "status": "skip", "seconds": 41, "result": "torch skipped: no torch"},
  {"stage": "sanitizer", "status": "skip", "seconds": 0, "result": "the 345 s budget was spent before this stage"}],
 "versions": {}, "attention": {}, "bench_kernels": {}, "cudnn_graphs": []}
EOF
: >"$W/cs.log"
FAKE_CS=refuse FAKE_CS_LOG="$W/cs.log" GPU_CHECK_SANITIZER="$W/bin/compute-sanitizer" GPU_CHECK_DRY=1 GPU_CHECK_ONLY=failed \
    GPU_CHECK_PREVIOUS="$W/previous.json" GPU_CHECK_OUT_DIR="$W/again" timeout 300 bash run/gpu_check.sh >"$W/again.out" 2>&1
rc=$?
A=$W/again/gpu-check.txt
[ $rc = 0 ] && grep -q '^gpu-check: GPU_CHECK_ONLY=failed: cudnn sanitizer$' "$W/again.out" && row load "$A" | grep -q ' pass .*one step' &&
    row tests "$A" | grep -qE ' pass +61  140 passed, 0 failed \(previous run\)$' &&
    row parity "$A" | grep -qE ' skip +41  torch skipped: no torch \(previous run\)$' &&
    row cudnn "$A" | grep -q ' pass .* \([0-9][0-9]*\)/\1 graphs accepted' && row bench "$A" | grep -qE ' pass +150  native 9000 tok/s \(previous run\)$' &&
    row sanitizer "$A" | grep -q ' skip .*compute-sanitizer cannot run here: Error: Device not supported' &&
    [ "$(wc -l <"$W/cs.log")" = 1 ] && grep -q '^--tool memcheck .* --attention native ' "$W/cs.log"
check "GPU_CHECK_ONLY=failed reruns the failed stages and those the budget skipped, keeping the other rows; compute-sanitizer's 'Device not supported' is a skip with its words, racecheck not tried after it (exit $rc)" $? \
    "$(grep GPU_CHECK_ONLY "$W/again.out"; head -9 "$A"; cat "$W/cs.log")"
