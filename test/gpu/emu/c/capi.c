// The C side of the CPU emulation (testing only): the CUDA runtime calls of comm/nccl.c, and NCCL
// over MPI. A collective is an op of its stream (emu_device.h checks it is ordered against the
// kernels) that completes asynchronously, as on a GPU: when queued it reads its input into host
// memory and starts a non-blocking MPI collective, and its output lands (a deferred op of
// emu_device.h) once MPI is done and FSDPC_EMU_NCCL_DELAY_MS have passed. Until then the events
// after it are not ready, so the host's polling, --collective_timeout and ncclCommAbort run as
// they would on hardware. MPI is initialised without threads, so nothing runs in the background:
// the host thread progresses the collectives whenever it enters the emulation. bf16 sums go
// through fp32.
//
// Test knobs: FSDPC_EMU_NCCL_DELAY_MS (a collective lands no sooner than this after it was
// queued; default 0), FSDPC_EMU_NCCL_STALL=N (the rank's Nth collective call never returns, as if
// its host thread hung before arriving), FSDPC_EMU_NCCL_ASYNC_ERROR=N (see ncclCommGetAsyncError),
// FSDPC_EMU_NCCL_LOG=1 (a line per communicator made or aborted, and at exit the rank's count of
// NCCL calls and of event queries answered "not ready").
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../emu_device.h"
#include "cuda_runtime_api.h"
#include "nccl.h"

static long nccl_calls, collectives, not_ready;

static void report_calls(void) {
    fprintf(stderr, "emu nccl: %ld NCCL calls (%ld collectives), %ld event queries answered not ready\n", nccl_calls,
            collectives, not_ready);
}

__attribute__((constructor)) static void log_at_exit(void) {
    if (getenv("FSDPC_EMU_NCCL_LOG")) atexit(report_calls);
}

static int logging(void) { return getenv("FSDPC_EMU_NCCL_LOG") != NULL; }

const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated error" : "no error"; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    return (void)flags, *s = (void *)(intptr_t)emu_stream_new(), 0;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    return (void)flags, (*e = emu_event_new()) ? 0 : 2;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return emu_event_record(e, emu_sid(s)), 0; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    return (void)flags, emu_stream_wait_event(emu_sid(s), e), 0;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { return emu_event_free(e), 0; }
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (emu_event_query(e)) return cudaSuccess;
    not_ready++;
    return cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return emu_event_sync(e), 0; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { return *ms = emu_event_elapsed_ms(a, b), 0; }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (kind != cudaMemcpyDeviceToDevice || !emu_is_dev(dst) || !emu_is_dev(src)) {
        fprintf(stderr, "emu: cudaMemcpyAsync kind %d from %p to %p: only device to device here\n", (int)kind, src, dst);
        abort();
    }
    if (!n) return cudaSuccess;
    emu_op_begin(emu_sid(s), "cudaMemcpyAsync");
    emu_op_cost(2.0 * (double)n, 0, 0);
    emu_op_access(src, n, 0);
    emu_op_access(dst, n, 1);
    memmove(dst, src, n);
    emu_op_end();
    return cudaSuccess;
}

struct EmuNcclComm {
    MPI_Comm comm;
    int world_rank;           // for log lines
    long ops;                 // collectives queued, for FSDPC_EMU_NCCL_ASYNC_ERROR
    _Atomic long in_flight;   // collectives queued and not landed
    _Atomic int aborted;      // ncclCommAbort (from any thread): its collectives are dropped
    _Atomic int failed;       // an MPI call of a collective failed: reported as a remote error
};

const char *ncclGetErrorString(ncclResult_t r) { return r ? "emulated NCCL error" : "no error"; }

// NCCL 2.27.7's code (major * 10000 + minor * 100 + patch since 2.9)
ncclResult_t ncclGetVersion(int *version) { return *version = 22707, ncclSuccess; }

// FSDPC_EMU_NCCL_ASYNC_ERROR=N: a communicator reports a remote error once it has queued N
// collectives, as NCCL does when a peer or the network fails (tests the error path)
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    nccl_calls++;
    const char *after = getenv("FSDPC_EMU_NCCL_ASYNC_ERROR");
    *err = (after && c->ops >= atol(after)) || atomic_load(&c->failed) ? ncclRemoteError : ncclSuccess;
    return ncclSuccess;
}

