#!/bin/bash
# One machine: N ranks (default 2) sharing its cores, full sharding, checkpoint dir = resume dir.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-2}
THREADS=$(( $(nproc) / NP > 0 ? $(nproc) / NP : 1 ))
mpirun --oversubscribe -np "$NP" ./fsdpc --sharding full-shard --num_threads "$THREADS" \
    --checkpoint_dir checkpoints --resume_from_checkpoint checkpoints "$@"
