#!/usr/bin/env bash
# make gpu-check: one command for the first GPU machine, after run/gpu-bundle.sh's install line
# (`. .gpu/install.sh`) has put ./fsdpc and build/test_gpu in place (it builds nothing: the
# machine has no Open MPI or HDF5 headers). Six stages, each under its own time limit and all
# under GPU_CHECK_BUDGET (345 s: with the machine's start, about 2 minutes, and the install line,
# 8 minutes), the cheap and telling ones first: load (stage 0: ldd of both binaries, the library
# versions, one training step of a tiny model on the GPU, in under 30 s; missing libraries or a
# binary that does not start skip every later stage with that reason); the GPU test suite (its row
# counts the checks of context parallelism's ring attention blocks);
# cuDNN's verdict on every attention graph shape the project builds; the benchmark: a 1B model
# (bf16, context 2048) trained by fsdpc (native and cuDNN attention, the GPU time per op from
# FSDPC_GPU_TIMERS=ops), build/test_gpu --bench (GEMMs against cuBLASLt's own best, attention
# forward and backward TFLOP/s, elementwise bandwidth against the device's copy) and
# transformers' LlamaForCausalLM (SDPA) in the same run, tokens/s and MFU, and fsdpc's compute
# efficiency as fsdpc plan --compute_efficiency takes it; parity: fsdpc's exported weights loaded
# by transformers, the loss on the same tokens (fp32 and bf16) and greedy text; and
# compute-sanitizer's memcheck and racecheck on a short run with --attention native (its
# "Device not supported" or error 999 is a skip with that reason). Ends with one table, the
# library versions and the attention path of each run, written to GPU_CHECK_OUT_DIR (default
# $OUT when set, else gpu-check/) as gpu-check.txt (with the kernel timings and failing stages'
# log tails), gpu-check.json, and gpu-check-logs.tar.gz (every stage's full log and side files):
# three files, as the device tool brings back at most eight. Exits 1 when a stage failed (a skip,
# with its reason, is not one). Offline throughout.
# GPU_CHECK_ONLY="cudnn bench" runs only the stages named, GPU_CHECK_ONLY=failed those that failed
# or did not run last time (the previous gpu-check.json in the folder); the others keep their
# previous rows, marked so, and stage 0 always runs (GPU_CHECK_PREVIOUS: that JSON, where the
# folder starts empty, as a device run's $OUT does). GPU_CHECK_DRY=1 runs the same bookkeeping on
# the CPU emulator (build/fsdpc_emu, build/test_gpu_emu) with tiny models: its timings mean
# nothing; GPU_CHECK_SANITIZER names a compute-sanitizer for it to run.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export DRY=${GPU_CHECK_DRY:-0}
PY=${PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3 || echo python3)
export PY
# Programs that are not fsdpc's (Python, nvidia-smi) run without the bundle's libraries, which
# may be older than the ones they were built against
export FOREIGN_LD=${LD_LIBRARY_PATH:-}
[ -n "${FSDPC_BUNDLE:-}" ] && FOREIGN_LD=$(tr ':' '\n' <<<"$FOREIGN_LD" | grep -vx "$FSDPC_BUNDLE/lib" | paste -sd:)
foreign() { LD_LIBRARY_PATH=$FOREIGN_LD "$@"; }
# stage 0's one step: the smallest model the GPU kernels take
export TINY_MODEL="--hidden_width 64 --num_layers 1 --num_heads 1 --intermediate_size 64 --max_context_width 16 --vocab_size 256
    --batch_size 2 --train_data synthetic"
if [ "$DRY" = 1 ]; then
    export FSDPC=${GPU_CHECK_FSDPC:-build/fsdpc_emu} TEST_GPU=build/test_gpu_emu PYDEV=cpu  # (a test names its own fsdpc)
    export TEST_GPU_BENCH="1 16 64 64 1 1 64"  # test_gpu --bench's tiny stand-in (head dim 64: cuDNN's)
    # the 1B model's stand-in, and the parity and sanitizer models: head dim 64, so cuDNN runs
    export BENCH_MODEL="--hidden_width 128 --num_layers 1 --num_heads 2 --num_key_value_heads 1 --intermediate_size 128
        --max_context_width 32 --vocab_size 256" BENCH_BATCH=2 BENCH_STEPS=2
    export PAR_MODEL="--tokenizer byte --hidden_width 128 --num_layers 1 --num_heads 2 --num_key_value_heads 1 --intermediate_size 128
        --max_context_width 32 --batch_size 2" PAR_STEPS=2
    export SAN_MODEL="$PAR_MODEL"