// Ends the waiting: the communicator's collectives in flight are dropped, so the events after them
// become ready and nothing waits on MPI for them (their MPI requests are abandoned: the process is
// on its way out). Safe from any thread.
ncclResult_t ncclCommAbort(ncclComm_t c) {
    nccl_calls++;
    atomic_store(&c->aborted, 1);
    if (logging())
        fprintf(stderr, "emu nccl: rank %d: ncclCommAbort drops %ld collective(s) in flight\n", c->world_rank,
                (long)atomic_load(&c->in_flight));
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    nccl_calls++;
    if (atomic_load(&c->in_flight)) emu_device_sync();  // its collectives land before the communicator goes
    MPI_Comm_free(&c->comm);
    free(c);
    return ncclSuccess;
}

// an id names its creator (world rank) and that rank's count of ids so far
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int count;
    int me;
    nccl_calls++;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    memset(id, 0, sizeof *id);
    const int v[2] = {me, count++};
    memcpy(id->internal, v, sizeof v);
    return ncclSuccess;
}

// Every rank initialises its groups in the same order, so a split of the world by id works.
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int v[2], size;
    nccl_calls++;
    memcpy(v, id.internal, sizeof v);
    struct EmuNcclComm *c = calloc(1, sizeof *c);
    if (!c || MPI_Comm_split(MPI_COMM_WORLD, v[0] * 4096 + v[1], rank, &c->comm) != MPI_SUCCESS) return ncclInternalError;
    MPI_Comm_size(c->comm, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    if (logging()) fprintf(stderr, "emu nccl: rank %d: ncclCommInitRank of %d ranks\n", c->world_rank, nranks);
    if (size != nranks) return ncclInternalError;
    *comm = c;
    return ncclSuccess;
}

// ---- collectives ----

// One collective in flight: host copies of what it sends and receives, and where the result lands.
typedef struct {
    ncclComm_t c;
    void *out;               // device memory
    size_t n;                // elements landing in out
    ncclDataType_t t;
    int fp32_sums;           // recv holds fp32 sums to be written in type t
    void *send, *recv;
    MPI_Request req;
    int done;                // MPI has finished
    double ready_ms;         // it lands no sooner (FSDPC_EMU_NCCL_DELAY_MS after it was queued)
    int *counts;             // an all-to-all's counts and displacements, which MPI reads until done
} Coll;

static size_t type_size(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : t == ncclInt8 ? 1 : 4; }
static MPI_Datatype mpi_type(ncclDataType_t t) { return t == ncclBfloat16 ? MPI_UINT16_T : t == ncclInt8 ? MPI_BYTE : MPI_FLOAT; }

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

static void coll_free(Coll *x) {
    atomic_fetch_sub(&x->c->in_flight, 1);
    free(x->send), free(x->recv), free(x->counts), free(x);
}

