// nccl: NCCL communicators for the MPI groups and event-ordered collectives.
#include "nccl.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>

#include "../kernels/cuda/cuda_backend.h"
#include "comm.h"

#define ncclCheck(x) nccl_check((x), #x, __FILE__, __LINE__)
static void nccl_check(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess)
        comm_fatal_at(file, line, "%s failed: %s (NCCL_DEBUG=INFO tells more; check GPUs and network)", what,
                      ncclGetErrorString(r));
}

#define cudaCheck(x) cuda_check((x), #x, __FILE__, __LINE__)
static void cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) comm_fatal_at(file, line, "%s failed: %s", what, cudaGetErrorString(e));
}

struct NcclComm {
    ncclComm_t comm;
    cudaStream_t stream;  // collectives of this group
};

struct NcclReq {
    cudaEvent_t done;
};

NcclComm *comm_nccl_init(void *mpi_comm, int rank, int size) {
    NcclComm *c = mallocCheck(sizeof *c);
    ncclUniqueId id;
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, *(MPI_Comm *)mpi_comm) != MPI_SUCCESS)
        comm_fatal("cannot broadcast the NCCL unique id");
    ncclCheck(ncclCommInitRank(&c->comm, size, id, rank));
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    return c;
}

// The collective's stream waits for everything already queued on the compute stream (its
// inputs), runs the op, and records an event the compute stream will wait on.
static NcclReq *begin(NcclComm *c, const char *what) {
    cudaEvent_t ready;
    cudaCheck(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(ready, (cudaStream_t)cuda_compute_stream()));
    cudaCheck(cudaStreamWaitEvent(c->stream, ready, 0));
    cudaCheck(cudaEventDestroy(ready));
    nvtxRangePushA(what);
    NcclReq *r = mallocCheck(sizeof *r);
    cudaCheck(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    return r;
}

static NcclReq *end(NcclComm *c, NcclReq *r) {
    cudaCheck(cudaEventRecord(r->done, c->stream));
    nvtxRangePop();
    return r;
}

static ncclDataType_t dtype(NcclType t) { return t == NCCL_BF16 ? ncclBfloat16 : ncclFloat32; }

NcclReq *comm_nccl_all_gather(NcclComm *c, const void *in, void *out, size_t n, NcclType t) {
    NcclReq *r = begin(c, "all-gather");
    ncclCheck(ncclAllGather(in, out, n, dtype(t), c->comm, c->stream));
    return end(c, r);
}

NcclReq *comm_nccl_reduce_scatter(NcclComm *c, const void *in, void *out, size_t n, NcclType t) {
    NcclReq *r = begin(c, "reduce-scatter");
    ncclCheck(ncclReduceScatter(in, out, n, dtype(t), ncclSum, c->comm, c->stream));
    return end(c, r);
}

NcclReq *comm_nccl_allreduce(NcclComm *c, void *buf, size_t n, NcclType t) {
    NcclReq *r = begin(c, "all-reduce");
    ncclCheck(ncclAllReduce(buf, buf, n, dtype(t), ncclSum, c->comm, c->stream));
    return end(c, r);
}

NcclReq *comm_nccl_bcast(NcclComm *c, void *buf, size_t n, int root) {
    NcclReq *r = begin(c, "broadcast");
    ncclCheck(ncclBroadcast(buf, buf, n, ncclFloat32, root, c->comm, c->stream));
    return end(c, r);
}

void comm_nccl_wait(NcclReq *r) {
    cudaCheck(cudaStreamWaitEvent((cudaStream_t)cuda_compute_stream(), r->done, 0));
    cudaCheck(cudaEventDestroy(r->done));
    free(r);
}