else
    export FSDPC=./fsdpc TEST_GPU=build/test_gpu PYDEV=cuda
    export BENCH_MODEL="--hidden_width 2048 --num_layers 16 --num_heads 16 --num_key_value_heads 8 --intermediate_size 5632
        --max_context_width 2048 --vocab_size 32000" BENCH_BATCH=${GPU_CHECK_BATCH:-4} BENCH_STEPS=${GPU_CHECK_STEPS:-10}
    export PAR_MODEL="--tokenizer byte --hidden_width 256 --num_layers 4 --num_heads 4 --num_key_value_heads 2 --intermediate_size 688
        --max_context_width 256 --batch_size 8" PAR_STEPS=20
    export SAN_MODEL="--tokenizer byte --hidden_width 128 --num_layers 2 --num_heads 2 --num_key_value_heads 1 --intermediate_size 352
        --max_context_width 128 --batch_size 2"
fi
QUIET="--num_tokens 0 --checkpoint_freq 0 --validation_freq 0"

# result STATUS TEXT: the stage's row (pass, fail or skip, and its numbers)
result() { printf '%s\t%s\n' "$1" "$2" >"$W/$STAGE.row"; }

# rel A B: |A - B| / |B|, or nothing when either is missing
rel() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) exit; d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }'; }

# loss JSONL: the first step's loss in a metrics file
loss() { sed -nE '1s/.*"loss": ([0-9.e+-]+).*/\1/p' "$1" 2>/dev/null; }

# stop REASON: stage 0 found that no later stage can run; each is skipped with REASON
stop() { printf '%s\n' "$1" >"$W/stop"; }

# version KEY: a "KEY: value" line of fsdpc --version's
version() { sed -n "s/^$1: //p" "$W/versions.txt" | head -1; }

stage_load() {
    local tg=${TEST_GPU%% *} miss rc loss t0
    ldd "$FSDPC" "$tg" >"$W/ldd.txt" 2>&1
    cat "$W/ldd.txt"
    miss=$(awk '/not found/ {print $1}' "$W/ldd.txt" | sort -u | paste -sd' ')
    if [ -n "$miss" ]; then
        stop "stage load found libraries missing: $miss"
        result fail "missing libraries: $miss (. .gpu/install.sh exports where the bundle's are; FSDPC_CUDA_LIBS names more folders)"
        return
    fi
    for b in "$FSDPC" "$tg"; do
        if ! $b --version >"$W/version.$(basename "$b").txt" 2>&1; then
            stop "stage load: $b does not start"
            result fail "$b --version failed: $(grep -m1 -iE 'error|not found' "$W/version.$(basename "$b").txt" | cut -c1-200)"
            return
        fi
    done
    # cuBLASLt is opened at run time, so ldd cannot tell it is missing: --version says so
    if grep -q '^cuBLASLt: none' "$W/version.$(basename "$FSDPC").txt"; then
        stop "stage load: cuBLASLt cannot be loaded"
        result fail "$(grep -m1 '^cuBLASLt: none' "$W/version.$(basename "$FSDPC").txt" | cut -c1-240)"
        return
    fi
    cp "$W/version.$(basename "$FSDPC").txt" "$W/versions.txt"
    cat "$W/versions.txt"
    # the table's versions: the driver's own number where nvidia-smi tells it
    {
        printf 'driver\t%s\n' "$([ "$DRY" = 1 ] && echo "emulated" || foreign nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
        printf 'cuda_driver\t%s\n' "$(version 'CUDA driver')"
        printf 'cuda_runtime\t%s\n' "$(version 'CUDA runtime')"
        printf 'cublaslt\t%s\n' "$(version cuBLASLt)"
        printf 'cudnn\t%s\n' "$(version cuDNN)"
        printf 'nccl\t%s\n' "$(version NCCL)"
        printf 'mpi\t%s\n' "$(version MPI | cut -d, -f1)"
    } >"$W/versions.tsv"
    if [ "$(version 'GPUs visible')" = 0 ] || [ -z "$(version 'GPUs visible')" ]; then
        stop "stage load: no GPU visible"
        result fail "no GPU visible (CUDA driver: $(version 'CUDA driver'); nvidia-smi, CUDA_VISIBLE_DEVICES)"
        return
    fi
    t0=$SECONDS
    $FSDPC $TINY_MODEL --device cuda --max_steps 1 --lr 1e-3 --warmup 1 $QUIET >"$W/load_step.log" 2>&1
    rc=$?
    cat "$W/load_step.log"
    loss=$(sed -nE 's/^Batch 1 Loss: ([0-9.]+).*/\1/p' "$W/load_step.log")
    if [ $rc = 0 ] && [ -n "$loss" ]; then
        result pass "ldd finds every library; both binaries start; one step of a tiny model on $(sed -nE 's/^fsdpc: .* on (cuda[^,]*),.*/\1/p' "$W/load_step.log" | head -1): loss $loss, $((SECONDS - t0)) s"
    else
        result fail "one step of a tiny model on the GPU failed (exit $rc): $(grep -m1 -E 'error' "$W/load_step.log" | cut -c1-200)"
    fi
}

