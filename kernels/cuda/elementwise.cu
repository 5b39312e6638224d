// elementwise: RMSNorm (and with the residual add), LayerNorm, the q|k|v split with RoPE, SwiGLU, GELU, bias, embedding, positions, dropout,
// cross-entropy (fused, and vocabulary-parallel), vector ops, AdamW, bf16 and NF4 dequantisation.
// Every reduction runs in a fixed order that depends only on the shapes (no float atomics), so
// results are bitwise reproducible from run to run.
#include <math.h>
#include <stdlib.h>

#include <cub/device/device_radix_sort.cuh>

#include "../../base/rng.h"
#include "../nf4.h"
#include "common.cuh"

namespace {

constexpr int kThreads = 256;

// ---- elementwise maps: one grid-stride kernel, the per-element work as a functor ----

template <class F> __global__ void map_kernel(size_t n, F f) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) f(i);
}

template <class F> void launch_map(size_t n, F f) {
    if (!n) return;
    map_kernel<<<grid_for(n, kThreads), kThreads, 0, cuda_stream()>>>(n, f);
    cudaCheckLaunch();
}

// The same map, eight elements to a thread through f.vec8 (16-byte loads and stores; the same
// arithmetic as f, so the same bits), the last n % 8 one at a time. `vec`: the caller found every
// pointer 16-byte aligned and every row a multiple of 8 elements; else the plain map runs.
template <class F> __global__ void map8_kernel(size_t n, F f) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t j = first; j < n / 8; j += stride) f.vec8(8 * j);
    for (size_t i = n / 8 * 8 + first; i < n; i += stride) f(i);
}

template <class F> void launch_map8(size_t n, F f, bool vec) {
    if (!vec || n < 8) return launch_map(n, f);
    map8_kernel<<<grid_for((n + 7) / 8, kThreads), kThreads, 0, cuda_stream()>>>(n, f);
    cudaCheckLaunch();
}

// h (N, F) from the fused gu (N, 2F): gate then up on each row
struct SwigluFwd {
    Act h, gu;
    int F;
    __device__ void operator()(size_t i) const {
        const size_t at = (i / F) * 2 * F + i % F;
        const float g = gu[at];
        h[i] = g / (1.0f + expf(-g)) * gu[at + F];
    }
    __device__ void vec8(size_t i) const {  // F % 8 == 0: the eight share a row
        const size_t at = (i / F) * 2 * F + i % F;
        float g[8], u[8], o[8];
        act_load8(gu, at, g);
        act_load8(gu, at + F, u);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
        act_store8(h, i, o);
    }
};

struct SwigluBwd {  // i over (N, F): writes d gate and d up of element i into dgu (N, 2F)
    Act dgu, dh, gu;
    int F;
    __device__ void operator()(size_t i) const {
        const size_t at = (i / F) * 2 * F + i % F;
        const float g = gu[at], up = gu[at + F], sig = 1.0f / (1.0f + expf(-g)), d = dh[i];
        dgu[at] = d * up * (sig * (1.0f + g * (1.0f - sig)));  // d silu(g) / dg
        dgu[at + F] = d * (g * sig);
    }
    __device__ void vec8(size_t i) const {
        const size_t at = (i / F) * 2 * F + i % F;
        float g[8], up[8], d[8], dg[8], du[8];
        act_load8(gu, at, g);
        act_load8(gu, at + F, up);
        act_load8(dh, i, d);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float sig = 1.0f / (1.0f + expf(-g[j]));
            dg[j] = d[j] * up[j] * (sig * (1.0f + g[j] * (1.0f - sig)));
            du[j] = d[j] * (g[j] * sig);
        }
        act_store8(dgu, at, dg);
        act_store8(dgu, at + F, du);
    }
};

// ---- mixture of experts (kernels.h): one thread per token for the routing, one per element
// for the rows; every sum runs in a fixed order, as the CPU's ----
struct MoeRoute {  // t over N
    float *probs, *wts;
    int32_t *idx;
    const float *logits;
    int E, K;
    __device__ void operator()(size_t t) const {
        const float *l = logits + t * E;
        float *p = probs + t * E, mx = l[0], sum = 0.0f, kept = 0.0f;
        for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
        for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
        for (int e = 0; e < E; e++) p[e] /= sum;
        unsigned long long taken = 0;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!(taken >> e & 1) && (best < 0 || p[e] > p[best])) best = e;
            taken |= 1ull << best;
            idx[t * K + k] = best;
            kept += wts[t * K + k] = p[best];
        }
        for (int k = 0; k < K; k++) wts[t * K + k] /= kept;
    }
};
struct MoeRouteBwd {  // t over N
    float *dlogits;
    const float *dwts, *probs, *logits, *wts, *gaux;
    const int32_t *idx, *targets;
    float zscale;
    int E, K;
    __device__ void operator()(size_t t) const {
        const float *p = probs + t * E, *l = logits + t * E, *w = wts + t * K, *dw = dwts + t * K;
        const int32_t *ix = idx + t * K;
        float *d = dlogits + t * E, kept = 0.0f, wdw = 0.0f, pd = 0.0f, mx = l[0], s = 0.0f;
        const bool counted = targets[t] >= 0;
        for (int e = 0; e < E; e++) d[e] = gaux && counted ? gaux[e] : 0.0f;
        for (int k = 0; k < K; k++) kept += p[ix[k]], wdw += w[k] * dw[k];
        for (int k = 0; k < K; k++) d[ix[k]] += (dw[k] - wdw) / kept;
        for (int e = 0; e < E; e++) pd += p[e] * d[e];
        for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
        for (int e = 0; e < E; e++) s += expf(l[e] - mx);
        const float zg = counted ? zscale * 2.0f * (mx + logf(s)) : 0.0f;
        for (int e = 0; e < E; e++) d[e] = p[e] * (d[e] - pd) + zg * p[e];
    }
};
struct Jitter {  // i over n: element e0 + i of rows of M per sample
    Act x, src;
    size_t e0, M;
    float j;
    uint64_t key, sample0;
    __device__ void operator()(size_t i) const {
        const size_t e = e0 + i;
        x[i] = src[i] * (1.0f - j + 2.0f * j * rng_unit(rng_dropout_seed(key, sample0 + e / M), e % M));
    }
};
struct MoeGather {  // i over (M, D)
    Act xe, x;
    const int32_t *src;
    int D;
    __device__ void operator()(size_t i) const { xe[i] = x[(size_t)src[i / D] * D + i % D]; }
};
struct MoeGatherBwd {  // i over (N, D)
    Act dx, dxe;
    const int32_t *slot;
    int K, D;
    __device__ void operator()(size_t i) const {
        const size_t t = i / D, c = i % D;
        float v = dxe[(size_t)slot[t * K] * D + c];
        for (int k = 1; k < K; k++) v += dxe[(size_t)slot[t * K + k] * D + c];
        dx[i] = v;
    }
};
struct MoeCombine {  // i over (N, D)
    float *out;
    const float *ye, *wts;
    const int32_t *slot;
    int K, D;
    __device__ void operator()(size_t i) const {
        const size_t t = i / D, c = i % D;
        float v = 0.0f;
        for (int k = 0; k < K; k++) v += wts[t * K + k] * ye[(size_t)slot[t * K + k] * D + c];
        out[i] = v;
    }
};
struct MoeCombineDy {  // i over (N*K, D)
    float *dye;
    const float *dout, *wts;
    const int32_t *slot;
    int K, D;
    __device__ void operator()(size_t i) const {
        const size_t j = i / D, c = i % D;
        dye[(size_t)slot[j] * D + c] = wts[j] * dout[(j / K) * D + c];
    }
};
struct MoeCombineDw {  // j over N*K: one dot product of D, in order
    float *dwts;
    const float *dout, *ye;
    const int32_t *slot;
    int K, D;
    __device__ void operator()(size_t j) const {
        const float *g = dout + (j / K) * D, *y = ye + (size_t)slot[j] * D;
        float dot = 0.0f;
        for (int c = 0; c < D; c++) dot += g[c] * y[c];
        dwts[j] = dot;
    }
};

