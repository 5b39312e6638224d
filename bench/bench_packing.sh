#!/usr/bin/env bash
# --packing on a length-skewed finetuning set (85% short rows, 15% long ones, labels on the
# completion only), as ratios measured in one run: loss-bearing tokens per second of padded
# batches and of packed ones, on the same samples in the same order, and the largest relative
# difference of their losses (packing changes speed, not results).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-12}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export FSDPC_CACHE_DIR=$W/cache
/usr/bin/python3 - "$W/sft.jsonl" <<'PY'
import json, random, sys
r = random.Random(5)
with open(sys.argv[1], "w") as f:
    for _ in range(2000):
        n = r.randint(5, 40) if r.random() < 0.85 else r.randint(150, 250)
        p = max(1, n // 2)
        ids = [1] + [r.randint(3, 255) for _ in range(n)] + [2]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * (1 + p) + ids[1 + p:]}) + "\n")
PY
MODEL="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256 --vocab_size 256"
run() {  # run NAME [FLAGS]: loss-bearing tokens/s over steps 2..STEPS
    ./fsdpc $MODEL --train_data "$W/sft.jsonl" --batch_size 8 --max_steps "$STEPS" --logging_freq "$STEPS" --checkpoint_freq 0 \
        --num_tokens 0 --metrics_file "$W/$1.jsonl" "${@:2}" 2>&1 | sed -nE "s/^Batch $STEPS Loss.*tokens\/sec: ([0-9.]+).*/\1/p"
}
pad=$(run padded)
packed=$(run packed --packing)
diff=$(paste <(sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$W/padded.jsonl") <(sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$W/packed.jsonl") |
    awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { printf "%.1e", w }')
echo "finetuning rows, 85% of 5-40 tokens and 15% of 150-250, context 256, batch 8, D=256 L=4, $STEPS steps, np=1"
printf 'padded: %.0f loss-bearing tokens/s\npacked: %.0f loss-bearing tokens/s\n' "$pad" "$packed"
awk -v a="$packed" -v b="$pad" -v d="$diff" 'BEGIN { printf "packed/padded: %.2fx at equal losses (max relative difference %s)\n", a / b, d }'
