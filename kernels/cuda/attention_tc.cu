// attention_tc: causal GQA attention on the tensor cores (bf16 operands, fp32 accumulation), the
// form used under --precision bf16. The algorithm, the saved row log-sum-exp and the ownership of
// every output element are those of attention.cu (so results stay deterministic, no atomics);
// what changes is that Q K^T, P V and backward's products run as 16x16x16 WMMA tiles. fp32 inputs
// are rounded to bf16 as tiles are loaded into shared memory; P and dS are rounded as they are
// written there. Softmax statistics, lse and Delta stay fp32. Dropout on P (DROP) as in
// attention.cu: the row sums are those of P, P V uses mask * P, backward regenerates the mask.
// Document masks and sliding windows (DOCS) as in attention.cu: masked tiles are skipped, partly
// masked ones masked per element.
//
// A block works on a 64-row tile (queries, or keys for dK/dV) with 4 warps of 16 rows each; the
// other side streams through in 64-row tiles. A warp's scores land in shared memory and are
// walked one row at a time, the 32 lanes across the row's 64 columns.
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "attention.cuh"

namespace {

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTile = 64;         // rows of a block's tile and of each streamed tile
constexpr int kLdS = kTile + 4;   // float score rows (WMMA wants a multiple of 4; +4 spreads banks)
constexpr int kLdP = kTile + 8;   // bf16 probability rows (a multiple of 8)
constexpr int kLdPt = 2 * kLdS;   // bf16 rows laid over float score rows (dK/dV)

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;  // B read as rows of B^T
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// Shared-memory row strides for a padded head dim: bf16 tiles and float output staging.
template <int HDP> struct TcLd {
    static constexpr int H = HDP + 8, O = HDP + 4;
};

// Shared memory of the three kernels, in bytes, for a padded head dim.
template <int HDP> constexpr size_t fwd_smem() {
    return sizeof(float) * kTile * (kLdS + TcLd<HDP>::O) + sizeof(bf16) * kTile * (3 * TcLd<HDP>::H + kLdP);
}
template <int HDP> constexpr size_t bwd_smem(int bf16_tiles, int p_tiles) {
    return sizeof(float) * kTile * (2 * kLdS + 2) + sizeof(bf16) * kTile * (bf16_tiles * TcLd<HDP>::H + p_tiles * kLdP);
}

// dst (ROWS, HDP + 8) bf16 <- activation rows of src (row stride ld): the first `valid` rows and hd
// columns, zeros elsewhere. Consecutive threads read consecutive columns (coalesced).
template <int ROWS, int HDP>
__device__ __forceinline__ void load_tile_bf16(bf16 *dst, Act src, size_t ld, int valid, int hd) {
    for (int i = threadIdx.x; i < ROWS * HDP; i += kThreads) {
        const int r = i / HDP, d = i % HDP;
        dst[r * TcLd<HDP>::H + d] = __float2bfloat16(r < valid && d < hd ? src[(size_t)r * ld + d] : 0.0f);
    }
}

// per-row statistics of a tile (lse and Delta), 0 past the valid rows
__device__ __forceinline__ void load_stats(float *Ls, float *Ds, const float *lse, const float *delta, int valid) {
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
        Ls[r] = r < valid ? lse[r] : 0.0f;
        Ds[r] = r < valid ? delta[r] : 0.0f;
    }
}

// Block-wide: once the previous tiles are no longer read, loads the next 64 rows of a and b
// (row stride ld, n valid) into the bf16 tiles A and B, and when lse is given the rows' statistics.
template <int HDP>
__device__ __forceinline__ void next_tiles(bf16 *A, bf16 *B, Act a, Act b, size_t ld, int n, int hd,
                                           float *Ls = nullptr, float *Ds = nullptr, const float *lse = nullptr,
                                           const float *delta = nullptr) {
    __syncthreads();
    load_tile_bf16<kTile, HDP>(A, a, ld, n, hd);
    load_tile_bf16<kTile, HDP>(B, b, ld, n, hd);
    if (lse) load_stats(Ls, Ds, lse, delta, n);
    __syncthreads();
}

