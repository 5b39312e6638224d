#!/usr/bin/env bash
# Tensor parallelism against FSDP alone, in one run: 4 ranks at one thread each train the same
# Llama on the same global batch, full-shard over 4 and tp 2 x full-shard 2, without and with
# --sequence_parallel; prints tokens/s of each, their ratios to full-shard (issue 27's aim: >=
# 0.90), and each run's peak activation memory per rank. Sequence parallelism's memory is held
# against tp 1 at the same per-rank batch (8 sequences; issue 27's aim: <= 0.6x).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-8}
MODEL="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 256 --vocab_size 256"
MPI="mpirun --oversubscribe --allow-run-as-root -q -np 4"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
source bench/lib.sh
run() { bench_run bench_tp "$@"; }
r=$(run --batch_size 4) || exit 1
read -r fs fsm <<<"$r"
r=$(run --batch_size 8 --tensor_parallel_degree 2) || exit 1
read -r tp tpm <<<"$r"
r=$(run --batch_size 8 --tensor_parallel_degree 2 --sequence_parallel) || exit 1
read -r sp spm <<<"$r"
r=$(STEPS=1 run --batch_size 8) || exit 1
read -r _ fs8m <<<"$r"
echo "tensor parallelism: D=256 L=4 H=8 KV=4 F=688 T=256, 4 ranks x 1 thread, global batch 16, fp32"
printf 'full-shard 4 tokens/sec: %.0f (peak activations %s MiB per rank)\n' "$fs" "$fsm"
printf 'tp 2 x full-shard 2 tokens/sec: %.0f (peak activations %s MiB per rank)\n' "$tp" "$tpm"
printf 'tp 2 x full-shard 2, sequence parallel tokens/sec: %.0f (peak activations %s MiB per rank)\n' "$sp" "$spm"
awk -v a="$tp" -v b="$fs" 'BEGIN { printf "tp 2 / full-shard: %.2fx\n", a / b }'
awk -v a="$sp" -v b="$fs" 'BEGIN { printf "tp 2 sequence parallel / full-shard: %.2fx\n", a / b }'
awk -v a="$spm" -v b="$fs8m" -v c="$tpm" 'BEGIN { printf "peak activations per rank at 8 sequences a rank: sequence parallel / tp 1 (%s MiB): %.2fx (tp 2 without it: %.2fx)\n", b, a / b, c / b }'
