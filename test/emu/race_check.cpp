// race_check CASE: one small stream program per case, to show that the emulation's race checks
// (emu_device.h) fire on unordered work and stay quiet on ordered work. test/test_emu.sh runs each
// case and expects "ordered" to exit 0 and every other case to abort with its message.
#include <cstring>

#include "cuda_runtime.h"

static void fill(float *x, float v, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = v;
}
static void copy(float *y, const float *x, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    const int n = 1024;
    cudaStream_t s1, s2;
    cudaEvent_t e;
    float *a, *b, *host;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaMalloc((void **)&a, n * sizeof(float));
    cudaMalloc((void **)&b, n * sizeof(float));
    cudaMallocHost((void **)&host, n * sizeof(float));
    const bool ordered = !strcmp(c, "ordered");

    emu_launch(fill, 1, 64, 0, s1)(a, 1.0f, n);  // s1 writes a
    if (!strcmp(c, "host")) return (int)a[0];       // host code reads device memory
    if (!strcmp(c, "free")) cudaFree(b);             // a real cudaFree would wait for s1's work
    if (!strcmp(c, "reuse")) {                       // a kernel on a block given back
        cudaDeviceSynchronize();
        cudaFree(b);
        emu_launch(fill, 1, 64, 0, s1)(b, 1.0f, n);
    }
    if (ordered || !strcmp(c, "war") || !strcmp(c, "pinned")) {
        cudaEventRecord(e, s1);
        cudaStreamWaitEvent(s2, e, 0);
    }
    emu_launch(copy, 1, 64, 0, s2)(b, a, n);        // s2 reads a: races unless it waited for s1
    if (!strcmp(c, "war") || ordered) {
        if (ordered) cudaEventRecord(e, s2), cudaStreamWaitEvent(s1, e, 0);
        emu_launch(fill, 1, 64, 0, s1)(a, 2.0f, n);  // s1 overwrites what s2 read: races unless it waited
    }
    cudaMemcpyAsync(host, b, n * sizeof(float), cudaMemcpyDeviceToHost, s2);
    if (ordered) cudaStreamSynchronize(s2);
    printf("%g\n", host[0]);  // races unless the host waited for the copy
    return host[0] == 1.0f ? 0 : 1;
}
