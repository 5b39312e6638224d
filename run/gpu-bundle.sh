#!/usr/bin/env bash
# Packs what the GPU machine needs (it has CUDA, cuBLAS and NCCL but no OpenMPI, HDF5 or OpenBLAS):
# ./fsdpc and build/test_gpu from a CUDA build, plus the runtime .debs of OpenMPI, parallel HDF5,
# libsentencepiece and the OpenMP OpenBLAS this binary links (by its rpath), into .gpu/. Prints the
# line that installs them on the device and puts the binaries back in place; name .gpu in the
# device run's carry.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x ./fsdpc ] && [ -x build/test_gpu ] || { echo "build first: make fsdpc build/test_gpu (with nvcc present)"; exit 1; }
grep -q libnccl <(ldd ./fsdpc) || { echo "./fsdpc has no CUDA backend (is nvcc on PATH? CUDA=1)"; exit 1; }
rm -rf .gpu && mkdir -p .gpu/debs && cp ./fsdpc build/test_gpu .gpu/
pk="libopenmpi3 openmpi-bin openmpi-common libhdf5-openmpi-103-1 libopenblas0-openmp libfabric1 libhwloc15
libhwloc-plugins libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 libucx0 libibverbs1 ibverbs-providers librdmacm1
libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libgfortran5 libquadmath0 libgomp1 libsz2 libaec0 libnuma1
libmunge2 libxnvctrl0 libpciaccess0 ocl-icd-libopencl1 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0
libbrotli1 libsasl2-2 libsasl2-modules-db libsentencepiece0"
(cd .gpu/debs && apt-get download $pk >/dev/null 2>&1) || { echo "apt-get download failed (run apt-get update once)"; exit 1; }
grep -q '^/.gpu/$' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
du -sh .gpu
echo 'for f in .gpu/debs/*.deb; do dpkg -x "$f" /; done; ldconfig; export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | tr "\n" :)$LD_LIBRARY_PATH; cp .gpu/fsdpc . && mkdir -p build && cp .gpu/test_gpu build/ && ldd ./fsdpc | grep "not found";'