// GELU: the tanh approximation as x * sigmoid(2u) (see kernels/cpu/elementwise.c), or the exact erf form
constexpr float kGeluC = 0.7978845608028654f, kGeluA = 0.044715f, kGeluR = 0.7071067811865476f,
                kGeluP = 0.3989422804014327f;

struct GeluFwd {
    Act out, inp;
    int erf_form;
    __device__ void operator()(size_t i) const {
        const float x = inp[i];
        if (erf_form) {
            out[i] = 0.5f * x * (1.0f + erff(x * kGeluR));
            return;
        }
        const float u = kGeluC * (x + kGeluA * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));
    }
};

struct GeluBwd {  // dinp may be dout: each element is read before it is written
    Act dinp, dout, inp;
    int erf_form;
    __device__ void operator()(size_t i) const {
        const float x = inp[i];
        if (erf_form) {  // d/dx x Phi(x) = Phi(x) + x phi(x)
            dinp[i] = (float)dout[i] * (0.5f * (1.0f + erff(x * kGeluR)) + x * kGeluP * expf(-0.5f * x * x));
            return;
        }
        const float u = kGeluC * (x + kGeluA * x * x * x);
        const float s = 1.0f / (1.0f + expf(-2.0f * u)), du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
        dinp[i] = (float)dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
    }
};

struct BiasAdd {  // out (N, D) += b
    Act out;
    Param b;
    int D;
    __device__ void operator()(size_t i) const { out[i] += b[i % D]; }
};

struct AddCols {  // out (N, ld) columns [c0, c0 + C) += s * src (N, C)
    Act out;
    const float *src;
    int ld, c0, C;
    float s;
    __device__ void operator()(size_t i) const { out[i / C * ld + c0 + i % C] += s * src[i]; }
};

struct GetCols {  // dst (N, C) = s * src (N, ld) columns [c0, c0 + C)
    float *dst;
    Act src;
    int ld, c0, C;
    float s;
    __device__ void operator()(size_t i) const { dst[i] = s * (float)src[i / C * ld + c0 + i % C]; }
};

struct PositionsFwd {  // out (B, T, D) += wpe[pos0 + t]
    float *out;
    Param wpe;
    int T, D, pos0;
    __device__ void operator()(size_t i) const {
        out[i] += wpe[((size_t)pos0 + (i / D) % T) * D + i % D];
    }
};

struct PositionsBwd {  // dwpe (T, D) += sum over b of dout[b], in b order (the CPU's order)
    float *dwpe;
    const float *dout;
    int B;
    size_t TD;
    __device__ void operator()(size_t i) const {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[b * TD + i];
        dwpe[i] = acc;
    }
};

// One element of the q|k|v layout per thread: idx over (rows, W), W = qd + 2 kvd, rows = (B, T).
// Forward (sign 1): q, k, v from the fused row, q and k rotated at position pos[row] when pos is
// given (per packed document), else pos0 + t. Backward (sign -1): the fused row from dq, dk, dv,
// rotated back. Without tables a plain copy. The rotation (x1, x2) -> (x1 c - x2 s', x2 c + x1 s'),
// s' = sign * s, is the CPU's.
struct QkvRope {
    Act fused, q, k, v;  // the fused row is read (forward) or written (backward)
    const float *cos_t, *sin_t;  // (positions, rot/2), or NULL
    const int32_t *pos;          // (rows) positions, or NULL
    int T, hd, rot, qd, kvd, pos0, per_head;
    float sign;
    __device__ void operator()(size_t idx) const {
        const int W = qd + 2 * kvd, col = (int)(idx % W);
        const size_t bt = idx / W;
        const Act x = fused + bt * W;  // this token's fused row
        Act part;                      // this token's q, k or v row, and the column inside it
        int c, which;
        if (per_head) which = col % (3 * hd) / hd, c = col / (3 * hd) * hd + col % hd;
        else which = col < qd ? 0 : col < qd + kvd ? 1 : 2, c = col - (which ? qd : 0) - (which == 2 ? kvd : 0);
        part = which == 0 ? q + bt * qd : which == 1 ? k + bt * kvd : v + bt * kvd;
        const int d = c % hd;  // the dimension inside its head
        if (!cos_t || which == 2 || d >= rot) {
            if (sign > 0) part[c] = x[col];
            else x[col] = part[c];
            return;
        }
        const int half = rot / 2, i = d % half;
        const size_t at = pos ? (size_t)pos[bt] : (size_t)pos0 + bt % T;
        const float cs = cos_t[at * half + i], sn = sign * sin_t[at * half + i];
        const Act src = sign > 0 ? x + (col - d) : part + (c - d);  // the head being rotated
        const float a = src[i], b = src[i + half];
        const float r = d < half ? a * cs - b * sn : b * cs + a * sn;
        if (sign > 0) part[c] = r;
        else x[col] = r;
    }
    // hd and rot / 2 multiples of 8: the eight share a head, its q, k or v, and a half of the rotation
    __device__ void vec8(size_t idx) const {
        const int W = qd + 2 * kvd, col = (int)(idx % W);
        const size_t bt = idx / W;
        const Act x = fused + bt * W;
        int c, which;
        if (per_head) which = col % (3 * hd) / hd, c = col / (3 * hd) * hd + col % hd;
        else which = col < qd ? 0 : col < qd + kvd ? 1 : 2, c = col - (which ? qd : 0) - (which == 2 ? kvd : 0);
        const Act part = which == 0 ? q + bt * qd : which == 1 ? k + bt * kvd : v + bt * kvd;
        const int d = c % hd;
        float o[8];
        if (!cos_t || which == 2 || d >= rot) {
            act_load8(sign > 0 ? x : part, sign > 0 ? col : c, o);
            act_store8(sign > 0 ? part : x, sign > 0 ? c : col, o);
            return;
        }
        const int half = rot / 2, i = d % half;
        const size_t at = pos ? (size_t)pos[bt] : (size_t)pos0 + bt % T;
        const Act src = sign > 0 ? x + (col - d) : part + (c - d);
        float a[8], b[8];
        act_load8(src, i, a);
        act_load8(src, i + half, b);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float cs = cos_t[at * half + i + j], sn = sign * sin_t[at * half + i + j];
            o[j] = d < half ? a[j] * cs - b[j] * sn : b[j] * cs + a[j] * sn;
        }
        act_store8(sign > 0 ? part : x, sign > 0 ? c : col, o);
    }
};

