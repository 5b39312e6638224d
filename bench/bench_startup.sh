#!/usr/bin/env bash
# Start-up to the first step (mostly the parameters' initial values, ~170M here) on one host thread
# and on all cores, in one run; the first step's loss must be bit-identical (the initial values are
# a function of the element index, not of the thread count).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${THREADS:-$(nproc)}
MODEL="--tokenizer byte --hidden_width 1024 --num_layers 8 --num_heads 8 --num_key_value_heads 4 --intermediate_size 2816
    --max_context_width 64 --vocab_size 32000 --batch_size 1"
run() {  # run THREADS: "seconds loss"
    ./fsdpc $MODEL --train_data synthetic --max_steps 1 --logging_freq 1 --checkpoint_freq 0 --num_tokens 0 --num_threads "$1" 2>&1 |
        sed -nE 's/^start-up: ([0-9.]+) s .*/\1/p; s/^Batch 1 Loss: ([0-9.]+),.*/\1/p' | paste -sd' '
}
read -r s1 l1 < <(run 1)
read -r sn ln < <(run "$N")
echo "start-up to the first step, model D=1024 L=8 V=32000 (170M parameters):"
awk -v a="$s1" -v b="$sn" -v n="$N" 'BEGIN { printf "  1 thread: %.1f s, %d threads: %.1f s, speedup %.2fx\n", a, n, b, a / b }'
[ "$l1" = "$ln" ] && echo "  first-step loss $l1 at both thread counts" || { echo "  first-step losses differ: $l1 vs $ln"; exit 1; }
