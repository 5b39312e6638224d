# fsdpc in a container, for enroot/pyxis under Slurm (docs/recipes.md) and Kubeflow's MPI Operator
# (run/launch/mpijob.yaml). Two stages: the CUDA devel image compiles ./fsdpc, the CUDA runtime
# image (with cuDNN, which --attention auto opens at run time) runs it. Both install their Debian
# packages with run/install-deps.sh itself, so the image and a bare machine cannot drift apart.
#   docker build -t fsdpc:latest .
#   docker build --build-arg CUDA=12.8.1 -t fsdpc:cu128 .    # another CUDA (sm_80 and sm_90 either way)
# EFA (libfabric, aws-ofi-nccl) comes from AWS's installer, not Debian: see docs/recipes.md.
ARG CUDA=13.0.1
ARG OS=ubuntu24.04

FROM nvidia/cuda:${CUDA}-devel-${OS} AS build
COPY run/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh build && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# CUDA=1: fail here if nvcc is missing rather than build a CPU-only binary; libs-of writes the
# packages of the libraries this binary links, which the runtime stage installs
RUN make -j"$(nproc)" fsdpc CUDA=1 && bash run/install-deps.sh libs-of ./fsdpc >/tmp/runtime-packages

FROM nvidia/cuda:${CUDA}-cudnn-runtime-${OS}
COPY run/install-deps.sh /tmp/install-deps.sh
COPY --from=build /tmp/runtime-packages /tmp/runtime-packages
RUN bash /tmp/install-deps.sh runtime /tmp/runtime-packages && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages
# The MPI Operator's launcher starts ranks over ssh with keys it mounts: workers run sshd, and
# neither side asks about unknown host keys or the mounted keys' file modes
RUN mkdir -p /run/sshd \
    && printf 'StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\nLogLevel ERROR\n' >/etc/ssh/ssh_config.d/fsdpc.conf \
    && printf 'StrictModes no\n' >/etc/ssh/sshd_config.d/fsdpc.conf
COPY --from=build /src/fsdpc /opt/fsdpc/fsdpc
WORKDIR /opt/fsdpc
# containers run as root; Open MPI refuses that unless told
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH=/opt/fsdpc:$PATH
CMD ["./fsdpc", "--help"]