struct EmbeddingGather {
    float *out;
    const int32_t *tokens;
    Param wte;
    int D;
    __device__ void operator()(size_t i) const { out[i] = wte[(size_t)tokens[i / D] * D + i % D]; }
};

// whether token t falls in the rows [v0, v0 + Vl) of a vocabulary-parallel part (in 64 bits: no overflow)
__device__ __forceinline__ bool in_part(int32_t t, int v0, int Vl) {
    return (long long)t - v0 >= 0 && (long long)t - v0 < Vl;
}

// the rows of wte_part (Vl, D) for the tokens in [v0, v0 + Vl), zero rows for the others
struct EmbeddingPartGather {
    float *out;
    const int32_t *tokens;
    Param wte;
    int D, v0, Vl;
    __device__ void operator()(size_t i) const {
        const int32_t t = tokens[i / D];
        out[i] = in_part(t, v0, Vl) ? wte[(size_t)(t - v0) * D + i % D] : 0.0f;
    }
};

struct Iota {
    int32_t *x;
    __device__ void operator()(size_t i) const { x[i] = (int32_t)i; }
};

struct AddInPlace {
    float *y;
    const float *x;
    __device__ void operator()(size_t i) const { y[i] += x[i]; }
};

struct Add3 {
    float *out;
    const float *a, *b;
    __device__ void operator()(size_t i) const { out[i] = a[i] + b[i]; }
};

struct Scale {
    float *x;
    float s;
    __device__ void operator()(size_t i) const { x[i] *= s; }
};

// torch.optim.AdamW over a unit shard; the bias corrections are folded into step_size and
// bc2_sqrt on the host. Weight decay inside h's ranges only; the clip coefficient scales g.
struct AdamW {
    float *p, *m, *v;
    uint16_t *pb;  // the bf16 copy of p for the next gather, or NULL
    const float *g;
    KernAdamW h;
    float step_size, bc2_sqrt, decay;
    __device__ void operator()(size_t i) const {
        float d = 1.0f;
        for (int r = 0; r < h.ndecay; r++)
            if (i >= h.decay[r][0] && i < h.decay[r][1]) d = decay;
        const float gi = g[i] * h.grad_scale;
        const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * gi, vi = h.beta2 * v[i] + (1.0f - h.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i] * d - step_size * (mi / (sqrtf(vi) / bc2_sqrt + h.eps));
        p[i] = pi;
        if (pb) pb[i] = f32_to_bf16(pi);
    }
};

struct F32ToBf16 {
    uint16_t *dst;
    const float *src;
    __device__ void operator()(size_t i) const { dst[i] = f32_to_bf16(src[i]); }
    __device__ void vec8(size_t i) const {
        float v[8];
        act_load8(Act{(void *)src, 0}, i, v);
        act_store8(Act{dst, 1}, i, v);
    }
};

struct RoundBf16 {
    float *x;
    __device__ void operator()(size_t i) const { x[i] = __uint_as_float((uint32_t)f32_to_bf16(x[i]) << 16); }
    __device__ void vec8(size_t i) const {
        float v[8];
        act_load8(Act{x, 0}, i, v);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __uint_as_float((uint32_t)f32_to_bf16(v[j]) << 16);
        act_store8(Act{x, 0}, i, v);
    }
};

struct Bf16ToF32 {
    float *dst;
    const uint16_t *src;
    __device__ void operator()(size_t i) const { dst[i] = bf16_to_f32(src[i]); }
    __device__ void vec8(size_t i) const {
        float v[8];
        act_load8(Act{(void *)src, 1}, i, v);
        act_store8(Act{dst, 0}, i, v);
    }
};

// ---- RMSNorm ----
// The row kernels visit a row V columns at a time: V = 8 (16-byte accesses) when D % 8 == 0 and
// every operand is 16-byte aligned (rows_vec8), else 1. Each column's arithmetic is the same either
// way; only the order a thread's partial sum gathers its columns differs.

template <int V> __device__ __forceinline__ void ld(const float *p, float (&v)[V]) {
    if constexpr (V == 8) act_load8(Act{(void *)p, 0}, 0, v);
    else v[0] = p[0];
}
template <int V> __device__ __forceinline__ void st(float *p, const float (&v)[V]) {
    if constexpr (V == 8) act_store8(Act{p, 0}, 0, v);
    else p[0] = v[0];
}
template <int V> __device__ __forceinline__ void ld(Act x, size_t i, float (&v)[V]) {
    if constexpr (V == 8) act_load8(x, i, v);
    else v[0] = x[i];
}
template <int V> __device__ __forceinline__ void st(Act x, size_t i, const float (&v)[V]) {
    if constexpr (V == 8) act_store8(x, i, v);
    else x[i] = v[0];
}
template <int V> __device__ __forceinline__ void ld(Param w, size_t i, float (&v)[V]) {
    if constexpr (V == 8) act_load8(Act{(void *)w.p, w.bf16}, i, v);  // a parameter's two dtypes are an Act's
    else v[0] = w[i];
}

// whether the row kernels go eight columns at a time: whole 16-byte groups in every row of every operand
template <class... P> bool rows_vec8(int D, const P *...p) { return D % 8 == 0 && (aligned16(p) && ...); }

// one block per row: out = inp * rstd * w
template <int V>
__global__ void rmsnorm_fwd_kernel(Act out, float *rstd, const float *inp, Param w, int D, float eps) {
    __shared__ float sh[32];
    const float *x = inp + (size_t)blockIdx.x * D;
    const Act o = out + (size_t)blockIdx.x * D;
    float ss = 0.0f, a[V], g[V];
    for (int j = V * threadIdx.x; j < D; j += V * blockDim.x) {
        ld<V>(x + j, a);
#pragma unroll
        for (int e = 0; e < V; e++) ss += a[e] * a[e];
    }
    ss = block_reduce(ss, SumOp(), sh);
    const float r = 1.0f / sqrtf(ss / D + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int j = V * threadIdx.x; j < D; j += V * blockDim.x) {
        ld<V>(x + j, a), ld<V>(w, j, g);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = (a[e] * r) * g[e];
        st<V>(o, j, a);
    }
}