// emu_op_defer's poll: ready once MPI is done and the delay has passed (at once when aborted);
// landing writes the result into device memory
static int coll_poll(void *arg, int land) {
    Coll *x = arg;
    const int dropped = atomic_load(&x->c->aborted);
    if (!land) {
        if (dropped) return 1;
        if (!x->done && MPI_Test(&x->req, &x->done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            x->done = 1, atomic_store(&x->c->failed, 1);
        return x->done && MPI_Wtime() * 1e3 >= x->ready_ms;
    }
    if (!dropped && !atomic_load(&x->c->failed)) {
        emu_device_access(1);
        if (!x->fp32_sums) memcpy(x->out, x->recv, x->n * type_size(x->t));
        else
            for (size_t i = 0; i < x->n; i++)
                if (x->t == ncclBfloat16) ((uint16_t *)x->out)[i] = f32_to_bf16(((const float *)x->recv)[i]);
                else ((float *)x->out)[i] = ((const float *)x->recv)[i];
        emu_device_access(0);
    }
    coll_free(x);
    return 1;
}

static double delay_ms(void) {
    const char *e = getenv("FSDPC_EMU_NCCL_DELAY_MS");
    return e ? atof(e) : 0;
}

// Queues the collective's op on stream s: it reads in_bytes of in (now, into send_bytes of host
// memory the caller fills) and will write n elements to out. NULL when the buffers are not device
// memory.
static Coll *begin(const char *what, ncclComm_t c, cudaStream_t s, const void *in, size_t in_bytes, void *out, size_t n,
                   ncclDataType_t t, size_t send_bytes, size_t recv_bytes) {
    nccl_calls++;
    const char *stall = getenv("FSDPC_EMU_NCCL_STALL");
    if (stall && ++collectives == atol(stall))
        for (;;) pause();  // until a signal ends the process
    else if (!stall) collectives++;
    if (!emu_is_dev(in) || !emu_is_dev(out)) {
        fprintf(stderr, "emu nccl: buffer %p or %p is not device memory\n", in, out);
        return NULL;
    }
    Coll *x = calloc(1, sizeof *x);
    if (!x || !(x->send = malloc(send_bytes ? send_bytes : 1)) || !(x->recv = malloc(recv_bytes ? recv_bytes : 1))) {
        if (x) free(x->send), free(x);
        return NULL;
    }
    x->c = c, x->out = out, x->n = n, x->t = t;
    x->ready_ms = MPI_Wtime() * 1e3 + delay_ms();
    atomic_fetch_add(&c->in_flight, 1);
    emu_op_begin_deferred(emu_sid(s), what, in, in_bytes);
    c->ops++;
    const size_t out_bytes = n * type_size(t);
    emu_op_cost((double)in_bytes + (double)out_bytes, 0, 0);
    emu_op_access(in, in_bytes, 0);
    emu_op_access(out, out_bytes, 1);
    return x;
}

// After the MPI call that begin's caller started (rc): the op becomes pending, or fails.
static ncclResult_t start(Coll *x, int rc) {
    if (rc == MPI_SUCCESS) emu_op_defer(coll_poll, x);
    emu_op_end();
    if (rc == MPI_SUCCESS) return ncclSuccess;
    coll_free(x);
    return ncclInternalError;
}

static int group_size(ncclComm_t c) {
    int size;
    MPI_Comm_size(c->comm, &size);
    return size;
}

ncclResult_t ncclAllGather(const void *in, void *out, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    const size_t bytes = n * type_size(t), p = (size_t)group_size(c);
    Coll *x = begin("ncclAllGather", c, s, in, bytes, out, n * p, t, bytes, bytes * p);
    if (!x) return ncclInternalError;
    memcpy(x->send, in, bytes);
    return start(x, MPI_Iallgather(x->send, (int)n, mpi_type(t), x->recv, (int)n, mpi_type(t), c->comm, &x->req));
}

// sum (or max) of n elements of `in` over the group, in fp32; out gets the rank's block (scatter) or all of it
static ncclResult_t reduce(const char *what, const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, int scatter, cudaStream_t s) {
    const size_t total = scatter ? n * (size_t)group_size(c) : n;
    Coll *x = begin(what, c, s, in, total * type_size(t), out, n, t, total * sizeof(float), n * sizeof(float));
    if (!x) return ncclInternalError;
    x->fp32_sums = 1;
    float *a = x->send;
    for (size_t i = 0; i < total; i++) a[i] = t == ncclBfloat16 ? bf16_to_f32(((const uint16_t *)in)[i]) : ((const float *)in)[i];
    return start(x, scatter ? MPI_Ireduce_scatter_block(a, x->recv, (int)n, MPI_FLOAT, MPI_SUM, c->comm, &x->req)
                            : MPI_Iallreduce(a, x->recv, (int)n, MPI_FLOAT, op == ncclMax ? MPI_MAX : MPI_SUM, c->comm, &x->req));
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
    const size_t bytes = n * type_size(t);
    Coll *x = in == out ? begin("ncclBroadcast", c, s, in, bytes, out, n, t, 0, bytes) : NULL;
    if (!x) return ncclInternalError;
    memcpy(x->recv, in, bytes);
    return start(x, MPI_Ibcast(x->recv, (int)n, mpi_type(t), root, c->comm, &x->req));
}

ncclResult_t ncclCommCount(ncclComm_t c, int *count) {
    nccl_calls++;
    *count = group_size(c);
    return ncclSuccess;
}

// The open group's point-to-point calls, issued together at ncclGroupEnd as one MPI_Ialltoallv
// (a member this rank neither sends to nor receives from gets counts of 0).
enum { P2P_MAX = 256 };
static struct {
    int open, n[2];      // n: sends, receives so far
    ncclComm_t c;
    cudaStream_t s;
    const char *buf[2][P2P_MAX];
    size_t bytes[2][P2P_MAX];
    int peer[2][P2P_MAX];
} p2p;

ncclResult_t ncclGroupStart(void) {
    nccl_calls++;
    if (p2p.open) return ncclInternalError;
    memset(&p2p, 0, sizeof p2p);
    p2p.open = 1;
    return ncclSuccess;
}

static ncclResult_t p2p_add(int side, const void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    nccl_calls++;
    int k = p2p.n[side];
    if (!p2p.open || k == P2P_MAX || (p2p.c && (p2p.c != c || p2p.s != s))) return ncclInternalError;
    p2p.c = c, p2p.s = s;
    p2p.buf[side][k] = buf, p2p.bytes[side][k] = n * type_size(t), p2p.peer[side][k] = peer;
    p2p.n[side]++;
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return p2p_add(0, buf, n, t, peer, c, s);
}

ncclResult_t ncclRecv(void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return p2p_add(1, buf, n, t, peer, c, s);
}

// On each side, members in increasing order, each at most once, their buffers adjacent in that
// order: else an error. fsdpc's all-to-all issues every member on both sides, its ring one send and
// one receive; other point-to-point patterns are not emulated.
ncclResult_t ncclGroupEnd(void) {
    nccl_calls++;
    if (!p2p.open) return ncclInternalError;
    p2p.open = 0;
    if (!p2p.c) return ncclSuccess;
    int p = group_size(p2p.c);
    if (p2p.n[0] > p || p2p.n[1] > p) return ncclInternalError;
    size_t tot[2] = {0, 0};
    int *cnt = calloc(4 * (size_t)p, sizeof(int));  // send counts, send offsets, receive counts, receive offsets
    if (!cnt) return ncclInternalError;
    for (int side = 0; side < 2; side++)
        for (int j = 0; j < p2p.n[side]; j++) {
            const int peer = p2p.peer[side][j];
            if (peer < 0 || peer >= p || (j && peer <= p2p.peer[side][j - 1]) ||
                p2p.buf[side][j] != p2p.buf[side][0] + tot[side] || p2p.bytes[side][j] > INT32_MAX) {
                free(cnt);
                return ncclInternalError;
            }
            cnt[2 * side * p + peer] = (int)p2p.bytes[side][j];
            cnt[2 * side * p + p + peer] = (int)tot[side];
            tot[side] += p2p.bytes[side][j];
        }
    Coll *x = begin("ncclSend/ncclRecv", p2p.c, p2p.s, p2p.buf[0][0], tot[0], (void *)p2p.buf[1][0], tot[1], ncclInt8, tot[0],
                    tot[1]);
    if (!x) {
        free(cnt);
        return ncclInternalError;
    }
    memcpy(x->send, p2p.buf[0][0], tot[0]);
    x->counts = cnt;
    return start(x, MPI_Ialltoallv(x->send, cnt, cnt + p, MPI_BYTE, x->recv, cnt + 2 * p, cnt + 3 * p, MPI_BYTE, p2p.c->comm,
                                   &x->req));
}

// the library emu_dlopen hands out as libnccl.so.2 (FSDPC_EMU_NCCL=missing: none)
__attribute__((constructor)) static void register_nccl(void) {
    static const EmuSym syms[] = {
#define EMU_SYM(f) {#f, (void *)&f},
        EMU_SYM(ncclGetVersion) EMU_SYM(ncclGetErrorString) EMU_SYM(ncclGetUniqueId) EMU_SYM(ncclCommInitRank)
            EMU_SYM(ncclCommGetAsyncError) EMU_SYM(ncclCommAbort) EMU_SYM(ncclCommDestroy) EMU_SYM(ncclAllGather)
                EMU_SYM(ncclReduceScatter) EMU_SYM(ncclAllReduce) EMU_SYM(ncclBroadcast) EMU_SYM(ncclGroupStart)
                    EMU_SYM(ncclGroupEnd) EMU_SYM(ncclSend) EMU_SYM(ncclRecv) EMU_SYM(ncclCommCount)
#undef EMU_SYM
    };
    emu_dl_register("libnccl.so.2", "FSDPC_EMU_NCCL", syms, sizeof syms / sizeof syms[0]);
}