stage_tests() {
    if [ "$DRY" = 1 ]; then  # test_gpu_emu's whole suite takes minutes: its quickest mode stands in
        TEST_GPU="$TEST_GPU --cudnn_shapes" GPU_TESTS_STEPS=3 GPU_TESTS_MODEL="--tokenizer byte --hidden_width 256 --num_layers 1 --num_heads 4
            --num_key_value_heads 2 --intermediate_size 256 --max_context_width 16 --batch_size 2 --train_data data/tinyshakespeare.txt" bash test/gpu/run_gpu_tests.sh
    else
        bash test/gpu/run_gpu_tests.sh
    fi
    local rc=$? sum ring cring
    sum=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$W/tests.log" | tail -1)
    # context parallelism on one GPU: the ring's part kernels against the CPU's and whole-sequence
    # attention (a cp run needs a GPU per rank; test_cp runs the ring on the emulator)
    ring=$(grep -c '^ok - gpu ring attention part kernels' "$W/tests.log")
    cring=$(grep -c '^ok - gpu ring attention part kernels.*\[cudnn ring' "$W/tests.log")
    [ "$ring" -gt 0 ] && sum="$sum; ring attention's part kernels: $ring checks pass ($cring with cuDNN's SDPA computing the blocks)"
    if [ $rc = 0 ] && [ -n "$sum" ] && [ "${sum%% *}" -gt 0 ]; then
        result pass "$sum"
    else
        result fail "${sum:-no summary line} (exit $rc); first failure: $(grep -m1 '^not ok' "$W/tests.log" | cut -c1-150)"
    fi
}

# compute-sanitizer on a short run of fsdpc's own kernels (--attention native: cuDNN's are not
# ours to fix). A runtime that refuses the tool ("Device not supported", then error 999, as the
# gVisor machines do) is a skip with its words, and racecheck is not tried after such a refusal.
stage_sanitizer() {
    local cs tool out n rc text="" status=pass limit
    cs=${GPU_CHECK_SANITIZER:-}
    [ -n "$cs" ] || [ "$DRY" = 1 ] || cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    local run="$FSDPC $SAN_MODEL --device cuda --precision bf16 --attention native --max_steps 2 --lr 1e-3 --warmup 1 $QUIET
        --train_data data/tinyshakespeare.txt"
    if [ -z "$cs" ]; then
        # the short run alone (on the emulator: under its own stream race checks)
        timeout 60 $run
        rc=$?
        [ $rc = 0 ] || { result fail "the short training run itself failed (exit $rc)"; return; }
        result skip "$([ "$DRY" = 1 ] && echo "dry run: compute-sanitizer needs a GPU" || echo "no compute-sanitizer on PATH or in /usr/local/cuda/bin"); the 2-step run passed"
        return
    fi
    for tool in memcheck racecheck; do
        out="$W/sanitizer.$tool"
        limit=$((LIMIT - SECONDS - 5))  # SECONDS: this stage's process's age
        [ $tool = memcheck ] && limit=$((LIMIT / 2 - 5))
        [ "$limit" -gt 5 ] || { status=fail text+="no time left for $tool; "; break; }
        timeout -k 5 $limit "$cs" --tool $tool --print-limit 20 $run >"$out" 2>&1
        rc=$?
        cat "$out"
        if grep -qiE 'device not supported|error 999|\(999\)|= 999\b' "$out"; then
            result skip "compute-sanitizer cannot run here: $(grep -m1 -iE 'device not supported|999' "$out" | sed -E 's/^=+ *//' | cut -c1-160)"
            return
        fi
        # memcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"
        n=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p; s/.*RACECHECK SUMMARY: .*\(([0-9]+) error.*/\1/p' "$out" | tail -1)
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            status=fail text+="$tool over its $limit s; "
        elif [ -z "$n" ]; then
            status=fail text+="$tool: no summary (exit $rc): $(grep -m1 -iE 'error' "$out" | cut -c1-120); "
        else
            [ "$n" = 0 ] && [ $rc = 0 ] || status=fail
            text+="$tool $n errors$([ $rc = 0 ] || echo " (exit $rc)"); "
        fi
    done
    result $status "${text%; } (2 bf16 steps, --attention native, $(echo $SAN_MODEL | sed -E 's/.*--hidden_width ([0-9]+).*--num_layers ([0-9]+).*/D=\1 L=\2/'))"
}

stage_cudnn() {
    $TEST_GPU --cudnn_shapes | tee "$W/cudnn_shapes.txt"
    local rc=${PIPESTATUS[0]} ok bad
    ok=$(grep -c '^ok - cudnn' "$W/cudnn_shapes.txt")
    bad=$(grep -c '^not ok - cudnn' "$W/cudnn_shapes.txt")
    if grep -q '^# no GPU visible' "$W/cudnn_shapes.txt"; then
        result fail "build/test_gpu sees no GPU"
    elif [ $rc = 2 ]; then
        result skip "$(grep -m1 '^# cannot' "$W/cudnn_shapes.txt" | cut -c3-200)"
    elif [ $rc = 0 ] && [ "$ok" -gt 0 ] && [ "$bad" = 0 ]; then
        result pass "$ok/$ok graphs accepted (forward and backward; list below)"
    else
        result fail "$ok/$((ok + bad)) graphs accepted (exit $rc); first refusal: $(grep -m1 "^not ok" "$W/cudnn_shapes.txt" | cut -c10-400)"
    fi
}

# bench_fsdpc ATTENTION: "tokens/s MFU" of the last logged step (the first is warmup) and the
# attention kernel's log line, into $W/bench.ATTENTION
# attention ATTENTION, with the GPU time per op (FSDPC_GPU_TIMERS=ops) into $W/ops.ATTENTION and
# the whole attention line into $W/attention.bench_ATTENTION
bench_fsdpc() {
    local log="$W/bench_fsdpc_$1.log" last=$((BENCH_STEPS + 1))
    FSDPC_GPU_TIMERS=ops $FSDPC $BENCH_MODEL --device cuda --precision bf16 --attention "$1" --batch_size "$BENCH_BATCH" \
        --train_data synthetic --max_steps $last --logging_freq $last $QUIET >"$log" 2>&1
    echo "fsdpc --attention $1: exit $?"
    cat "$log"
    { sed -nE "s/^Batch $last Loss.*tokens\/sec: ([0-9.]+)(, MFU: ([0-9.]+)%)?.*/\1 \3/p" "$log"
      grep -m1 -oE '^fsdpc: attention: [^(]*' "$log" | sed 's/^fsdpc: attention: //; s/ *$//'; } >"$W/bench.$1"
    grep -m1 '^fsdpc: attention: ' "$log" | sed 's/^fsdpc: attention: //' >"$W/attention.bench_$1"
    sed -n '/^gpu time per step/p; /^gpu time per op and step/,/^[^ ]/{/^  /p}' "$log" >"$W/ops.$1"
}

# gpu_kind: the GPU as fsdpc plan's --gpu names it, or nothing (the dry run plans an H100)
gpu_kind() {
    [ "$DRY" = 1 ] && { echo h100; return; }
    case $(foreign nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) in
    *H100*PCIe*) echo h100-pcie ;;
    *H100*) echo h100 ;;
    *H200*) echo h200 ;;
    *A100*40GB*) echo a100-40g ;;
    *A100*) echo a100-80g ;;
    esac
}

