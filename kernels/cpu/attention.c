// attention: causal grouped-query attention (document masks, sliding window) with explicit (saved)
// softmax probabilities.
// Work is split into blocks of CPU_ATT_BLOCK query rows (and, in backward, key columns) so the
// products (cpu_gemm_block: sgemm, or bf16 under --precision bf16) skip the masked upper triangle
// of the (Tq, Tk) score matrix.
// Dropout on P: the saved probabilities stay undropped (backward needs P itself); the dropped,
// rescaled rows P' = mask * P / (1 - p) are made per block in a buffer and feed P'V and P'^T dout.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../../base/err.h"
#include "../../base/rng.h"
#include "cpu_common.h"

static inline int att_min(int a, int b) { return a < b ? a : b; }

// a KernDropout resolved for the kernels; on == 0: none
typedef struct {
    int on;
    uint32_t thr;  // rng_dropout_threshold(p)
    float scale;   // 1 / (1 - p)
    uint64_t key, sample0;
    uint64_t head0;  // global index of the call's head 0
} AttDrop;

static AttDrop att_drop(const KernDropout *d) {
    AttDrop a = {0, 0, 1.0f, 0, 0, 0};
    if (d && d->p > 0.0f)
        a = (AttDrop){1, rng_dropout_threshold(d->p), 1.0f / (1.0f - d->p), d->key, d->sample0, (uint64_t)d->head0};
    return a;
}

static float *att_alloc(size_t n) {
    return mallocCheck(sizeof(float) * (n ? n : 1));
}

// s[lo..n) <- softmax(s[lo..n)); the rest of s[0..len) <- 0 (masked keys get probability exactly 0).
// Returns the row's log-sum-exp (ring attention merges by it).
static float att_softmax_row(float *s, int lo, int n, int len) {
    float mx = s[lo];
#pragma omp simd reduction(max : mx) CPU_KEEP_ORDER
    for (int j = lo; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum) CPU_KEEP_ORDER
    for (int j = lo; j < n; j++) {
        s[j] = cpu_expf(s[j] - mx);
        sum += s[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = lo; j < n; j++) s[j] *= inv;
    memset(s, 0, sizeof(float) * (size_t)lo);
    memset(s + n, 0, sizeof(float) * (size_t)(len - n));
    return mx + logf(sum);
}

// the first key query t at position pos sees: its document's start (ks: NULL without documents)
// or, under a sliding window, the oldest key of the window, whichever is later
static inline int att_first(const int32_t *ks, int t, int pos, int window) {
    const int lo = ks ? ks[t] : 0;
    return window > 0 && pos - window + 1 > lo ? pos - window + 1 : lo;
}

// first query of row ks (T entries, non-decreasing) from q0 on whose document starts after key kmax:
// queries q0 .. that - 1 are the ones that can see key kmax
static int att_query_end(const int32_t *ks, int q0, int T, int kmax) {
    if (!ks) return T;
    int lo = q0, hi = T;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ks[mid] > kmax) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

void CPU_OP(documents_loaded)(const int32_t *kstart, const int32_t *host_kstart, int ntok, int T) {
    (void)kstart, (void)host_kstart, (void)ntok, (void)T;  // the CPU kernels read kstart as they go
}

void CPU_OP(attention_fwd)(void *out_, float *probs, const void *q_, const void *k_, const void *v_,
                        int B, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride, const int32_t *kstart,
                        int window, const KernDropout *drop) {
    float *out = out_;  // the CPU's activations are fp32
    const float *q = q_;
    const float *k = k_;
    const float *v = v_;
    const int grp = H / KV, off = Tk - Tq;
    const int ldq = H * hd, ldk = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const AttDrop ad = att_drop(drop);
    // under dropout, each thread's (CPU_ATT_BLOCK, Tk) block of P'
    float *pdrop = ad.on ? att_alloc((size_t)omp_get_max_threads() * CPU_ATT_BLOCK * Tk) : NULL;
    // one (batch, head) per iteration; each thread's products run on that thread
#pragma omp parallel
    {
    int packed = -1;  // the (batch, kv head) whose keys and values the thread has packed (bf16)
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const uint64_t seed = ad.on ? rng_dropout_seed(ad.key, ad.sample0 + (uint64_t)b) : 0;
        float *pd = ad.on ? pdrop + (size_t)omp_get_thread_num() * CPU_ATT_BLOCK * Tk : NULL;
        const float *qh = q + (size_t)b * Tq * ldq + (size_t)h * hd;  // (Tq, hd), row stride ldq
        const float *kh = k + b * kv_bstride + (size_t)(h / grp) * hd;  // (Tk, hd), row stride ldk
        const float *vh = v + b * kv_bstride + (size_t)(h / grp) * hd;
        float *oh = out + (size_t)b * Tq * ldq + (size_t)h * hd;
        float *p = probs + (size_t)bh * Tq * Tk;  // (Tq, Tk)
        const int32_t *ks = kstart ? kstart + (size_t)b * Tq : NULL;  // (Tq) first key each query sees
        if (packed != b * KV + h / grp) {  // a static schedule gives a thread a group's heads in a row
            packed = b * KV + h / grp;
            cpu_gemm_pack_b(0, 1, Tk, hd, kh, ldk);  // K^T: a column per key
            cpu_gemm_pack_b(1, 0, hd, Tk, vh, ldk);  // V: a row per key
        }
        for (int r0 = 0; r0 < Tq; r0 += CPU_ATT_BLOCK) {
            const int rows = att_min(CPU_ATT_BLOCK, Tq - r0);
            const int kend = off + r0 + rows;  // keys visible to the block's last row
            const int kbeg = att_first(ks, r0, off + r0, window);  // and to its first (first keys are in order)
            float *pb = p + (size_t)r0 * Tk;
            cpu_gemm_block_b(0, 0, 1, rows, kend - kbeg, hd, kbeg, 0, CPU_GEMM_TRI_COLS, off + r0 - kbeg, scale,
                             qh + (size_t)r0 * ldq, ldq, kh, ldk, 0.0f, pb + kbeg, Tk);
            for (int i = 0; i < rows; i++)
                att_softmax_row(pb + (size_t)i * Tk, att_first(ks, r0 + i, off + r0 + i, window), off + r0 + i + 1, Tk);
            const float *pv = pb;  // what multiplies V: P, or P' under dropout
            if (ad.on) {
                for (int i = 0; i < rows; i++) {
                    const float *pr = pb + (size_t)i * Tk;
                    float *dst = pd + (size_t)i * Tk;
                    const uint64_t idx0 = ((ad.head0 + h) * Tq + r0 + i) * Tk;  // mask index of (t, key 0)
#pragma omp simd
                    for (int j = kbeg; j < kend; j++)
                        dst[j] = pr[j] * (rng_dropout_keep(seed, idx0 + j, ad.thr) ? ad.scale : 0.0f);
                }
                pv = pd;
            }
            cpu_gemm_block_b(1, 0, 0, rows, hd, kend - kbeg, 0, kbeg, CPU_GEMM_TRI_K_TO, off + r0 - kbeg, 1.0f,
                             pv + kbeg, Tk, vh, ldk, 0.0f, oh + (size_t)r0 * ldq, ldq);
        }
    }
    }
    free(pdrop);
}

