// attention: causal grouped-query attention, flash style (fp32, no (Tq, Tk) buffer).
// Forward: per (batch, head, query tile), loop over key tiles with an online softmax; saves the
// row log-sum-exp lse (B, H, Tq) of the scaled scores. Backward recomputes P = exp(S - lse):
//   dV = P^T dO, dP = dO V^T, dS = P * (dP - Delta), dQ = scale dS K, dK = scale dS^T Q,
// with Delta = rowsum(dO * O) (B, H, T) in the scratch. dK/dV come from one block per
// (batch, kv head, key tile) that loops over the group's query heads, and dQ from one block per
// (batch, head, query tile) that loops over key tiles: every output element has one owner, so
// there are no atomics and the results are deterministic.
// Dropout on P (DROP): the softmax statistics (l, lse, Delta) are those of P itself; P V uses
// mask * P and the output is scaled by 1 / (1 - p). Backward regenerates the mask per element:
// dV = P'^T dO with P' = mask * P / (1 - p), and dS = P * (mask * dP / (1 - p) - Delta).
// Document masks (DOCS, kstart): a query also ignores keys before kstart[query]. Key tiles before
// the first query's kstart are skipped (kstart is non-decreasing along a row), as are query tiles
// after the last query that sees a key tile; partly masked tiles mask per element, as the causal
// edge does. A row can then see no key of a whole tile, so the online softmax keeps exp() finite.
// A sliding window (kernels.h) is a first key per query too (att_first), under the same DOCS flag;
// kstart is then NULL when there are no documents.
//
// Tiles live in shared memory as (rows, HDP + 1) or (rows, cols + 1): the odd row stride keeps
// the column-strided reads of tile_mac free of bank conflicts. Head dims up to 128 are padded
// to HDP in {32, 64, 128} with zeros, which changes no dot product.
#include <math.h>

#include "attention.cuh"
#include "cudnn_attention.cuh"

namespace {

constexpr int kAttThreads = 256;  // 16 x 16: ty = tid / 16 owns tile rows ty + 16 i, tx = tid % 16 columns tx + 16 j

// Tile sizes per padded head dim (multiples of 16). Shared memory stays <= ~116 KB, within the
// A100's 163 KB per block and the H100's 227 KB. SMALL halves backward's tiles to <= ~73 KB for
// parts with less (sm_86/89: 99 KB), chosen at run time from the device's limit. FWD, DKV, DQ:
// the kernels' bytes of shared memory, functions of the padded head dim and the tile.
constexpr size_t att_fwd_smem(int P, int BQ, int BK) {
    return sizeof(float) * ((size_t)(BQ + 2 * BK) * (P + 1) + (size_t)BQ * (BK + 1));
}
constexpr size_t att_dkv_smem(int P, int BQ, int BK) {
    return sizeof(float) * ((size_t)2 * (BK + BQ) * (P + 1) + (size_t)2 * BK * (BQ + 1) + 2 * BQ);
}
constexpr size_t att_dq_smem(int P, int BQ, int BK) {
    return sizeof(float) * ((size_t)2 * (BQ + BK) * (P + 1) + (size_t)BQ * (BK + 1) + 2 * BQ);
}
template <int P> struct AttFwdTiles {
    static constexpr int FWD_Q = 64, FWD_K = P > 64 ? 32 : 64;
    static constexpr size_t FWD = att_fwd_smem(P, FWD_Q, FWD_K);
};
template <int P, bool SMALL> struct AttBwdTiles {
    static constexpr int DKV_Q = P > 64 ? 32 : 64, DKV_K = SMALL ? 32 : 64;    // dK/dV
    static constexpr int DQ_Q = SMALL ? 32 : 64, DQ_K = P > 64 ? 32 : 64;      // dQ
    static constexpr size_t DKV = att_dkv_smem(P, DKV_Q, DKV_K), DQ = att_dq_smem(P, DQ_Q, DQ_K);
};

// dst (ROWS, HDP + 1) <- rows of src (row stride ld): the first `valid` rows and hd columns,
// zeros elsewhere. Consecutive threads read consecutive columns (coalesced).
template <int ROWS, int HDP>
__device__ __forceinline__ void load_tile(float *dst, Act src, size_t ld, int valid, int hd) {
    for (int i = threadIdx.x; i < ROWS * HDP; i += kAttThreads) {
        const int r = i / HDP, d = i % HDP;
        dst[r * (HDP + 1) + d] = (r < valid && d < hd) ? src[(size_t)r * ld + d] : 0.0f;
    }
}

// acc[i][j] += sum_{kk < K} A[(ty + 16 i) * lda + kk] * B[kk * bk + (tx + 16 j) * bc]
// Bank-conflict free when lda is not a multiple of 32 (a warp reads two A rows) and bc is odd
// (16 distinct B columns; the other half-warp reads the same ones).
template <int RM, int RN, int K>
__device__ __forceinline__ void tile_mac(float (&acc)[RM][RN], const float *A, int lda, const float *B, int bk,
                                         int bc) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
    for (int kk = 0; kk < K; kk++) {
        float a[RM], b[RN];
#pragma unroll
        for (int i = 0; i < RM; i++) a[i] = A[(ty + 16 * i) * lda + kk];
#pragma unroll
        for (int j = 0; j < RN; j++) b[j] = B[kk * bk + (tx + 16 * j) * bc];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// (rows, hd) tile acc * mul to global rows dst + r * ld, rows < valid, columns < hd
template <int RM, int RD>
__device__ __forceinline__ void store_tile(Act dst, size_t ld, const float (&acc)[RM][RD], int valid, int hd,
                                           float mul) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = ty + 16 * i;
        if (r >= valid) continue;
#pragma unroll
        for (int j = 0; j < RD; j++)
            if (tx + 16 * j < hd) dst[(size_t)r * ld + tx + 16 * j] = acc[i][j] * mul;
    }
}