// one block per row: y += res, then out = y * rstd * w (each thread reads back only what it wrote)
template <int V>
__global__ void add_rmsnorm_fwd_kernel(float *y, Act out, float *rstd, const float *res, Param w, int D,
                                       float eps) {
    __shared__ float sh[32];
    float *x = y + (size_t)blockIdx.x * D;
    const Act o = out + (size_t)blockIdx.x * D;
    const float *b = res + (size_t)blockIdx.x * D;
    float ss = 0.0f, a[V], c[V];
    for (int j = V * threadIdx.x; j < D; j += V * blockDim.x) {
        ld<V>(x + j, a), ld<V>(b + j, c);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] += c[e], ss += a[e] * a[e];
        st<V>(x + j, a);
    }
    ss = block_reduce(ss, SumOp(), sh);
    const float r = 1.0f / sqrtf(ss / D + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int j = V * threadIdx.x; j < D; j += V * blockDim.x) {
        ld<V>(x + j, a), ld<V>(w, j, c);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = (a[e] * r) * c[e];
        st<V>(o, j, a);
    }
}

// one block per row: dinp += r * (dy * w - xhat * mean(dy * w * xhat)), xhat = x * r
template <int V>
__global__ void rmsnorm_bwd_dinp_kernel(float *dinp, Act dout, const float *inp, Param w,
                                        const float *rstd, int D) {
    __shared__ float sh[32];
    const size_t row = (size_t)blockIdx.x * D;
    const float *x = inp + row;
    const Act dy = dout + row;
    float *dx = dinp + row;
    const float r = rstd[blockIdx.x];
    float acc = 0.0f, a[V], g[V], c[V];
    for (int j = V * threadIdx.x; j < D; j += V * blockDim.x) {
        ld<V>(dy, j, g), ld<V>(w, j, c), ld<V>(x + j, a);
#pragma unroll
        for (int e = 0; e < V; e++) acc += (g[e] * c[e]) * (a[e] * r);
    }
    const float m = block_reduce(acc, SumOp(), sh) / D;
    for (int j = V * threadIdx.x; j < D; j += V * blockDim.x) {
        float d[V];
        ld<V>(dy, j, g), ld<V>(w, j, c), ld<V>(x + j, a), ld<V>(dx + j, d);
#pragma unroll
        for (int e = 0; e < V; e++) d[e] += r * (g[e] * c[e] - (a[e] * r) * m);
        st<V>(dx + j, d);
    }
}

// dw partial sums, part (chunks, D): column j of chunk c sums dy * xhat over that chunk's rows in
// order. Threads run along columns, so every row read is coalesced.
__global__ void rmsnorm_dw_partial_kernel(float *part, Act dout, const float *inp, const float *rstd, int N,
                                          int D, int rows_per_chunk) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    const int n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float s = 0.0f;
    for (int n = n0; n < n1; n++) s += dout[(size_t)n * D + j] * (inp[(size_t)n * D + j] * rstd[n]);
    part[(size_t)blockIdx.y * D + j] = s;
}

// dw += the chunks' partial sums, in chunk order
__global__ void chunk_sums_kernel(float *dw, const float *part, int chunks, int D) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    float s = 0.0f;
    for (int c = 0; c < chunks; c++) s += part[(size_t)c * D + j];
    dw[j] += s;
}

constexpr int kDwChunks = 128;  // row chunks of the column sums: enough blocks to fill the GPU at small D
ScratchBuf colsum_scratch;  // the (chunks, D) partial sums of rmsnorm, layernorm and bias backward

// ---- LayerNorm ----

// one block per row: out = (x - mean) * rstd * w + b, biased variance from a second pass over x - mean.
// With res, x (inp) += res first (each thread reads back only what it wrote).
__global__ void layernorm_fwd_kernel(Act out, float *mean, float *rstd, float *inp, const float *res, Param w,
                                     Param bias, int D, float eps) {
    __shared__ float sh[32];
    float *x = inp + (size_t)blockIdx.x * D;
    const Act o = out + (size_t)blockIdx.x * D;
    float s = 0.0f;
    if (res)
        for (int j = threadIdx.x; j < D; j += blockDim.x) x[j] += res[(size_t)blockIdx.x * D + j];
    for (int j = threadIdx.x; j < D; j += blockDim.x) s += x[j];
    const float m = block_reduce(s, SumOp(), sh) / D;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) ss += (x[j] - m) * (x[j] - m);
    const float r = 1.0f / sqrtf(block_reduce(ss, SumOp(), sh) / D + eps);
    if (threadIdx.x == 0) mean[blockIdx.x] = m, rstd[blockIdx.x] = r;
    for (int j = threadIdx.x; j < D; j += blockDim.x) o[j] = ((x[j] - m) * r) * w[j] + bias[j];
}

// one block per row: dinp += r (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - m) r
__global__ void layernorm_bwd_dinp_kernel(float *dinp, Act dout, const float *inp, Param w,
                                          const float *mean, const float *rstd, int D) {
    __shared__ float sh[32];
    const size_t row = (size_t)blockIdx.x * D;
    const float *x = inp + row;
    const Act dy = dout + row;
    float *dx = dinp + row;
    const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float sg = 0.0f, sgx = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        const float g = dy[j] * w[j];
        sg += g;
        sgx += g * ((x[j] - m) * r);
    }
    const float mg = block_reduce(sg, SumOp(), sh) / D, mgx = block_reduce(sgx, SumOp(), sh) / D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) dx[j] += r * (dy[j] * w[j] - mg - ((x[j] - m) * r) * mgx);
}

// dw and db partial sums, pw, pb (chunks, D), as rmsnorm_dw_partial_kernel does
__global__ void layernorm_dwdb_partial_kernel(float *pw, float *pb, Act dout, const float *inp,
                                              const float *mean, const float *rstd, int N, int D,
                                              int rows_per_chunk) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    const int n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float sw = 0.0f, sb = 0.0f;
    for (int n = n0; n < n1; n++) {
        const float dy = dout[(size_t)n * D + j];
        sw += dy * ((inp[(size_t)n * D + j] - mean[n]) * rstd[n]);
        sb += dy;
    }
    pw[(size_t)blockIdx.y * D + j] = sw;
    pb[(size_t)blockIdx.y * D + j] = sb;
}

// ---- bias backward: column sums over row chunks, then the chunks in order ----

__global__ void colsum_partial_kernel(float *part, Act x, int N, int D, int rows_per_chunk) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    const int n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float s = 0.0f;
    for (int n = n0; n < n1; n++) s += x[(size_t)n * D + j];
    part[(size_t)blockIdx.y * D + j] = s;
}

