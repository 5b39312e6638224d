#!/bin/bash
# One machine: N ranks (default 2) sharing its cores, full sharding, checkpoint dir = resume dir.
# Extra arguments go to fsdpc. Smallest run: NP=1 run/launch/local.sh --max_steps 20 (tested as root and
# not by test/probes/test_faults.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
NP=${NP:-2}
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)  # containers often run as root
mpirun "${ROOT[@]}" --oversubscribe -np "$NP" ./fsdpc --sharding full-shard \
    --checkpoint_dir checkpoints --resume_from_checkpoint checkpoints "$@"
