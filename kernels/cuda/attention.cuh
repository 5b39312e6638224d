// attention.cuh: shared by the fp32 attention kernels (attention.cu) and their bf16 tensor-core
// form (attention_tc.cu, used under --precision bf16). Both save the same row statistics, so
// either backward runs after either forward.
#ifndef FSDPC_CUDA_ATTENTION_CUH
#define FSDPC_CUDA_ATTENTION_CUH

#include <algorithm>
#include <type_traits>

#include "../../base/rng.h"
#include "common.cuh"

// A head dim padded with zeros to HDP (zeros change no dot product).
template <int P> struct HeadDim {
    static constexpr int HDP = P;
};

// Calls f(HeadDim<P>()) with hd padded to P in {32, 64, 128}.
template <class F> void with_head_dim(int hd, F &&f) {
    if (hd <= 0 || hd > 128) err_fatal("attention: head dim %d is not supported by the CUDA kernels (1..128)", hd);
    if (hd <= 32)
        f(HeadDim<32>());
    else if (hd <= 64)
        f(HeadDim<64>());
    else
        f(HeadDim<128>());
}

static inline void check_heads(int H, int KV) {
    if (KV <= 0 || H % KV) err_fatal("attention: %d heads are not a multiple of %d kv heads", H, KV);
}

// Dropout on the probabilities (kernels.h), resolved on the host and passed to the kernels by
// value. Each kernel has a DROP template flag, so the forms without dropout are unchanged; with it
// the mask is regenerated from the hash wherever P is (forward and both backward kernels).
struct AttDrop {
    uint64_t key, sample0;
    uint32_t threshold;  // rng_dropout_threshold(p)
    float scale;         // 1 / (1 - p)
    uint64_t head_off;   // head0 * Tq * Tk: head h's mask indices are those of global head head0 + h
};

// d resolved into *a; false when there is no dropout (NULL or p == 0)
static inline bool att_drop_from(const KernDropout *d, int Tq, int Tk, AttDrop *a) {
    *a = AttDrop{0, 0, 0, 1.0f, 0};
    if (!d || !(d->p > 0.0f)) return false;
    *a = AttDrop{d->key, d->sample0, rng_dropout_threshold(d->p), 1.0f / (1.0f - d->p),
                 (uint64_t)d->head0 * (uint64_t)Tq * (uint64_t)Tk};
    return true;
}

// Calls f(std::true_type()) when on (dropout, small tiles), else f(std::false_type()).
template <class F> void with_flag(bool on, F &&f) {
    if (on)
        f(std::true_type());
    else
        f(std::false_type());
}

// Document masking (kernels.h): ks, the first key each query of a row sees (T, non-decreasing).
// Returns the first query from q0 on whose document starts after key kmax: of the queries from q0
// on, only those before it can see kmax. Every thread of a block finds the same answer.
__device__ __forceinline__ int att_query_end(const int32_t *ks, int q0, int T, int kmax) {
    int lo = q0, hi = T;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ks[mid] > kmax) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// The first key the query at index t (position pos) sees: its document's start (ks: NULL without
// documents) or, with a sliding window (> 0), the oldest key of its window, whichever is later.
// The kernels' DOCS flag covers both masks; both are non-decreasing along a row.
__device__ __forceinline__ int att_first(const int32_t *ks, int t, int pos, int window) {
    const int lo = ks ? ks[t] : 0;
    return window > 0 && pos - window + 1 > lo ? pos - window + 1 : lo;
}

// The end of the queries (from q0 on, training form) that can see some key <= kmax: past the
// document of kmax, and under a window past kmax + window - 1, none does.
__device__ __forceinline__ int att_query_stop(const int32_t *ks, int q0, int T, int kmax, int window) {
    const int end = ks ? att_query_end(ks, q0, T, kmax) : T;
    return window > 0 && kmax + window < end ? kmax + window : end;
}

// The blocks per SM a kernel's launch bounds ask for: 2 where two blocks' smem_bytes of shared
// memory fit one SM (plus the 1 KB per block the hardware reserves; 228 KB on sm_90, 164 KB on
// sm_80 and used for the parts that run its code), else 1. Without it ptxas picks its own register
// target for occupancy, and spills a few registers to reach it. The kernels take their shared
// memory as a defaulted template argument SMEM: it feeds their launch bounds, and shows in their
// names in the ptxas report, which test/gpu/test_ptxas.sh reads to check spills and blocks per SM.
constexpr int att_min_blocks(size_t smem_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr size_t sm_smem = 228 << 10;
#else
    constexpr size_t sm_smem = 164 << 10;
#endif
    return 2 * (smem_bytes + 1024) <= sm_smem ? 2 : 1;
}

// Launches an attention kernel with smem_bytes of dynamic shared memory. The callers pick tiles
// that fit the device; this catches a shape that fits none.
template <class... KArgs, class... Args>
void att_launch(void (*kernel)(KArgs...), dim3 grid, int threads, size_t smem_bytes, Args... args) {
    if (smem_bytes > cuda_smem_per_block())
        err_fatal("attention: a kernel needs %zu KB of shared memory per block, but this GPU allows %zu KB "
                  "(cudaDevAttrMaxSharedMemoryPerBlockOptin); a smaller head dim would fit",
                  smem_bytes >> 10, cuda_smem_per_block() >> 10);
    // more than 48 KB of dynamic shared memory needs an opt-in per kernel
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
    kernel<<<grid, threads, smem_bytes, cuda_stream()>>>(args...);
    cudaCheckLaunch();
}

// Whether the tensor-core kernels fit the device's shared memory at head dim hd; where they do
// not (head dim 128 on sm_86/89's 99 KB), attention runs the fp32 kernels instead.
bool att_tc_fits(int hd);
// The tensor-core kernels. lse (B, H, Tq) is the forward's saved row log-sum-exp of the scaled
// scores and delta (B, H, T) = rowsum(dout * out); shapes as in kernels.h. kstart: NULL, or the
// document masks of kernels.h (training form); window: kernels.h's sliding window (0: none). drop: NULL, or the dropout of att_drop_from.
void att_tc_fwd(Act out, float *lse, Act q, Act k, Act v, int B, int Tq, int Tk, int H, int KV, int hd,
                size_t kv_bstride, float scale, const int32_t *kstart, int window, const AttDrop *drop);
void att_tc_bwd(Act dq, Act dk, Act dv, const float *delta, Act dout, const float *lse, Act q, Act k, Act v, int B,
                int T, int H, int KV, int hd, float scale, const int32_t *kstart, int window, const AttDrop *drop);

#endif
