// nccl: NCCL communicators for the MPI groups and event-ordered collectives.
#include "nccl.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/clock.h"
#include "../base/err.h"
#include "../kernels/cuda/cuda_backend.h"
#include "comm.h"

// libnccl is opened at run time (comm_nccl_open), as cuDNN is: a CPU run or a single GPU does not
// load it, and ./fsdpc starts where it is not installed. Its calls go through this table.
#define NCCL_FUNCS(X)                                                                                           \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommGetAsyncError)     \
        X(ncclCommAbort) X(ncclCommDestroy) X(ncclAllGather) X(ncclReduceScatter) X(ncclAllReduce) X(ncclBroadcast)
// point to point (NCCL 2.7+), for expert parallelism's all-to-all and context parallelism's ring
// only: an older NCCL still runs the rest
#define NCCL_P2P_FUNCS(X) X(ncclGroupStart) X(ncclGroupEnd) X(ncclSend) X(ncclRecv) X(ncclCommCount)
static struct {
#define NCCL_MEMBER(f) __typeof__(&f) f;
    NCCL_FUNCS(NCCL_MEMBER)
    NCCL_P2P_FUNCS(NCCL_MEMBER)
#undef NCCL_MEMBER
} nccl;
static const char nccl_lib[] = "libnccl.so.2";

const char *comm_nccl_open(void) {
    static char why[512];
    static int open;  // a failure is tried again by the next caller
    if (open) return NULL;
    void *lib = dlopen(nccl_lib, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *path = getenv("LD_LIBRARY_PATH");
        return err_text(why, sizeof why, "cannot load %s (%s; LD_LIBRARY_PATH=%s): install NCCL 2 or add its lib directory, "
                 "e.g. a Python environment's nvidia/nccl/lib, to LD_LIBRARY_PATH, or pass --device cpu", nccl_lib,
                 dlerror(), path && *path ? path : "(unset)");
    }
#define NCCL_LOOKUP(f)                                                                  \
    if (!(*(void **)&nccl.f = dlsym(lib, #f))) {                                        \
        snprintf(why, sizeof why, "%s has no %s (NCCL 2 is needed)", nccl_lib, #f);     \
        return why;                                                                     \
    }
    NCCL_FUNCS(NCCL_LOOKUP)
#undef NCCL_LOOKUP
#define NCCL_P2P_LOOKUP(f) *(void **)&nccl.f = dlsym(lib, #f);
    NCCL_P2P_FUNCS(NCCL_P2P_LOOKUP)
#undef NCCL_P2P_LOOKUP
    open = 1;
    return NULL;
}

#define ncclCheck(x) nccl_check((x), #x, __FILE__, __LINE__)
static void nccl_check(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess)
        err_fatal_at(file, line, "%s failed: %s (NCCL_DEBUG=INFO tells more; check GPUs and network)", what,
                     nccl.ncclGetErrorString(r));
}

#define cudaCheck(x) cuda_check((x), #x, __FILE__, __LINE__)
static void cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) err_fatal_at(file, line, "%s failed: %s", what, cudaGetErrorString(e));
}

struct NcclComm {
    ncclComm_t comm;  // NULL for a group of one rank, whose collectives are copies or nothing
    int aborted;      // ncclCommAbort ran: the communicator is gone
};

struct NcclReq {
    NcclComm *c;
    cudaEvent_t start, done;  // start: only when timed
};

// One stream for every communicator. NCCL kernels of two communicators that run at once on
// different streams can deadlock: each occupies GPU resources while it waits for peers that are
// busy in the other one, and with hybrid sharding the shard and replica groups' collectives
// overlap. On one stream they run in issue order, and every rank issues them in the same order.
static cudaStream_t stream;
// Timed events are placed on the host clock through a reference event whose host time is known.
static cudaEvent_t clock_ref;
static int64_t clock_ref_us;

// A group of one rank makes no communicator: NCCL's bootstrap and topology scan are not needed to
// move nothing, and a single-GPU run then works where they would fail.
NcclComm *comm_nccl_init(void *mpi_comm, int rank, int size) {
    NcclComm *c = callocCheck(1, sizeof *c);
    if (size > 1) {
        const char *why = comm_nccl_open();  // a run checks it first (comm_open_gpu_transport)
        if (why) err_fatal("%s", why);
        ncclUniqueId id;
        if (rank == 0) ncclCheck(nccl.ncclGetUniqueId(&id));
        if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, *(MPI_Comm *)mpi_comm) != MPI_SUCCESS)
            err_fatal("cannot broadcast the NCCL unique id");
        ncclCheck(nccl.ncclCommInitRank(&c->comm, size, id, rank));
    }
    if (!stream) cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return c;
}

