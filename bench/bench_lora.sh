#!/usr/bin/env bash
# LoRA against full finetuning, in one run: one rank trains the same Llama on the same random
# tokens with every weight training and with LoRA r=16 on every linear layer (base frozen: no
# weight gradients, no AdamW for it); prints tokens/s and the memory tracker's peak of each and
# their ratios (issue 38's aim: LoRA at least 1.3x faster per step on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-6}
SHAPE="--hidden_width 1024 --num_layers 4 --num_heads 16 --num_key_value_heads 16 --intermediate_size 2752 --max_context_width 256 --vocab_size 256"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
run() {  # run NAME FLAGS...: tokens/s of the timed steps (the first is warm-up), and the tracker's peak total into $W/NAME.mem
    local name=$1 t
    shift
    t=$(OMP_NUM_THREADS=$THREADS ./fsdpc $SHAPE --batch_size 8 --train_data synthetic --max_steps $((STEPS + 1)) --logging_freq $((STEPS + 1)) \
        --checkpoint_freq 0 --validation_freq 0 --num_tokens 0 --num_threads "$THREADS" --metrics_file "$W/$name.jsonl" "$@" 2>&1 |
        grep "^Batch $((STEPS + 1)) Loss" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/')
    if [ -z "$t" ]; then
        echo "bench_lora: no reading from the run with $*" >&2
        exit 1
    fi
    tail -1 "$W/$name.jsonl" | sed -E 's/.*"total": \[[0-9]+, [0-9]+, ([0-9]+),.*/\1/' >"$W/$name.mem"
    echo "$t"
}
full=$(run full)
lora=$(run lora --lora_rank 16 --lora_alpha 32 --lora_target_modules all-linear)
echo "LoRA vs full finetuning: D=1024 L=4 H=16 F=2752 T=256, batch 8, fp32, 1 rank x $THREADS threads"
printf 'full finetuning tokens/sec: %.0f, peak %.1f MiB\n' "$full" "$(awk '{ print $1 / 1048576 }' "$W/full.mem")"
printf 'LoRA r=16 all-linear tokens/sec: %.0f, peak %.1f MiB\n' "$lora" "$(awk '{ print $1 / 1048576 }' "$W/lora.mem")"
awk -v a="$lora" -v b="$full" 'BEGIN { printf "LoRA / full step speed: %.2fx\n", a / b }'
paste "$W/lora.mem" "$W/full.mem" | awk '{ printf "LoRA / full peak memory: %.2fx\n", $1 / $2 }'
