// host: pinned host buffers, so offloaded optimizer state copies at full PCIe/NVLink speed.
#include <string.h>

#include "common.cuh"

extern "C" void *cuda_alloc_host(size_t bytes) {
    void *p = nullptr;
    cudaCheck(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault));
    memset(p, 0, bytes);
    return p;
}

extern "C" void cuda_free_host(void *p) {
    if (!p) return;
    cudaCheck(cudaStreamSynchronize(cuda_ctx.copy_stream));  // an async copy may still read or fill it
    cudaCheck(cudaFreeHost(p));
}