# efficiency TOKENS_PER_S: fsdpc's measured compute efficiency, in the form fsdpc plan
# --compute_efficiency takes: the benchmark's model FLOPs over the peak and the measured step less
# what the plan puts beside the compute (AdamW; one GPU has no collectives), with the plan's
# fitted efficiency for this run beside it
efficiency() {
    local kind
    kind=$(gpu_kind)
    [ -n "$1" ] && [ -n "$kind" ] || { [ -n "$1" ] && echo "compute efficiency: no fsdpc plan --gpu for this GPU"; return; }
    $FSDPC plan $BENCH_MODEL --device cuda --precision bf16 --batch_size "$BENCH_BATCH" --world_size 1 --gpu "$kind" --json \
        >"$W/bench_plan.json" 2>"$W/bench_plan.err" || { echo "compute efficiency: fsdpc plan failed: $(head -c 150 "$W/bench_plan.err")"; return; }
    foreign "$PY" -c '
import json, sys
d, tps = json.load(open(sys.argv[1])), float(sys.argv[2])
tokens = d["tokens_per_step_per_rank"]
compute = tokens / tps - d["optimizer_time_s"] - d["unhidden_comm_s"]
flops = tokens * (d["flops_per_token"] + d["recompute_cost"] * d["recompute_flops_per_token"])
f = flops / (d["peak_flops"] * compute) if compute > 0 else 0
print("fsdpc compute efficiency %.3g of the %s bf16 peak: fsdpc plan --gpu %s --compute_efficiency %.3g (fitted: %.3g)" % (
    f, d["device"], sys.argv[3], min(f, 1), d["compute_efficiency"]) if 0 < f else "compute efficiency: the step is shorter than AdamW")
' "$W/bench_plan.json" "$1" "$kind"
}

