#!/usr/bin/env bash
# make test-gpu: every CUDA kernel against the CPU kernel, then 20 training steps on the GPU
# against the same steps on the CPU. Ends with "N passed, N failed".
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
build/test_gpu 2>&1 | tee "$W/log"
M="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256
   --batch_size 8 --max_steps 20 --lr 1e-3 --warmup 5 --num_tokens 0 --checkpoint_freq 0 --validation_freq 0"
./fsdpc $M --device cpu --metrics_file "$W/cpu.jsonl" 2>/dev/null
./fsdpc $M --device cuda --metrics_file "$W/gpu.jsonl" 2>"$W/gpu.err"
paste <(sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$W/cpu.jsonl") <(sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$W/gpu.jsonl") |
    awk '{ n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d }
         END { printf "%s - gpu: 20 training steps track the CPU losses (worst rel diff %.1e)\n", (n == 20 && w < 2e-3) ? "ok" : "not ok", w }' |
    tee -a "$W/log"
grep -q "on cuda:" "$W/gpu.err" || echo "not ok - gpu: the run did not report a CUDA device ($(head -c 200 "$W/gpu.err"))" | tee -a "$W/log"
echo "$(grep -c '^ok ' "$W/log") passed, $(grep -c '^not ok ' "$W/log") failed"
! grep -q '^not ok ' "$W/log"
