// CPU emulation of the CUDA runtime subset used by kernels/cuda (testing only).
#pragma once
#include <setjmp.h>
#include <ucontext.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "../emu_device.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ emu_shared_memory_must_be_declared_as__shared__T_name_N  // the Makefile rewrites those
#define __constant__  // an ordinary global: device code reads it, as on a GPU

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
// one IEEE rounding each: g++ in an ISO mode (-std=c++20) does not contract them into an FMA
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
using std::min;
using std::max;

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef void *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
#define cudaStreamNonBlocking 1
struct cudaUUID_t { char bytes[16]; };
struct cudaDeviceProp { char name[256]; cudaUUID_t uuid; };

namespace emu {
// Every emulated GPU thread of a block is a fiber (ucontext) on the calling thread; a fiber runs
// until it waits at a barrier or ends, then the next runnable one in index order runs. Switching
// fibers costs far less than OS threads, and a block that can make no progress (a barrier some
// threads never reach) is reported instead of hanging. A fiber is started once, through ucontext,
// and then lives on: it runs thread after thread, parking between them, and switches with
// _setjmp/_longjmp, which (unlike getcontext/setcontext) make no signal-mask system call: two
// system calls per emulated thread were most of the emulator's time.
struct Fiber;
inline Fiber *cur;  // the running fiber
inline jmp_buf sched_jb;

class Barrier {
    unsigned expected, arrived = 0;
public:
    unsigned long phase = 0;
    explicit Barrier(unsigned n = 32) : expected(n) {}
    void arrive_and_wait();
    void arrive_and_drop() {  // an ended thread: later phases expect one fewer
        if (--expected && arrived == expected) arrived = 0, phase++;
    }
};

struct Ctx {
    dim3 threadIdx, blockIdx, blockDim, gridDim;
    Barrier *block_bar, *warp_bar;
    uint64_t *xbuf;
};
inline Ctx ctx;  // the running fiber's ids and barriers

struct Fiber {
    ucontext_t uc;
    jmp_buf jb;  // where it waits at a barrier, or is parked between threads
    bool started;  // its ucontext ran: it lives on in fiber_main
    Ctx ctx;
    Barrier *wait_on;
    unsigned long wait_phase;
    bool done;
    std::unique_ptr<char[]> stack;
};
inline std::function<void()> body;  // the kernel call every fiber of a launch makes

inline void Barrier::arrive_and_wait() {
    if (++arrived == expected) {
        arrived = 0, phase++;
        return;
    }
    cur->wait_on = this, cur->wait_phase = phase;
    if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1);
}

// a fiber's life: one emulated thread after another, parked in between (cur is the fiber itself
// on every return here: only the scheduler jumps into a fiber)
inline void fiber_main() {
    for (;;) {
        body();
        cur->ctx.block_bar->arrive_and_drop();
        cur->ctx.warp_bar->arrive_and_drop();
        cur->done = true;
        if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1);
    }
}

inline float *dyn_smem;
inline unsigned long block_serial;  // counts the blocks run
// A kernel's `__shared__ T name[N]` (rewritten by the Makefile): NaN bytes at each block's start,
// like the dynamic shared memory, so reading an element no thread of this block wrote shows.
template <class T, int N, int Line> T (&shared_array())[N] {
    static T a[N];
    static unsigned long serial = ~0ul;
    if (serial != block_serial) serial = block_serial, memset((void *)a, 0xff, sizeof a);
    return a;
}
inline size_t max_dyn_smem = 48 * 1024;  // set by cudaFuncSetAttribute (not per kernel here)
inline long launches;
}

// fibers switch only at barriers, so a read-modify-write is atomic here
static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    const unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}
static inline void __syncthreads() { emu::ctx.block_bar->arrive_and_wait(); }
namespace emu { inline unsigned lane() { return ctx.threadIdx.x % 32; } }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::ctx.warp_bar->arrive_and_wait(); }