stage_bench() {
    local nat auto tt mfu_t text status
    bench_fsdpc native
    read -r nat nat_mfu <"$W/bench.native"
    result fail "native ${nat:-?} tok/s MFU ${nat_mfu:-?}%"  # a partial row, should the limit cut the rest
    bench_fsdpc auto
    read -r auto auto_mfu <"$W/bench.auto"
    result fail "native ${nat:-?} tok/s MFU ${nat_mfu:-?}%; auto ${auto:-?} tok/s MFU ${auto_mfu:-?}%"
    # the kernels alone at the same shapes (its summary lines go below the table)
    $TEST_GPU --bench >"$W/bench_kernels.txt" 2>&1
    local krc=$?
    cat "$W/bench_kernels.txt"
    foreign "$PY" bench/gpu_check.py bench $BENCH_MODEL --batch_size "$BENCH_BATCH" --steps "$BENCH_STEPS" --device $PYDEV \
        >"$W/bench_torch.log" 2>&1
    local prc=$?
    cat "$W/bench_torch.log"
    tt=$(sed -nE 's/^torch tokens\/sec: ([0-9.]+).*/\1/p' "$W/bench_torch.log")
    # one model, one token count per step: torch's MFU is fsdpc's scaled by the speed ratio
    text=$(awk -v n="$nat" -v nm="${nat_mfu:-}" -v a="$auto" -v am="${auto_mfu:-}" -v t="$tt" -v ak="$(sed -n 2p "$W/bench.auto")" 'BEGIN {
        if (n != "") printf "native %.0f tok/s%s", n, nm != "" ? sprintf(" MFU %.1f%%", nm) : ""
        if (a != "") printf "; auto (%s) %.0f tok/s%s", ak, a, am != "" ? sprintf(" MFU %.1f%%", am) : ""
        best = (a > n) ? a : n; bm = (a > n) ? am : nm
        if (t != "") printf "; torch sdpa %.0f tok/s%s; fsdpc/torch %.2fx", t, bm != "" ? sprintf(" MFU %.1f%%", bm * t / best) : "", best / t
        if (bm != "") printf "; targets: MFU >= 50%% %s, >= 1.2x torch %s", (bm >= 50) ? "met" : "NOT met", (t == "") ? "n/a" : (best / t >= 1.2) ? "met" : "NOT met"
    }')
    local model="D=$(echo $BENCH_MODEL | sed -E 's/.*--hidden_width ([0-9]+).*/\1/') L=$(echo $BENCH_MODEL | sed -E 's/.*--num_layers ([0-9]+).*/\1/') T=$(echo $BENCH_MODEL | sed -E 's/.*--max_context_width ([0-9]+).*/\1/') B=$BENCH_BATCH, $BENCH_STEPS steps"
    if [ -z "$nat" ]; then
        status=fail text="fsdpc --attention native gave no tokens/s: $(grep -m1 -iE 'error' "$W/bench_fsdpc_native.log" | cut -c1-150)"
    elif [ $krc != 0 ] || ! grep -q '^# summary gemm' "$W/bench_kernels.txt"; then
        status=fail text+="; test_gpu --bench failed (exit $krc): $(grep -m1 -iE 'error' "$W/bench_kernels.txt" | cut -c1-120)"
    elif [ -z "$auto" ]; then
        status=fail text+="; fsdpc --attention auto gave no tokens/s: $(grep -m1 -iE 'error' "$W/bench_fsdpc_auto.log" | cut -c1-120)"
    elif [ $prc = 3 ]; then
        status=skip text+="; torch skipped: $(sed -n 's/^SKIP: //p' "$W/bench_torch.log" | head -1 | cut -c1-120)"
    elif [ -z "$tt" ]; then
        status=fail text+="; torch failed (exit $prc): $(tail -1 "$W/bench_torch.log" | cut -c1-120)"
    else
        status=pass
    fi
    local eff
    eff=$(efficiency "$(awk -v n="$nat" -v a="$auto" 'BEGIN { print (a > n) ? a : n }')")
    result $status "$text${eff:+; $eff} ($model)"
}

