// common: shared by the CUDA backend's translation units (not part of the kernels API).
// Error checks, the backend's device state, the caching allocator's raw interface and the
// warp/block reductions.
#ifndef FSDPC_CUDA_COMMON_CUH
#define FSDPC_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "../../base/err.h"
#include "../../base/log.h"
#include "../backend.h"
}
#include "cuda_backend.h"

// Every CUDA and cuBLASLt call is checked: a failure prints
// "fsdpc: error: <call> failed: <reason> (file:line)" and aborts all ranks.
#define cudaCheck(call) cuda_check_at((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)
// after a kernel launch: launch-configuration errors surface here, not at some later call
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())

static inline void cuda_check_at(cudaError_t e, const char *call, const char *file, int line) {
    if (e != cudaSuccess) err_fatal_at(file, line, "%s failed: %s", call, cudaGetErrorString(e));
}

// cuBLASLt is opened at run time (cuda_cublaslt_open, matmul.cu), as cuDNN is: a CPU run does not
// pay for loading its 500 MB, and ./fsdpc starts where it is not installed. Its calls go through
// this table.
#define CUBLASLT_FUNCS(X)                                                                                    \
    X(cublasLtGetVersion) X(cublasLtGetStatusString) X(cublasLtCreate) X(cublasLtMatmulDescCreate)          \
        X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)        \
            X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) \
                X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)
struct CublasLtApi {
#define CUBLASLT_MEMBER(f) decltype(&::f) f;
    CUBLASLT_FUNCS(CUBLASLT_MEMBER)
#undef CUBLASLT_MEMBER
};
extern CublasLtApi blaslt;
// NULL once blaslt is filled, else why not (a line naming the library and LD_LIBRARY_PATH)
const char *cuda_cublaslt_open(void);

static inline void cublas_check_at(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) err_fatal_at(file, line, "%s failed: %s", call, blaslt.cublasLtGetStatusString(s));
}

// What the host waits for: a reduction's result, with the token check's note (tokens.cu) riding
// along, so reading the note costs no sync of its own.
struct CudaResult {
    double value;
    unsigned long long token_note;  // index << 32 | id of the first id out of range; ~0: none
};

// Device state set up by cuda_bind (memory.cu).
struct CudaContext {
    cudaStream_t stream;     // every op is queued here, in order
    cudaStream_t copy_stream;  // the *_async copies
    cublasLtHandle_t lt;
    void *workspace;         // cuBLASLt workspace, reused by every matmul
    size_t workspace_bytes;
    CudaResult *result_dev;  // reductions the host waits for land here...
    CudaResult *result_host;  // ...and are copied to this pinned one
    int compute;             // a CudaCompute mode (backend.h): fp32 or bf16 tensor-core operands
    int params_bf16;         // parameters (kern_params_bf16) are bf16
    int acts_bf16;           // activations (kern_acts_bf16) are bf16
    int smem_per_block;      // bytes of shared memory a block may opt in to (tiles are picked to fit)
    int cc_major;            // compute capability: 8 Ampere/Ada, 9 Hopper, 10+ Blackwell
    int sm_clock_mhz;        // peak SM clock (tells an H100 PCIe from an SXM)
};
extern CudaContext cuda_ctx;

static inline cudaStream_t cuda_stream() { return cuda_ctx.stream; }
static inline size_t cuda_smem_per_block() { return (size_t)cuda_ctx.smem_per_block; }

// A block from the caching allocator without the zero fill (scratch that is fully written
// before it is read). Released with cuda_free.
void *cuda_alloc_uninit(size_t bytes);

// Waits for the stream and returns the double a reduction kernel left in cuda_ctx.result_dev->value.
double cuda_fetch_result(void);

// A per-op scratch buffer that grows on demand. Safe to regrow while earlier work that uses the
// old block is still queued: the allocator hands blocks out again only in stream order.
struct ScratchBuf {
    void *ptr = nullptr;
    size_t cap = 0;
    int track = -1;  // the memory tracker's category it is counted in (kern_mem_track), or -1: none
    void *get(size_t bytes) {
        if (bytes > cap) {
            if (track >= 0) kern_mem_untrack(ptr);
            cuda_free(ptr);
            ptr = cuda_alloc_uninit(bytes);
            if (track >= 0) kern_mem_track(ptr, bytes, (KernMem)track);
            cap = bytes;
        }
        return ptr;
    }
};

// A parameter tensor as a kernel reads it: fp32, or bf16 (cuda_ctx.params_bf16) widened on load.
// The dtype is one flag for the whole launch, so the branch costs no divergence.
struct Param {
    const void *p;
    int bf16;
    __device__ __forceinline__ float operator[](size_t i) const {
        return bf16 ? __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16) : ((const float *)p)[i];
    }
};
static inline Param param(const void *p) { return {p, cuda_ctx.params_bf16}; }