// One warp: C (16, NC) = A (16, K) @ B^T with B given as NC rows of K, C float (row stride ldc).
// Up to K = 64 the A fragments stay in registers across the columns; a longer K reloads them per
// column tile, which keeps the 128-wide head dim's kernels within 255 registers without spills.
template <int K, int NC>
__device__ __forceinline__ void warp_abt(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb) {
    constexpr bool KEEP = K <= 64;
    FragA a[KEEP ? K / 16 : 1];
#pragma unroll
    for (int kk = 0; kk < (KEEP ? K / 16 : 0); kk++) wmma::load_matrix_sync(a[kk], A + 16 * kk, lda);
#pragma unroll
    for (int j = 0; j < NC / 16; j++) {
        FragC c;
        wmma::fill_fragment(c, 0.0f);
#pragma unroll
        for (int kk = 0; kk < K / 16; kk++) {
            if (!KEEP) wmma::load_matrix_sync(a[0], A + 16 * kk, lda);
            FragBt b;
            wmma::load_matrix_sync(b, B + 16 * j * ldb + 16 * kk, ldb);
            wmma::mma_sync(c, a[KEEP ? kk : 0], b, c);
        }
        wmma::store_matrix_sync(C + 16 * j, c, ldc, wmma::mem_row_major);
    }
}

// One warp: acc (16, 16 NJ) += A (16, K) @ B (K, 16 NJ), B row-major. The K loop stays rolled:
// unrolled, ptxas hoists the next steps' B fragments next to the 128 accumulator registers of
// dK/dV at head dim 128, and spills.
template <int K, int NJ>
__device__ __forceinline__ void warp_ab_acc(FragC (&acc)[NJ], const bf16 *A, int lda, const bf16 *B, int ldb) {
#pragma unroll 1
    for (int kk = 0; kk < K / 16; kk++) {
        FragA a;
        wmma::load_matrix_sync(a, A + 16 * kk, lda);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            FragB b;
            wmma::load_matrix_sync(b, B + 16 * kk * ldb + 16 * j, ldb);
            wmma::mma_sync(acc[j], a, b, acc[j]);
        }
    }
}

// One warp: the first `rows` (<= 16) rows and hd columns of acc * mul to global dst (row stride
// ld), through the warp's float staging rows (16, ldst).
template <int NJ>
__device__ __forceinline__ void warp_store(Act dst, size_t ld, FragC (&acc)[NJ], float *stage, int ldst, int rows,
                                           int hd, float mul) {
#pragma unroll
    for (int j = 0; j < NJ; j++) wmma::store_matrix_sync(stage + 16 * j, acc[j], ldst, wmma::mem_row_major);
    __syncwarp();
    const int lane = threadIdx.x % 32;
    for (int r = 0; r < min(rows, 16); r++)
        for (int d = lane; d < hd; d += 32) dst[(size_t)r * ld + d] = stage[r * ldst + d] * mul;
    __syncwarp();  // the staging rows are reused by the next call
}

