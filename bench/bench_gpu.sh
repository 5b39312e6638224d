#!/usr/bin/env bash
# make bench-gpu: a ~1B Llama on one GPU: fsdpc tokens/s and MFU (PaLM FLOPs against the dense
# bf16 peak), and PyTorch eager on the same model in the same run (fp32, and bf16 autocast).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10}
B=${BATCH:-4}
MODEL="--hidden_width 2048 --num_layers 16 --num_heads 16 --num_key_value_heads 8 --intermediate_size 5632 --max_context_width 2048 --vocab_size 32000"
PY=${PYTHON:-$(ls /opt/torch/.venv/bin/python 2>/dev/null || echo /usr/bin/python3)}
line=$(./fsdpc $MODEL --device cuda --batch_size "$B" --train_data synthetic --max_steps $((STEPS + 1)) \
    --logging_freq $((STEPS + 1)) --checkpoint_freq 0 --num_tokens 0 2>&1 | tee /dev/stderr | grep "^Batch $((STEPS + 1)) Loss")
fs=$(echo "$line" | sed -E 's/.*tokens\/sec: ([0-9.]+).*/\1/')
mfu=$(echo "$line" | sed -nE 's/.*MFU: ([0-9.]+)%.*/\1/p')
echo "model: D=2048 L=16 H=16 KV=8 F=5632 T=2048 V=32000, batch $B"
printf 'fsdpc fp32 tokens/sec: %.0f  MFU: %s%%\n' "$fs" "${mfu:-?}"
for mode in fp32 bf16; do
    flag=""
    [ $mode = bf16 ] && flag=--bf16
    pt=$($PY bench/bench_torch.py $MODEL --batch_size "$B" --steps "$STEPS" --warmup_steps 2 --device cuda $flag |
        sed -nE 's/^torch tokens\/sec: ([0-9.]+).*/\1/p')
    awk -v a="$fs" -v b="$pt" -v m=$mode 'BEGIN { printf "torch %s tokens/sec: %.0f  fsdpc/torch: %.2fx\n", m, b, a / b }'
done
