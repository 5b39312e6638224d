#!/usr/bin/env bash
# make test-gpu: every CUDA kernel against the CPU kernel (fp32, and bf16 tensor-core forms), then
# 20 training steps on the GPU against the same steps on the CPU, in fp32, bf16 and with
# --cpu_offload, --offload_activations against checkpointing alone, and --attention cudnn against
# native when libcudnn loads. Ends with "N passed, N failed".
# make gpu-check's emulator dry run swaps in its binaries (FSDPC, TEST_GPU), a smaller model
# (GPU_TESTS_MODEL, whose head dim cuDNN takes) and fewer steps (GPU_TESTS_STEPS).
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
TEST_GPU=${TEST_GPU:-build/test_gpu}
STEPS=${GPU_TESTS_STEPS:-20}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
$TEST_GPU 2>&1 | tee "$W/log"
M="--tokenizer byte ${GPU_TESTS_MODEL:---hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256
   --batch_size 8} --max_steps $STEPS --lr 1e-3 --warmup 5 --num_tokens 0 --checkpoint_freq 0 --validation_freq 0"

# train NAME FLAGS...: $STEPS steps, losses to $W/NAME.jsonl
train() {
    local name=$1
    shift
    $FSDPC $M "$@" --metrics_file "$W/$name.jsonl" 2>"$W/$name.err" >/dev/null
}

# compare WHAT A B TOL: the $STEPS losses of runs A and B agree to TOL relative
compare() {
    paste <(sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$W/$2.jsonl") <(sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$W/$3.jsonl") |
        awk -v what="$1" -v tol="$4" -v steps="$STEPS" '{ n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d }
             END { printf "%s - gpu: %s (%d steps, worst rel diff %.1e, tolerance %g)\n",
                   (n == steps && w < tol) ? "ok" : "not ok", what, steps, w, tol }' | tee -a "$W/log"
}

train cpu --device cpu
train gpu --device cuda
grep -q "on cuda:" "$W/gpu.err" || echo "not ok - gpu: the run did not report a CUDA device ($(head -c 200 "$W/gpu.err"))" | tee -a "$W/log"
compare "fp32 training tracks the CPU losses" cpu gpu 2e-3
train cpu_bf16 --device cpu --precision bf16
train gpu_bf16 --device cuda --precision bf16
# the GPU also stores activations in bf16 (the CPU keeps them fp32): on a 20-step emulated run of a
# smaller model the two bf16 runs differed by up to 2.8e-2, where the CPU's bf16 and fp32 runs differ
# by 2.7e-2 (single steps of a sensitive batch)
compare "bf16 tensor-core training tracks the CPU's bf16 losses" cpu_bf16 gpu_bf16 5e-2
train gpu_offload --device cuda --cpu_offload
compare "--cpu_offload (host AdamW, async copies) matches the on-device optimizer" gpu gpu_offload 1e-3
# activation offloading moves bytes only: bit-identical to checkpointing alone (horizon 1: of the 4
# checkpointed inputs, 2 make the round trip through pinned host memory)
train gpu_bf16_ac --device cuda --precision bf16 --activation_checkpoints
train gpu_bf16_offact --device cuda --precision bf16 --offload_activations 1 --activation_loading_horizon 1
compare "--offload_activations gives checkpointing's bf16 losses bit for bit" gpu_bf16_ac gpu_bf16_offact 1e-30
# cuDNN's fused attention (head dim 64, GQA) against the native kernel, when libcudnn loads
A="--device cuda --precision bf16 --num_heads 4 --num_key_value_heads 2"
train att_native $A --attention native
train att_cudnn $A --attention cudnn
if grep -q "cannot load libcudnn" "$W/att_cudnn.err"; then
    echo "# cuDNN attention skipped: $(grep -m1 'cannot load' "$W/att_cudnn.err")" | tee -a "$W/log"
else
    grep -q "^fsdpc: attention: cuDNN " "$W/att_cudnn.err" ||
        echo "not ok - gpu: --attention cudnn did not run cuDNN ($(grep -m2 -E 'attention|error' "$W/att_cudnn.err"))" | tee -a "$W/log"
    compare "--attention cudnn tracks the native bf16 attention" att_native att_cudnn 1e-2
fi
echo "$(grep -c '^ok ' "$W/log") passed, $(grep -c '^not ok ' "$W/log") failed"
! grep -q '^not ok ' "$W/log"
