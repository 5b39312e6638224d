#!/usr/bin/env bash
# make bench: fsdpc and PyTorch eager (fp32, AdamW, same threads) train the same Llama on random
# tokens in one run; prints tokens/s for both and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-10}
MODEL="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256 --vocab_size 256"
BATCH=8

# fsdpc: the first step is warm-up; the log line at step STEPS+1 covers the STEPS timed steps
fs=$(OMP_NUM_THREADS=$THREADS ./fsdpc $MODEL --batch_size $BATCH --train_data synthetic --max_steps $((STEPS + 1)) \
    --logging_freq $((STEPS + 1)) --checkpoint_freq 0 --num_tokens 0 --num_threads "$THREADS" 2>&1 |
    grep "^Batch $((STEPS + 1)) Loss" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/')
pt=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/bench_torch.py $MODEL --batch_size $BATCH --steps "$STEPS" \
    --warmup_steps 1 --threads "$THREADS" | sed -nE 's/^torch tokens\/sec: ([0-9.]+).*/\1/p')
echo "model: D=256 L=4 H=8 KV=4 F=688 T=256 V=256, batch $BATCH, fp32 AdamW, $THREADS threads"
printf 'fsdpc tokens/sec: %.0f\n' "$fs"
printf 'torch tokens/sec: %.0f\n' "$pt"
awk -v a="$fs" -v b="$pt" 'BEGIN { printf "fsdpc/torch speedup: %.2fx\n", a / b }'
echo; echo "scaling (global batch 8, ranks x threads = $(nproc) cores):"; bash bench/scaling.sh
echo; bash bench/bench_tp.sh
echo; bash bench/bench_moe.sh
echo; bash bench/bench_lora.sh
echo; bash bench/bench_prepare.sh
echo; bash bench/bench_data.sh
echo; bash bench/bench_packing.sh
echo; bash bench/bench_startup.sh
echo; bash bench/bench_ckpt.sh