// Block-wide: once the previous tiles are no longer read, loads the next ROWS rows of a and b
// (row stride ld, n valid) into the tiles A and B.
template <int ROWS, int HDP>
__device__ __forceinline__ void next_tiles(float *A, float *B, Act a, Act b, size_t ld, int n, int hd) {
    __syncthreads();
    load_tile<ROWS, HDP>(A, a, ld, n, hd);
    load_tile<ROWS, HDP>(B, b, ld, n, hd);
    __syncthreads();
}

// lse and Delta of query rows [q0, q0 + BQ) into shared Ls, Ds (0 past the valid rows)
template <int BQ>
__device__ __forceinline__ void load_row_stats(float *Ls, float *Ds, const float *lse, const float *delta, int valid) {
    for (int r = threadIdx.x; r < BQ; r += kAttThreads) {
        Ls[r] = r < valid ? lse[r] : 0.0f;
        Ds[r] = r < valid ? delta[r] : 0.0f;
    }
}

// ---- forward ----
// grid (Tq tiles, H, B). Query t sits at position off + t, off = Tk - Tq, and sees keys <= that.
template <int HDP, int BQ, int BK, bool DROP, bool DOCS, size_t SMEM = att_fwd_smem(HDP, BQ, BK)>
__global__ void __launch_bounds__(kAttThreads, att_min_blocks(SMEM))
    att_fwd_kernel(Act out, float *lse, Act q, Act k, Act v, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride,
                   float scale, AttDrop drop, const int32_t *kstart, int window) {
    constexpr int LDH = HDP + 1, LDP = BK + 1, RM = BQ / 16, RK = BK / 16, RD = HDP / 16;
    extern __shared__ float smem[];
    float *Qs = smem;             // (BQ, LDH)
    float *Ks = Qs + BQ * LDH;    // (BK, LDH)
    float *Vs = Ks + BK * LDH;    // (BK, LDH)
    float *Ps = Vs + BK * LDH;    // (BQ, LDP) probabilities of the current key tile
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;  // the last tiles see the most keys: start them first
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV), off = Tk - Tq;
    const int nq = min(BQ, Tq - q0), kend = off + q0 + nq;  // keys [0, kend) are visible to some row
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t qrow0 = ((size_t)b * Tq + q0) * ldq + (size_t)h * hd;  // (BQ, hd) rows of q and out
    const Act kb = k + (b * kv_bstride + (size_t)g * hd), vb = v + (b * kv_bstride + (size_t)g * hd);
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    const int32_t *ks = DOCS && kstart ? kstart + (size_t)b * Tq : nullptr;  // (Tq) each query's document start
    int kfirst[DOCS ? RM : 1];  // of this thread's rows (0 for padding rows)
#pragma unroll
    for (int i = 0; i < (DOCS ? RM : 0); i++)
        kfirst[i] = ty + 16 * i < nq ? att_first(ks, q0 + ty + 16 * i, off + q0 + ty + 16 * i, window) : 0;

    load_tile<BQ, HDP>(Qs, q + qrow0, ldq, nq, hd);
    float m[RM], l[RM], o[RM][RD] = {};
#pragma unroll
    for (int i = 0; i < RM; i++) m[i] = -INFINITY, l[i] = 0.0f;

    for (int k0 = DOCS ? att_first(ks, q0, off + q0, window) / BK * BK : 0; k0 < kend; k0 += BK) {
        next_tiles<BK, HDP>(Ks, Vs, kb + (size_t)k0 * ldk, vb + (size_t)k0 * ldk, ldk, min(BK, kend - k0), hd);
        float s[RM][RK] = {};
        tile_mac<RM, RK, HDP>(s, Qs, LDH, Ks, 1, LDH);  // S = Q K^T
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int qpos = off + q0 + ty + 16 * i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < RK; j++) {
                const int key = k0 + tx + 16 * j;
                s[i][j] = key <= qpos && (!DOCS || key >= kfirst[i]) ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            // a row lives in the 16 lanes of a half-warp. Without documents mnew is finite: key 0
            // is visible to every row (valid rows see only loaded keys; padding rows are never
            // stored). With them a row may have seen no key yet: base keeps exp() finite then.
            const float mnew = fmaxf(m[i], warp_reduce<16>(mx, MaxOp()));
            const float base = DOCS && mnew == -INFINITY ? 0.0f : mnew;
            const float alpha = expf(m[i] - base);  // 0 on the first tile (m = -inf)
            float rs = 0.0f;
            // mask index of column j = 0
            const uint64_t idx0 = drop.head_off + ((uint64_t)h * Tq + q0 + ty + 16 * i) * Tk + k0 + tx;
#pragma unroll
            for (int j = 0; j < RK; j++) {
                const float p = expf(s[i][j] - base);
                Ps[(ty + 16 * i) * LDP + tx + 16 * j] =
                    DROP && !rng_dropout_keep(seed, idx0 + 16 * j, drop.threshold) ? 0.0f : p;
                rs += p;  // the softmax normalises over every key, dropped or not
            }
            l[i] = l[i] * alpha + warp_reduce<16>(rs, SumOp());
            m[i] = mnew;
#pragma unroll
            for (int j = 0; j < RD; j++) o[i][j] *= alpha;
        }
        __syncwarp();  // a row of P is written and then read by its own half-warp only
        tile_mac<RM, RD, BK>(o, Ps, LDP, Vs, LDH, 1);  // O += P V
    }

#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = ty + 16 * i;
        if (r >= nq) continue;
        const float inv = 1.0f / l[i] * (DROP ? drop.scale : 1.0f);
#pragma unroll
        for (int j = 0; j < RD; j++)
            if (tx + 16 * j < hd) out[qrow0 + (size_t)r * ldq + tx + 16 * j] = o[i][j] * inv;
        if (tx == 0) lse[((size_t)b * H + h) * Tq + q0 + r] = m[i] + logf(l[i]);
    }
}

// ---- backward ----

