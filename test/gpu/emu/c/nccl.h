// CPU emulation of NCCL (testing only): the collectives of fsdpc's GPU transport, done at once
// with MPI on the emulated device buffers. A communicator is an MPI_Comm split off the world.
#ifndef FSDPC_EMU_NCCL_H
#define FSDPC_EMU_NCCL_H
#include <stddef.h>
#include "cuda_runtime_api.h"
typedef enum { ncclSuccess = 0, ncclInternalError = 3, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclFloat32 = 7, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct EmuNcclComm *ncclComm_t;
const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllGather(const void *in, void *out, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s);
ncclResult_t ncclAllReduce(const void *in, void *out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s);
ncclResult_t ncclBroadcast(const void *in, void *out, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s);
// point to point, as fsdpc's all-to-all and ring use it: between ncclGroupStart and ncclGroupEnd
// at most one send and one receive per member of one communicator, each side's members in
// increasing order and their buffers adjacent in that order
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclRecv(void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclCommCount(ncclComm_t c, int *count);
#endif