// ---- forward ----
// grid (Tq tiles, H, B). Query t sits at position off + t, off = Tk - Tq, and sees keys <= that.
// The unnormalised output O of the block's rows lives in shared memory: the online softmax
// rescales its rows, the tensor cores add P V to it.
template <int HDP, bool DROP, bool DOCS, size_t SMEM = fwd_smem<HDP>()>
__global__ void __launch_bounds__(kThreads, att_min_blocks(SMEM))
    att_fwd_tc_kernel(Act out, float *lse, Act q, Act k, Act v, int Tq, int Tk, int H, int KV, int hd,
                      size_t kv_bstride, float scale, AttDrop drop, const int32_t *kstart, int window) {
    constexpr int LDH = TcLd<HDP>::H, LDO = TcLd<HDP>::O, NJ = HDP / 16;
    extern __shared__ __align__(128) float smem[];  // WMMA needs 32-byte aligned tiles
    float *Ss = smem;                       // (64, kLdS) scores
    float *Os = Ss + kTile * kLdS;          // (64, LDO)
    bf16 *Qs = (bf16 *)(Os + kTile * LDO);  // (64, LDH)
    bf16 *Ks = Qs + kTile * LDH;            // (64, LDH)
    bf16 *Vs = Ks + kTile * LDH;            // (64, LDH)
    bf16 *Ps = Vs + kTile * LDH;            // (64, kLdP) probabilities
    const int lane = threadIdx.x % 32, r0 = 16 * (threadIdx.x / 32);  // the warp's first row
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;  // the last tiles see the most keys: start them first
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV), off = Tk - Tq;
    const int nq = min(kTile, Tq - q0), kend = off + q0 + nq;  // keys [0, kend) are visible to some row
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t qrow0 = ((size_t)b * Tq + q0) * ldq + (size_t)h * hd;
    const Act kb = k + (b * kv_bstride + (size_t)g * hd), vb = v + (b * kv_bstride + (size_t)g * hd);
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    const int32_t *ks = DOCS && kstart ? kstart + (size_t)b * Tq : nullptr;  // (Tq) each query's document start
    // Per-row values of the warp's 16 rows live in the lanes: lane i holds row i % 16's, and the
    // row loop takes them by shuffle (a register each, not 16)
    const int kfirst_lane =
        DOCS && r0 + lane % 16 < nq ? att_first(ks, q0 + r0 + lane % 16, off + q0 + r0 + lane % 16, window) : 0;
    float m_lane = -INFINITY, l_lane = 0.0f;  // running max and sum of the row

    load_tile_bf16<kTile, HDP>(Qs, q + qrow0, ldq, nq, hd);
    for (int i = threadIdx.x; i < kTile * LDO; i += kThreads) Os[i] = 0.0f;

    for (int k0 = DOCS ? att_first(ks, q0, off + q0, window) / kTile * kTile : 0; k0 < kend; k0 += kTile) {
        next_tiles<HDP>(Ks, Vs, kb + (size_t)k0 * ldk, vb + (size_t)k0 * ldk, ldk, min(kTile, kend - k0), hd);
        warp_abt<HDP, kTile>(Ss + r0 * kLdS, kLdS, Qs + r0 * LDH, LDH, Ks, LDH);  // S = Q K^T
        __syncwarp();
#pragma unroll 2
        for (int r = 0; r < 16; r++) {
            const int row = r0 + r, qpos = off + q0 + row;
            const int kfirst = DOCS ? __shfl_sync(0xffffffffu, kfirst_lane, r) : 0;
            const float m = __shfl_sync(0xffffffffu, m_lane, r), l = __shfl_sync(0xffffffffu, l_lane, r);
            float s[2], mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int col = lane + 32 * c;
                s[c] = k0 + col <= qpos && (!DOCS || k0 + col >= kfirst) ? Ss[row * kLdS + col] * scale : -INFINITY;
                mx = fmaxf(mx, s[c]);
            }
            const float mnew = fmaxf(m, warp_reduce(mx, MaxOp()));
            const float base = mnew == -INFINITY ? 0.0f : mnew;  // no visible key yet: keep exp() finite
            const float alpha = expf(m - base);
            float rs = 0.0f;
            // mask index of column c = 0
            const uint64_t idx0 = drop.head_off + ((uint64_t)h * Tq + q0 + row) * Tk + k0 + lane;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const bf16 p = __float2bfloat16(expf(s[c] - base));
                Ps[row * kLdP + lane + 32 * c] =
                    DROP && !rng_dropout_keep(seed, idx0 + 32 * c, drop.threshold) ? __float2bfloat16(0.0f) : p;
                rs += __bfloat162float(p);  // normalise by the probabilities P V actually uses (before dropout)
            }
            const float lnew = l * alpha + warp_reduce(rs, SumOp());
            if (lane % 16 == r) m_lane = mnew, l_lane = lnew;
            for (int d = lane; d < HDP; d += 32) Os[row * LDO + d] *= alpha;
        }
        __syncwarp();
        FragC acc[NJ];
