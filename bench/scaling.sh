#!/usr/bin/env bash
# Scaling table for make bench: tokens/s and per-rank peak memory for np=1/2/4 in each sharding
# strategy, same model and global batch (8 sequences), ranks x threads = cores. Every row runs
# unbound (--bind-to none): mpirun's default binds np<=2 to one core each, which would halve np=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CORES=$(nproc)
MODEL="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256 --vocab_size 256"
STEPS=${STEPS:-3}
printf '%-4s %-18s %12s %14s\n' np sharding tokens/sec "peak MiB/rank"
for np in 1 2 4; do
    threads=$((CORES / np > 0 ? CORES / np : 1))
    case $np in
    1) strategies="no-shard full-shard" ;;
    2) strategies="no-shard full-shard grad-shard" ;;
    4) strategies="no-shard full-shard grad-shard hybrid-full-shard hybrid-grad-shard" ;;
    esac
    for st in $strategies; do
        group=""
        case $st in hybrid-*) group="--shard_group_size 2" ;; esac
        line=$(timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np ./fsdpc $MODEL --batch_size $((8 / np)) \
            --sharding $st $group --train_data synthetic --max_steps $((STEPS + 1)) \
            --logging_freq $((STEPS + 1)) --checkpoint_freq 0 --num_tokens 0 --num_threads $threads 2>&1 |
            grep "^Batch $((STEPS + 1)) Loss")
        tok=$(echo "$line" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/')
        mem=$(echo "$line" | sed -E 's/.*mem: ([0-9]+) MiB.*/\1/')
        printf '%-4s %-18s %12s %14s\n' $np $st "$tok" "$mem"
    done
done
