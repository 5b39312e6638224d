// The C side of the CPU emulation (testing only): the CUDA runtime calls of comm/nccl.c, and NCCL
// over MPI. Collectives run at once, when queued, on emulated device memory, as ops of their stream
// (emu_device.h checks they are ordered against the kernels); bf16 sums go through fp32.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../emu_device.h"
#include "cuda_runtime_api.h"
#include "nccl.h"

const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated error" : "no error"; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    return (void)flags, *s = (void *)(intptr_t)emu_stream_new(), 0;
}
// An event: the emulator's stream clocks, and the host time of its record, which is when its
// stream reached it (work runs when queued), for cudaEventElapsedTime.
typedef struct {
    void *clocks;
    double ms;
} EmuEvent;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    EmuEvent *ev = calloc(1, sizeof *ev);
    if (!ev) return 2;
    ev->clocks = emu_event_new();
    return (void)flags, *e = ev, 0;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    EmuEvent *ev = e;
    emu_event_record(ev->clocks, emu_sid(s));
    ev->ms = MPI_Wtime() * 1e3;
    return 0;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    return (void)flags, emu_stream_wait_event(emu_sid(s), ((EmuEvent *)e)->clocks), 0;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    emu_event_free(((EmuEvent *)e)->clocks);
    free(e);
    return 0;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return (void)e, cudaSuccess; }  // its work ran when queued
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return emu_event_sync(((EmuEvent *)e)->clocks), 0; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    return *ms = (float)(((EmuEvent *)b)->ms - ((EmuEvent *)a)->ms), 0;
}

struct EmuNcclComm {
    MPI_Comm comm;
    long ops;  // collectives queued, for FSDPC_EMU_NCCL_ASYNC_ERROR
};

const char *ncclGetErrorString(ncclResult_t r) { return r ? "emulated NCCL error" : "no error"; }

// NCCL 2.27.7's code (major * 10000 + minor * 100 + patch since 2.9)
ncclResult_t ncclGetVersion(int *version) { return *version = 22707, ncclSuccess; }

// FSDPC_EMU_NCCL_ASYNC_ERROR=N: a communicator reports a remote error once it has queued N
// collectives, as NCCL does when a peer or the network fails (tests the error path)
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    const char *after = getenv("FSDPC_EMU_NCCL_ASYNC_ERROR");
    *err = after && c->ops >= atol(after) ? ncclRemoteError : ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return (void)c, ncclSuccess; }  // nothing runs in the background to end
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    MPI_Comm_free(&c->comm);
    free(c);
    return ncclSuccess;
}

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
    struct EmuNcclComm *c = calloc(1, sizeof *c);
    if (!c || MPI_Comm_split(MPI_COMM_WORLD, v[0] * 4096 + v[1], rank, &c->comm) != MPI_SUCCESS) return ncclInternalError;
    MPI_Comm_size(c->comm, &size);
    if (size != nranks) return ncclInternalError;
    *comm = c;
    return ncclSuccess;
}

// Starts the collective's op on stream s: it reads in_bytes of in and writes out_bytes of out.
static int begin(const char *what, ncclComm_t c, cudaStream_t s, const void *in, size_t in_bytes, void *out, size_t out_bytes) {
    if (!emu_is_dev(in) || !emu_is_dev(out)) {
        fprintf(stderr, "emu nccl: buffer %p or %p is not device memory\n", in, out);
        return 0;
    }
    emu_op_begin(emu_sid(s), what);
    c->ops++;
    emu_op_cost((double)in_bytes + (double)out_bytes, 0, 0);
    emu_op_access(in, in_bytes, 0);
    emu_op_access(out, out_bytes, 1);
    return 1;
}

static MPI_Datatype mpi_type(ncclDataType_t t) { return t == ncclBfloat16 ? MPI_UINT16_T : MPI_FLOAT; }
static size_t type_size(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : 4; }

static int group_size(ncclComm_t c) {
    int size;
    MPI_Comm_size(c->comm, &size);
    return size;
}

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
    if (!begin("ncclAllGather", c, s, in, n * type_size(t), out, n * type_size(t) * group_size(c))) return ncclInternalError;
    int rc = MPI_Allgather(in, (int)n, mpi_type(t), out, (int)n, mpi_type(t), c->comm);
    emu_op_end();
    return rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError;
}

// sum (or max) of n elements of `in` over the group, as fp32; out gets the rank's block (scatter) or all of it
static ncclResult_t reduce(const char *what, const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, int scatter, cudaStream_t s) {
    const size_t total = scatter ? n * (size_t)group_size(c) : n;
    float *a = malloc(sizeof(float) * total), *b = malloc(sizeof(float) * n);
    if (!a || !b || !begin(what, c, s, in, total * type_size(t), out, n * type_size(t))) return ncclInternalError;
    for (size_t i = 0; i < total; i++) a[i] = t == ncclBfloat16 ? bf16_to_f32(((const uint16_t *)in)[i]) : ((const float *)in)[i];
    int rc = scatter ? MPI_Reduce_scatter_block(a, b, (int)n, MPI_FLOAT, MPI_SUM, c->comm)
                     : MPI_Allreduce(a, b, (int)n, MPI_FLOAT, op == ncclMax ? MPI_MAX : MPI_SUM, c->comm);
    for (size_t i = 0; i < n; i++)
        if (t == ncclBfloat16) ((uint16_t *)out)[i] = f32_to_bf16(b[i]);
        else ((float *)out)[i] = b[i];
    emu_op_end();
    free(a), free(b);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError;
}

ncclResult_t ncclReduceScatter(const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
    return op == ncclSum ? reduce("ncclReduceScatter", in, out, n, t, op, c, 1, s) : ncclInternalError;
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
    return reduce("ncclAllReduce", in, out, n, t, op, c, 0, s);
}

ncclResult_t ncclBroadcast(const void *in, void *out, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
    if (in != out || !begin("ncclBroadcast", c, s, in, n * type_size(t), out, n * type_size(t))) return ncclInternalError;
    int rc = MPI_Bcast(out, (int)n, mpi_type(t), root, c->comm);
    emu_op_end();
    return rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError;
}
