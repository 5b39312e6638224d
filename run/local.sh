#!/bin/bash
# One machine: N ranks (default 2) sharing its cores, full sharding, checkpoint dir = resume dir.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-2}
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)  # containers often run as root
mpirun "${ROOT[@]}" --oversubscribe -np "$NP" ./fsdpc --sharding full-shard \
    --checkpoint_dir checkpoints --resume_from_checkpoint checkpoints "$@"