// the row chunking of the column reductions: depends only on N, so the sums' order does too
static inline void row_chunks(int N, int *rows_per_chunk, int *chunks) {
    *rows_per_chunk = (N + kDwChunks - 1) / kDwChunks;
    *chunks = (N + *rows_per_chunk - 1) / *rows_per_chunk;
}

// ---- dropout ----
// grid (blocks over M, rows): each thread derives its row's seed once, then strides over the
// row's part of [e0, e0 + n); rows are b0 + blockIdx.y (+ gridDim.y ...) up to the last one touched
constexpr int kDropRows = 1024;
__global__ void dropout_kernel(float *x, size_t e0, size_t n, size_t M, size_t b0, size_t nrows, uint32_t thr, float scale,
                               uint64_t key, uint64_t sample0) {
    for (size_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const size_t b = b0 + r, lo = b * M < e0 ? e0 - b * M : 0, hi = (b + 1) * M > e0 + n ? e0 + n - b * M : M;
        const uint64_t seed = rng_dropout_seed(key, sample0 + (uint64_t)b);
        for (size_t i = lo + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < hi; i += (size_t)gridDim.x * blockDim.x)
            x[b * M + i - e0] *= rng_dropout_keep(seed, i, thr) ? scale : 0.0f;  // as the CPU: NaN stays NaN
    }
}

// ---- embedding backward ----
// Deterministic without atomics: the (token, position) pairs are radix-sorted by token (a stable
// sort, so positions stay ascending within a token), then the first sorted entry of each run of
// equal tokens owns that wte row and adds the run's dout rows to it in position order: the same
// additions, in the same order, as the CPU's sequential loop.
// A vocabulary-parallel part (rows [v0, v0 + Vl) as dwte) skips the runs of other tokens.
__global__ void embedding_bwd_kernel(float *dwte, const float *dout, const int32_t *sorted_tok,
                                     const int32_t *sorted_pos, int N, int D, int v0, int Vl) {
    const int i = blockIdx.x;
    const int32_t tok = sorted_tok[i];
    if (i > 0 && sorted_tok[i - 1] == tok) return;  // not the head of its run
    if (!in_part(tok, v0, Vl)) return;
    int end = i + 1;
    while (end < N && sorted_tok[end] == tok) end++;
    float *dst = dwte + (size_t)(tok - v0) * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float acc = dst[j];
        for (int r = i; r < end; r++) acc += dout[(size_t)sorted_pos[r] * D + j];
        dst[j] = acc;
    }
}

ScratchBuf embedding_scratch;

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// ---- cross-entropy and double reductions ----

// (max, sum exp(x - max)) pairs: merging two running softmax denominators
struct LseOp {
    __device__ float2 operator()(float2 a, float2 b) const {
        if (b.x == -INFINITY) return a;
        if (a.x == -INFINITY) return b;
        const float m = fmaxf(a.x, b.x);
        return make_float2(m, a.y * expf(a.x - m) + b.y * expf(b.x - m));
    }
};

constexpr int kCeThreads = 512;

// one block per row of logits (V): loss into losses[row]; with dscale != 0 the row becomes
// (softmax - onehot) * dscale. One read for the (online) max and sum, one read+write for the gradient.
// A negative target bears no loss: 0, and a zero gradient row (the whole block leaves together).
__global__ void crossentropy_kernel(Act logits, const int32_t *targets, double *losses, int V, float dscale) {
    __shared__ float2 sh[32];
    const Act x = logits + (size_t)blockIdx.x * V;
    const int t = targets[blockIdx.x];
    if (t < 0) {
        if (threadIdx.x == 0) losses[blockIdx.x] = 0.0;
        if (dscale != 0.0f)
            for (int j = threadIdx.x; j < V; j += blockDim.x) x[j] = 0.0f;
        return;
    }
    const float xt = x[t];  // read before the block_reduce barrier, so before any thread overwrites it
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float v = x[j];
        if (v > m) {
            s = s * expf(m - v) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    const float2 ms = block_reduce(make_float2(m, s), LseOp(), sh);
    if (threadIdx.x == 0) losses[blockIdx.x] = log((double)ms.y) + ms.x - xt;
    if (dscale != 0.0f) {
        const float c = dscale / ms.y;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            const float g = expf((float)x[j] - ms.x) * c;
            x[j] = j == t ? g - dscale : g;
        }
    }
}

// ---- vocabulary-parallel cross-entropy: one block per row of the local logits (Vl) ----

__global__ void xent_part_max_kernel(Act logits, int Vl, float *row_max) {
    __shared__ float sh[32];
    const Act x = logits + (size_t)blockIdx.x * Vl;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_reduce(m, MaxOp(), sh);
    if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void xent_part_sums_kernel(Act logits, const int32_t *targets, int Vl, int v0, const float *row_max,
                                      float *sums) {
    __shared__ float sh[32];
    const int n = blockIdx.x, t = targets[n];
    if (t < 0) {  // no loss: the sums are never read (the whole block leaves together)
        if (threadIdx.x == 0) sums[2 * n] = sums[2 * n + 1] = 0.0f;
        return;
    }
    const Act x = logits + (size_t)n * Vl;
    const float m = row_max[n];
    float s = 0.0f;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) s += expf((float)x[j] - m);
    s = block_reduce(s, SumOp(), sh);
    if (threadIdx.x == 0) {
        sums[2 * n] = s;
        sums[2 * n + 1] = in_part(t, v0, Vl) ? (float)x[t - v0] : 0.0f;
    }
}

// losses[row] (0 for a negative target); with dscale != 0 the row becomes dscale * (softmax - onehot)
__global__ void xent_part_finish_kernel(Act logits, const int32_t *targets, int Vl, int v0, const float *row_max,
                                        const float *sums, float dscale, double *losses) {
    const int n = blockIdx.x, t = targets[n];
    const Act x = logits + (size_t)n * Vl;
    if (t < 0) {
        if (threadIdx.x == 0 && losses) losses[n] = 0.0;
        if (dscale != 0.0f)
            for (int j = threadIdx.x; j < Vl; j += blockDim.x) x[j] = 0.0f;
        return;
    }
    const float m = row_max[n], sum = sums[2 * n];
    if (threadIdx.x == 0 && losses) losses[n] = log((double)sum) + m - sums[2 * n + 1];
    if (dscale != 0.0f) {
        const float c = dscale / sum;
        const int tl = in_part(t, v0, Vl) ? t - v0 : -1;
        for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
            const float g = expf((float)x[j] - m) * c;
            x[j] = j == tl ? g - dscale : g;
        }
    }
}

// *out = sum of x (n) (+= with accumulate), one block, fixed order
__global__ void sum_doubles_kernel(double *out, const double *x, size_t n, int accumulate) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = block_reduce(s, SumOp(), sh);
    if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