// delta (B, H, T) = rowsum(dout * out); one warp per (b, t, h) row
__global__ void att_delta_kernel(float *delta, Act dout, Act out, int T, int H, int hd, size_t rows) {
    const size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;  // (b * T + t) * H + h
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // whole warps
    const Act a = dout + row * hd, c = out + row * hd;
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s += a[d] * c[d];
    s = warp_reduce(s, SumOp());
    if (lane == 0) {
        const size_t b = row / ((size_t)T * H), t = row / H % T, h = row % H;
        delta[(b * H + h) * T + t] = s;
    }
}

// grid (T key tiles, KV, B): dk, dv (BK, hd) of one kv head, over its group's query heads
template <int HDP, int BQ, int BK, bool DROP, bool DOCS, size_t SMEM = att_dkv_smem(HDP, BQ, BK)>
__global__ void __launch_bounds__(kAttThreads, att_min_blocks(SMEM))
    att_bwd_dkdv_kernel(Act dk, Act dv, Act q, Act k, Act v, Act dout, const float *lse, const float *delta, int T,
                        int H, int KV, int hd, float scale, AttDrop drop, const int32_t *kstart, int window) {
    constexpr int LDH = HDP + 1, LDQ = BQ + 1, RK = BK / 16, RQ = BQ / 16, RD = HDP / 16;
    extern __shared__ float smem[];
    float *Ks = smem;              // (BK, LDH)
    float *Vs = Ks + BK * LDH;     // (BK, LDH)
    float *Qs = Vs + BK * LDH;     // (BQ, LDH)
    float *dOs = Qs + BQ * LDH;    // (BQ, LDH)
    float *Pt = dOs + BQ * LDH;    // (BK, LDQ) P^T
    float *dSt = Pt + BK * LDQ;    // (BK, LDQ) dS^T
    float *Ls = dSt + BK * LDQ;    // (BQ)
    float *Ds = Ls + BQ;           // (BQ)
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int k0 = blockIdx.x * BK, g = blockIdx.y, b = blockIdx.z, grp = H / KV;
    const int nk = min(BK, T - k0);
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t krow0 = ((size_t)b * T + k0) * ldk + (size_t)g * hd;  // (BK, hd) rows of k, v, dk, dv
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    const int32_t *ks = DOCS && kstart ? kstart + (size_t)b * T : nullptr;  // (T) each query's document start
    const int qend = DOCS ? att_query_stop(ks, k0, T, k0 + nk - 1, window) : T;  // queries past it see none of the keys

    load_tile<BK, HDP>(Ks, k + krow0, ldk, nk, hd);
    load_tile<BK, HDP>(Vs, v + krow0, ldk, nk, hd);
    float dka[RK][RD] = {}, dva[RK][RD] = {};
    for (int h = g * grp; h < (g + 1) * grp; h++) {
        const size_t stats = ((size_t)b * H + h) * T;
        for (int q0 = k0 / BQ * BQ; q0 < qend; q0 += BQ) {  // query tiles with positions >= k0
            const int nq = min(BQ, T - q0);
            const size_t qrow0 = ((size_t)b * T + q0) * ldq + (size_t)h * hd;
            __syncthreads();  // the previous tile's shared data is no longer read
            load_tile<BQ, HDP>(Qs, q + qrow0, ldq, nq, hd);
            load_tile<BQ, HDP>(dOs, dout + qrow0, ldq, nq, hd);
            load_row_stats<BQ>(Ls, Ds, lse + stats + q0, delta + stats + q0, nq);
            __syncthreads();
            int kfirst[DOCS ? RQ : 1];  // of this thread's query columns
#pragma unroll
            for (int j = 0; j < (DOCS ? RQ : 0); j++)  // past T: INT_MAX, which also masks the padding columns
                kfirst[j] = q0 + tx + 16 * j < T ? att_first(ks, q0 + tx + 16 * j, q0 + tx + 16 * j, window) : INT_MAX;
            float st[RK][RQ] = {}, dpt[RK][RQ] = {};
            tile_mac<RK, RQ, HDP>(st, Ks, LDH, Qs, 1, LDH);    // S^T = K Q^T
            tile_mac<RK, RQ, HDP>(dpt, Vs, LDH, dOs, 1, LDH);  // dP^T = V dO^T
#pragma unroll
            for (int i = 0; i < RK; i++) {
                const int c = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < RQ; j++) {
                    const int r = tx + 16 * j, qpos = q0 + r;
                    const bool seen = k0 + c <= qpos && (DOCS ? k0 + c >= kfirst[j] : qpos < T);
                    const float p = seen ? expf(st[i][j] * scale - Ls[r]) : 0.0f;
                    float pv = p, dp = dpt[i][j];
                    if (DROP) {
                        const bool keep =
                            rng_dropout_keep(seed, drop.head_off + ((uint64_t)h * T + qpos) * T + k0 + c, drop.threshold);
                        pv = keep ? p * drop.scale : 0.0f;
                        dp = keep ? dp * drop.scale : 0.0f;
                    }
                    Pt[c * LDQ + r] = pv;
                    dSt[c * LDQ + r] = p * (dp - Ds[r]);
                }
            }
            __syncthreads();
            tile_mac<RK, RD, BQ>(dva, Pt, LDQ, dOs, LDH, 1);  // dV += P^T dO (P'^T dO under dropout)
            tile_mac<RK, RD, BQ>(dka, dSt, LDQ, Qs, LDH, 1);  // dK += dS^T Q (scaled at the end)
        }
    }
    store_tile(dk + krow0, ldk, dka, nk, hd, scale);
    store_tile(dv + krow0, ldk, dva, nk, hd, 1.0f);
}