#pragma unroll
        for (int j = 0; j < NJ; j++) wmma::load_matrix_sync(acc[j], Os + r0 * LDO + 16 * j, LDO, wmma::mem_row_major);
        warp_ab_acc<kTile, NJ>(acc, Ps + r0 * kLdP, kLdP, Vs, LDH);  // O += P V
#pragma unroll
        for (int j = 0; j < NJ; j++) wmma::store_matrix_sync(Os + r0 * LDO + 16 * j, acc[j], LDO, wmma::mem_row_major);
        __syncwarp();
    }

    for (int r = 0; r < 16; r++) {
        const int row = r0 + r;
        const float m = __shfl_sync(0xffffffffu, m_lane, r), l = __shfl_sync(0xffffffffu, l_lane, r);
        if (row < nq) {
            const float inv = 1.0f / l * (DROP ? drop.scale : 1.0f);
            for (int d = lane; d < hd; d += 32) out[qrow0 + (size_t)row * ldq + d] = Os[row * LDO + d] * inv;
            if (lane == 0) lse[((size_t)b * H + h) * Tq + q0 + row] = m + logf(l);
        }
    }
}

// ---- backward ----
// P = exp(S scale - lse), dS = P (dP - Delta); dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K.

// grid (T key tiles, KV, B): dk, dv of one kv head's 64 keys, over its group's query heads and the
// query tiles at or after the keys. Each warp owns 16 keys and keeps their dK, dV in fragments.
template <int HDP, bool DROP, bool DOCS, size_t SMEM = bwd_smem<HDP>(4, 0)>
__global__ void __launch_bounds__(kThreads, att_min_blocks(SMEM))
    att_bwd_dkdv_tc_kernel(Act dk, Act dv, Act q, Act k, Act v, Act dout, const float *lse, const float *delta, int T,
                           int H, int KV, int hd, float scale, AttDrop drop, const int32_t *kstart, int window) {
    constexpr int LDH = TcLd<HDP>::H, LDO = TcLd<HDP>::O, NJ = HDP / 16;
    extern __shared__ __align__(128) float smem[];  // WMMA needs 32-byte aligned tiles
    float *St = smem;                       // (64 keys, kLdS) S^T; the output staging at the end
    float *dPt = St + kTile * kLdS;         // (64, kLdS) dP^T
    float *Ls = dPt + kTile * kLdS;         // (64) lse of the query tile
    float *Ds = Ls + kTile;                 // (64) Delta of the query tile
    bf16 *Ks = (bf16 *)(Ds + kTile);        // (64, LDH)
    bf16 *Vs = Ks + kTile * LDH;            // (64, LDH)
    bf16 *Qs = Vs + kTile * LDH;            // (64, LDH)
    bf16 *dOs = Qs + kTile * LDH;           // (64, LDH)
    // P^T and dS^T (bf16) overwrite the first half of each S^T and dP^T row once the warp has read
    // that row: at head dim 128 the two tiles of their own would keep two blocks off an SM (sm_90)
    bf16 *Pt = (bf16 *)St, *dSt = (bf16 *)dPt;  // (64, kLdPt)
    const int lane = threadIdx.x % 32, r0 = 16 * (threadIdx.x / 32);
    const int k0 = blockIdx.x * kTile, g = blockIdx.y, b = blockIdx.z, grp = H / KV;
    const int nk = min(kTile, T - k0);
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t krow0 = ((size_t)b * T + k0) * ldk + (size_t)g * hd;
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    const int32_t *ks = DOCS && kstart ? kstart + (size_t)b * T : nullptr;  // (T) each query's document start
    const int qend = DOCS ? att_query_stop(ks, k0, T, k0 + nk - 1, window) : T;  // queries past it see none of the keys

    load_tile_bf16<kTile, HDP>(Ks, k + krow0, ldk, nk, hd);
    load_tile_bf16<kTile, HDP>(Vs, v + krow0, ldk, nk, hd);
    FragC dka[NJ], dva[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) wmma::fill_fragment(dka[j], 0.0f), wmma::fill_fragment(dva[j], 0.0f);
    for (int h = g * grp; h < (g + 1) * grp; h++) {
        const size_t stats = ((size_t)b * H + h) * T;
        for (int q0 = k0; q0 < qend; q0 += kTile) {  // queries at positions >= k0
            const size_t qrow0 = ((size_t)b * T + q0) * ldq + (size_t)h * hd;
            next_tiles<HDP>(Qs, dOs, q + qrow0, dout + qrow0, ldq, min(kTile, T - q0), hd, Ls, Ds, lse + stats + q0,
                            delta + stats + q0);
            warp_abt<HDP, kTile>(St + r0 * kLdS, kLdS, Ks + r0 * LDH, LDH, Qs, LDH);    // S^T = K Q^T
            warp_abt<HDP, kTile>(dPt + r0 * kLdS, kLdS, Vs + r0 * LDH, LDH, dOs, LDH);  // dP^T = V dO^T
            int kfirst[DOCS ? 2 : 1];  // of this lane's two query columns
#pragma unroll
            for (int c = 0; c < (DOCS ? 2 : 0); c++)
                kfirst[c] = q0 + lane + 32 * c < T ? att_first(ks, q0 + lane + 32 * c, q0 + lane + 32 * c, window) : 0;
            __syncwarp();
#pragma unroll 4
            for (int r = 0; r < 16; r++) {
                const int row = r0 + r, key = k0 + row;
                float s[2], dps[2];
#pragma unroll
                for (int c = 0; c < 2; c++) s[c] = St[row * kLdS + lane + 32 * c], dps[c] = dPt[row * kLdS + lane + 32 * c];
                __syncwarp();  // the row is read: its bf16 P^T and dS^T may overwrite it
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int col = lane + 32 * c, qpos = q0 + col;
                    const bool seen = key <= qpos && qpos < T && (!DOCS || key >= kfirst[c]);
                    const float p = seen ? expf(s[c] * scale - Ls[col]) : 0.0f;
                    float pv = p, dp = dps[c];
                    if (DROP) {
                        const bool keep =
                            rng_dropout_keep(seed, drop.head_off + ((uint64_t)h * T + qpos) * T + key, drop.threshold);
                        pv = keep ? p * drop.scale : 0.0f;
                        dp = keep ? dp * drop.scale : 0.0f;
                    }
                    Pt[row * kLdPt + col] = __float2bfloat16(pv);
                    dSt[row * kLdPt + col] = __float2bfloat16(p * (dp - Ds[col]));
                }
            }
            __syncwarp();
            warp_ab_acc<kTile, NJ>(dva, Pt + r0 * kLdPt, kLdPt, dOs, LDH);  // dV += P^T dO (P'^T dO under dropout)
            warp_ab_acc<kTile, NJ>(dka, dSt + r0 * kLdPt, kLdPt, Qs, LDH);  // dK += dS^T Q
        }
    }
    __syncthreads();  // St and dPt become the (64, LDO) output staging
    warp_store(dk + krow0 + r0 * ldk, ldk, dka, smem + r0 * LDO, LDO, nk - r0, hd, scale);
    warp_store(dv + krow0 + r0 * ldk, ldk, dva, smem + r0 * LDO, LDO, nk - r0, hd, 1.0f);
}

