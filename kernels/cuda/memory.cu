// memory: device setup, the compute stream, a caching allocator and host <-> device copies.
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.cuh"

CudaContext cuda_ctx;

namespace {

// ---- caching allocator ----
// cudaMalloc/cudaFree synchronise the device and cost milliseconds, so freed blocks are kept on
// per-size-class free lists and handed out again. Small requests round up to a power of two,
// big ones to a 2 MiB multiple (the driver's own granularity). Reuse is safe without events
// because every op runs on the one compute stream: work queued after the new owner's first use
// runs after the old owner's last.

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallMax = (size_t)1 << 20;
constexpr size_t kLargeGrain = (size_t)2 << 20;

std::mutex alloc_mutex;
std::unordered_map<size_t, std::vector<void *>> free_blocks;  // size class -> cached blocks
std::unordered_map<void *, size_t> live_blocks;                // block -> its size class
size_t bytes_in_use, peak_in_use;
size_t bytes_cached, peak_held;  // in the free lists; the most ever held (in use + cached)

size_t size_class(size_t bytes) {
    if (bytes <= kMinBlock) return kMinBlock;
    if (bytes <= kSmallMax) {
        size_t c = kMinBlock;
        while (c < bytes) c *= 2;
        return c;
    }
    return (bytes + kLargeGrain - 1) / kLargeGrain * kLargeGrain;
}

// Gives every cached block back to the driver (when cudaMalloc runs out). cudaFree waits for the
// whole device while holding the driver's lock; with NCCL kernels in flight that wait for peers
// (whose own CUDA calls may then need that lock) it can hang, as NCCL's documentation warns. So
// the device is drained first, collective streams included, without the lock: every rank queues
// its collectives in the same order, so those in flight here complete. Then nothing runs when
// cudaFree is called, and every cached block's last use is done.
void release_cached() {
    cudaCheck(cudaDeviceSynchronize());
    for (auto &kv : free_blocks)
        for (void *p : kv.second) cudaCheck(cudaFree(p));
    free_blocks.clear();
    bytes_cached = 0;
}

}  // namespace

void *cuda_alloc_uninit(size_t bytes) {
    std::lock_guard<std::mutex> lock(alloc_mutex);
    const size_t cls = size_class(bytes);
    void *p = nullptr;
    auto it = free_blocks.find(cls);
    if (it != free_blocks.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        bytes_cached -= cls;
    } else if (cudaMalloc(&p, cls) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the out-of-memory error, free the cache and retry once
        release_cached();
        cudaError_t e = cudaMalloc(&p, cls);
        if (e != cudaSuccess)
            err_fatal("cudaMalloc(%zu bytes) failed: %s (%.1f MiB in use)", cls, cudaGetErrorString(e),
                      bytes_in_use / 1048576.0);
    }
    live_blocks[p] = cls;
    bytes_in_use += cls;
    if (bytes_in_use > peak_in_use) peak_in_use = bytes_in_use;
    if (bytes_in_use + bytes_cached > peak_held) peak_held = bytes_in_use + bytes_cached;
    return p;
}

double cuda_fetch_result(void) {
    cudaCheck(cudaMemcpyAsync(cuda_ctx.result_host, cuda_ctx.result_dev, sizeof(CudaResult), cudaMemcpyDeviceToHost,
                              cuda_stream()));
    cudaCheck(cudaStreamSynchronize(cuda_stream()));
    return cuda_ctx.result_host->value;
}

extern "C" {

void *cuda_alloc(size_t bytes) {
    void *p = cuda_alloc_uninit(bytes);
    if (bytes) cudaCheck(cudaMemsetAsync(p, 0, bytes, cuda_stream()));
    return p;
}

void cuda_free(void *p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(alloc_mutex);
    auto it = live_blocks.find(p);
    if (it == live_blocks.end()) err_fatal("cuda_free: %p was not allocated by cuda_alloc", p);
    bytes_in_use -= it->second;
    bytes_cached += it->second;
    free_blocks[it->second].push_back(p);
    live_blocks.erase(it);
}

double cuda_peak_mem_mib(void) {
    std::lock_guard<std::mutex> lock(alloc_mutex);
    return peak_in_use / 1048576.0;
}

void cuda_mem_held(double *held, double *held_peak, double *cached) {
    std::lock_guard<std::mutex> lock(alloc_mutex);
    *held = (double)(bytes_in_use + bytes_cached);
    *held_peak = (double)peak_held;
    *cached = (double)bytes_cached;
}

void cuda_mem_info(size_t *free_bytes, size_t *total_bytes) { cudaCheck(cudaMemGetInfo(free_bytes, total_bytes)); }

// Synchronous like the CPU's memcpy: the caller may reuse host_src (pinned or not) on return.
void cuda_upload(void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cuda_stream()));
    cudaCheck(cudaStreamSynchronize(cuda_stream()));
}

void cuda_download(void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream()));
    cudaCheck(cudaStreamSynchronize(cuda_stream()));
}

void cuda_sync(void) { cudaCheck(cudaStreamSynchronize(cuda_stream())); }