// grid (T query tiles, H, B): dq (BQ, hd) of one head
template <int HDP, int BQ, int BK, bool DROP, bool DOCS, size_t SMEM = att_dq_smem(HDP, BQ, BK)>
__global__ void __launch_bounds__(kAttThreads, att_min_blocks(SMEM))
    att_bwd_dq_kernel(Act dq, Act q, Act k, Act v, Act dout, const float *lse, const float *delta, int T, int H,
                      int KV, int hd, float scale, AttDrop drop, const int32_t *kstart, int window) {
    constexpr int LDH = HDP + 1, LDS = BK + 1, RM = BQ / 16, RK = BK / 16, RD = HDP / 16;
    extern __shared__ float smem[];
    float *Qs = smem;              // (BQ, LDH)
    float *dOs = Qs + BQ * LDH;    // (BQ, LDH)
    float *Ks = dOs + BQ * LDH;    // (BK, LDH)
    float *Vs = Ks + BK * LDH;     // (BK, LDH)
    float *dSs = Vs + BK * LDH;    // (BQ, LDS)
    float *Ls = dSs + BQ * LDS;    // (BQ)
    float *Ds = Ls + BQ;           // (BQ)
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;  // the last tiles see the most keys: start them first
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const int nq = min(BQ, T - q0), kend = q0 + nq;
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t qrow0 = ((size_t)b * T + q0) * ldq + (size_t)h * hd;  // (BQ, hd) rows of q, dout, dq
    const size_t stats = ((size_t)b * H + h) * T + q0;
    const Act kb = k + ((size_t)b * T * ldk + (size_t)g * hd), vb = v + ((size_t)b * T * ldk + (size_t)g * hd);
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    const int32_t *ks = DOCS && kstart ? kstart + (size_t)b * T : nullptr;  // (T) each query's document start
    int kfirst[DOCS ? RM : 1];  // of this thread's rows (0 for padding rows)
#pragma unroll
    for (int i = 0; i < (DOCS ? RM : 0); i++)
        kfirst[i] = ty + 16 * i < nq ? att_first(ks, q0 + ty + 16 * i, q0 + ty + 16 * i, window) : 0;

    load_tile<BQ, HDP>(Qs, q + qrow0, ldq, nq, hd);
    load_tile<BQ, HDP>(dOs, dout + qrow0, ldq, nq, hd);
    load_row_stats<BQ>(Ls, Ds, lse + stats, delta + stats, nq);
    float dqa[RM][RD] = {};
    for (int k0 = DOCS ? att_first(ks, q0, q0, window) / BK * BK : 0; k0 < kend; k0 += BK) {
        next_tiles<BK, HDP>(Ks, Vs, kb + (size_t)k0 * ldk, vb + (size_t)k0 * ldk, ldk, min(BK, kend - k0), hd);
        float s[RM][RK] = {}, dp[RM][RK] = {};
        tile_mac<RM, RK, HDP>(s, Qs, LDH, Ks, 1, LDH);    // S = Q K^T
        tile_mac<RM, RK, HDP>(dp, dOs, LDH, Vs, 1, LDH);  // dP = dO V^T
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int r = ty + 16 * i, qpos = q0 + r;
#pragma unroll
            for (int j = 0; j < RK; j++) {
                const int c = tx + 16 * j;
                float dpv = dp[i][j];
                if (DROP)
                    dpv = rng_dropout_keep(seed, drop.head_off + ((uint64_t)h * T + qpos) * T + k0 + c, drop.threshold)
                              ? dpv * drop.scale
                              : 0.0f;
                const bool seen = k0 + c <= qpos && qpos < T && (!DOCS || k0 + c >= kfirst[i]);
                dSs[r * LDS + c] = seen ? expf(s[i][j] * scale - Ls[r]) * (dpv - Ds[r]) : 0.0f;
            }
        }
        __syncthreads();
        tile_mac<RM, RD, BK>(dqa, dSs, LDS, Ks, LDH, 1);  // dQ += dS K (scaled at the end)
    }
    store_tile(dq + qrow0, ldq, dqa, nq, hd, scale);
}

// ---- ring attention's blocks (kernels.h kern_attention_part_*): positions instead of indices ----
// The same tiles as above, with the mask by the queries' and keys' positions in their sequence
// (qpos, kpos increasing), so a cp rank's two chunks and any block of the ring take one launch.
// Every row mask is a key range [first, qpos]: a tile's rows need the keys from its first row's
// first to its last row's position, found by binary search.