// grid (T query tiles, H, B): dq of one head's 64 queries over the key tiles they see.
template <int HDP, bool DROP, bool DOCS, size_t SMEM = bwd_smem<HDP>(4, 1)>
__global__ void __launch_bounds__(kThreads, att_min_blocks(SMEM))
    att_bwd_dq_tc_kernel(Act dq, Act q, Act k, Act v, Act dout, const float *lse, const float *delta, int T, int H,
                         int KV, int hd, float scale, AttDrop drop, const int32_t *kstart, int window) {
    constexpr int LDH = TcLd<HDP>::H, LDO = TcLd<HDP>::O, NJ = HDP / 16;
    extern __shared__ __align__(128) float smem[];  // WMMA needs 32-byte aligned tiles
    float *Ss = smem;                       // (64, kLdS) S; the output staging at the end
    float *dPs = Ss + kTile * kLdS;         // (64, kLdS) dP
    float *Ls = dPs + kTile * kLdS;         // (64)
    float *Ds = Ls + kTile;                 // (64)
    bf16 *Qs = (bf16 *)(Ds + kTile);        // (64, LDH)
    bf16 *dOs = Qs + kTile * LDH;           // (64, LDH)
    bf16 *Ks = dOs + kTile * LDH;           // (64, LDH)
    bf16 *Vs = Ks + kTile * LDH;            // (64, LDH)
    bf16 *dSs = Vs + kTile * LDH;           // (64, kLdP)
    const int lane = threadIdx.x % 32, r0 = 16 * (threadIdx.x / 32);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;  // the last tiles see the most keys: start them first
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const int nq = min(kTile, T - q0), kend = q0 + nq;
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t qrow0 = ((size_t)b * T + q0) * ldq + (size_t)h * hd;
    const size_t stats = ((size_t)b * H + h) * T + q0;
    const Act kb = k + ((size_t)b * T * ldk + (size_t)g * hd), vb = v + ((size_t)b * T * ldk + (size_t)g * hd);
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    const int32_t *ks = DOCS && kstart ? kstart + (size_t)b * T : nullptr;  // (T) each query's document start
    // lane i holds that of the warp's row i % 16; the row loop takes it by shuffle (one register, not 16)
    const int kfirst_lane =
        DOCS && r0 + lane % 16 < nq ? att_first(ks, q0 + r0 + lane % 16, q0 + r0 + lane % 16, window) : 0;

    load_tile_bf16<kTile, HDP>(Qs, q + qrow0, ldq, nq, hd);
    load_tile_bf16<kTile, HDP>(dOs, dout + qrow0, ldq, nq, hd);
    load_stats(Ls, Ds, lse + stats, delta + stats, nq);
    FragC dqa[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) wmma::fill_fragment(dqa[j], 0.0f);
    for (int k0 = DOCS ? att_first(ks, q0, q0, window) / kTile * kTile : 0; k0 < kend; k0 += kTile) {
        next_tiles<HDP>(Ks, Vs, kb + (size_t)k0 * ldk, vb + (size_t)k0 * ldk, ldk, min(kTile, kend - k0), hd);
        warp_abt<HDP, kTile>(Ss + r0 * kLdS, kLdS, Qs + r0 * LDH, LDH, Ks, LDH);    // S = Q K^T
        warp_abt<HDP, kTile>(dPs + r0 * kLdS, kLdS, dOs + r0 * LDH, LDH, Vs, LDH);  // dP = dO V^T
        __syncwarp();
#pragma unroll 4
        for (int r = 0; r < 16; r++) {
            const int row = r0 + r, qpos = q0 + row;
            const int kfirst = DOCS ? __shfl_sync(0xffffffffu, kfirst_lane, r) : 0;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int col = lane + 32 * c;
                float dp = dPs[row * kLdS + col];
                if (DROP)
                    dp = rng_dropout_keep(seed, drop.head_off + ((uint64_t)h * T + qpos) * T + k0 + col, drop.threshold)
                             ? dp * drop.scale
                             : 0.0f;
                const bool seen = k0 + col <= qpos && qpos < T && (!DOCS || k0 + col >= kfirst);
                const float ds = seen ? expf(Ss[row * kLdS + col] * scale - Ls[row]) * (dp - Ds[row]) : 0.0f;
                dSs[row * kLdP + col] = __float2bfloat16(ds);
            }
        }
        __syncwarp();
        warp_ab_acc<kTile, NJ>(dqa, dSs + r0 * kLdP, kLdP, Ks, LDH);  // dQ += dS K
    }
    __syncthreads();  // Ss and dPs become the (64, LDO) output staging
    warp_store(dq + qrow0 + r0 * ldq, ldq, dqa, smem + r0 * LDO, LDO, nq - r0, hd, scale);
}

}  // namespace