// part[block] = sum of x^2 over the block's grid-stride share, in double
__global__ void sumsq_partial_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_reduce(s, SumOp(), sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

constexpr unsigned kSumsqBlocks = 1024;  // the grid depends only on n, so the sum order does too
ScratchBuf reduce_scratch;

// *out (device) = the sum of x (n doubles), or += with accumulate; the host does not wait
void sum_doubles(double *out, const double *x, size_t n, int accumulate) {
    sum_doubles_kernel<<<1, 1024, 0, cuda_stream()>>>(out, x, n, accumulate);
    cudaCheckLaunch();
}

// ---- NF4 (kernels.h, "NF4 storage") ----

__constant__ float kNf4Values[16] = {NF4_VALUES};
__constant__ float kNf4Dyn[256] = {NF4_DYNAMIC_MAP};

// element i of a packed tensor: the block's scale with two roundings, as the CPU computes it (no FMA)
struct Nf4Dequantize {
    void *dst;  // bf16 or fp32
    const uint8_t *src;
    const float *absmax2;  // the groups' scales, then the offset
    size_t qabsmax, groups;
    KernSegs seg;  // output element i is the whole tensor's w
    int bf16;
    __device__ void operator()(size_t i) const {
        const size_t w = i / seg.len * seg.stride + seg.off + i % seg.len, b = w / NF4_BLOCK;
        const float scale = __fadd_rn(__fmul_rn(kNf4Dyn[src[qabsmax + b]], absmax2[b / NF4_GROUP]), absmax2[groups]);
        const float x = kNf4Values[(src[w / 2] >> (w % 2 ? 0 : 4)) & 15] * scale;
        if (bf16) ((uint16_t *)dst)[i] = f32_to_bf16(x);
        else ((float *)dst)[i] = x;
    }
};

}  // namespace