// the first index of the increasing pos[0..n) whose position is at least p
__device__ __forceinline__ int part_lower(const int32_t *pos, int n, int p) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (pos[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// the end of the queries that see some key at a position <= kmax: their first key is non-decreasing
__device__ __forceinline__ int part_query_end(const int32_t *qpos, const int32_t *qf, int Tq, int kmax, int window) {
    int lo = 0, hi = Tq;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (att_first(qf, mid, qpos[mid], window) > kmax) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// A query tile of a part kernel with grid (Tq tiles, H, B): where its rows, keys and values are,
// this thread's rows' positions and first keys (a padding row sees nothing), and the keys
// [kbeg, kend) some row of the tile sees
template <int BQ> struct PartRows {
    static constexpr int RM = BQ / 16;
    int q0, h, b, nq, kbeg, kend;
    size_t ldq, ldk, qrow0;  // qrow0: the tile's first row of q, out, dout and dq (head h)
    Act kb, vb;              // row b's keys and values of head h's kv head
    const int32_t *qf;       // row b's document starts (NULL: none)
    int qp[RM], kfirst[RM];
    __device__ __forceinline__ PartRows(Act k, Act v, int Tq, int Tk, int H, int KV, int hd, const int32_t *qpos,
                                        const int32_t *kpos, const int32_t *qfirst, int window) {
        const int ty = threadIdx.x / 16, g = blockIdx.y / (H / KV);
        q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z, nq = min(BQ, Tq - q0);
        ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
        qrow0 = ((size_t)b * Tq + q0) * ldq + (size_t)h * hd;
        kb = k + ((size_t)b * Tk * ldk + (size_t)g * hd), vb = v + ((size_t)b * Tk * ldk + (size_t)g * hd);
        qf = qfirst ? qfirst + (size_t)b * Tq : nullptr;
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int r = q0 + ty + 16 * i;
            qp[i] = r < Tq ? qpos[r] : INT_MIN;
            kfirst[i] = r < Tq ? att_first(qf, r, qp[i], window) : INT_MAX;
        }
        kbeg = part_lower(kpos, Tk, att_first(qf, q0, qpos[q0], window));
        kend = part_lower(kpos, Tk, qpos[q0 + nq - 1] + 1);
    }
};

// Under dropout (kernels.h): whether head h keeps the probability of its query at position qp for
// the key at kp, the whole-sequence kernels' mask for them in a sequence of seq tokens
__device__ __forceinline__ bool part_keep(uint64_t seed, const AttDrop &d, int h, int seq, int qp, int kp) {
    return rng_dropout_keep(seed, d.head_off + ((uint64_t)h * seq + (uint64_t)qp) * seq + (uint64_t)kp, d.threshold);
}

// grid (Tq tiles, H, B): this block's part of out and lse, merged into them by log-sum-exp. Under
// dropout P V uses the kept probabilities (times 1 / (1 - p)), lse those of P itself.
template <int HDP, int BQ, int BK, bool DROP, size_t SMEM = att_fwd_smem(HDP, BQ, BK)>
__global__ void __launch_bounds__(kAttThreads, att_min_blocks(SMEM))
    att_part_fwd_kernel(Act out, float *lse, Act q, Act k, Act v, int Tq, int Tk, int H, int KV, int hd, float scale,
                        const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst, int window, int first,
                        AttDrop drop, int seq) {
    constexpr int LDH = HDP + 1, LDP = BK + 1, RM = BQ / 16, RK = BK / 16, RD = HDP / 16;
    extern __shared__ float smem[];
    float *Qs = smem, *Ks = Qs + BQ * LDH, *Vs = Ks + BK * LDH, *Ps = Vs + BK * LDH;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const PartRows<BQ> t(k, v, Tq, Tk, H, KV, hd, qpos, kpos, qfirst, window);
    const int q0 = t.q0, h = t.h, b = t.b, nq = t.nq, kend = t.kend;
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    load_tile<BQ, HDP>(Qs, q + t.qrow0, t.ldq, nq, hd);
    float m[RM], l[RM], o[RM][RD] = {};
#pragma unroll
    for (int i = 0; i < RM; i++) m[i] = -INFINITY, l[i] = 0.0f;
    for (int k0 = t.kbeg; k0 < kend; k0 += BK) {
        next_tiles<BK, HDP>(Ks, Vs, t.kb + (size_t)k0 * t.ldk, t.vb + (size_t)k0 * t.ldk, t.ldk, min(BK, kend - k0), hd);
        float s[RM][RK] = {};
        tile_mac<RM, RK, HDP>(s, Qs, LDH, Ks, 1, LDH);
        int kp[RK];  // this thread's keys' positions (a padding key is seen by no row)
#pragma unroll
        for (int j = 0; j < RK; j++) kp[j] = k0 + tx + 16 * j < kend ? kpos[k0 + tx + 16 * j] : INT_MAX;
#pragma unroll
        for (int i = 0; i < RM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < RK; j++) {
                s[i][j] = kp[j] <= t.qp[i] && kp[j] >= t.kfirst[i] ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            const float mnew = fmaxf(m[i], warp_reduce<16>(mx, MaxOp()));
            const float base = mnew == -INFINITY ? 0.0f : mnew;  // a row that has seen no key yet
            const float alpha = expf(m[i] - base);
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < RK; j++) {
                const float p = expf(s[i][j] - base);
                Ps[(ty + 16 * i) * LDP + tx + 16 * j] = DROP && !part_keep(seed, drop, h, seq, t.qp[i], kp[j]) ? 0.0f : p;
                rs += p;  // the softmax normalises over every key, dropped or not
            }
            l[i] = l[i] * alpha + warp_reduce<16>(rs, SumOp());
            m[i] = mnew;
#pragma unroll
            for (int j = 0; j < RD; j++) o[i][j] *= alpha;
        }
        __syncwarp();
        tile_mac<RM, RD, BK>(o, Ps, LDP, Vs, LDH, 1);
    }
    // merge: the rows' earlier part (lo, out) and this block's (ln, o / l), weighted by their sums.
    // Every lane of a row reads its lse before the barrier, and one writes it after.
    float lo[RM];
#pragma unroll
    for (int i = 0; i < RM; i++) lo[i] = first || ty + 16 * i >= nq ? -INFINITY : lse[((size_t)b * H + h) * Tq + q0 + ty + 16 * i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = ty + 16 * i;
        if (r >= nq) continue;
        const size_t li = ((size_t)b * H + h) * Tq + q0 + r;
        const float ln = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
        const Act orow = out + t.qrow0 + (size_t)r * t.ldq;
        if (ln == -INFINITY) {  // this block adds nothing
            if (first) {
#pragma unroll
                for (int j = 0; j < RD; j++)
                    if (tx + 16 * j < hd) orow[tx + 16 * j] = 0.0f;
                if (tx == 0) lse[li] = -INFINITY;
            }
            continue;
        }
        const float mx = fmaxf(lo[i], ln), wo = lo[i] == -INFINITY ? 0.0f : expf(lo[i] - mx), wn = expf(ln - mx);
        const float inv = 1.0f / (wo + wn);
#pragma unroll
        for (int j = 0; j < RD; j++)
            if (tx + 16 * j < hd) {
                const float old = wo > 0.0f ? (float)orow[tx + 16 * j] : 0.0f;
                orow[tx + 16 * j] = (wo * old + wn * o[i][j] / l[i] * (DROP ? drop.scale : 1.0f)) * inv;
            }
        if (tx == 0) lse[li] = mx + logf(wo + wn);
    }
}

// (rows, hd) tile acc * mul added to global rows dst + r * ld (the ring's running sums)
template <int RM, int RD>
__device__ __forceinline__ void add_tile(Act dst, size_t ld, const float (&acc)[RM][RD], int valid, int hd, float mul) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = ty + 16 * i;
        if (r >= valid) continue;
#pragma unroll
        for (int j = 0; j < RD; j++)
            if (tx + 16 * j < hd) {
                const Act e = dst + (size_t)r * ld + tx + 16 * j;
                e[0] = (float)e[0] + acc[i][j] * mul;
            }
    }
}