bool att_tc_fits(int hd) {
    size_t need = 0;
    with_head_dim(hd, [&](auto head) {
        constexpr int HDP = decltype(head)::HDP;
        need = std::max(fwd_smem<HDP>(), bwd_smem<HDP>(4, 1));
    });
    if (need <= cuda_smem_per_block()) return true;
    static bool told;
    if (!told)
        log_msg("fsdpc: note: bf16 attention at head dim %d needs %zu KB of shared memory per block, this GPU allows "
                "%zu KB: attention runs on the fp32 kernels\n", hd, need >> 10, cuda_smem_per_block() >> 10);
    told = true;
    return false;
}

void att_tc_fwd(Act out, float *lse, Act q, Act k, Act v, int B, int Tq, int Tk, int H, int KV, int hd,
                size_t kv_bstride, float scale, const int32_t *kstart, int window, const AttDrop *drop) {
    const AttDrop dp = drop ? *drop : AttDrop{0, 0, 0, 1.0f, 0};
    with_head_dim(hd, [&](auto head) {
        with_flag(drop != nullptr, [&](auto on) {
            with_flag(kstart != nullptr || window > 0, [&](auto docs) {
                constexpr int HDP = decltype(head)::HDP;
                att_launch(att_fwd_tc_kernel<HDP, decltype(on)::value, decltype(docs)::value>,
                           dim3((Tq + kTile - 1) / kTile, H, B), kThreads, fwd_smem<HDP>(), out, lse, q, k, v, Tq, Tk,
                           H, KV, hd, kv_bstride, scale, dp, kstart, window);
            });
        });
    });
}