extern "C" {

void cuda_rmsnorm_fwd(void *out, float *rstd, const float *inp, const void *w, int N, int D, float eps) {
    if (N <= 0) return;
    auto *kernel = rows_vec8(D, out, inp, w) ? rmsnorm_fwd_kernel<8> : rmsnorm_fwd_kernel<1>;
    kernel<<<N, kThreads, 0, cuda_stream()>>>(act(out), rstd, inp, param(w), D, eps);
    cudaCheckLaunch();
}

void cuda_add_rmsnorm_fwd(float *y, void *out, float *rstd, const float *r, const void *w, int N, int D, float eps) {
    if (N <= 0) return;
    auto *kernel = rows_vec8(D, out, y, w, r) ? add_rmsnorm_fwd_kernel<8> : add_rmsnorm_fwd_kernel<1>;
    kernel<<<N, kThreads, 0, cuda_stream()>>>(y, act(out), rstd, r, param(w), D, eps);
    cudaCheckLaunch();
}

void cuda_rmsnorm_bwd(float *dinp, float *dw, const void *dout, const float *inp, const void *w, const float *rstd,
                      int N, int D) {
    if (N <= 0) return;
    auto *kernel = rows_vec8(D, dinp, dout, inp, w) ? rmsnorm_bwd_dinp_kernel<8> : rmsnorm_bwd_dinp_kernel<1>;
    kernel<<<N, kThreads, 0, cuda_stream()>>>(dinp, act(dout), inp, param(w), rstd, D);
    cudaCheckLaunch();
    int rows_per_chunk, chunks;
    row_chunks(N, &rows_per_chunk, &chunks);
    float *part = (float *)colsum_scratch.get(sizeof(float) * (size_t)chunks * D);  // (chunks, D)
    const unsigned col_blocks = (D + kThreads - 1) / kThreads;
    rmsnorm_dw_partial_kernel<<<dim3(col_blocks, chunks), kThreads, 0, cuda_stream()>>>(part, act(dout), inp, rstd, N,
                                                                                         D, rows_per_chunk);
    cudaCheckLaunch();
    chunk_sums_kernel<<<col_blocks, kThreads, 0, cuda_stream()>>>(dw, part, chunks, D);
    cudaCheckLaunch();
}

void cuda_layernorm_fwd(void *out, float *mean, float *rstd, const float *inp, const void *w, const void *b, int N,
                        int D, float eps) {
    if (N <= 0) return;
    layernorm_fwd_kernel<<<N, kThreads, 0, cuda_stream()>>>(act(out), mean, rstd, (float *)inp, nullptr, param(w),
                                                            param(b), D, eps);
    cudaCheckLaunch();
}

void cuda_add_layernorm_fwd(float *y, void *out, float *mean, float *rstd, const float *r, const void *w,
                            const void *b, int N, int D, float eps) {
    if (N <= 0) return;
    layernorm_fwd_kernel<<<N, kThreads, 0, cuda_stream()>>>(act(out), mean, rstd, y, r, param(w), param(b), D, eps);
    cudaCheckLaunch();
}

void cuda_layernorm_bwd(float *dinp, float *dw, float *db, const void *dout, const float *inp, const void *w,
                        const float *mean, const float *rstd, int N, int D) {
    if (N <= 0) return;
    layernorm_bwd_dinp_kernel<<<N, kThreads, 0, cuda_stream()>>>(dinp, act(dout), inp, param(w), mean, rstd, D);
    cudaCheckLaunch();
    int rows_per_chunk, chunks;
    row_chunks(N, &rows_per_chunk, &chunks);
    float *pw = (float *)colsum_scratch.get(sizeof(float) * 2 * (size_t)chunks * D), *pb = pw + (size_t)chunks * D;
    const unsigned col_blocks = (D + kThreads - 1) / kThreads;
    layernorm_dwdb_partial_kernel<<<dim3(col_blocks, chunks), kThreads, 0, cuda_stream()>>>(pw, pb, act(dout), inp, mean,
                                                                                             rstd, N, D,
                                                                                             rows_per_chunk);
    cudaCheckLaunch();
    chunk_sums_kernel<<<col_blocks, kThreads, 0, cuda_stream()>>>(dw, pw, chunks, D);
    cudaCheckLaunch();
    chunk_sums_kernel<<<col_blocks, kThreads, 0, cuda_stream()>>>(db, pb, chunks, D);
    cudaCheckLaunch();
}

void cuda_gelu_fwd(void *out, const void *inp, size_t n, KernGelu form) {
    launch_map(n, GeluFwd{act(out), act(inp), form == KERN_GELU_ERF});
}

void cuda_gelu_bwd(void *dinp, const void *dout, const void *inp, size_t n, KernGelu form) {
    launch_map(n, GeluBwd{act(dinp), act(dout), act(inp), form == KERN_GELU_ERF});
}

void cuda_bias_add(void *out, KernDtype dt, const void *b, int N, int D) {
    if (N > 0 && D > 0) launch_map((size_t)N * D, BiasAdd{act(out, dt), param(b), D});
}

void cuda_bias_bwd(float *db, const void *dout, KernDtype dt, int N, int D) {
    if (N <= 0 || D <= 0) return;
    int rows_per_chunk, chunks;
    row_chunks(N, &rows_per_chunk, &chunks);
    float *part = (float *)colsum_scratch.get(sizeof(float) * (size_t)chunks * D);  // (chunks, D)
    const unsigned col_blocks = (D + kThreads - 1) / kThreads;
    colsum_partial_kernel<<<dim3(col_blocks, chunks), kThreads, 0, cuda_stream()>>>(part, act(dout, dt), N, D,
                                                                                     rows_per_chunk);
    cudaCheckLaunch();
    chunk_sums_kernel<<<col_blocks, kThreads, 0, cuda_stream()>>>(db, part, chunks, D);
    cudaCheckLaunch();
}

void cuda_add_cols(void *out, KernDtype dt, int ld, int c0, const float *src, int N, int C, float s) {
    if (N > 0 && C > 0) launch_map((size_t)N * C, AddCols{act(out, dt), src, ld, c0, C, s});
}

void cuda_get_cols(float *dst, const void *src, KernDtype dt, int ld, int c0, int N, int C, float s) {
    if (N > 0 && C > 0) launch_map((size_t)N * C, GetCols{dst, act(src, dt), ld, c0, C, s});
}

void cuda_positions_fwd(float *out, const void *wpe, int B, int T, int D, int pos0) {
    if (B > 0 && T > 0 && D > 0) launch_map((size_t)B * T * D, PositionsFwd{out, param(wpe), T, D, pos0});
}

void cuda_positions_bwd(float *dwpe, const float *dout, int B, int T, int D) {
    if (T > 0 && D > 0) launch_map((size_t)T * D, PositionsBwd{dwpe, dout, B, (size_t)T * D});
}

void cuda_dropout(float *x, size_t e0, size_t n, size_t M, float p, uint64_t key, uint64_t sample0) {
    if (p == 0.0f || !n || !M) return;
    const size_t b0 = e0 / M, nrows = (e0 + n - 1) / M - b0 + 1, span = n < M ? n : M;
    // up to kDropRows rows of blocks (more loop), and about as many blocks in all as launch_map uses
    const unsigned rows = nrows < kDropRows ? (unsigned)nrows : (unsigned)kDropRows;
    const unsigned blocks = grid_for(span, kThreads, (65536 + rows - 1) / rows);
    dropout_kernel<<<dim3(blocks, rows), kThreads, 0, cuda_stream()>>>(x, e0, n, M, b0, nrows, rng_dropout_threshold(p),
                                                                       1.0f / (1.0f - p), key, sample0);
    cudaCheckLaunch();
}

void cuda_rope_table(float *cos_t, float *sin_t, int T, int rot, const double *inv_freq) {
    // built on the host in double by the CPU kernel, so both backends use identical tables
    const size_t n = (size_t)T * (rot / 2);
    float *c = (float *)mallocCheck(sizeof(float) * n), *s = (float *)mallocCheck(sizeof(float) * n);
    cpu_rope_table(c, s, T, rot, inv_freq);
    cuda_upload(cos_t, c, sizeof(float) * n);
    cuda_upload(sin_t, s, sizeof(float) * n);
    free(c);
    free(s);
}

// whether QkvRope's eight-at-a-time form applies: whole heads of 8s, a rotation in halves of 8s
static bool qkv_vec8(const void *fused, const void *q, const void *k, const void *v, const float *cos_t, int hd, int rot) {
    return hd % 8 == 0 && (!cos_t || rot / 2 % 8 == 0) && aligned16(fused) && aligned16(q) && aligned16(k) &&
           aligned16(v);
}

void cuda_qkv_split(void *q, void *k, void *v, const void *qkv, const float *cos_t, const float *sin_t, int B, int T,
                    int H, int KV, int hd, int rot, KernQkvLayout layout, int pos0, const int32_t *pos) {
    const int qd = H * hd, kvd = KV * hd;
    launch_map8((size_t)B * T * (qd + 2 * kvd),
                QkvRope{act(qkv), act(q), act(k), act(v), cos_t, sin_t, pos, T, hd, rot, qd, kvd, pos0,
                        layout == KERN_QKV_PER_HEAD, 1.0f},
                qkv_vec8(qkv, q, k, v, cos_t, hd, rot));
}

void cuda_qkv_merge(void *dqkv, const void *dq, const void *dk, const void *dv, const float *cos_t,
                    const float *sin_t, int B, int T, int H, int KV, int hd, int rot, KernQkvLayout layout,
                    const int32_t *pos) {
    // the transpose of a rotation is the rotation by the negative angle
    const int qd = H * hd, kvd = KV * hd;
    launch_map8((size_t)B * T * (qd + 2 * kvd),
                QkvRope{act(dqkv), act(dq), act(dk), act(dv), cos_t, sin_t, pos, T, hd, rot, qd, kvd, 0,
                        layout == KERN_QKV_PER_HEAD, -1.0f},
                qkv_vec8(dqkv, dq, dk, dv, cos_t, hd, rot));
}

void cuda_swiglu_fwd(void *h, const void *gu, int N, int F) {
    if (N > 0 && F > 0)
        launch_map8((size_t)N * F, SwigluFwd{act(h), act(gu), F}, F % 8 == 0 && aligned16(h) && aligned16(gu));
}

void cuda_swiglu_bwd(void *dgu, const void *dh, const void *gu, int N, int F) {
    if (N > 0 && F > 0)
        launch_map8((size_t)N * F, SwigluBwd{act(dgu), act(dh), act(gu), F},
                    F % 8 == 0 && aligned16(dgu) && aligned16(dh) && aligned16(gu));
}

void cuda_moe_route(float *probs, int32_t *idx, float *wts, const float *logits, int N, int E, int K) {
    launch_map((size_t)N, MoeRoute{probs, wts, idx, logits, E, K});
}

void cuda_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const float *logits, const int32_t *idx,
                        const float *wts, const int32_t *targets, const float *gaux, float zscale, int N, int E, int K) {
    launch_map((size_t)N, MoeRouteBwd{dlogits, dwts, probs, logits, wts, gaux, idx, targets, zscale, E, K});
}

void cuda_jitter(void *x, const void *src, size_t e0, size_t n, size_t M, float j, uint64_t key, uint64_t sample0) {
    launch_map(n, Jitter{act(x), act(src), e0, M, j, key, sample0});
}

void cuda_moe_gather(void *xe, const void *x, const int32_t *src, int M, int D) {
    launch_map((size_t)M * D, MoeGather{act(xe), act(x), src, D});
}

void cuda_moe_gather_bwd(void *dx, const void *dxe, const int32_t *slot, int N, int K, int D) {
    launch_map((size_t)N * D, MoeGatherBwd{act(dx), act(dxe), slot, K, D});
}