size_t CPU_OP(attention_saved_floats)(int B, int H, int Tq, int Tk) {
    return (size_t)B * H * Tq * Tk;  // the softmax probabilities
}

size_t CPU_OP(attention_scratch_floats)(int B, int H, int T) {
    (void)B, (void)H;  // per thread: a (T, T) dP/dS matrix and a (min(T, CPU_ATT_BLOCK), T) block of P'
    return (size_t)omp_get_max_threads() * T * ((size_t)T + att_min(T, CPU_ATT_BLOCK));
}

void CPU_OP(attention_bwd)(void *dq_, void *dk_, void *dv_, float *scratch, const void *dout_, const void *out_,
                       const float *probs, const void *q_, const void *k_, const void *v_,
                        int B, int T, int H, int KV, int hd, const int32_t *kstart, int window, const KernDropout *drop) {
    float *dq = dq_;  // the CPU's activations are fp32
    float *dk = dk_;
    float *dv = dv_;
    const float *dout = dout_;
    const float *out = out_;
    const float *q = q_;
    const float *k = k_;
    const float *v = v_;
    (void)out;  // the probabilities are kept, so the forward output is not needed
    const int grp = H / KV;
    const int ldq = H * hd, ldk = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const AttDrop ad = att_drop(drop);
    // one (batch, kv head) per iteration, its query heads serially, so dk/dv need no reduction
#pragma omp parallel for schedule(static)
    for (int bg = 0; bg < B * KV; bg++) {
        const int b = bg / KV, g = bg % KV;
        // (T, T): dP, then dS
        float *ds = scratch + (size_t)omp_get_thread_num() * T * ((size_t)T + att_min(T, CPU_ATT_BLOCK));
        float *pdb = ds + (size_t)T * T;  // (min(T, CPU_ATT_BLOCK), T): P' of a row block, under dropout
        const uint64_t seed = ad.on ? rng_dropout_seed(ad.key, ad.sample0 + (uint64_t)b) : 0;
        const float *kg = k + (size_t)b * T * ldk + (size_t)g * hd;  // (T, hd), row stride ldk
        const float *vg = v + (size_t)b * T * ldk + (size_t)g * hd;
        float *dkg = dk + (size_t)b * T * ldk + (size_t)g * hd;
        float *dvg = dv + (size_t)b * T * ldk + (size_t)g * hd;
        const int32_t *ks = kstart ? kstart + (size_t)b * T : NULL;  // (T) first key each query sees
        for (int t = 0; t < T; t++) {
            memset(dkg + (size_t)t * ldk, 0, sizeof(float) * hd);
            memset(dvg + (size_t)t * ldk, 0, sizeof(float) * hd);
        }
        cpu_gemm_pack_b(0, 1, T, hd, vg, ldk);  // V^T for dP: a column per key
        cpu_gemm_pack_b(1, 0, hd, T, kg, ldk);  // K for dq: a row per key
        for (int h = g * grp; h < (g + 1) * grp; h++) {
            const size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;  // (T, hd) rows of q, dq, dout
            const float *qh = q + qoff, *doh = dout + qoff;
            float *dqh = dq + qoff;
            const float *p = probs + ((size_t)b * H + h) * T * T;  // (T, T)
            cpu_gemm_pack_b(2, 0, hd, T, qh, ldq);  // Q for dk and dout for dv: a row per query
            cpu_gemm_pack_b(3, 0, hd, T, doh, ldq);
            for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
                const int rows = att_min(CPU_ATT_BLOCK, T - r0), kend = r0 + rows, kbeg = att_first(ks, r0, r0, window);
                float *dsb = ds + (size_t)r0 * T;
                // dP = dout @ V^T over the keys the block sees
                cpu_gemm_block_b(0, 0, 1, rows, kend - kbeg, hd, kbeg, 0, CPU_GEMM_TRI_COLS, r0 - kbeg, 1.0f,
                                 doh + (size_t)r0 * ldq, ldq, vg, ldk, 0.0f, dsb + kbeg, T);
                // dS = P * (dP - rowsum(dP * P)); zero past the diagonal up to the block edge.
                // Under dropout dP' = mask * dP / (1 - p) takes dP's place (rowsum(P * dP') is still
                // rowsum(dout * out), as out = P' V), and the row's P' goes to pdb for dV.
                for (int i = 0; i < rows; i++) {
                    const int n = r0 + i + 1, lo = att_first(ks, r0 + i, r0 + i, window);
                    const float *pr = p + (size_t)(r0 + i) * T;
                    float *dr = dsb + (size_t)i * T;
                    if (ad.on) {
                        float *pdr = pdb + (size_t)i * T;
                        const uint64_t idx0 = ((ad.head0 + h) * T + r0 + i) * T;  // mask index of (t, key 0)
#pragma omp simd
                        for (int j = 0; j < n; j++) {
                            const float f = rng_dropout_keep(seed, idx0 + j, ad.thr) ? ad.scale : 0.0f;
                            pdr[j] = pr[j] * f;
                            dr[j] *= f;
                        }
                        memset(pdr + n, 0, sizeof(float) * (size_t)(kend - n));
                    }
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot) CPU_KEEP_ORDER
                    for (int j = lo; j < n; j++) dot += pr[j] * dr[j];
#pragma omp simd
                    for (int j = lo; j < n; j++) dr[j] = pr[j] * (dr[j] - dot);
                    // keys the row does not see hold 0: the key blocks below read whole columns
                    memset(dr, 0, sizeof(float) * (size_t)lo);
                    memset(dr + n, 0, sizeof(float) * (size_t)(kend - n));
                }
                // dq = scale * dS @ K
                cpu_gemm_block_b(1, 0, 0, rows, hd, kend - kbeg, 0, kbeg, CPU_GEMM_TRI_K_TO, r0 - kbeg, scale,
                                 dsb + kbeg, T, kg, ldk, 0.0f, dqh + (size_t)r0 * ldq, ldq);
                // under dropout dv += P'^T @ dout here, while the block's P' is at hand
                if (ad.on)
                    cpu_gemm_block_b(3, 1, 0, kend - kbeg, hd, rows, 0, r0, CPU_GEMM_TRI_K_FROM, kbeg - r0, 1.0f,
                                     pdb + kbeg, T, doh, ldq, 1.0f, dvg + (size_t)kbeg * ldk, ldk);
            }
            // key block c0 is seen only by queries c0.. up to the end of the document of its last key,
            // and under a window only by those within window - 1 positions of that key
            for (int c0 = 0; c0 < T; c0 += CPU_ATT_BLOCK) {
                const int cols = att_min(CPU_ATT_BLOCK, T - c0), kmax = c0 + cols - 1;
                int qend = att_query_end(ks, c0, T, kmax);
                if (window > 0 && kmax + window < qend) qend = kmax + window;
                const int nq = qend - c0;
                // dk += scale * dS^T @ Q, dv += P^T @ dout (without dropout)
                cpu_gemm_block_b(2, 1, 0, cols, hd, nq, 0, c0, CPU_GEMM_TRI_K_FROM, 0, scale, ds + (size_t)c0 * T + c0, T,
                                 qh, ldq, 1.0f, dkg + (size_t)c0 * ldk, ldk);
                if (!ad.on)
                    cpu_gemm_block_b(3, 1, 0, cols, hd, nq, 0, c0, CPU_GEMM_TRI_K_FROM, 0, 1.0f, p + (size_t)c0 * T + c0,
                                     T, doh, ldq, 1.0f, dvg + (size_t)c0 * ldk, ldk);
            }
        }
    }
}