// lse and Delta = rowsum(dout * out) of query rows [q0, q0 + valid) into Ls, Ds (0 past them):
// the part kernels take no scratch, so each tile sums its rows' Delta itself
template <int BQ>
__device__ __forceinline__ void part_row_stats(float *Ls, float *Ds, const float *lse, Act dout, Act out, size_t ld,
                                               int valid, int hd) {
    for (int r = threadIdx.x; r < BQ; r += kAttThreads) {
        float d = 0.0f;
        for (int c = 0; r < valid && c < hd; c++) d += (float)dout[(size_t)r * ld + c] * (float)out[(size_t)r * ld + c];
        Ls[r] = r < valid ? lse[r] : 0.0f;
        Ds[r] = d;
    }
}

// grid (Tk tiles, KV, B): dk, dv of one key tile of one kv head += its group's query heads' share.
// Under dropout dv takes the kept probabilities P' and dS = P (mask dP / (1 - p) - Delta), as the
// whole-sequence kernels do.
template <int HDP, int BQ, int BK, bool DROP, size_t SMEM = att_dkv_smem(HDP, BQ, BK)>
__global__ void __launch_bounds__(kAttThreads, att_min_blocks(SMEM))
    att_part_dkdv_kernel(Act dk, Act dv, Act q, Act k, Act v, Act dout, Act out, const float *lse, int Tq, int Tk, int H,
                         int KV, int hd, float scale, const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst,
                         int window, AttDrop drop, int seq) {
    constexpr int LDH = HDP + 1, LDQ = BQ + 1, RK = BK / 16, RQ = BQ / 16, RD = HDP / 16;
    extern __shared__ float smem[];
    float *Ks = smem, *Vs = Ks + BK * LDH, *Qs = Vs + BK * LDH, *dOs = Qs + BQ * LDH;
    float *Pt = dOs + BQ * LDH, *dSt = Pt + BK * LDQ, *Ls = dSt + BK * LDQ, *Ds = Ls + BQ;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int k0 = blockIdx.x * BK, g = blockIdx.y, b = blockIdx.z, grp = H / KV;
    const int nk = min(BK, Tk - k0);
    const size_t ldq = (size_t)H * hd, ldk = (size_t)KV * hd;
    const size_t krow0 = ((size_t)b * Tk + k0) * ldk + (size_t)g * hd;
    const int32_t *qf = qfirst ? qfirst + (size_t)b * Tq : nullptr;
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + b) : 0;
    // the queries that see some key of the tile: from the first at or after its first key, to the
    // first whose mask starts past its last
    const int qbeg = part_lower(qpos, Tq, kpos[k0]), qend = part_query_end(qpos, qf, Tq, kpos[k0 + nk - 1], window);
    int kp[RK];
#pragma unroll
    for (int i = 0; i < RK; i++) kp[i] = ty + 16 * i < nk ? kpos[k0 + ty + 16 * i] : INT_MAX;
    load_tile<BK, HDP>(Ks, k + krow0, ldk, nk, hd);
    load_tile<BK, HDP>(Vs, v + krow0, ldk, nk, hd);
    float dka[RK][RD] = {}, dva[RK][RD] = {};
    for (int h = g * grp; h < (g + 1) * grp; h++) {
        const size_t stats = ((size_t)b * H + h) * Tq;
        for (int q0 = qbeg; q0 < qend; q0 += BQ) {
            const int nq = min(BQ, qend - q0);
            const size_t qrow0 = ((size_t)b * Tq + q0) * ldq + (size_t)h * hd;
            __syncthreads();
            load_tile<BQ, HDP>(Qs, q + qrow0, ldq, nq, hd);
            load_tile<BQ, HDP>(dOs, dout + qrow0, ldq, nq, hd);
            part_row_stats<BQ>(Ls, Ds, lse + stats + q0, dout + qrow0, out + qrow0, ldq, nq, hd);
            __syncthreads();
            int kfirst[RQ], qp[RQ];  // of this thread's query columns: a padding column sees nothing
#pragma unroll
            for (int j = 0; j < RQ; j++) {
                const int r = tx + 16 * j;
                qp[j] = r < nq ? qpos[q0 + r] : INT_MIN;
                kfirst[j] = r < nq ? att_first(qf, q0 + r, qp[j], window) : INT_MAX;
            }
            float st[RK][RQ] = {}, dpt[RK][RQ] = {};
            tile_mac<RK, RQ, HDP>(st, Ks, LDH, Qs, 1, LDH);
            tile_mac<RK, RQ, HDP>(dpt, Vs, LDH, dOs, 1, LDH);
#pragma unroll
            for (int i = 0; i < RK; i++) {
                const int c = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < RQ; j++) {
                    const int r = tx + 16 * j;
                    const bool seen = kp[i] <= qp[j] && kp[i] >= kfirst[j];
                    const float p = seen ? expf(st[i][j] * scale - Ls[r]) : 0.0f;
                    const float f = DROP ? (part_keep(seed, drop, h, seq, qp[j], kp[i]) ? drop.scale : 0.0f) : 1.0f;
                    Pt[c * LDQ + r] = p * f;
                    dSt[c * LDQ + r] = p * (dpt[i][j] * f - Ds[r]);
                }
            }
            __syncthreads();
            tile_mac<RK, RD, BQ>(dva, Pt, LDQ, dOs, LDH, 1);
            tile_mac<RK, RD, BQ>(dka, dSt, LDQ, Qs, LDH, 1);
        }
    }
    add_tile(dk + krow0, ldk, dka, nk, hd, scale);
    add_tile(dv + krow0, ldk, dva, nk, hd, 1.0f);
}

