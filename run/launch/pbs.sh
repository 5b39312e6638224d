#!/bin/bash
# PBS Pro: 8 nodes x 8 ranks (the 10.FSDP-style mpiexec launch), hybrid sharding per node.
# Debian's OpenMPI has no PBS (tm) support, so the node list comes from $PBS_NODEFILE, which lists
# each node mpiprocs times: mpiprocs is the ranks per node (ppr), and NP defaults to its line count.
# Keep ncpus/mpiprocs = the threads each rank should use (fsdpc shares an unpinned node's cores).
# Smallest allocation:
#   qsub -l select=1:ncpus=2:mpiprocs=2 -v DATA=data/tinyshakespeare.txt,MODEL=tiny,STEPS=20 run/launch/pbs.sh
# MPICH (MPI=mpich): Debian's MPICH with ./fsdpc-mpich (make MPI=mpich), or Cray MPICH on Polaris
# with the ./fsdpc of make CC=cc (docs/recipes.md): its mpiexec places PPN ranks (4) on each node
# of the node file, which there lists each node once; BIND is its binding, e.g. Cray PALS's
#   qsub -l select=2:system=polaris -v MPI=mpich,PPN=4,BIND='--depth=16 --cpu-bind depth',DATA=... run/launch/pbs.sh
# Tested: this script as written, by test/probes/test_faults.sh (Open MPI) and test/integration/test_mpich.sh (MPI=mpich,
# Hydra), with fake PBS_NODEFILEs on one machine (no PBS server here); not tested: a real PBS Pro or
# Torque server, Cray's PALS mpiexec, or several nodes.
#PBS -N fsdpc-7b
#PBS -l select=8:ncpus=96:mpiprocs=8
#PBS -l walltime=24:00:00
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
die() { echo "fsdpc: error: $*" >&2; exit 1; }
[ -n "${DATA:-}" ] || die "set DATA to the training token shards, e.g. qsub -v DATA='/data/corpus/train_*.bin' run/launch/pbs.sh"
[ -n "${PBS_NODEFILE:-}" ] || die "run this under PBS (qsub), which sets PBS_NODEFILE"
CKPT=${CKPT:-$PWD/checkpoints/llama2_7b}
MODEL_ARGS=${MODEL_ARGS:---model_name ${MODEL:-llama2_7b} --precision bf16}
if [ "${MPI:-}" = mpich ]; then
    # mpiexec.mpich where Debian has it (plain mpiexec stays Open MPI's there); Cray's mpiexec else
    PPN=${PPN:-4}
    NP=${NP:-$(($(sort -u "$PBS_NODEFILE" | wc -l) * PPN))}
    FSDPC=${FSDPC:-$([ -x ./fsdpc-mpich ] && echo ./fsdpc-mpich || echo ./fsdpc)}
    LAUNCH=("${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)}" -n "$NP" -ppn "$PPN" --hostfile "$PBS_NODEFILE" ${BIND:-})
else
    # ranks are not pinned (--bind-to none): fsdpc shares each node's cores among its ranks
    NP=${NP:-$(wc -l <"$PBS_NODEFILE")}
    FSDPC=${FSDPC:-./fsdpc}
    LAUNCH=(mpiexec -n "$NP" --hostfile "$PBS_NODEFILE" --bind-to none)
fi
"${LAUNCH[@]}" "$FSDPC" $MODEL_ARGS --sharding hybrid-full-shard \
    --batch_size ${BATCH:-1} --max_steps ${STEPS:-10000} --train_data "$DATA" \
    --checkpoint_dir "$CKPT" --resume_from_checkpoint "$CKPT" --checkpoint_freq ${CKPT_FREQ:-500} ${EXTRA_ARGS:-}
