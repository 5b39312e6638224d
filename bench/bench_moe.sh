#!/usr/bin/env bash
# A mixture of experts against the dense model with the same active parameters, in one run: one
# rank trains a Mixtral of 8 experts of width 344, 2 per token, and a Llama of width 688 (the same
# attention, and the same MLP parameters per token) on random tokens; prints tokens/s of each and
# their ratio, the routing overhead (issue 37's aim: >= 0.8x). Then expert parallelism: 2 ranks
# train the Mixtral at the same global batch with --ep 2 (4 experts each, tokens by all-to-all)
# and with --ep 1 (every rank all 8, FSDP-sharded), and the ratio of their tokens/s (aim >= 0.9x).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-8}
SHAPE="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --max_context_width 256 --vocab_size 256"
rate() {  # rate [-np N] FLAGS...: tokens/s of the timed steps (the first is warm-up), batch 8 over the ranks
    local t np=1 launch=""
    if [ "$1" = -np ]; then
        np=$2
        shift 2
        launch="mpirun --oversubscribe --allow-run-as-root --bind-to none -q -np $np"
    fi
    local threads=$(((THREADS + np - 1) / np))
    t=$(OMP_NUM_THREADS=$threads $launch ./fsdpc $SHAPE --batch_size $((8 / np)) --train_data synthetic --max_steps $((STEPS + 1)) \
        --logging_freq $((STEPS + 1)) --checkpoint_freq 0 --validation_freq 0 --num_tokens 0 --num_threads "$threads" "$@" 2>&1 |
        grep "^Batch $((STEPS + 1)) Loss" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/')
    if [ -z "$t" ]; then
        echo "bench_moe: no reading from the run with $*" >&2
        exit 1
    fi
    echo "$t"
}
MOE="--model_type mixtral --intermediate_size 344 --num_experts 8 --num_experts_per_tok 2"
moe=$(rate $MOE)
dense=$(rate --model_type llama_v2 --intermediate_size 688)
echo "mixture of experts: D=256 L=4 H=8 KV=4 T=256, batch 8, fp32, 1 rank x $THREADS threads"
printf 'mixtral (8 experts of F=344, 2 per token) tokens/sec: %.0f\n' "$moe"
printf 'llama (F=688: the same active parameters) tokens/sec: %.0f\n' "$dense"
awk -v a="$moe" -v b="$dense" 'BEGIN { printf "mixtral / dense: %.2fx\n", a / b }'
ep1=$(rate -np 2 $MOE --sharding full-shard)
ep2=$(rate -np 2 $MOE --sharding full-shard --ep 2)
echo "expert parallelism: the same Mixtral, global batch 8, 2 ranks x $(((THREADS + 1) / 2)) threads, full-shard"
printf 'ep 1 (every rank all 8 experts) tokens/sec: %.0f\n' "$ep1"
printf 'ep 2 (4 experts per rank, all-to-all) tokens/sec: %.0f\n' "$ep2"
awk -v a="$ep2" -v b="$ep1" 'BEGIN { printf "ep 2 / ep 1: %.2fx\n", a / b }'
