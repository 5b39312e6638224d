// C view of the CPU emulation (testing only): the CUDA runtime calls of fsdpc's C sources
// (comm/nccl.c), done by test/gpu/emu/device.cpp.
#ifndef FSDPC_EMU_CUDA_RUNTIME_API_H
#define FSDPC_EMU_CUDA_RUNTIME_API_H
#include <stddef.h>
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorNotReady = 600 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
#define cudaStreamNonBlocking 1
#define cudaEventDefault 0
#define cudaEventDisableTiming 2
typedef enum { cudaMemcpyDeviceToDevice = 3 } cudaMemcpyKind;
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s);  // device to device only
#endif