// grid (Tq tiles, H, B): dq of one query tile of one head += this block's share
template <int HDP, int BQ, int BK, bool DROP, size_t SMEM = att_dq_smem(HDP, BQ, BK)>
__global__ void __launch_bounds__(kAttThreads, att_min_blocks(SMEM))
    att_part_dq_kernel(Act dq, Act q, Act k, Act v, Act dout, Act out, const float *lse, int Tq, int Tk, int H, int KV,
                       int hd, float scale, const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst, int window,
                       AttDrop drop, int seq) {
    constexpr int LDH = HDP + 1, LDS = BK + 1, RM = BQ / 16, RK = BK / 16, RD = HDP / 16;
    extern __shared__ float smem[];
    float *Qs = smem, *dOs = Qs + BQ * LDH, *Ks = dOs + BQ * LDH, *Vs = Ks + BK * LDH, *dSs = Vs + BK * LDH;
    float *Ls = dSs + BQ * LDS, *Ds = Ls + BQ;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const PartRows<BQ> t(k, v, Tq, Tk, H, KV, hd, qpos, kpos, qfirst, window);
    const int kend = t.kend;
    if (t.kbeg >= kend) return;  // no key of the block for these rows: dq keeps its sum
    const uint64_t seed = DROP ? rng_dropout_seed(drop.key, drop.sample0 + t.b) : 0;
    load_tile<BQ, HDP>(Qs, q + t.qrow0, t.ldq, t.nq, hd);
    load_tile<BQ, HDP>(dOs, dout + t.qrow0, t.ldq, t.nq, hd);
    part_row_stats<BQ>(Ls, Ds, lse + ((size_t)t.b * H + t.h) * Tq + t.q0, dout + t.qrow0, out + t.qrow0, t.ldq, t.nq, hd);
    float dqa[RM][RD] = {};
    for (int k0 = t.kbeg; k0 < kend; k0 += BK) {
        next_tiles<BK, HDP>(Ks, Vs, t.kb + (size_t)k0 * t.ldk, t.vb + (size_t)k0 * t.ldk, t.ldk, min(BK, kend - k0), hd);
        float s[RM][RK] = {}, dp[RM][RK] = {};
        tile_mac<RM, RK, HDP>(s, Qs, LDH, Ks, 1, LDH);
        tile_mac<RM, RK, HDP>(dp, dOs, LDH, Vs, 1, LDH);
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int r = ty + 16 * i;
#pragma unroll
            for (int j = 0; j < RK; j++) {
                const int c = tx + 16 * j, key = k0 + c, kp = key < kend ? kpos[key] : INT_MAX;
                const bool seen = kp <= t.qp[i] && kp >= t.kfirst[i];
                const float dpv = DROP ? (part_keep(seed, drop, t.h, seq, t.qp[i], kp) ? dp[i][j] * drop.scale : 0.0f) : dp[i][j];
                dSs[r * LDS + c] = seen ? expf(s[i][j] * scale - Ls[r]) * (dpv - Ds[r]) : 0.0f;
            }
        }
        __syncthreads();
        tile_mac<RM, RD, BK>(dqa, dSs, LDS, Ks, LDH, 1);
    }
    add_tile(dq + t.qrow0, t.ldq, dqa, t.nq, hd, scale);
}

}  // namespace

