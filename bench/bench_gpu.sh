#!/usr/bin/env bash
# make bench-gpu: a ~1B Llama on one GPU. fsdpc tokens/s and MFU (PaLM FLOPs against the dense
# bf16 peak) in bf16 (--precision bf16: tensor-core matmuls and attention) and fp32, and PyTorch
# eager on the same model in the same run (bf16 autocast and fp32), with the ratios, and fsdpc's
# GPU time per step by kind (gemm, attention, elementwise, optimizer, waiting) from CUDA events
# (FSDPC_GPU_TIMERS).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10}
B=${BATCH:-4}
MODEL="--hidden_width 2048 --num_layers 16 --num_heads 16 --num_key_value_heads 8 --intermediate_size 5632 --max_context_width 2048 --vocab_size 32000"
PY=${PYTHON:-$(ls /opt/torch/.venv/bin/python 2>/dev/null || echo /usr/bin/python3)}
echo "model: D=2048 L=16 H=16 KV=8 F=5632 T=2048 V=32000, batch $B, $STEPS timed steps"

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# fsdpc PRECISION: prints "tokens/s MFU" of the last logged step (the first step is warmup); the
# run's log is left in $LOG
fsdpc() {
    FSDPC_GPU_TIMERS=1 ./fsdpc $MODEL --device cuda --precision "$1" --batch_size "$B" --train_data synthetic \
        --max_steps $((STEPS + 1)) --logging_freq $((STEPS + 1)) --checkpoint_freq 0 --num_tokens 0 \
        ${PROFILE:+--profile} 2>&1 | tee "$LOG" >&2
    sed -nE "s/^Batch $((STEPS + 1)) Loss.*tokens\/sec: ([0-9.]+), MFU: ([0-9.]+)%.*/\1 \2/p" "$LOG"
}

for mode in bf16 fp32; do
    read -r fs mfu < <(fsdpc "$([ $mode = bf16 ] && echo bf16 || echo float32)") || true
    pt=$($PY bench/bench_torch.py $MODEL --batch_size "$B" --steps "$STEPS" --warmup_steps 2 --device cuda \
        $([ $mode = bf16 ] && echo --bf16) | sed -nE 's/^torch tokens\/sec: ([0-9.]+).*/\1/p')
    awk -v a="$fs" -v m="$mfu" -v b="$pt" -v mode=$mode 'BEGIN {
        printf "%s: fsdpc %.0f tokens/s (MFU %s%%), torch %.0f tokens/s, fsdpc/torch: %.2fx\n", mode, a, m, b, a / b }'
    sed -n "s/^gpu time per step/  $mode fsdpc gpu time per step/p" "$LOG"
done
