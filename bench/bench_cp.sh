#!/usr/bin/env bash
# Context parallelism against FSDP alone: 4 ranks at one thread each train the same Llama on
# sequences of 1024 tokens at the same global batch (4 sequences a step), full-shard over 4 (a
# sequence per rank) and cp 4 (every sequence split over the 4 ranks, ring attention); prints the
# tokens/s of each and their ratio, and the peak activation memory per rank of cp 4 against cp 1 on
# the same sequence (one per rank group; issue 42's aim: at most 0.3x).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-4}
MODEL="--hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 688 --max_context_width 1024 --vocab_size 256"
MPI="mpirun --oversubscribe --allow-run-as-root -q -np 4"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
source bench/lib.sh
run() { bench_run bench_cp "$@"; }
r=$(run --batch_size 1) || exit 1
read -r fs fsm <<<"$r"
r=$(run --batch_size 4 --context_parallel_degree 4) || exit 1
read -r cp cpm <<<"$r"
r=$(STEPS=1 run --batch_size 1 --context_parallel_degree 4) || exit 1
read -r _ cp1m <<<"$r"
echo "context parallelism: D=256 L=4 H=8 KV=4 F=688 T=1024, 4 ranks x 1 thread, global batch 4 sequences, fp32"
printf 'full-shard 4 tokens/sec: %.0f (peak activations %s MiB per rank, a sequence each)\n' "$fs" "$fsm"
printf 'cp 4 tokens/sec: %.0f (peak activations %s MiB per rank)\n' "$cp" "$cpm"
awk -v a="$cp" -v b="$fs" 'BEGIN { printf "cp 4 / full-shard: %.2fx tokens/sec\n", a / b }'
awk -v a="$cp1m" -v b="$fsm" 'BEGIN { printf "peak activations per rank on the same sequence: cp 4 %s MiB / cp 1 %s MiB = %.2fx\n", a, b, a / b }'