extern "C" {

size_t cuda_attention_saved_floats(int B, int H, int Tq, int Tk) {
    (void)Tk;
    return (size_t)B * H * Tq;  // the row log-sum-exp
}

size_t cuda_attention_scratch_floats(int B, int H, int T) {
    return (size_t)B * H * T;  // Delta
}

void cuda_attention_fwd(void *out, float *saved, const void *q, const void *k, const void *v, int B, int Tq, int Tk,
                        int H, int KV, int hd, size_t kv_bstride, const int32_t *kstart, int window,
                        const KernDropout *drop) {
    if (B <= 0 || Tq <= 0) return;
    if (Tq > Tk) err_fatal("attention: %d queries but only %d keys", Tq, Tk);
    if (kstart && Tq != Tk) err_fatal("attention: document masks need the training form (%d queries, %d keys)", Tq, Tk);
    check_heads(H, KV);
    const float scale = 1.0f / sqrtf((float)hd);
    AttDrop dp;
    const bool dropping = att_drop_from(drop, Tq, Tk, &dp);
    if (window >= Tk) window = 0;  // a window as long as the keys masks none of them
    if (!window && cudnn_att_fwd(act(out), saved, act(q), act(k), act(v), B, Tq, Tk, H, KV, hd, kv_bstride, kstart,
                                 dropping ? &dp : nullptr))
        return;
    if (cuda_ctx.compute != COMPUTE_FP32 && att_tc_fits(hd)) {
        att_tc_fwd(act(out), saved, act(q), act(k), act(v), B, Tq, Tk, H, KV, hd, kv_bstride, scale, kstart, window,
                   dropping ? &dp : nullptr);
        return;
    }
    with_head_dim(hd, [&](auto head) {
        with_flag(dropping, [&](auto on) {
            with_flag(kstart != nullptr || window > 0, [&](auto docs) {
                constexpr int HDP = decltype(head)::HDP;
                constexpr bool DROP = decltype(on)::value, DOCS = decltype(docs)::value;
                using C = AttFwdTiles<HDP>;
                constexpr int BQ = C::FWD_Q, BK = C::FWD_K;
                att_launch(att_fwd_kernel<HDP, BQ, BK, DROP, DOCS>, dim3((Tq + BQ - 1) / BQ, H, B), kAttThreads,
                           C::FWD, act(out), saved, act(q), act(k), act(v), Tq, Tk, H, KV, hd,
                           kv_bstride, scale, dp, kstart, window);
            });
        });
    });
}

void cuda_attention_bwd(void *dq, void *dk, void *dv, float *scratch, const void *dout, const void *out,
                        const float *saved, const void *q, const void *k, const void *v, int B, int T, int H, int KV,
                        int hd, const int32_t *kstart, int window, const KernDropout *drop) {
    if (B <= 0 || T <= 0) return;
    if (window >= T) window = 0;
    check_heads(H, KV);
    const float scale = 1.0f / sqrtf((float)hd);
    float *delta = scratch;  // (B, H, T)
    AttDrop dp;
    const bool dropping = att_drop_from(drop, T, T, &dp);
    if (!window && cudnn_att_bwd(act(dq), act(dk), act(dv), delta, act(dout), act(out), saved, act(q), act(k), act(v), B,
                                 T, H, KV, hd, kstart, dropping ? &dp : nullptr))
        return;
    const size_t rows = (size_t)B * T * H;
    att_delta_kernel<<<grid_for(rows * 32, kAttThreads, 0x7fffffffu), kAttThreads, 0, cuda_stream()>>>(
        delta, act(dout), act(out), T, H, hd, rows);
    cudaCheckLaunch();
    if (cuda_ctx.compute != COMPUTE_FP32 && att_tc_fits(hd)) {
        att_tc_bwd(act(dq), act(dk), act(dv), delta, act(dout), saved, act(q), act(k), act(v), B, T, H, KV, hd, scale,
                   kstart, window, dropping ? &dp : nullptr);
        return;
    }
    with_head_dim(hd, [&](auto head) {
        with_flag(dropping, [&](auto on) {
            with_flag(kstart != nullptr || window > 0, [&](auto docs) {
                constexpr int HDP = decltype(head)::HDP;
                constexpr bool DROP = decltype(on)::value, DOCS = decltype(docs)::value;
                using Big = AttBwdTiles<HDP, false>;
                const bool small = std::max(Big::DKV, Big::DQ) > cuda_smem_per_block();
                with_flag(small, [&](auto sm) {  // a bool as a type: the small tiles or the default ones
                    using C = AttBwdTiles<HDP, decltype(sm)::value>;
                    {
                        constexpr int BQ = C::DKV_Q, BK = C::DKV_K;
                        att_launch(att_bwd_dkdv_kernel<HDP, BQ, BK, DROP, DOCS>, dim3((T + BK - 1) / BK, KV, B),
                                   kAttThreads, C::DKV, act(dk), act(dv), act(q), act(k), act(v),
                                   act(dout), saved, delta, T, H, KV, hd, scale, dp, kstart, window);
                    }
                    {
                        constexpr int BQ = C::DQ_Q, BK = C::DQ_K;
                        att_launch(att_bwd_dq_kernel<HDP, BQ, BK, DROP, DOCS>, dim3((T + BQ - 1) / BQ, H, B),
                                   kAttThreads, C::DQ, act(dq), act(q), act(k), act(v), act(dout),
                                   saved, delta, T, H, KV, hd, scale, dp, kstart, window);
                    }
                });
            });
        });
    });
}

void cuda_attention_part_fwd(void *out, float *lse, const void *q, const void *k, const void *v, int B, int Tq, int Tk,
                             int H, int KV, int hd, const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst,
                             int window, int first, const KernDropout *drop, int seq) {
    if (B <= 0 || Tq <= 0 || Tk <= 0) return;
    check_heads(H, KV);
    const float scale = 1.0f / sqrtf((float)hd);
    AttDrop dp;  // head h's masks are those of head head0 + h in a sequence of seq tokens
    const bool dropping = att_drop_from(drop, seq, seq, &dp);
    with_head_dim(hd, [&](auto head) {
        with_flag(dropping, [&](auto on) {
            constexpr int HDP = decltype(head)::HDP;
            constexpr bool DROP = decltype(on)::value;
            using C = AttFwdTiles<HDP>;
            constexpr int BQ = C::FWD_Q, BK = C::FWD_K;
            att_launch(att_part_fwd_kernel<HDP, BQ, BK, DROP>, dim3((Tq + BQ - 1) / BQ, H, B), kAttThreads, C::FWD, act(out),
                       lse, act(q), act(k), act(v), Tq, Tk, H, KV, hd, scale, qpos, kpos, qfirst, window, first, dp, seq);
        });
    });
}

void cuda_attention_part_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                             const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int KV, int hd,
                             const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst, int window,
                             const KernDropout *drop, int seq) {
    if (B <= 0 || Tq <= 0 || Tk <= 0) return;
    check_heads(H, KV);
    const float scale = 1.0f / sqrtf((float)hd);
    AttDrop dp;  // as in the forward
    const bool dropping = att_drop_from(drop, seq, seq, &dp);
    with_head_dim(hd, [&](auto head) {
        with_flag(dropping, [&](auto on) {
            constexpr int HDP = decltype(head)::HDP;
            constexpr bool DROP = decltype(on)::value;
            using Big = AttBwdTiles<HDP, false>;
            with_flag(std::max(Big::DKV, Big::DQ) > cuda_smem_per_block(), [&](auto sm) {
                using C = AttBwdTiles<HDP, decltype(sm)::value>;
                att_launch(att_part_dkdv_kernel<HDP, C::DKV_Q, C::DKV_K, DROP>, dim3((Tk + C::DKV_K - 1) / C::DKV_K, KV, B),
                           kAttThreads, C::DKV, act(dk), act(dv), act(q), act(k), act(v), act(dout), act(out), lse, Tq,
                           Tk, H, KV, hd, scale, qpos, kpos, qfirst, window, dp, seq);
                att_launch(att_part_dq_kernel<HDP, C::DQ_Q, C::DQ_K, DROP>, dim3((Tq + C::DQ_Q - 1) / C::DQ_Q, H, B),
                           kAttThreads, C::DQ, act(dq), act(q), act(k), act(v), act(dout), act(out), lse, Tq, Tk, H, KV,
                           hd, scale, qpos, kpos, qfirst, window, dp, seq);
            });
        });
    });
}

}  // extern "C"