stage_parity() {
    local T n ck="$W/parity_ck" hf="$W/parity_hf" prompt="ROMEO:"
    T=$(echo $PAR_MODEL | sed -E 's/.*--max_context_width ([0-9]+).*/\1/')
    n=$((T - ${#prompt} < 32 ? T - ${#prompt} : 32))  # within the context: no window slides
    $FSDPC $PAR_MODEL --device cuda --precision bf16 --train_data data/tinyshakespeare.txt --max_steps $PAR_STEPS --lr 1e-3 \
        --warmup 2 --num_tokens 0 --validation_freq 0 --checkpoint_dir "$ck" --checkpoint_freq $PAR_STEPS || {
        result fail "fsdpc training for the export failed"; return; }
    $FSDPC export --checkpoint "$ck" --output "$hf" --dtype fp32 || { result fail "fsdpc export failed"; return; }
    # 4 samples of T+1 tokens, one batch: its mean loss does not depend on the sample order
    head -c $((4 * T + 1)) data/tinyshakespeare.txt >"$W/four.txt"
    for p in float32 bf16; do
        $FSDPC --init_from "$hf" --device cuda --precision $p --train_data "$W/four.txt" --batch_size 4 --max_steps 1 \
            --metrics_file "$W/parity_$p.jsonl" $QUIET || { result fail "fsdpc's $p loss run failed"; return; }
    done
    $FSDPC --init_from "$hf" --device cuda --train_data data/tinyshakespeare.txt --max_steps 0 --prompt "$prompt" --num_tokens $n --temperature 0 \
        --checkpoint_freq 0 --validation_freq 0 >"$W/greedy.fsdpc" || { result fail "fsdpc generation failed"; return; }
    local l32 l16 text
    l32=$(loss "$W/parity_float32.jsonl") l16=$(loss "$W/parity_bf16.jsonl")
    text="fsdpc loss fp32 $l32, bf16 $l16 on $((4 * T)) tokens of the exported model ($PAR_STEPS bf16 steps)"
    foreign "$PY" bench/gpu_check.py parity "$hf" "$W/four.txt" "$prompt" $n --device $PYDEV >"$W/parity_torch.log" 2>&1
    local prc=$?
    cat "$W/parity_torch.log"
    if [ $prc = 3 ]; then
        result skip "$text; torch skipped: $(sed -n 's/^SKIP: //p' "$W/parity_torch.log" | head -1 | cut -c1-120)"
        return
    fi
    local t32 t16 d32 d16 same total
    t32=$(sed -n 's/^torch loss fp32: //p' "$W/parity_torch.log") t16=$(sed -n 's/^torch loss bf16: //p' "$W/parity_torch.log")
    d32=$(rel "$l32" "$t32") d16=$(rel "$l16" "$t16")
    # greedy: how many generated bytes agree before the first difference
    sed -n 's/^torch greedy: //p' "$W/parity_torch.log" | xxd -r -p >"$W/greedy.torch"
    total=$(($(wc -c <"$W/greedy.torch") - ${#prompt}))
    same=$(cmp "$W/greedy.fsdpc" "$W/greedy.torch" 2>/dev/null | sed -nE 's/.*byte ([0-9]+),.*/\1/p')
    same=$([ -z "$same" ] && [ "$(wc -c <"$W/greedy.fsdpc")" = "$(wc -c <"$W/greedy.torch")" ] && echo $total || echo $((${same:-1} - 1 - ${#prompt})))
    text="loss vs transformers: fp32 rel diff ${d32:-?} (tol 1e-4), bf16 ${d16:-?} (tol 2e-2), $((4 * T)) tokens; greedy $same/$total bytes equal (fp32)"
    if [ -n "$d32" ] && [ -n "$d16" ] && awk -v a="$d32" -v b="$d16" 'BEGIN { exit !(a <= 1e-4 && b <= 2e-2) }'; then
        result pass "$text"
    else
        result fail "$text; torch exit $prc"
    fi
}

if [ "${1:-}" = --stage ]; then  # one stage, in its own process under its time limit
    STAGE=$2
    # dry runs only: GPU_CHECK_DRY_STALL names a stage that never ends, for the test of the limits
    # (a real stage's seconds depend on the machine)
    if [ "$DRY" = 1 ] && [ "${GPU_CHECK_DRY_STALL:-}" = "$2" ]; then echo "stalled (GPU_CHECK_DRY_STALL)"; while :; do sleep 1; done; fi
    "stage_$2"
    exit 0
fi

DIR=${GPU_CHECK_OUT_DIR:-${OUT:-gpu-check}}
mkdir -p "$DIR" || { echo "gpu-check: cannot create $DIR"; exit 1; }
TXT=$DIR/gpu-check.txt JSON=$DIR/gpu-check.json LOGS=$DIR/gpu-check-logs.tar.gz
# the emulator's stages take longer than a GPU's, on a machine that may be busy: in a dry run the
# limits and the default budget are GPU_CHECK_DRY_SCALE (4) times the GPU's
SCALE=1
[ "$DRY" = 1 ] && SCALE=${GPU_CHECK_DRY_SCALE:-4}
TOTAL=${GPU_CHECK_BUDGET:-$((345 * SCALE))}
if [ "$DRY" = 1 ]; then
    for b in $FSDPC $TEST_GPU; do [ -x "$b" ] || { echo "gpu-check: $b is missing: make build/fsdpc_emu build/test_gpu_emu"; exit 1; }; done
    DEVICE="CPU emulation (dry run: timings mean nothing)"
else
    [ -x ./fsdpc ] && [ -x build/test_gpu ] || {
        echo "gpu-check: ./fsdpc or build/test_gpu is missing: run run/gpu-bundle.sh's install line first (docs/gpu.md)"; exit 1; }
    # a binary whose libraries are missing is stage 0's to report; one built without CUDA is not worth running
    [[ $(ldd ./fsdpc 2>/dev/null) == *libcudart* ]] || { echo "gpu-check: ./fsdpc has no CUDA backend: build it with nvcc on PATH, then run/gpu-bundle.sh"; exit 1; }
    DEVICE=$(foreign nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    DEVICE=${DEVICE:-no nvidia-smi}
fi
export W
W=$(mktemp -d)
[ -n "${GPU_CHECK_KEEP:-}" ] || trap 'rm -rf "$W"' EXIT

# name, limit in seconds, what it does: the telling and quick ones first
STAGES="load:30:stage 0: ldd of both binaries, the library versions, one tiny step on the GPU
tests:90:GPU test suite (test_gpu + training against the CPU)
cudnn:30:cuDNN accepts every attention graph shape
bench:150:1B model bf16 T=2048: fsdpc vs transformers; test_gpu --bench; GPU time per op
parity:45:exported weights in transformers: loss + greedy
sanitizer:80:compute-sanitizer memcheck + racecheck, short training run (native attention)"

# GPU_CHECK_ONLY=failed: the stages that failed or did not run in the previous run's JSON, whose
# rows the others keep (name, status, seconds, result per line in $W/previous). A device run's
# $OUT starts empty: GPU_CHECK_PREVIOUS names the JSON that came back, carried in the tree.
PREV=${GPU_CHECK_PREVIOUS:-$JSON}
: >"$W/previous"
ONLY=${GPU_CHECK_ONLY:-}
if [ -n "$ONLY" ] && [ -s "$PREV" ]; then
    foreign "$PY" -c '
import json, sys
for s in json.load(open(sys.argv[1]))["stages"]:
    print("\t".join([s["stage"], s["status"], str(s["seconds"]), s["result"].replace("\t", " ").replace("\n", " ")]))
' "$PREV" >"$W/previous" 2>/dev/null || : >"$W/previous"
fi
if [ "$ONLY" = failed ]; then
    if [ -s "$W/previous" ]; then
        # a skip for want of time or for stage 0's verdict is a stage that did not run
        ONLY=$(awk -F'\t' '$2 == "fail" || ($2 == "skip" && $4 ~ /budget was spent|^stage load/) {print $1}' "$W/previous" | paste -sd' ')
        echo "gpu-check: GPU_CHECK_ONLY=failed: ${ONLY:-none failed last time ($PREV)}"
        [ -n "$ONLY" ] || ONLY=load
    else
        echo "gpu-check: GPU_CHECK_ONLY=failed: no previous $PREV (GPU_CHECK_PREVIOUS): every stage runs"
        ONLY=""
    fi
fi

START=$SECONDS
while IFS=: read -r name limit what; do
    limit=$((limit * SCALE))
    left=$((TOTAL - (SECONDS - START)))
    [ "$limit" -gt "$left" ] && limit=$left
    t0=$SECONDS
    echo "== $name: $what (limit ${limit} s)"
    prev=$(awk -F'\t' -v n="$name" '$1 == n' "$W/previous")
    if [ -n "$ONLY" ] && [ "$name" != load ] && [[ " $ONLY " != *" $name "* ]]; then
        if [ -n "$prev" ]; then  # kept from the previous run, with its seconds
            printf '%s\t%s (previous run)\n' "$(cut -f2 <<<"$prev")" "$(cut -f4 <<<"$prev")" >"$W/$name.row"
            cut -f3 <<<"$prev" >"$W/$name.secs"
        else
            printf 'skip\tnot in GPU_CHECK_ONLY\n' >"$W/$name.row"
        fi
    elif [ -s "$W/stop" ]; then
        printf 'skip\t%s\n' "$(cat "$W/stop")" >"$W/$name.row"
    elif [ "$limit" -le 5 ]; then
        printf 'skip\tthe %d s budget was spent before this stage\n' "$TOTAL" >"$W/$name.row"
    else
        LIMIT=$limit timeout -k 10 "$limit" bash "$0" --stage "$name" >"$W/$name.log" 2>&1
        rc=$?
        if [ $rc = 124 ] || [ $rc = 137 ]; then  # what the stage had measured so far stays in its row
            so_far=$(cut -f2 "$W/$name.row" 2>/dev/null)
            printf 'fail\tover its %d s limit%s\n' "$limit" "${so_far:+; so far: $so_far}" >"$W/$name.row"
        elif [ ! -s "$W/$name.row" ]; then
            printf 'fail\tstopped without a result (exit %d): %s\n' "$rc" "$(tail -1 "$W/$name.log" | cut -c1-150)" >"$W/$name.row"
        fi
    fi
    [ -s "$W/$name.secs" ] || echo $((SECONDS - t0)) >"$W/$name.secs"
    echo "$name" >>"$W/order"
    sed 's/\t/: /' "$W/$name.row"
done <<<"$STAGES"

# the attention path each run took, from its log: KEY<TAB>the fsdpc: attention: line
for f in "$W"/attention.bench_*; do [ -s "$f" ] && printf '%s\t%s\n' "${f##*/attention.}" "$(cat "$f")"; done >"$W/attention.tsv"
for s in tests sanitizer; do
    l=$(grep -m1 '^fsdpc: attention: ' "$W/$s.log" 2>/dev/null | sed 's/^fsdpc: attention: //')
    [ -n "$l" ] && printf '%s\t%s\n' "$s" "$l"
done >>"$W/attention.tsv"

# the table, the versions, the attention paths, the kernels, then the cuDNN list and the log
# tails of failed stages
{
    echo "make gpu-check on $DEVICE, $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - START)) s of $TOTAL"
    printf '%-10s %-6s %5s  %s\n' stage status s result
    while read -r name; do
        IFS=$'\t' read -r status text <"$W/$name.row"
        printf '%-10s %-6s %5s  %s\n' "$name" "$status" "$(cat "$W/$name.secs")" "$text"
    done <"$W/order"
    npass=$(cat "$W"/*.row | grep -c '^pass') nfail=$(cat "$W"/*.row | grep -c '^fail') nskip=$(cat "$W"/*.row | grep -c '^skip')
    echo "overall: $([ "$nfail" = 0 ] && echo pass || echo FAIL) ($npass pass, $nfail fail, $nskip skip)"
    if [ -s "$W/versions.tsv" ]; then
        awk -F'\t' '{v[$1] = $2} END {
            printf "versions: NVIDIA driver %s (CUDA %s); CUDA runtime %s; cuBLASLt %s; cuDNN %s; NCCL %s; %s\n",
                v["driver"] != "" ? v["driver"] : "?", v["cuda_driver"], v["cuda_runtime"], v["cublaslt"], v["cudnn"], v["nccl"], v["mpi"] }' \
            "$W/versions.tsv"
    fi
    [ -s "$W/attention.tsv" ] && sed 's/^/attention: /; s/\t/: /' "$W/attention.tsv"
    # where the time goes: the kernels against their references, and the costliest ops of a step
    [ -s "$W/bench_kernels.txt" ] && sed -n 's/^# summary /kernels: /p' "$W/bench_kernels.txt"
    for a in native auto; do
        [ -s "$W/ops.$a" ] && awk -v a="$a" '/^  / && n < 6 {s = s (n++ ? ", " : "") $1 " " $4} END {
            if (n) print "gpu time, --attention " a ": " s " of the step (the rest below)" }' "$W/ops.$a"
    done
} >"$W/table"
{
    cat "$W/table"
    if [ -s "$W/bench_kernels.txt" ]; then
        echo
        echo "build/test_gpu --bench:"
        grep -vE '^# device' "$W/bench_kernels.txt"
    fi
    for a in native auto; do
        [ -s "$W/ops.$a" ] || continue
        echo
        echo "fsdpc --attention $a, GPU time per op (FSDPC_GPU_TIMERS=ops):"
        cat "$W/ops.$a"
    done
    if [ -s "$W/cudnn_shapes.txt" ]; then
        echo
        echo "cuDNN graphs:"
        grep -E '^(not )?ok - ' "$W/cudnn_shapes.txt"
    fi
    while read -r name; do
        grep -q '^fail' "$W/$name.row" && [ -s "$W/$name.log" ] || continue
        echo
        echo "$name log (last 30 lines):"
        tail -30 "$W/$name.log"
    done <"$W/order"
} >"$TXT"

# JSON: the same rows; strings with their quotes and backslashes escaped, control characters dropped
js() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"; }
# tsv_object FILE: {"key": "value", ...} of a KEY<TAB>VALUE file
tsv_object() {
    local sep="" k v
    printf '{'
    [ -s "$1" ] && while IFS=$'\t' read -r k v; do printf '%s%s: %s' "$sep" "$(js "$k")" "$(js "$v")"; sep=", "; done <"$1"
    printf '}'
}
{
    printf '{"device": %s, "dry_run": %s, "budget_s": %d, "seconds": %d, "stages": [' "$(js "$DEVICE")" \
        "$([ "$DRY" = 1 ] && echo true || echo false)" "$TOTAL" $((SECONDS - START))
    sep=""
    while read -r name; do
        IFS=$'\t' read -r status text <"$W/$name.row"
        printf '%s\n  {"stage": %s, "status": %s, "seconds": %d, "result": %s}' "$sep" "$(js "$name")" "$(js "$status")" \
            "$(cat "$W/$name.secs")" "$(js "$text")"
        sep=","
    done <"$W/order"
    printf '],\n "versions": %s,\n "attention": %s,\n "bench_kernels": ' "$(tsv_object "$W/versions.tsv")" "$(tsv_object "$W/attention.tsv")"
    sed -nE 's/^# summary ([a-z]+)[^:]*: (.*)/\1\t\2/p' "$W/bench_kernels.txt" 2>/dev/null >"$W/kernels.tsv"
    tsv_object "$W/kernels.tsv"
    printf ',\n "cudnn_graphs": ['
    sep=""
    [ -s "$W/cudnn_shapes.txt" ] && while read -r line; do
        case $line in
        "ok - cudnn "*) printf '%s\n  {"graph": %s, "accepted": true}' "$sep" "$(js "${line#ok - cudnn }")" ;;
        "not ok - cudnn "*) g=${line#not ok - cudnn }
            printf '%s\n  {"graph": %s, "accepted": false, "message": %s}' "$sep" "$(js "${g%%): *})")" "$(js "${g#*): }")" ;;
        *) continue ;;
        esac
        sep=","
    done <"$W/cudnn_shapes.txt"
    printf ']}\n'
} >"$JSON"

# every stage's whole log and side files (not the parity stage's checkpoint and export), one archive
(cd "$W" && tar --exclude=parity_ck --exclude=parity_hf -czf - --transform 's,^\.,gpu-check-logs,' .) >"$LOGS"
echo
cat "$W/table"
echo "written to $TXT, $JSON and $LOGS"
! grep -q '^fail' "$W"/*.row
