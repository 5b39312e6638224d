// moe: the mixture-of-experts kernels on the CPU (kernels.h): routing, grouping the experts' rows,
// and their weighted sum. Each token's work is its own, so tokens run in parallel and every sum
// has a fixed order: results depend neither on timing nor on the thread count.
#include <math.h>

#include "../../base/rng.h"
#include "../backend.h"
#include "cpu_common.h"

void CPU_OP(moe_route)(float *probs, int32_t *idx, float *wts, const float *logits, int N, int E, int K) {
#pragma omp parallel for schedule(static) if ((size_t)N * E >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = probs + (size_t)t * E, mx = l[0], sum = 0.0f;
        for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
        for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
        for (int e = 0; e < E; e++) p[e] /= sum;
        int32_t *ix = idx + (size_t)t * K;
        float *w = wts + (size_t)t * K, kept = 0.0f;
        unsigned long long taken = 0;  // E <= 64
        for (int k = 0; k < K; k++) {  // K passes: K is small
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!(taken >> e & 1) && (best < 0 || p[e] > p[best])) best = e;
            taken |= 1ull << best;
            ix[k] = best;
            kept += w[k] = p[best];
        }
        for (int k = 0; k < K; k++) w[k] /= kept;
    }
}

void CPU_OP(moe_route_bwd)(float *dlogits, const float *dwts, const float *probs, const float *logits, const int32_t *idx,
                       const float *wts, const int32_t *targets, const float *gaux, float zscale, int N, int E, int K) {
#pragma omp parallel for schedule(static) if ((size_t)N * E >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E, *l = logits + (size_t)t * E, *w = wts + (size_t)t * K, *dw = dwts + (size_t)t * K;
        const int32_t *ix = idx + (size_t)t * K;
        float *d = dlogits + (size_t)t * E, kept = 0.0f, wdw = 0.0f;
        const int counted = targets[t] >= 0;  // the router losses' tokens
        for (int e = 0; e < E; e++) d[e] = gaux && counted ? gaux[e] : 0.0f;  // d = dloss/dprobs first
        for (int k = 0; k < K; k++) kept += p[ix[k]], wdw += w[k] * dw[k];
        // w_k = p_k / kept: dloss/dp_i = (dw_i - sum_k w_k dw_k) / kept for each chosen i
        for (int k = 0; k < K; k++) d[ix[k]] += (dw[k] - wdw) / kept;
        float pd = 0.0f, mx = l[0], s = 0.0f;
        for (int e = 0; e < E; e++) pd += p[e] * d[e];
        for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
        for (int e = 0; e < E; e++) s += expf(l[e] - mx);
        const float zg = counted ? zscale * 2.0f * (mx + logf(s)) : 0.0f;  // d (logsumexp)^2 / d logit_e = 2 lse p_e
        for (int e = 0; e < E; e++) d[e] = p[e] * (d[e] - pd) + zg * p[e];
    }
}

void CPU_OP(jitter)(void *x_, const void *src_, size_t e0, size_t n, size_t M, float j, uint64_t key, uint64_t sample0) {
    float *x = x_;
    const float *src = src_;
    // by the rows the elements cross (a cp rank's call is a chunk of one row), each cut to [e0, e0 + n)
    const size_t b0 = e0 / M, b1 = n ? (e0 + n - 1) / M + 1 : b0;
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t b = b0; b < b1; b++) {
        const uint64_t seed = rng_dropout_seed(key, sample0 + b);
        const size_t lo = b * M > e0 ? b * M : e0, hi = (b + 1) * M < e0 + n ? (b + 1) * M : e0 + n;
        for (size_t i = lo; i < hi; i++) x[i - e0] = src[i - e0] * (1.0f - j + 2.0f * j * rng_unit(seed, i - b * M));
    }
}

void CPU_OP(moe_gather)(void *xe_, const void *x_, const int32_t *src, int M, int D) {
    float *xe = xe_;  // the CPU's activations are fp32
    const float *x = x_;
#pragma omp parallel for schedule(static) if ((size_t)M * D >= CPU_PAR_MIN)
    for (int r = 0; r < M; r++) memcpy(xe + (size_t)r * D, x + (size_t)src[r] * D, sizeof(float) * D);
}

void CPU_OP(moe_gather_bwd)(void *dx_, const void *dxe_, const int32_t *slot, int N, int K, int D) {
    float *dx = dx_;
    const float *dxe = dxe_;
#pragma omp parallel for schedule(static) if ((size_t)N * K * D >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++) {
        float *o = dx + (size_t)t * D;
        memcpy(o, dxe + (size_t)slot[(size_t)t * K] * D, sizeof(float) * D);
        for (int k = 1; k < K; k++) {
            const float *g = dxe + (size_t)slot[(size_t)t * K + k] * D;
            for (int i = 0; i < D; i++) o[i] += g[i];
        }
    }
}

void CPU_OP(moe_combine)(float *out, const float *ye, const int32_t *slot, const float *wts, int N, int K, int D) {
#pragma omp parallel for schedule(static) if ((size_t)N * K * D >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++) {
        float *o = out + (size_t)t * D;
        for (int i = 0; i < D; i++) o[i] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float w = wts[(size_t)t * K + k], *y = ye + (size_t)slot[(size_t)t * K + k] * D;
            for (int i = 0; i < D; i++) o[i] += w * y[i];
        }
    }
}

void CPU_OP(moe_combine_bwd)(float *dye, float *dwts, const float *dout, const float *ye, const int32_t *slot, const float *wts,
                         int N, int K, int D) {
#pragma omp parallel for schedule(static) if ((size_t)N * K * D >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++) {
        const float *g = dout + (size_t)t * D;
        for (int k = 0; k < K; k++) {
            size_t j = (size_t)t * K + k;
            const float w = wts[j], *y = ye + (size_t)slot[j] * D;
            float *dy = dye + (size_t)slot[j] * D, dot = 0.0f;
            for (int i = 0; i < D; i++) dy[i] = w * g[i], dot += g[i] * y[i];
            dwts[j] = dot;
        }
    }
}
