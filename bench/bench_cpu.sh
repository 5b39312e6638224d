#!/usr/bin/env bash
# make bench's CPU table: fsdpc and PyTorch eager (AdamW, same threads, random tokens) train the
# Llama D256 L4 T256 B8 and GPT-2 124M (minGPT) at B4 T64, in fp32 and bf16, in one run. Each
# tokens/s is also a fraction of the machine's GEMM peak measured just before (a 2048^3 product on
# the same threads): fp32 against OpenBLAS's sgemm, bf16 against the bf16 matmuls fsdpc runs
# (oneDNN) and against sgemm. Then the same models on one thread by CPU time (robust on a shared
# machine), and AdamW's bandwidth against a memcpy of the same bytes.
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
family=$(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/.*: //')
cpumodel=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | sed 's/.*: //')
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') (family $family model $cpumodel), $(nproc) core(s), $THREADS thread(s); features: ${flags:-none of avx2/avx512/amx}"
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
echo "(wall clock, $THREADS thread(s); torch bf16: autocast; tokens/s x FLOPs per token (fsdpc plan) / peak)"

# The same models on one thread by CPU time, which a shared machine's other jobs do not add to (the
# wall-clock table above moves with the load): a step's CPU seconds are the difference between
# runs of S1 and S2 steps (start-up and the first step cancel), the least of REPS tries, the
# configurations interleaved; the peak is the 2048^3 product per CPU second, also one thread.
REPS=${REPS:-3}
cpu1=$(OMP_NUM_THREADS=1 build/test_kernels --bench-gemm 1)
sg1=$(sed -nE 's/^sgemm GFLOP per CPU second: //p' <<<"$cpu1")
bf1=$(sed -nE 's/^bf16 GFLOP per CPU second: //p' <<<"$cpu1")
cpu_run() {  # cpu_run STEPS FSDPC_FLAGS: user + system seconds of one one-thread run
    local steps=$1 TIMEFORMAT='%U %S'
    shift
    { time OMP_NUM_THREADS=1 ./fsdpc "$@" --train_data synthetic --max_steps "$steps" --logging_freq 1000 --checkpoint_freq 0 \
        --num_tokens 0 --num_threads 1 >/dev/null 2>&1; } 2>&1 | awk '{ print $1 + $2 }'
}
declare -A best
cfg_names=(llama32 llama16 gpt32 gpt16)
cfg() {  # the configuration's S1 S2 and flags
    case $1 in
    llama32) echo "2 ${CPU_STEPS:-12} $LLAMA --batch_size 8" ;;
    llama16) echo "2 ${CPU_STEPS:-12} $LLAMA --batch_size 8 --precision bf16" ;;
    gpt32) echo "1 ${CPU_GPT2_STEPS:-6} $GPT2 --batch_size 4" ;;
    gpt16) echo "1 ${CPU_GPT2_STEPS:-6} $GPT2 --batch_size 4 --precision bf16" ;;
    esac
}
for ((rep = 0; rep < REPS; rep++)); do
    for c in "${cfg_names[@]}"; do
        read -r s1 s2 args <<<"$(cfg "$c")"
        a=$(cpu_run "$s1" $args)
        b=$(cpu_run "$s2" $args)
        best[$c]=$(awk -v a="$a" -v b="$b" -v n=$((s2 - s1)) -v m="${best[$c]:-1e30}" 'BEGIN { v = (b - a) / n; print (v < m ? v : m) }')
    done
done
echo
echo "one thread, by CPU time (best of $REPS): sgemm $sg1 GFLOP per CPU second${bf1:+, bf16 (oneDNN) $bf1}"
printf '%-34s %-5s %12s %12s %12s %12s\n' model prec "CPU s/step" "tok/CPU s" "of fp32 pk" "bf16/fp32"
cpu_row() {  # cpu_row NAME PREC CFG FP32_CFG TOKENS_PER_STEP FSDPC_FLAGS (for plan)
    local name=$1 prec=$2 c=$3 f=$4 tok=$5 flops
    shift 5
    flops=$(fpt "$@")
    awk -v n="$name" -v pr="$prec" -v s="${best[$c]}" -v s32="${best[$f]}" -v tok="$tok" -v fl="${flops:-0}" -v sg="$sg1" 'BEGIN {
        r = tok / s
        printf "%-34s %-5s %12.3f %12.0f %12.2f %12s\n", n, pr, s, r, r * fl / 1e9 / sg, pr == "bf16" ? sprintf("%.2fx", s32 / s) : "-" }'
}
cpu_row "llama D256 L4 H8/4 F688 T256 B8" fp32 llama32 llama32 2048 $LLAMA --batch_size 8
cpu_row "llama D256 L4 H8/4 F688 T256 B8" bf16 llama16 llama32 2048 $LLAMA --batch_size 8 --precision bf16
cpu_row "gpt2 124M (minGPT) T64 B4" fp32 gpt32 gpt32 256 $GPT2 --batch_size 4
cpu_row "gpt2 124M (minGPT) T64 B4" bf16 gpt16 gpt32 256 $GPT2 --batch_size 4 --precision bf16
echo
build/test_kernels --bench-adamw "$THREADS" | tail -2
