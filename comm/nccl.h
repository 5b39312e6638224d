// nccl: the GPU transport behind comm.h (built with CUDA only). Every communicator's collectives
// run on one stream, ordered after the compute stream's queued work by events; the host polls a
// collective's completion (and NCCL's asynchronous errors), then the compute stream waits for it.
#ifndef FSDPC_COMM_NCCL_H
#define FSDPC_COMM_NCCL_H

#include <stddef.h>
#include <stdint.h>

typedef struct NcclComm NcclComm;
typedef struct NcclReq NcclReq;

typedef enum { NCCL_F32, NCCL_BF16 } NcclType;

// Loads libnccl.so.2 (dlopen), once: NULL, or why it cannot be (a line naming the library and
// LD_LIBRARY_PATH). Needs no GPU.
const char *comm_nccl_open(void);
// Collective over the MPI communicator `mpi_comm` (an MPI_Comm passed by address): rank 0 makes
// the unique id and broadcasts it. A group of one rank gets no NCCL communicator (no NCCL call):
// its gathers and scatters are copies on the collectives' stream, its all-reduces and broadcasts
// nothing.
NcclComm *comm_nccl_init(void *mpi_comm, int rank, int size);
// timed: record CUDA events around the op, so comm_nccl_finish can give its times on the stream
NcclReq *comm_nccl_all_gather(NcclComm *c, const void *in, void *out, size_t n, NcclType t, int timed);
NcclReq *comm_nccl_reduce_scatter(NcclComm *c, const void *in, void *out, size_t n, NcclType t, int timed);
NcclReq *comm_nccl_allreduce(NcclComm *c, void *buf, size_t n, NcclType t, int max, int timed);  // max: else sum
NcclReq *comm_nccl_bcast(NcclComm *c, void *buf, size_t n, int root, int timed);
// comm.h's comm_all_to_all on device buffers: grouped sends and receives, one pair per member
NcclReq *comm_nccl_all_to_all(NcclComm *c, const void *send, const size_t *send_rows, void *recv, const size_t *recv_rows,
                              size_t row_bytes, int timed);
// comm.h's comm_ring_shift_start on device buffers: bytes to member `to`, as many from member `from`
NcclReq *comm_nccl_ring_shift(NcclComm *c, const void *send, void *recv, size_t bytes, int to, int from, int timed);
// One poll: 1 when r is done, 0 while it runs; *err is set when NCCL reports an asynchronous
// error (the caller's fatal path then aborts the communicators).
int comm_nccl_test(NcclReq *r, const char **err);
// After comm_nccl_test said done: the compute stream waits for r, which is freed; a timed r sets
// *start_us and *end_us to its times on the stream (clock_now_us's clock).
void comm_nccl_finish(NcclReq *r, int64_t *start_us, int64_t *end_us);
// Fatal paths: ends c's pending work so no rank stays blocked in NCCL (ncclCommAbort).
void comm_nccl_abort(NcclComm *c);
// At exit: ncclCommDestroy.
void comm_nccl_destroy(NcclComm *c);
// The loaded NCCL's "major.minor.patch" (ncclGetVersion; fsdpc --version), or "none (why)". Needs no GPU.
const char *comm_nccl_version(void);

#endif