// fp32 to bf16, round to nearest even; NaN must not round into Inf, so it keeps its top bits with
// the quiet bit forced
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u)
                                           : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float bf16_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

// An activation tensor as a kernel reads and writes it (kernels.h kern_acts_bf16): fp32, or bf16
// widened on load and rounded on store. Like Param, one flag for the whole launch. x[i] reads as
// a float and takes a float; x + i is the tensor from element i on.
struct ActRef {
    void *p;
    size_t i;
    int bf16;
    __device__ __forceinline__ operator float() const {
        return bf16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
    }
    __device__ __forceinline__ const ActRef &operator=(float v) const {
        if (bf16) ((uint16_t *)p)[i] = f32_to_bf16(v);
        else ((float *)p)[i] = v;
        return *this;
    }
    __device__ __forceinline__ const ActRef &operator=(const ActRef &o) const { return *this = (float)o; }
    __device__ __forceinline__ const ActRef &operator+=(float v) const { return *this = (float)*this + v; }
    __device__ __forceinline__ const ActRef &operator*=(float v) const { return *this = (float)*this * v; }
};
struct Act {
    void *p;
    int bf16;
    __device__ __forceinline__ ActRef operator[](size_t i) const { return {p, i, bf16}; }
    __host__ __device__ __forceinline__ Act operator+(size_t i) const {
        return {(char *)p + i * (bf16 ? sizeof(uint16_t) : sizeof(float)), bf16};
    }
};
// Eight consecutive activations from element i on, in 16-byte accesses (one for bf16, two for
// fp32); the launcher has checked that x.p is 16-byte aligned and i is a multiple of 8. Element
// i is the low half of a bf16 pair (little-endian).
__device__ __forceinline__ void act_load8(Act x, size_t i, float (&v)[8]) {
    if (x.bf16) {
        const uint4 u = *(const uint4 *)((const uint16_t *)x.p + i);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) v[2 * j] = __uint_as_float(w[j] << 16), v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        return;
    }
    const float4 a = *(const float4 *)((const float *)x.p + i), b = *(const float4 *)((const float *)x.p + i + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
    return (uint32_t)f32_to_bf16(lo) | (uint32_t)f32_to_bf16(hi) << 16;
}
__device__ __forceinline__ void act_store8(Act x, size_t i, const float (&v)[8]) {
    if (x.bf16) {
        *(uint4 *)((uint16_t *)x.p + i) = uint4{bf16_pair(v[0], v[1]), bf16_pair(v[2], v[3]), bf16_pair(v[4], v[5]),
                                                bf16_pair(v[6], v[7])};
        return;
    }
    *(float4 *)((float *)x.p + i) = float4{v[0], v[1], v[2], v[3]};
    *(float4 *)((float *)x.p + i + 4) = float4{v[4], v[5], v[6], v[7]};
}
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// activations p; or an operand of dtype dt (fp32 unless dt is KERN_ACT and activations are bf16)
static inline Act act(const void *p) { return {const_cast<void *>(p), cuda_ctx.acts_bf16}; }
static inline Act act(const void *p, KernDtype dt) {
    return {const_cast<void *>(p), dt == KERN_ACT && cuda_ctx.acts_bf16};
}
static inline size_t act_bytes() { return cuda_ctx.acts_bf16 ? sizeof(uint16_t) : sizeof(float); }

// ---- reductions ----

struct SumOp {
    template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_xor(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ float2 shfl_xor(float2 v, int o) {
    return make_float2(shfl_xor(v.x, o), shfl_xor(v.y, o));
}

// Butterfly reduction over aligned groups of WIDTH lanes; all 32 lanes must call it.
template <int WIDTH = 32, class T, class Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
    for (int o = WIDTH / 2; o > 0; o /= 2) v = op(v, shfl_xor(v, o));
    return v;
}

// Reduction over the whole block (blockDim.x a multiple of 32, every thread calls it); every
// thread gets the same value, combined in a fixed order. sh: 32 elements of shared memory.
template <class T, class Op> __device__ T block_reduce(T v, Op op, T *sh) {
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_reduce(v, op);
    __syncthreads();  // sh may still be read by the previous call
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    T r = sh[0];
    for (int i = 1; i < nw; i++) r = op(r, sh[i]);
    return r;
}

// Grid for a grid-stride loop over n items with `threads` per block.
static inline unsigned grid_for(size_t n, int threads, unsigned max_blocks = 65536) {
    const size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < max_blocks ? (b ? b : 1) : max_blocks);
}

#endif