// The collectives' stream waits for everything already queued on the compute stream (its
// inputs), then runs the op, bracketed by the request's events.
static NcclReq *begin(NcclComm *c, const char *what, int timed) {
    cudaEvent_t ready;
    cudaCheck(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(ready, (cudaStream_t)cuda_compute_stream()));
    cudaCheck(cudaStreamWaitEvent(stream, ready, 0));
    cudaCheck(cudaEventDestroy(ready));
    nvtxRangePushA(what);
    NcclReq *r = callocCheck(1, sizeof *r);
    r->c = c;
    cudaCheck(cudaEventCreateWithFlags(&r->done, timed ? cudaEventDefault : cudaEventDisableTiming));
    if (timed) {
        if (!clock_ref) {
            cudaCheck(cudaEventCreateWithFlags(&clock_ref, cudaEventDefault));
            cudaCheck(cudaEventRecord(clock_ref, stream));
            cudaCheck(cudaEventSynchronize(clock_ref));
            clock_ref_us = clock_now_us();
        }
        cudaCheck(cudaEventCreateWithFlags(&r->start, cudaEventDefault));
        cudaCheck(cudaEventRecord(r->start, stream));
    }
    return r;
}

static NcclReq *end(NcclReq *r) {
    cudaCheck(cudaEventRecord(r->done, stream));
    nvtxRangePop();
    return r;
}

static ncclDataType_t dtype(NcclType t) { return t == NCCL_BF16 ? ncclBfloat16 : ncclFloat32; }
static size_t type_size(NcclType t) { return t == NCCL_BF16 ? 2 : 4; }

// A gather or scatter over one rank: the input is the output, copied unless in place.
static void copy_one_rank(const void *in, void *out, size_t n, NcclType t) {
    if (in != out) cudaCheck(cudaMemcpyAsync(out, in, n * type_size(t), cudaMemcpyDeviceToDevice, stream));
}

NcclReq *comm_nccl_all_gather(NcclComm *c, const void *in, void *out, size_t n, NcclType t, int timed) {
    NcclReq *r = begin(c, "all-gather", timed);
    if (c->comm) ncclCheck(nccl.ncclAllGather(in, out, n, dtype(t), c->comm, stream));
    else copy_one_rank(in, out, n, t);
    return end(r);
}

NcclReq *comm_nccl_reduce_scatter(NcclComm *c, const void *in, void *out, size_t n, NcclType t, int timed) {
    NcclReq *r = begin(c, "reduce-scatter", timed);
    if (c->comm) ncclCheck(nccl.ncclReduceScatter(in, out, n, dtype(t), ncclSum, c->comm, stream));
    else copy_one_rank(in, out, n, t);
    return end(r);
}

// in place: over one rank, nothing to do
NcclReq *comm_nccl_allreduce(NcclComm *c, void *buf, size_t n, NcclType t, int max, int timed) {
    NcclReq *r = begin(c, "all-reduce", timed);
    if (c->comm) ncclCheck(nccl.ncclAllReduce(buf, buf, n, dtype(t), max ? ncclMax : ncclSum, c->comm, stream));
    return end(r);
}

NcclReq *comm_nccl_bcast(NcclComm *c, void *buf, size_t n, int root, int timed) {
    NcclReq *r = begin(c, "broadcast", timed);
    if (c->comm) ncclCheck(nccl.ncclBroadcast(buf, buf, n, ncclFloat32, root, c->comm, stream));
    return end(r);
}

// fails the job where the loaded NCCL predates point to point
static void need_p2p(const char *what) {
    if (!nccl.ncclSend || !nccl.ncclRecv || !nccl.ncclGroupStart || !nccl.ncclGroupEnd || !nccl.ncclCommCount)
        err_fatal("%s has no ncclSend/ncclRecv (NCCL 2.7 or later is needed for %s)", nccl_lib, what);
}

