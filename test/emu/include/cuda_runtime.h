// CPU emulation of the CUDA runtime subset used by kernels/cuda (testing only).
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 { float x, y; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
using std::min;
using std::max;

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef void *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
#define cudaStreamNonBlocking 1
struct cudaDeviceProp { char name[256]; };

namespace emu {
struct Ctx {
    dim3 threadIdx, blockIdx, blockDim, gridDim;
    std::barrier<> *block_bar, *warp_bar;
    uint64_t *xbuf;
};
inline thread_local Ctx ctx;
inline float *dyn_smem;
inline size_t max_dyn_smem = 48 * 1024;  // set by cudaFuncSetAttribute (not per kernel here)
inline long launches;
}

static inline void __syncthreads() { emu::ctx.block_bar->arrive_and_wait(); }
namespace emu { inline unsigned lane() { return ctx.threadIdx.x % 32; } }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::ctx.warp_bar->arrive_and_wait(); }

template <class T> static inline T emu_shfl_xor(T v, int o) {
    static_assert(sizeof(T) <= 8, "");
    const unsigned tid = emu::ctx.threadIdx.x, lane = tid % 32;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    emu::ctx.xbuf[tid] = bits;
    emu::ctx.warp_bar->arrive_and_wait();
    bits = emu::ctx.xbuf[tid - lane + (lane ^ o)];
    emu::ctx.warp_bar->arrive_and_wait();
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int o) { return emu_shfl_xor(v, o); }
static inline double __shfl_xor_sync(unsigned, double v, int o) { return emu_shfl_xor(v, o); }

namespace emu {
struct Cfg {
    dim3 grid, block;
    size_t smem;
    Cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), smem(s) {}
};
template <class F> struct Launch {
    Cfg cfg;
    F f;
    // one thread per CUDA thread for the whole launch; blocks run one after another
    template <class... A> void operator()(A... args) {
        if (cfg.block.y != 1 || cfg.block.z != 1 || cfg.block.x % 32 || cfg.block.x > 1024) abort();
        if (cfg.smem > max_dyn_smem) { fprintf(stderr, "emu: dynamic smem %zu > opt-in %zu\n", cfg.smem, max_dyn_smem); abort(); }
        if (cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x == 0) abort();
        launches++;
        const unsigned nt = cfg.block.x, nw = nt / 32;
        const size_t nblocks = (size_t)cfg.grid.x * cfg.grid.y * cfg.grid.z;
        // 256-byte aligned like the hardware's dynamic shared memory (WMMA needs 32)
        std::unique_ptr<float[]> sm_store(cfg.smem ? new float[cfg.smem / 4 + 64] : nullptr);
        float *sm = sm_store ? (float *)(((uintptr_t)sm_store.get() + 255) & ~(uintptr_t)255) : nullptr;
        dyn_smem = sm;
        std::barrier<> launch_bar(nt);
        alignas(std::barrier<>) static unsigned char bb_mem[sizeof(std::barrier<>)];
        alignas(std::barrier<>) static unsigned char wb_mem[32][sizeof(std::barrier<>)];
        auto *bb = new (bb_mem) std::barrier<>(nt);
        std::barrier<> *wb[32];
        for (unsigned w = 0; w < nw; w++) wb[w] = new (wb_mem[w]) std::barrier<>(32);
        std::vector<uint64_t> xb(nt);
        std::vector<std::thread> th;
        for (unsigned t = 0; t < nt; t++)
            th.emplace_back([&, t] {
                for (size_t blk = 0; blk < nblocks; blk++) {
                    if (t == 0 && cfg.smem) for (size_t i = 0; i < cfg.smem / 4; i++) sm[i] = NAN;  // uninitialised
                    launch_bar.arrive_and_wait();
                    ctx.threadIdx = dim3(t, 0, 0);
                    ctx.blockIdx = dim3(blk % cfg.grid.x, blk / cfg.grid.x % cfg.grid.y, blk / cfg.grid.x / cfg.grid.y);
                    ctx.blockDim = cfg.block;
                    ctx.gridDim = cfg.grid;
                    ctx.block_bar = bb;
                    ctx.warp_bar = wb[t / 32];
                    ctx.xbuf = xb.data();
                    f(args...);
                    bb->arrive_and_drop();
                    ctx.warp_bar->arrive_and_drop();
                    launch_bar.arrive_and_wait();
                    if (t == 0) {  // fresh barriers for the next block
                        bb->~barrier();
                        bb = new (bb_mem) std::barrier<>(nt);
                        for (unsigned w = 0; w < nw; w++) { wb[w]->~barrier(); wb[w] = new (wb_mem[w]) std::barrier<>(32); }
                    }
                }
            });
        for (auto &x : th) x.join();
        bb->~barrier();
        for (unsigned w = 0; w < nw; w++) wb[w]->~barrier();
    }
};
template <class F> Launch<F> make_launch(Cfg c, F f) { return Launch<F>{c, f}; }
}
#define emu_launch(K, ...) emu::make_launch(emu::Cfg(__VA_ARGS__), [=](auto... a) { K(a...); })

static inline const char *cudaGetErrorString(cudaError_t) { return "emu error"; }
static inline cudaError_t cudaGetLastError() { return 0; }
static inline cudaError_t cudaMalloc(void **p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); memset(*p, 0xff, n); return 0; }
static inline cudaError_t cudaMallocHost(void **p, size_t n) { *p = malloc(n); return 0; }
static inline cudaError_t cudaFree(void *p) { free(p); return 0; }
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memmove(d, s, n); return 0; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
// streams run in order at the call, so events are always complete
typedef void *cudaEvent_t;
#define cudaEventDisableTiming 2
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = (void *)0x1; return 0; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { return e ? 0 : 1; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) { return e ? 0 : 1; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? 0 : 1; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = (void *)0x1; return 0; }
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return 0; }
static inline cudaError_t cudaSetDevice(int) { return 0; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) { strcpy(p->name, "CPU emulation"); return 0; }
template <class T> cudaError_t cudaFuncSetAttribute(T *, cudaFuncAttribute, int v) {
    if (v > 166912) { fprintf(stderr, "emu: %d bytes of smem exceed the A100 limit\n", v); abort(); }
    emu::max_dyn_smem = v > 48 * 1024 ? v : 48 * 1024;
    return 0;
}
#define threadIdx (emu::ctx.threadIdx)
#define blockIdx (emu::ctx.blockIdx)
#define blockDim (emu::ctx.blockDim)
#define gridDim (emu::ctx.gridDim)
#define cudaHostAllocDefault 0
static inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { *p = malloc(n); memset(*p, 0xff, n); return 0; }
static inline cudaError_t cudaFreeHost(void *p) { free(p); return 0; }