// ---- copies on the copy stream ----
// A ticket names the event recorded after its copy. Events come from a ring: a ticket whose event
// was recorded again by a later copy waits for that later copy, which on the in-order copy stream
// means its own copy is done too (it only waits longer).
namespace {
constexpr int kCopyEvents = 256;
cudaEvent_t copy_events[kCopyEvents], compute_mark;
int next_ticket;

void make_events() {
    if (copy_events[0]) return;
    for (auto &e : copy_events) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&compute_mark, cudaEventDisableTiming));
}

// copies queued from now on start after the kernels queued so far
void copies_after_kernels() {
    cudaCheck(cudaEventRecord(compute_mark, cuda_stream()));
    cudaCheck(cudaStreamWaitEvent(cuda_ctx.copy_stream, compute_mark, 0));
}

int copy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    make_events();
    if (kind == cudaMemcpyDeviceToHost) copies_after_kernels();  // the source is written by kernels queued so far
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, cuda_ctx.copy_stream));
    const int t = next_ticket;
    next_ticket = (next_ticket + 1) % kCopyEvents;
    cudaCheck(cudaEventRecord(copy_events[t], cuda_ctx.copy_stream));
    return t;
}
}  // namespace

int cuda_download_async(void *host_dst, const void *src, size_t bytes) {
    return copy_async(host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

int cuda_upload_async(void *dst, const void *host_src, size_t bytes) {
    return copy_async(dst, host_src, bytes, cudaMemcpyHostToDevice);
}

void cuda_async_wait(int ticket) { cudaCheck(cudaEventSynchronize(copy_events[ticket])); }

void cuda_async_fence(void) {
    if (!copy_events[0]) return;  // nothing was ever copied
    const int last = (next_ticket + kCopyEvents - 1) % kCopyEvents;
    cudaCheck(cudaStreamWaitEvent(cuda_stream(), copy_events[last], 0));
}

void cuda_async_fence_to(int ticket) {
    if (!copy_events[0]) return;
    cudaCheck(cudaStreamWaitEvent(cuda_stream(), copy_events[ticket], 0));
}

void cuda_async_after_kernels(void) {
    make_events();
    copies_after_kernels();
}

void *cuda_compute_stream(void) { return (void *)cuda_ctx.stream; }

int cuda_sm_clock_mhz(void) { return cuda_ctx.sm_clock_mhz; }

int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // no driver or no device: not an error here, just no GPU
        return 0;
    }
    return n;
}

// "major.minor" of a CUDA version number (1000 * major + 10 * minor), or what 0 means
static const char *cuda_version_text(int v, const char *zero, char *buf, size_t len) {
    if (v <= 0) return zero;
    snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
    return buf;
}

const char *cuda_library_versions(void) {
    static char out[1500];
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;  // no driver: the runtime says 0
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    (void)cudaGetLastError();
    char d[32], r[32];
    snprintf(out, sizeof out, "CUDA driver: %s\nCUDA runtime: %s\ncuBLASLt: %s\ncuBLAS grouped GEMM: %s\ncuDNN: %s\nGPUs visible: %d\n",
             cuda_version_text(drv, "none (no NVIDIA driver loaded)", d, sizeof d),
             cuda_version_text(rt, "unknown", r, sizeof r), cuda_cublaslt_version(), cuda_cublas_grouped(),
             cuda_cudnn_version(), cuda_device_count());
    return out;
}

const char *cuda_bind(int device, char *name, size_t len, char *uuid, size_t uuid_len) {
    const char *why = cuda_cublaslt_open();
    if (why) return why;
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    if (name && len) snprintf(name, len, "%s", prop.name);
    for (size_t i = 0; uuid && 2 * i + 2 < uuid_len && i < sizeof prop.uuid.bytes; i++)
        snprintf(uuid + 2 * i, 3, "%02x", (unsigned char)prop.uuid.bytes[i]);
    if (cuda_ctx.stream) return NULL;  // already bound
    // non-blocking: no implicit ordering against the legacy default stream
    cudaCheck(cudaStreamCreateWithFlags(&cuda_ctx.stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&cuda_ctx.copy_stream, cudaStreamNonBlocking));
    cublasCheck(blaslt.cublasLtCreate(&cuda_ctx.lt));
    // sm_80/90 code also runs on sm_86/89 parts, which give a block at most 99 KB
    cudaCheck(cudaDeviceGetAttribute(&cuda_ctx.smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaCheck(cudaDeviceGetAttribute(&cuda_ctx.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    int khz;
    cudaCheck(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    cuda_ctx.sm_clock_mhz = khz / 1000;
    cuda_ctx.workspace_bytes = (size_t)32 << 20;
    cuda_ctx.workspace = cuda_alloc_uninit(cuda_ctx.workspace_bytes);
    cuda_ctx.result_dev = (CudaResult *)cuda_alloc_uninit(sizeof(CudaResult));
    cudaCheck(cudaMallocHost((void **)&cuda_ctx.result_host, sizeof(CudaResult)));
    cudaCheck(cudaMemsetAsync(cuda_ctx.result_dev, 0xff, sizeof(CudaResult), cuda_stream()));  // no token note
    cuda_ctx.result_host->token_note = ~0ull;
    return NULL;
}

}  // extern "C"
