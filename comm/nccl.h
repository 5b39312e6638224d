// nccl: the GPU transport behind comm.h (built with CUDA only). Collectives run on a dedicated
// stream, ordered after the compute stream's queued work by events; waiting makes the compute
// stream (not the host) wait for them.
#ifndef FSDPC_COMM_NCCL_H
#define FSDPC_COMM_NCCL_H

#include <stddef.h>

typedef struct NcclComm NcclComm;
typedef struct NcclReq NcclReq;

typedef enum { NCCL_F32, NCCL_BF16 } NcclType;

// Collective over the MPI communicator `mpi_comm` (an MPI_Comm passed by address): rank 0 makes
// the unique id and broadcasts it.
NcclComm *comm_nccl_init(void *mpi_comm, int rank, int size);
NcclReq *comm_nccl_all_gather(NcclComm *c, const void *in, void *out, size_t n, NcclType t);
NcclReq *comm_nccl_reduce_scatter(NcclComm *c, const void *in, void *out, size_t n, NcclType t);
NcclReq *comm_nccl_allreduce(NcclComm *c, void *buf, size_t n, NcclType t);
NcclReq *comm_nccl_bcast(NcclComm *c, void *buf, size_t n, int root);
void comm_nccl_wait(NcclReq *r);

#endif
