#!/usr/bin/env bash
# make bench: fsdpc and PyTorch eager (AdamW, same threads) train the same models on random tokens
# in one run (bench_cpu.sh: tokens/s, fractions of the GEMM peaks, AdamW's bandwidth), then the
# scaling, tensor-parallel, context-parallel, MoE, LoRA and data tables.
set -euo pipefail
cd "$(dirname "$0")/.."
# the CPU table: Llama and GPT-2 in fp32 and bf16 against PyTorch and the machine's GEMM peaks
bash bench/bench_cpu.sh
echo; echo "scaling (global batch 8, ranks x threads = $(nproc) cores):"; bash bench/scaling.sh
echo; bash bench/bench_tp.sh
echo; bash bench/bench_cp.sh
echo; bash bench/bench_moe.sh
echo; bash bench/bench_lora.sh
echo; bash bench/bench_prepare.sh
echo; bash bench/bench_data.sh
echo; bash bench/bench_packing.sh
echo; bash bench/bench_startup.sh
echo; bash bench/bench_ckpt.sh