void att_tc_bwd(Act dq, Act dk, Act dv, const float *delta, Act dout, const float *lse, Act q, Act k, Act v, int B,
                int T, int H, int KV, int hd, float scale, const int32_t *kstart, int window, const AttDrop *drop) {
    const AttDrop dp = drop ? *drop : AttDrop{0, 0, 0, 1.0f, 0};
    with_head_dim(hd, [&](auto head) {
        with_flag(drop != nullptr, [&](auto on) {
            with_flag(kstart != nullptr || window > 0, [&](auto docs) {
                constexpr int HDP = decltype(head)::HDP;
                constexpr bool DROP = decltype(on)::value, DOCS = decltype(docs)::value;
                static_assert(kTile * TcLd<HDP>::O <= 2 * kTile * kLdS, "the output staging must fit the score buffers");
                const unsigned tiles = (T + kTile - 1) / kTile;
                att_launch(att_bwd_dkdv_tc_kernel<HDP, DROP, DOCS>, dim3(tiles, KV, B), kThreads, bwd_smem<HDP>(4, 0),
                           dk, dv, q, k, v, dout, lse, delta, T, H, KV, hd, scale, dp, kstart, window);
                att_launch(att_bwd_dq_tc_kernel<HDP, DROP, DOCS>, dim3(tiles, H, B), kThreads, bwd_smem<HDP>(4, 1), dq,
                           q, k, v, dout, lse, delta, T, H, KV, hd, scale, dp, kstart, window);
            });
        });
    });
}