void cuda_moe_combine(float *out, const float *ye, const int32_t *slot, const float *wts, int N, int K, int D) {
    launch_map((size_t)N * D, MoeCombine{out, ye, wts, slot, K, D});
}

void cuda_moe_combine_bwd(float *dye, float *dwts, const float *dout, const float *ye, const int32_t *slot, const float *wts,
                          int N, int K, int D) {
    launch_map((size_t)N * K * D, MoeCombineDy{dye, dout, wts, slot, K, D});
    launch_map((size_t)N * K, MoeCombineDw{dwts, dout, ye, slot, K, D});
}

void cuda_embedding_fwd(float *out, const int32_t *tokens, const void *wte, int N, int D) {
    launch_map((size_t)N * D, EmbeddingGather{out, tokens, param(wte), D});
}

void cuda_embedding_part_fwd(float *out, const int32_t *tokens, const void *wte_part, int N, int D, int v0, int Vl) {
    launch_map((size_t)N * D, EmbeddingPartGather{out, tokens, param(wte_part), D, v0, Vl});
}

void cuda_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D) {
    cuda_embedding_part_bwd(dwte, dout, tokens, N, D, 0, INT32_MAX);
}

void cuda_embedding_part_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl) {
    if (N <= 0) return;
    size_t sort_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int32_t *)nullptr, (int32_t *)nullptr,
                                              (const int32_t *)nullptr, (int32_t *)nullptr, N, 0, 32, cuda_stream()));
    // scratch: sorted tokens, positions, sorted positions (N each), then cub's temporary storage
    const size_t arr = align256(sizeof(int32_t) * (size_t)N);
    char *base = (char *)embedding_scratch.get(3 * arr + sort_bytes);
    int32_t *sorted_tok = (int32_t *)base, *pos = (int32_t *)(base + arr), *sorted_pos = (int32_t *)(base + 2 * arr);
    launch_map((size_t)N, Iota{pos});
    cudaCheck(cub::DeviceRadixSort::SortPairs(base + 3 * arr, sort_bytes, tokens, sorted_tok, pos, sorted_pos, N, 0,
                                              32, cuda_stream()));
    embedding_bwd_kernel<<<N, kThreads, 0, cuda_stream()>>>(dwte, dout, sorted_tok, sorted_pos, N, D, v0, Vl);
    cudaCheckLaunch();
}

void cuda_crossentropy_fwd_bwd(void *logits, const int32_t *targets, int N, int V, float dscale, double *loss) {
    if (N <= 0) return;
    double *losses = (double *)reduce_scratch.get(sizeof(double) * (size_t)N);  // (N)
    crossentropy_kernel<<<N, kCeThreads, 0, cuda_stream()>>>(act(logits), targets, losses, V, dscale);
    cudaCheckLaunch();
    sum_doubles(loss, losses, (size_t)N, 1);
}

void cuda_xent_part_max(const void *logits, int N, int Vl, float *row_max) {
    if (N <= 0) return;
    xent_part_max_kernel<<<N, kCeThreads, 0, cuda_stream()>>>(act(logits), Vl, row_max);
    cudaCheckLaunch();
}

void cuda_xent_part_sums(const void *logits, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                         float *sums) {
    if (N <= 0) return;
    xent_part_sums_kernel<<<N, kCeThreads, 0, cuda_stream()>>>(act(logits), targets, Vl, v0, row_max, sums);
    cudaCheckLaunch();
}

void cuda_xent_part_finish(void *logits, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                           const float *sums, float dscale, int add_loss, double *loss) {
    if (N <= 0 || (dscale == 0.0f && !add_loss)) return;
    double *losses = add_loss ? (double *)reduce_scratch.get(sizeof(double) * (size_t)N) : nullptr;  // (N)
    xent_part_finish_kernel<<<N, kCeThreads, 0, cuda_stream()>>>(act(logits), targets, Vl, v0, row_max, sums, dscale,
                                                                 losses);
    cudaCheckLaunch();
    if (add_loss) sum_doubles(loss, losses, (size_t)N, 1);
}

void cuda_add(float *y, const float *x, size_t n) { launch_map(n, AddInPlace{y, x}); }

void cuda_add3(float *out, const float *a, const float *b, size_t n) { launch_map(n, Add3{out, a, b}); }

void cuda_scale(float *x, float s, size_t n) { launch_map(n, Scale{x, s}); }

void cuda_zero(float *x, size_t n) {
    if (n) cudaCheck(cudaMemsetAsync(x, 0, sizeof(float) * n, cuda_stream()));
}

void cuda_act_copy(void *dst, const void *src, size_t n) {
    if (n && dst != src)
        cudaCheck(cudaMemcpyAsync(dst, src, act_bytes() * n, cudaMemcpyDeviceToDevice, cuda_stream()));
}

void cuda_copy(float *dst, const float *src, size_t n) {
    if (n && dst != src)
        cudaCheck(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, cuda_stream()));
}

void cuda_sumsq_to(double *out, const float *x, size_t n) {
    const unsigned blocks = grid_for(n, kThreads, kSumsqBlocks);
    double *part = (double *)reduce_scratch.get(sizeof(double) * blocks);
    sumsq_partial_kernel<<<blocks, kThreads, 0, cuda_stream()>>>(part, x, n);
    cudaCheckLaunch();
    sum_doubles(out, part, blocks, 0);
}

double cuda_sumsq(const float *x, size_t n) {
    if (!n) return 0.0;
    cuda_sumsq_to(&cuda_ctx.result_dev->value, x, n);
    return cuda_fetch_result();
}

void cuda_adamw(float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h) {
    // exactly the CPU's constants: bias corrections in double, then rounded to float
    const double bc1 = 1.0 - pow(h->beta1, h->step), bc2 = 1.0 - pow(h->beta2, h->step);
    launch_map(n, AdamW{p, m, v, p_bf16, g, *h, (float)(h->lr / bc1), (float)sqrt(bc2),
                        (float)(1.0 - (double)h->lr * h->weight_decay)});
}

void cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
    launch_map8(n, F32ToBf16{dst, src}, aligned16(dst) && aligned16(src));
}

void cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    launch_map8(n, Bf16ToF32{dst, src}, aligned16(dst) && aligned16(src));
}

void cuda_round_bf16(float *x, size_t n) { launch_map8(n, RoundBf16{x}, aligned16(x)); }

void cuda_nf4_dequantize(void *dst, int f32, const uint8_t *src, size_t n, KernSegs seg) {
    const Nf4Layout l = nf4_layout(n);
    launch_map(seg.n * seg.len, Nf4Dequantize{dst, src, (const float *)(src + l.absmax2), l.qabsmax, l.groups, seg,
                                              cuda_ctx.params_bf16 && !f32});
}

}  // extern "C"
