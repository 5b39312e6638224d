#!/usr/bin/env bash
# A mixture of experts against the dense model with the same active parameters, in one run: one
# rank trains a Mixtral of 8 experts of width 344, 2 per token, and a Llama of width 688 (the same
# attention, and the same MLP parameters per token) on random tokens; prints tokens/s of each and
# their ratio, the routing overhead (issue 37's aim: >= 0.8x).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-8}
SHAPE="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --max_context_width 256 --vocab_size 256"
rate() {  # rate FLAGS...: tokens/s of the timed steps (the first is warm-up)
    local t
    t=$(OMP_NUM_THREADS=$THREADS ./fsdpc $SHAPE --batch_size 8 --train_data synthetic --max_steps $((STEPS + 1)) \
        --logging_freq $((STEPS + 1)) --checkpoint_freq 0 --validation_freq 0 --num_tokens 0 --num_threads "$THREADS" "$@" 2>&1 |
        grep "^Batch $((STEPS + 1)) Loss" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/')
    if [ -z "$t" ]; then
        echo "bench_moe: no reading from the run with $*" >&2
        exit 1
    fi
    echo "$t"
}
moe=$(rate --model_type mixtral --intermediate_size 344 --num_experts 8 --num_experts_per_tok 2)
dense=$(rate --model_type llama_v2 --intermediate_size 688)
echo "mixture of experts: D=256 L=4 H=8 KV=4 T=256, batch 8, fp32, 1 rank x $THREADS threads"
printf 'mixtral (8 experts of F=344, 2 per token) tokens/sec: %.0f\n' "$moe"
printf 'llama (F=688: the same active parameters) tokens/sec: %.0f\n' "$dense"
awk -v a="$moe" -v b="$dense" 'BEGIN { printf "mixtral / dense: %.2fx\n", a / b }'
