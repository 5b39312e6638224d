#!/usr/bin/env bash
# Installs the Debian packages fsdpc builds and tests with, when any is missing.
set -euo pipefail
pkgs="make gcc g++ perl zlib1g-dev libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libmpich-dev mpich libhdf5-mpich-dev libopenblas-openmp-dev python3-torch python3-h5py python3-numpy python3-matplotlib python3-protobuf libsentencepiece-dev sentencepiece python3-sentencepiece libpcre2-dev clang libclang-rt-dev libsnappy-dev libzstd-dev liblz4-dev zstd lz4 bzip2 xz-utils zip"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ -n "$missing" ]; then
    echo "installing:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# MPICH and Open MPI share Debian's mpicc/mpirun/mpiexec alternatives: ./fsdpc and the tests build
# and launch with Open MPI's, so they are pinned to it after an install (and put back if anything
# moved them); make MPI=mpich names MPICH's tools (mpicc.mpich, mpiexec.mpich) itself.
for alt in mpi mpirun "mpi-$(gcc -dumpmachine)"; do
    want=$(update-alternatives --list "$alt" 2>/dev/null | grep -m1 openmpi) || continue
    now=$(update-alternatives --query "$alt" | sed -n 's/^Value: //p')
    if [ "$now" != "$want" ] || [ -n "$missing" ]; then
        $SUDO update-alternatives --set "$alt" "$want" >/dev/null
    fi
done