// ---- context parallelism: one query block against one key/value block of the ring ----

// the first index of the increasing kpos[0..n) whose position is at least p
static int att_lower(const int32_t *kpos, int n, int p) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (kpos[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// the keys [*j0, *j1) of the increasing kpos that query i sees: causal, from its document's start
// (qfirst: NULL without documents), and within the window when there is one
static void att_part_keys(const int32_t *qpos, const int32_t *qfirst, const int32_t *kpos, int Tk, int i, int window, int *j0,
                          int *j1) {
    *j1 = att_lower(kpos, Tk, qpos[i] + 1);
    *j0 = att_lower(kpos, Tk, att_first(qfirst, i, qpos[i], window));
    if (*j0 > *j1) *j0 = *j1;
}

// a row block's keys: from its first row's first to its last row's end (both grow with the rows)
static void att_part_block(const int32_t *qpos, const int32_t *qfirst, const int32_t *kpos, int Tk, int i0, int rows,
                           int window, int *kb, int *ke) {
    int unused;
    att_part_keys(qpos, qfirst, kpos, Tk, i0, window, kb, &unused);
    att_part_keys(qpos, qfirst, kpos, Tk, i0 + rows - 1, window, &unused, ke);
    if (*kb > *ke) *kb = *ke;
}

// Dropout on one row of a block's probabilities p[j0..j1) (query at position qp of head h, keys
// at kpos[j]): the whole-sequence kernels' mask for that query and key. Forward (dp NULL): p <- P'.
// Backward: dp holds dP' = dout V^T; dp <- dS = P (mask dP' / (1 - p) - dot), then p <- P'.
static void att_part_drop(const AttDrop *ad, uint64_t seed, int h, int seq, int qp, const int32_t *kpos, float *p, float *dp,
                          float dot, int j0, int j1) {
    const uint64_t row = ((ad->head0 + (uint64_t)h) * (uint64_t)seq + (uint64_t)qp) * (uint64_t)seq;
    for (int j = j0; j < j1; j++) {
        const float f = rng_dropout_keep(seed, row + (uint64_t)kpos[j], ad->thr) ? ad->scale : 0.0f;
        if (dp) dp[j] = p[j] * (f * dp[j] - dot);
        p[j] *= f;
    }
}

void CPU_OP(attention_part_fwd)(void *outp, float *lse, const void *qp, const void *kp, const void *vp, int B, int Tq,
                                int Tk, int H, int KV, int hd, const int32_t *qpos, const int32_t *kpos,
                                const int32_t *qfirst, int window, int first, const KernDropout *drop, int seq,
                                const KernBlock *blk) {
    (void)blk;  // the CPU masks by the positions alone
    float *out = outp;  // the CPU's activations are fp32
    const float *q = qp, *k = kp, *v = vp;
    const int grp = H / KV, ldq = H * hd, ldk = KV * hd, rb = att_min(Tq, CPU_ATT_BLOCK);
    const float scale = 1.0f / sqrtf((float)hd);
    const AttDrop ad = att_drop(drop);
    // per thread: a row block's scores, then probabilities (rb, Tk), and its output (rb, hd)
    const size_t per = (size_t)rb * Tk + (size_t)rb * hd;
    float *scratch = att_alloc((size_t)omp_get_max_threads() * per);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        float *s = scratch + (size_t)omp_get_thread_num() * per, *o = s + (size_t)rb * Tk;
        const float *qh = q + (size_t)b * Tq * ldq + (size_t)h * hd;
        const float *kh = k + (size_t)b * Tk * ldk + (size_t)(h / grp) * hd;
        const float *vh = v + (size_t)b * Tk * ldk + (size_t)(h / grp) * hd;
        float *oh = out + (size_t)b * Tq * ldq + (size_t)h * hd, *lh = lse + (size_t)bh * Tq;
        const int32_t *qf = qfirst ? qfirst + (size_t)b * Tq : NULL;
        const uint64_t seed = ad.on ? rng_dropout_seed(ad.key, ad.sample0 + (uint64_t)b) : 0;
        float blse[CPU_ATT_BLOCK];
        // by blocks of rows: each row's softmax over the keys it sees (this block's alone, their
        // log-sum-exp in blse), P V into o, then merged into out and lse by log-sum-exp
        for (int i0 = 0; i0 < Tq; i0 += CPU_ATT_BLOCK) {
            const int rows = att_min(CPU_ATT_BLOCK, Tq - i0);
            int kb, ke;
            att_part_block(qpos, qf, kpos, Tk, i0, rows, window, &kb, &ke);
            const int n = ke - kb;
            if (n > 0) {
                cpu_gemm_block(0, 1, rows, n, hd, scale, qh + (size_t)i0 * ldq, ldq,
                            kh + (size_t)kb * ldk, ldk, 0.0f, s, n);
                for (int i = 0; i < rows; i++) {
                    int j0, j1;
                    att_part_keys(qpos, qf, kpos, Tk, i0 + i, window, &j0, &j1);
                    float *sr = s + (size_t)i * n;
                    if (j0 == j1) {  // no key of this block: nothing to add
                        memset(sr, 0, sizeof(float) * n);
                        blse[i] = -INFINITY;
                        continue;
                    }
                    blse[i] = att_softmax_row(sr, j0 - kb, j1 - kb, n);
                    if (ad.on) att_part_drop(&ad, seed, h, seq, qpos[i0 + i], kpos + kb, sr, NULL, 0.0f, j0 - kb, j1 - kb);
                }
                cpu_gemm_block(0, 0, rows, hd, n, 1.0f, s, n, vh + (size_t)kb * ldk, ldk,
                            0.0f, o, hd);
            }
            for (int i = 0; i < rows; i++) {
                const float lo = first ? -INFINITY : lh[i0 + i], ln = n > 0 ? blse[i] : -INFINITY;
                float *orow = oh + (size_t)(i0 + i) * ldq;
                const float *brow = o + (size_t)i * hd;
                if (ln == -INFINITY) {
                    if (first) memset(orow, 0, sizeof(float) * hd), lh[i0 + i] = -INFINITY;
                    continue;
                }
                const float m = lo > ln ? lo : ln, wo = lo == -INFINITY ? 0.0f : expf(lo - m), wn = expf(ln - m);
                const float inv = 1.0f / (wo + wn);
                for (int d = 0; d < hd; d++) orow[d] = (wo * (lo == -INFINITY ? 0.0f : orow[d]) + wn * brow[d]) * inv;
                lh[i0 + i] = m + logf(wo + wn);
            }
        }
    }
    free(scratch);
}

void CPU_OP(attention_part_bwd)(void *dqp, void *dkp, void *dvp, const void *doutp, const void *outp, const float *lse,
                                const void *qp, const void *kp, const void *vp, int B, int Tq, int Tk, int H, int KV,
                                int hd, const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst, int window,
                                const KernDropout *drop, int seq, const KernBlock *blk) {
    (void)blk;
    float *dq = dqp, *dk = dkp, *dv = dvp;  // the CPU's activations are fp32
    const float *dout = doutp, *out = outp, *q = qp, *k = kp, *v = vp;
    const int grp = H / KV, ldq = H * hd, ldk = KV * hd, rb = att_min(Tq, CPU_ATT_BLOCK);
    const float scale = 1.0f / sqrtf((float)hd);
    const AttDrop ad = att_drop(drop);
    const size_t per = 2 * (size_t)rb * Tk;  // a row block's P, and its dP then dS
    float *scratch = att_alloc((size_t)omp_get_max_threads() * per);
    // one (batch, kv head) per iteration, its query heads serially, so dk and dv need no reduction
#pragma omp parallel for schedule(static)
    for (int bg = 0; bg < B * KV; bg++) {
        const int b = bg / KV, g = bg % KV;
        float *p = scratch + (size_t)omp_get_thread_num() * per, *ds = p + (size_t)rb * Tk;
        const float *kg = k + (size_t)b * Tk * ldk + (size_t)g * hd, *vg = v + (size_t)b * Tk * ldk + (size_t)g * hd;
        float *dkg = dk + (size_t)b * Tk * ldk + (size_t)g * hd, *dvg = dv + (size_t)b * Tk * ldk + (size_t)g * hd;
        const int32_t *qf = qfirst ? qfirst + (size_t)b * Tq : NULL;
        const uint64_t seed = ad.on ? rng_dropout_seed(ad.key, ad.sample0 + (uint64_t)b) : 0;
        for (int h = g * grp; h < (g + 1) * grp; h++)
            for (int i0 = 0; i0 < Tq; i0 += CPU_ATT_BLOCK) {
                const int rows = att_min(CPU_ATT_BLOCK, Tq - i0);
                int kb, ke;
                att_part_block(qpos, qf, kpos, Tk, i0, rows, window, &kb, &ke);
                const int n = ke - kb;
                if (n == 0) continue;
                const size_t qoff = ((size_t)b * Tq + i0) * ldq + (size_t)h * hd;  // the block's first row
                const float *qh = q + qoff, *doh = dout + qoff, *oh = out + qoff, *lh = lse + ((size_t)b * H + h) * Tq + i0;
                // P = exp(scale Q K^T - lse) where seen, from the whole ring's statistics; dP = dout V^T
                cpu_gemm_block(0, 1, rows, n, hd, scale, qh, ldq, kg + (size_t)kb * ldk, ldk,
                            0.0f, p, n);
                cpu_gemm_block(0, 1, rows, n, hd, 1.0f, doh, ldq, vg + (size_t)kb * ldk, ldk,
                            0.0f, ds, n);
                for (int i = 0; i < rows; i++) {
                    int j0, j1;
                    att_part_keys(qpos, qf, kpos, Tk, i0 + i, window, &j0, &j1);
                    float dot = 0.0f;  // rowsum(dout * out): rowsum(P dP) over every block of the ring
                    for (int d = 0; d < hd; d++) dot += doh[(size_t)i * ldq + d] * oh[(size_t)i * ldq + d];
                    float *pr = p + (size_t)i * n, *dr = ds + (size_t)i * n;
                    if (ad.on) {  // dP = mask * dP' / (1 - p) for dS, and P' for dv (what multiplied V)
                        for (int j = 0; j < n; j++) {
                            const int seen = j + kb >= j0 && j + kb < j1;
                            pr[j] = seen ? cpu_expf(pr[j] - lh[i]) : 0.0f;
                            if (!seen) dr[j] = 0.0f;
                        }
                        att_part_drop(&ad, seed, h, seq, qpos[i0 + i], kpos + kb, pr, dr, dot, j0 - kb, j1 - kb);
                        continue;
                    }
                    for (int j = 0; j < n; j++) {
                        pr[j] = j + kb >= j0 && j + kb < j1 ? cpu_expf(pr[j] - lh[i]) : 0.0f;
                        dr[j] = pr[j] * (dr[j] - dot);  // dS
                    }
                }
                cpu_gemm_block(0, 0, rows, hd, n, scale, ds, n, kg + (size_t)kb * ldk, ldk, 1.0f,
                            dq + qoff, ldq);
                cpu_gemm_block(1, 0, n, hd, rows, scale, ds, n, qh, ldq, 1.0f,
                            dkg + (size_t)kb * ldk, ldk);
                cpu_gemm_block(1, 0, n, hd, rows, 1.0f, p, n, doh, ldq, 1.0f,
                            dvg + (size_t)kb * ldk, ldk);
            }
    }
    free(scratch);
}
