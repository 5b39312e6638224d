// race_check CASE: one small stream program per case, to show that the emulation's race checks
// (emu_device.h) fire on unordered work and stay quiet on ordered work. test/gpu/test_emu.sh runs each
// case and expects "ordered" to exit 0 and every other case to abort with its message. Case
// "deferred" (test/gpu/test_emu_libs.sh) exits 0 when a deferred op behaves as a collective in flight.
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "cuda_runtime.h"

static void fill(float *x, float v, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = v;
}
static void copy(float *y, const float *x, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}

// A deferred op, as the emulated NCCL's collectives are: it writes `value` into out when it lands,
// which it may once another thread has set `ready` (as a collective's peers arrive).
struct Pending {
    float *out;
    int n;
    float value;
    std::atomic<bool> ready;
};
static int pending_poll(void *arg, int land) {
    Pending *p = (Pending *)arg;
    if (!land) return p->ready.load();
    EmuDeviceWork raw;
    for (int i = 0; i < p->n; i++) p->out[i] = p->value;
    return 1;
}

// the event after it is not ready until it lands; a kernel ordered after it waits for it and
// reads its bytes
static int deferred(cudaStream_t s1, cudaStream_t s2, cudaEvent_t e, float *a, float *b, float *host, int n) {
    Pending p{b, n, 3.0f, {false}};
    emu_op_begin_deferred(emu_sid(s1), "deferred", a, 0);
    emu_op_access(b, n * sizeof(float), 1);
    emu_op_defer(pending_poll, &p);
    emu_op_end();
    cudaEventRecord(e, s1);
    if (emu_event_query(e)) return 2;
    std::thread peer([&p] { usleep(50000), p.ready = true; });
    cudaStreamWaitEvent(s2, e, 0);
    emu_launch(copy, 1, 64, 0, s2)(a, b, n);
    peer.join();
    cudaMemcpyAsync(host, a, n * sizeof(float), cudaMemcpyDeviceToHost, s2);
    cudaStreamSynchronize(s2);
    printf("%g\n", host[0]);
    return host[0] == 3.0f && emu_event_query(e) ? 0 : 1;
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
    if (!strcmp(c, "deferred")) return deferred(s1, s2, e, a, b, host, n);

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