// every lane of the warp publishes v, then reads the value of lane src_of(its lane)
template <class T, class L> static inline T emu_shfl(T v, L src_of) {
    static_assert(sizeof(T) <= 8, "");
    const unsigned tid = emu::ctx.threadIdx.x, lane = tid % 32;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    emu::ctx.xbuf[tid] = bits;
    emu::ctx.warp_bar->arrive_and_wait();
    bits = emu::ctx.xbuf[tid - lane + (src_of(lane) & 31)];
    emu::ctx.warp_bar->arrive_and_wait();
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
template <class T> static inline T emu_shfl_xor(T v, int o) {
    return emu_shfl(v, [o](unsigned lane) { return lane ^ (unsigned)o; });
}
static inline float __shfl_xor_sync(unsigned, float v, int o) { return emu_shfl_xor(v, o); }
static inline double __shfl_xor_sync(unsigned, double v, int o) { return emu_shfl_xor(v, o); }
static inline int __shfl_sync(unsigned, int v, int src) {
    return emu_shfl(v, [src](unsigned) { return (unsigned)src; });
}
static inline float __shfl_sync(unsigned, float v, int src) {
    return emu_shfl(v, [src](unsigned) { return (unsigned)src; });
}

namespace emu {
struct Cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    Cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), smem(s), stream(st) {}
};
template <class F> struct Launch {
    Cfg cfg;
    const char *name;
    F f;
    // a pointer argument must be device memory (or null), as on a GPU
    template <class T> static void check_arg(T a) {
        if constexpr (std::is_pointer_v<T>)
            if (a && !emu_is_dev(a)) { fprintf(stderr, "emu: kernel argument %p is not device memory\n", (const void *)a); abort(); }
    }
    // a generic kernel (one whose last argument is a functor) is named with the functor too, so
    // the roofline model's per-op split tells its uses apart
    template <class... A> const char *op_name() {
        using Last = std::tuple_element_t<sizeof...(A) ? sizeof...(A) - 1 : 0, std::tuple<A..., int>>;
        if constexpr (sizeof...(A) == 0 || !std::is_class_v<Last>) return name;
        else {
            static const std::string full = [&] {
                char *d = abi::__cxa_demangle(typeid(Last).name(), nullptr, nullptr, nullptr);
                std::string s = std::string(name) + " " + (d ? d : typeid(Last).name());
                free(d);
                return s;
            }();
            return full.c_str();
        }
    }
    template <class... A> void operator()(A... args) {
        (check_arg(args), ...);
        EmuOp op(emu_sid(cfg.stream), op_name<A...>());
        if (cfg.block.y != 1 || cfg.block.z != 1 || cfg.block.x % 32 || cfg.block.x > 1024) abort();
        if (cfg.smem > max_dyn_smem) { fprintf(stderr, "emu: dynamic smem %zu > opt-in %zu\n", cfg.smem, max_dyn_smem); abort(); }
        if (cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x == 0) abort();
        launches++;
        const unsigned nt = cfg.block.x;
        const size_t nblocks = (size_t)cfg.grid.x * cfg.grid.y * cfg.grid.z;
        // 256-byte aligned like the hardware's dynamic shared memory (WMMA needs 32)
        std::unique_ptr<float[]> sm_store(cfg.smem ? new float[cfg.smem / 4 + 64] : nullptr);
        float *sm = sm_store ? (float *)(((uintptr_t)sm_store.get() + 255) & ~(uintptr_t)255) : nullptr;
        dyn_smem = sm;
        constexpr size_t kStack = 256 << 10;
        static std::vector<Fiber> fibers(1024);
        std::vector<uint64_t> xb(nt);
        body = [&] { f(args...); };
        // Blocks run one at a time and threads until they wait, so a missing barrier or a block
        // reading another block's output would go unseen in one fixed order; the order flips
        // between launches (blocks) and blocks (threads), so each such dependency breaks somewhere.
        // Warps also drift apart, as on a GPU: in a block, either every pass over the threads
        // skips a pseudo-random half of the warps, or one warp runs only when no other can.
        const bool blocks_back = launches % 2;
        uint64_t rng = 0x9E3779B97F4A7C15ull * launches;
        auto next_rand = [&rng] { return (unsigned)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 32); };
        for (size_t i = 0; i < nblocks; i++) {
            const size_t blk = blocks_back ? nblocks - 1 - i : i;
            const bool threads_back = (i + launches / 2) % 2;
            const unsigned r = next_rand();
            const bool starve = r >> 31;
            const unsigned starved = r % ((nt + 31) / 32);
            if (cfg.smem) for (size_t j = 0; j < cfg.smem / 4; j++) sm[j] = NAN;  // uninitialised
            block_serial++;
            Barrier bb(nt), wb[32];
            for (unsigned t = 0; t < nt; t++) {
                Fiber &fb = fibers[t];
                if (!fb.stack) fb.stack.reset(new char[kStack]);
                fb.ctx = Ctx{dim3(t, 0, 0), dim3(blk % cfg.grid.x, blk / cfg.grid.x % cfg.grid.y, blk / cfg.grid.x / cfg.grid.y),
                             cfg.block, cfg.grid, &bb, &wb[t / 32], xb.data()};
                fb.wait_on = nullptr, fb.done = false;
                if (fb.started) continue;
                getcontext(&fb.uc);
                fb.uc.uc_stack.ss_sp = fb.stack.get();
                fb.uc.uc_stack.ss_size = kStack;
                fb.uc.uc_link = nullptr;
                makecontext(&fb.uc, fiber_main, 0);
            }
            for (unsigned left = nt, everyone = 0; left;) {
                bool progress = false;
                const unsigned warps_run = everyone ? ~0u : starve ? ~(1u << starved) : next_rand();
                for (unsigned k = 0; k < nt; k++) {
                    const unsigned t = threads_back ? nt - 1 - k : k;
                    Fiber &fb = fibers[t];
                    if (!(warps_run >> (t / 32) & 1u)) continue;
                    if (fb.done || (fb.wait_on && fb.wait_on->phase == fb.wait_phase)) continue;
                    fb.wait_on = nullptr;
                    cur = &fb, ctx = fb.ctx;
                    if (!_setjmp(sched_jb)) {  // back here when the fiber waits or ends
                        if (fb.started) _longjmp(fb.jb, 1);
                        fb.started = true;
                        setcontext(&fb.uc);
                    }
                    progress = true;
                    left -= fb.done;
                }
                if (!progress && everyone) { fprintf(stderr, "emu: block %zu deadlocked: threads wait at a barrier others never reach\n", blk); abort(); }
                everyone = !progress;  // the warps that could run were skipped: run them all
            }
        }
    }
};
template <class F> Launch<F> make_launch(Cfg c, const char *name, F f) { return Launch<F>{c, name, f}; }
}
// named with its source file, which tells the roofline model attention kernels from the rest
#define emu_launch(K, ...) emu::make_launch(emu::Cfg(__VA_ARGS__), "kernel " #K " (" __FILE__ ")", [=](auto... a) { K(a...); })

