// The C side of the CPU emulation (testing only): the CUDA runtime calls of comm/nccl.c, and NCCL
// over MPI. Collectives run at once (the emulation's streams are synchronous) on emulated device
// memory; bf16 sums go through fp32.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../emu_device.h"
#include "cuda_runtime_api.h"
#include "nccl.h"

const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated error" : "no error"; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) { return (void)flags, *s = (void *)0x1, 0; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) { return (void)flags, *e = (void *)0x1, 0; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return (void)s, e ? 0 : 1; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) { return (void)s, (void)flags, e ? 0 : 1; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return e ? 0 : 1; }

struct EmuNcclComm {
    MPI_Comm comm;
};

const char *ncclGetErrorString(ncclResult_t r) { return r ? "emulated NCCL error" : "no error"; }

// an id names its creator (world rank) and that rank's count of ids so far
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int count;
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    memset(id, 0, sizeof *id);
    const int v[2] = {me, count++};
    memcpy(id->internal, v, sizeof v);
    return ncclSuccess;
}

// Every rank initialises its groups in the same order, so a split of the world by id works.
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int v[2], size;
    memcpy(v, id.internal, sizeof v);
    struct EmuNcclComm *c = malloc(sizeof *c);
    if (!c || MPI_Comm_split(MPI_COMM_WORLD, v[0] * 4096 + v[1], rank, &c->comm) != MPI_SUCCESS) return ncclInternalError;
    MPI_Comm_size(c->comm, &size);
    if (size != nranks) return ncclInternalError;
    *comm = c;
    return ncclSuccess;
}

static int check_dev(const void *a, const void *b) {
    if (emu_is_dev(a) && emu_is_dev(b)) return 1;
    fprintf(stderr, "emu nccl: buffer %p or %p is not device memory\n", a, b);
    return 0;
}

static MPI_Datatype mpi_type(ncclDataType_t t) { return t == ncclBfloat16 ? MPI_UINT16_T : MPI_FLOAT; }

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

ncclResult_t ncclAllGather(const void *in, void *out, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    (void)s;
    if (!check_dev(in, out)) return ncclInternalError;
    emu_device_access(1);
    int rc = MPI_Allgather(in, (int)n, mpi_type(t), out, (int)n, mpi_type(t), c->comm);
    emu_device_access(0);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError;
}

// sum of n elements of `in` over the group, as fp32; out gets the rank's block (scatter) or all of it
static ncclResult_t reduce(const void *in, void *out, size_t n, ncclDataType_t t, ncclComm_t c, int scatter) {
    int size;
    MPI_Comm_size(c->comm, &size);
    const size_t total = scatter ? n * (size_t)size : n;
    float *a = malloc(sizeof(float) * total), *b = malloc(sizeof(float) * n);
    if (!a || !b || !check_dev(in, out)) return ncclInternalError;
    emu_device_access(1);
    for (size_t i = 0; i < total; i++) a[i] = t == ncclBfloat16 ? bf16_to_f32(((const uint16_t *)in)[i]) : ((const float *)in)[i];
    int rc = scatter ? MPI_Reduce_scatter_block(a, b, (int)n, MPI_FLOAT, MPI_SUM, c->comm)
                     : MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, c->comm);
    for (size_t i = 0; i < n; i++)
        if (t == ncclBfloat16) ((uint16_t *)out)[i] = f32_to_bf16(b[i]);
        else ((float *)out)[i] = b[i];
    emu_device_access(0);
    free(a), free(b);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError;
}

ncclResult_t ncclReduceScatter(const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
    (void)op, (void)s;
    return reduce(in, out, n, t, c, 1);
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
    (void)op, (void)s;
    return reduce(in, out, n, t, c, 0);
}

ncclResult_t ncclBroadcast(const void *in, void *out, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
    (void)s;
    if (in != out || !check_dev(in, out)) return ncclInternalError;
    emu_device_access(1);
    int rc = MPI_Bcast(out, (int)n, mpi_type(t), root, c->comm);
    emu_device_access(0);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError;
}
