#!/usr/bin/env bash
# make bench's CPU table: fsdpc and PyTorch eager (AdamW, same threads, random tokens) train the
# Llama D256 L4 T256 B8 and GPT-2 124M (minGPT) at B4 T64, in fp32 and bf16, in one run. Each
# tokens/s is also a fraction of the machine's GEMM peak measured just before (a 2048^3 product on
# the same threads): fp32 against OpenBLAS's sgemm, bf16 against the bf16 matmuls fsdpc runs
# (oneDNN) and against sgemm. Then AdamW's bandwidth against a memcpy of the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-10}
LLAMA="--model_type llama_v2 --hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256 --vocab_size 256"
GPT2="--model_type mingpt --hidden_width 768 --num_layers 12 --num_heads 12 --intermediate_size 3072 --max_context_width 64 --vocab_size 50304"
GPT2_STEPS=${GPT2_STEPS:-3}
export OMP_NUM_THREADS=$THREADS

peaks=$(build/test_kernels --bench-gemm "$THREADS")
sg=$(sed -nE 's/^sgemm GFLOP\/s: //p' <<<"$peaks")
bf=$(sed -nE 's/^bf16 GFLOP\/s: //p' <<<"$peaks")
fpt() { ./fsdpc plan --device cpu "$@" --json 2>/dev/null | sed -nE 's/.*"flops_per_token": ([0-9.e+]+).*/\1/p'; }
# fsdpc's tokens/s over steps 2..S+1 (the first is warm-up): the log line at step S+1 covers them
fsdpc_rate() {
    local steps=$1
    shift
    ./fsdpc "$@" --train_data synthetic --max_steps $((steps + 1)) --logging_freq "$steps" --checkpoint_freq 0 \
        --num_tokens 0 --num_threads "$THREADS" 2>&1 | grep "^Batch $((steps + 1)) Loss" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/'
}
torch_rate() {
    local steps=$1
    shift
    /usr/bin/python3 bench/bench_torch.py "$@" --steps "$steps" --warmup_steps 1 --threads "$THREADS" 2>/dev/null |
        sed -nE 's/^torch tokens\/sec: ([0-9.]+).*/\1/p'
}

flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512bw|avx512vl|avx512_bf16|avx512_fp16|amx_bf16|amx_tile)$' | tr '\n' ' ')
kernels=$(./fsdpc --model_name tiny --max_steps 1 --num_tokens 0 --checkpoint_freq 0 --train_data synthetic --precision bf16 \
    --num_threads "$THREADS" 2>&1 | sed -nE 's/^fsdpc: CPU kernels: //p' | head -1)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $THREADS thread(s); features: ${flags:-none of avx2/avx512/amx}"
echo "CPU kernels: ${kernels:-?}"
echo "GEMM peak (2048^3, $THREADS threads): sgemm (OpenBLAS) $sg GFLOP/s${bf:+, bf16 (oneDNN matmul) $bf GFLOP/s}"
printf '%-34s %-5s %12s %12s %12s %12s %9s\n' model prec "fsdpc tok/s" "of fp32 pk" "of bf16 pk" "torch tok/s" "vs torch"
row() {  # row NAME PREC STEPS FSDPC_FLAGS -- TORCH_FLAGS
    local name=$1 prec=$2 steps=$3 f=() t=()
    shift 3
    while [ "$1" != -- ]; do f+=("$1"); shift; done
    shift
    t=("$@")
    local flops r p
    flops=$(fpt "${f[@]}")
    r=$(fsdpc_rate "$steps" "${f[@]}")
    p=$(torch_rate "$steps" "${t[@]}")
    awk -v n="$name" -v pr="$prec" -v r="${r:-0}" -v p="${p:-0}" -v fl="${flops:-0}" -v sg="$sg" -v bf="${bf:-0}" 'BEGIN {
        g = r * fl / 1e9
        ofbf = (pr == "bf16" && bf > 0) ? sprintf("%.2f", g / bf) : "-"
        vs = (p > 0) ? r / p : 0
        printf "%-34s %-5s %12.0f %12.2f %12s %12.0f %8.2fx\n", n, pr, r, g / sg, ofbf, p, vs }'
}
row "llama D256 L4 H8/4 F688 T256 B8" fp32 "$STEPS" $LLAMA --batch_size 8 -- $LLAMA --batch_size 8
row "llama D256 L4 H8/4 F688 T256 B8" bf16 "$STEPS" $LLAMA --batch_size 8 --precision bf16 -- $LLAMA --batch_size 8 --bf16
row "gpt2 124M (minGPT) T64 B4" fp32 "$GPT2_STEPS" $GPT2 --batch_size 4 -- $GPT2 --batch_size 4
row "gpt2 124M (minGPT) T64 B4" bf16 "$GPT2_STEPS" $GPT2 --batch_size 4 --precision bf16 -- $GPT2 --batch_size 4 --bf16
echo "(torch bf16: autocast; tokens/s x FLOPs per token (fsdpc plan) / peak)"
build/test_kernels --bench-adamw "$THREADS" | tail -2
