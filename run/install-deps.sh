#!/usr/bin/env bash
# Installs the Debian packages fsdpc builds and tests with, when any is missing.
set -euo pipefail
pkgs="make gcc g++ perl zlib1g-dev libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libopenblas-openmp-dev python3-torch python3-h5py python3-numpy python3-matplotlib python3-protobuf libsentencepiece-dev sentencepiece python3-sentencepiece libpcre2-dev clang libclang-rt-dev libsnappy-dev libzstd-dev liblz4-dev zstd lz4 bzip2 xz-utils zip"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