// One send to member `to` and one receive from member `from`, as one group call: both move at once
// on the collectives' stream, while the compute stream runs what was queued after begin.
NcclReq *comm_nccl_ring_shift(NcclComm *c, const void *send, void *recv, size_t bytes, int to, int from, int timed) {
    NcclReq *r = begin(c, "ring shift", timed);
    if (!c->comm) {  // over one rank the block comes back to itself
        cudaCheck(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream));
        return end(r);
    }
    need_p2p("--context_parallel_degree above 1");
    ncclCheck(nccl.ncclGroupStart());
    ncclCheck(nccl.ncclSend(send, bytes, ncclInt8, to, c->comm, stream));
    ncclCheck(nccl.ncclRecv(recv, bytes, ncclInt8, from, c->comm, stream));
    ncclCheck(nccl.ncclGroupEnd());
    return end(r);
}

// One send and one receive per member inside a group call (NCCL's all-to-all pattern); rows as
// bytes, so any row size moves. Over one rank: a copy.
NcclReq *comm_nccl_all_to_all(NcclComm *c, const void *send, const size_t *send_rows, void *recv, const size_t *recv_rows,
                              size_t row_bytes, int timed) {
    NcclReq *r = begin(c, "all-to-all", timed);
    if (!c->comm) {
        if (send_rows[0] && send != recv)
            cudaCheck(cudaMemcpyAsync(recv, send, send_rows[0] * row_bytes, cudaMemcpyDeviceToDevice, stream));
        return end(r);
    }
    need_p2p("--expert_parallel_degree above 1");
    int p;
    ncclCheck(nccl.ncclCommCount(c->comm, &p));
    size_t so = 0, ro = 0;
    ncclCheck(nccl.ncclGroupStart());
    for (int j = 0; j < p; j++) {
        ncclCheck(nccl.ncclSend((const char *)send + so, send_rows[j] * row_bytes, ncclInt8, j, c->comm, stream));
        ncclCheck(nccl.ncclRecv((char *)recv + ro, recv_rows[j] * row_bytes, ncclInt8, j, c->comm, stream));
        so += send_rows[j] * row_bytes, ro += recv_rows[j] * row_bytes;
    }
    ncclCheck(nccl.ncclGroupEnd());
    return end(r);
}

int comm_nccl_test(NcclReq *r, const char **err) {
    ncclResult_t async = ncclSuccess;
    if (r->c->comm) ncclCheck(nccl.ncclCommGetAsyncError(r->c->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
        *err = nccl.ncclGetErrorString(async);
        return 0;
    }
    cudaError_t e = cudaEventQuery(r->done);
    if (e == cudaErrorNotReady) return 0;
    cudaCheck(e);
    return 1;
}

// milliseconds from the reference event to e, on the host clock
static int64_t host_us(cudaEvent_t e) {
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, clock_ref, e));
    return clock_ref_us + (int64_t)(ms * 1000.0f);
}

void comm_nccl_finish(NcclReq *r, int64_t *start_us, int64_t *end_us) {
    cudaCheck(cudaStreamWaitEvent((cudaStream_t)cuda_compute_stream(), r->done, 0));
    if (r->start) {
        *start_us = host_us(r->start);
        *end_us = host_us(r->done);
        cudaCheck(cudaEventDestroy(r->start));
    }
    cudaCheck(cudaEventDestroy(r->done));
    free(r);
}

void comm_nccl_abort(NcclComm *c) {
    if (c->aborted || !c->comm) return;
    c->aborted = 1;
    nccl.ncclCommAbort(c->comm);  // not checked: this runs on the way out of a failure already reported
}

void comm_nccl_destroy(NcclComm *c) {
    if (!c->aborted && c->comm) ncclCheck(nccl.ncclCommDestroy(c->comm));
    free(c);
}

const char *comm_nccl_version(void) {
    static char out[600];
    int v = 0;
    const char *why = comm_nccl_open();
    if (why) {
        snprintf(out, sizeof out, "none (%s)", why);
        return out;
    }
    if (nccl.ncclGetVersion(&v) != ncclSuccess || v <= 0) return "unknown";
    // major * 10000 + minor * 100 + patch from NCCL 2.9 on, major * 1000 + minor * 100 + patch before
    const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
    snprintf(out, sizeof out, "%d.%d.%d", major, minor, v % 100);
    return out;
}