static inline const char *cudaGetErrorString(cudaError_t) { return "emu error"; }
static inline cudaError_t cudaGetLastError() { return 0; }
// FSDPC_EMU_GPU_MEM_MIB: the emulated GPU's memory in MiB (default 80 GiB, an H100's; the
// emulation's address space holds 32 GiB); cudaMalloc past it fails as on a full GPU
static inline size_t emu_gpu_mem_total() {
    const char *e = getenv("FSDPC_EMU_GPU_MEM_MIB");
    return (e ? (size_t)atoll(e) : (size_t)80 << 10) << 20;
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = emu_gpu_mem_total();
    *free_b = emu_dev_used() < *total ? *total - emu_dev_used() : 0;
    return 0;
}
// FSDPC_EMU_MALLOC_RETRY_AFTER=N: from the Nth cudaMalloc on, each first try fails as if the GPU
// were full and the next try succeeds, so the caching allocator's out-of-memory retry runs on
// every allocation, wherever the program stands (collectives in flight, copies pending)
static inline bool emu_malloc_fails_once() {
    static const char *e = getenv("FSDPC_EMU_MALLOC_RETRY_AFTER");
    static long calls;
    static bool failed;
    if (!e || ++calls < atol(e) || failed) return failed = false;
    return failed = true;
}
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    if (emu_malloc_fails_once() || emu_dev_used() + n > emu_gpu_mem_total()) {  // said, so tests can tell the allocator's retry ran
        fprintf(stderr, "emu: cudaMalloc(%zu bytes) fails: %.1f of %zu MiB in use\n", n, emu_dev_used() / 1048576.0,
                emu_gpu_mem_total() >> 20);
        return cudaErrorMemoryAllocation;
    }
    if (!(*p = emu_dev_alloc(n))) return cudaErrorMemoryAllocation;
    EmuDeviceWork work;
    memset(*p, 0xff, n);  // not zeroed, like real device memory
    return 0;
}
static inline cudaError_t cudaMallocHost(void **p, size_t n) { return (*p = emu_host_alloc(n)) ? 0 : cudaErrorMemoryAllocation; }
static inline cudaError_t cudaFree(void *p) {  // the memory counts as free; its addresses are never reused
    if (p && !emu_dev_free(p)) { fprintf(stderr, "emu: cudaFree(%p) of memory not from cudaMalloc\n", p); abort(); }
    return 0;
}
static inline cudaError_t cudaDeviceSynchronize() { emu_device_sync(); return 0; }
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (n && !emu_is_dev(p)) { fprintf(stderr, "emu: cudaMemsetAsync on host memory %p\n", p); abort(); }
    EmuOp op(emu_sid(s), "cudaMemsetAsync");
    emu_op_cost((double)n, 0, 0);
    memset(p, v, n);
    return 0;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    // the direction must match where the pointers live
    if (n && ((k == cudaMemcpyDeviceToHost) == (bool)emu_is_dev(d) || (k == cudaMemcpyHostToDevice) == (bool)emu_is_dev(s))) {
        fprintf(stderr, "emu: cudaMemcpyAsync kind %d from %p (%s) to %p (%s)\n", (int)k, s, emu_is_dev(s) ? "device" : "host",
                d, emu_is_dev(d) ? "device" : "host");
        abort();
    }
    if (!n) return 0;
    EmuOp op(emu_sid(st), "cudaMemcpyAsync");
    emu_op_cost(k == cudaMemcpyDeviceToDevice ? 2.0 * n : (double)n, 0, 0);  // device bytes read and written
    if (k == cudaMemcpyDeviceToDevice) memmove(d, s, n);
    else emu_op_copy(d, s, n, k == cudaMemcpyDeviceToHost);
    if (k == cudaMemcpyDeviceToHost) emu_reads_back++;
    return 0;
}
// work runs when queued; emu_device.h's clocks say whether it was ordered as a GPU needs
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { emu_stream_sync(emu_sid(s)); return 0; }
typedef void *cudaEvent_t;
#define cudaEventDefault 0
#define cudaEventDisableTiming 2
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = emu_event_new(); return 0; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { emu_event_record(e, emu_sid(s)); return 0; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) { emu_stream_wait_event(emu_sid(s), e); return 0; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { emu_event_sync(e); return 0; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = emu_event_elapsed_ms(a, b); return 0; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = (void *)(intptr_t)emu_stream_new(); return 0; }
// the versions a CUDA 13.0 runtime and driver report (fsdpc --version)
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
// FSDPC_EMU_GPUS emulated GPUs per node (default 8); they all share the one emulated memory
static inline cudaError_t cudaGetDeviceCount(int *n) { const char *e = getenv("FSDPC_EMU_GPUS"); *n = e ? atoi(e) : 8; return 0; }
static inline cudaError_t cudaSetDevice(int d) { int n; cudaGetDeviceCount(&n); return d >= 0 && d < n ? 0 : 101; }
// a device's UUID: its index on the emulated machine FSDPC_EMU_GPU_ID (tests pose as ranks that
// each see their own GPU, or all the same one)
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    const char *name = getenv("FSDPC_EMU_GPU_NAME");
    snprintf(p->name, sizeof p->name, "%s", name ? name : "CPU emulation");
    memset(&p->uuid, 0, sizeof p->uuid);
    const char *id = getenv("FSDPC_EMU_GPU_ID");
    snprintf(p->uuid.bytes, sizeof p->uuid.bytes, "%s:%d", id ? id : "0", d);
    return 0;
}
// FSDPC_EMU_SMEM_KB: the shared memory a block may opt in to (default 227 KB, an H100's; an
// A100 has 163, sm_86/89 parts 99)
enum cudaDeviceAttr { cudaDevAttrClockRate = 13, cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
static inline int emu_smem_optin() {
    const char *e = getenv("FSDPC_EMU_SMEM_KB");
    return (e ? atoi(e) : 227) * 1024;
}
// FSDPC_EMU_GPU_NAME, FSDPC_EMU_SM_CLOCK_MHZ, FSDPC_EMU_CC_MAJOR: what the device says it is
// (default "CPU emulation", and an H100 SXM's 1980 MHz and compute capability 9), to test what
// fsdpc makes of real parts' answers
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    const char *clock = getenv("FSDPC_EMU_SM_CLOCK_MHZ"), *cc = getenv("FSDPC_EMU_CC_MAJOR");
    if (a == cudaDevAttrMaxSharedMemoryPerBlockOptin) *v = emu_smem_optin();
    else if (a == cudaDevAttrComputeCapabilityMajor) *v = cc ? atoi(cc) : 9;
    else if (a == cudaDevAttrClockRate) *v = (clock ? atoi(clock) : 1980) * 1000;  // in kHz
    else abort();
    return 0;
}
template <class T> cudaError_t cudaFuncSetAttribute(T *, cudaFuncAttribute, int v) {
    if (v > emu_smem_optin()) { fprintf(stderr, "emu: %d bytes of smem exceed the device's %d\n", v, emu_smem_optin()); abort(); }
    emu::max_dyn_smem = v > 48 * 1024 ? v : 48 * 1024;
    return 0;
}
#define threadIdx (emu::ctx.threadIdx)
#define blockIdx (emu::ctx.blockIdx)
#define blockDim (emu::ctx.blockDim)
#define gridDim (emu::ctx.gridDim)
#define cudaHostAllocDefault 0
static inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return cudaMallocHost(p, n); }
static inline cudaError_t cudaFreeHost(void *p) {
    if (p && !emu_host_free(p)) { fprintf(stderr, "emu: cudaFreeHost(%p) of memory not from cudaHostAlloc\n", p); abort(); }
    return 0;
}
