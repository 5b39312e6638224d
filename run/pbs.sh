#!/bin/bash
# PBS Pro: 8 nodes x 8 ranks (the 10.FSDP-style mpiexec launch), hybrid sharding per node.
#PBS -N fsdpc-llama2-7b
#PBS -l select=8:ncpus=96:mpiprocs=8
#PBS -l walltime=24:00:00
set -euo pipefail
cd "$PBS_O_WORKDIR"
CKPT=${CKPT:-$PWD/checkpoints/llama2_7b}
mpiexec -n 64 --map-by ppr:8:node --bind-to none ./fsdpc --model_name llama2_7b --sharding hybrid-full-shard \
    --precision bf16 --batch_size 1 --max_steps 10000 --train_data "$DATA" \
    --checkpoint_dir "$CKPT" --resume_from_checkpoint "$CKPT" --checkpoint_freq 500 --num_threads 12
