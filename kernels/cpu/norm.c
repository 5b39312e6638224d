// norm: RMSNorm (alone and fused with the residual add before it), LayerNorm, and the q|k|v split
// with rotary position embedding (RoPE).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/err.h"
#include "../backend.h"
#include "cpu_common.h"

void CPU_OP(rmsnorm_fwd)(void *out_, float *rstd, const float *inp, const void *wv, int N, int D, float eps) {
    float *out = out_;  // the CPU's activations are fp32
    const float *w = wv;  // the CPU's parameters are fp32
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * D;
        float *o = out + (size_t)n * D;
        double ss = 0.0;  // double: D squares of very different sizes
#pragma omp simd reduction(+ : ss) CPU_KEEP_ORDER
        for (int j = 0; j < D; j++) ss += (double)x[j] * x[j];
        float r = (float)(1.0 / sqrt(ss / D + eps));
        rstd[n] = r;
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] = (x[j] * r) * w[j];
    }
}

void CPU_OP(add_rmsnorm_fwd)(float *y, void *out_, float *rstd, const float *r, const void *wv, int N, int D, float eps) {
    float *out = out_;  // the CPU's activations are fp32
    const float *w = wv;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = y + (size_t)n * D, *o = out + (size_t)n * D;
        const float *b = r + (size_t)n * D;
        double ss = 0.0;
#pragma omp simd reduction(+ : ss) CPU_KEEP_ORDER
        for (int j = 0; j < D; j++) {
            x[j] += b[j];
            ss += (double)x[j] * x[j];
        }
        float rs = (float)(1.0 / sqrt(ss / D + eps));
        rstd[n] = rs;
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] = (x[j] * rs) * w[j];
    }
}

void CPU_OP(rmsnorm_bwd)(float *dinp, float *dw, const void *dout_, const float *inp, const void *wv,
                      const float *rstd, int N, int D) {
    const float *dout = dout_;  // the CPU's activations are fp32
    const float *w = wv;
    // dw is summed over rows: each thread sums its static block of rows into its own partial,
    // then the partials are added in thread order, so the result does not depend on timing.
    float *part = mallocCheck(sizeof(float) * (size_t)omp_get_max_threads() * D);  // (threads, D)
#pragma omp parallel
    {
        const int nth = omp_get_num_threads();
        float *dwp = part + (size_t)omp_get_thread_num() * D;
        for (int j = 0; j < D; j++) dwp[j] = 0.0f;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * D, *dy = dout + (size_t)n * D;
            float *dx = dinp + (size_t)n * D;
            const float r = rstd[n];
            // xhat = x * r, dxhat = dy * w; m = mean(dxhat * xhat)
            double acc = 0.0;
#pragma omp simd reduction(+ : acc) CPU_KEEP_ORDER
            for (int j = 0; j < D; j++) acc += (double)(dy[j] * w[j]) * (x[j] * r);
            const float m = (float)(acc / D);
#pragma omp simd
            for (int j = 0; j < D; j++) {
                float xhat = x[j] * r;
                dx[j] += r * (dy[j] * w[j] - xhat * m);
                dwp[j] += dy[j] * xhat;
            }
        }
#pragma omp for schedule(static)
        for (int j = 0; j < D; j++) {
            float s = 0.0f;
            for (int t = 0; t < nth; t++) s += part[(size_t)t * D + j];
            dw[j] += s;
        }
    }
    free(part);
}

// one row of LayerNorm: o (D) from x (D), its mean and rstd into *mean, *rstd
static void layernorm_row(float *o, float *mean, float *rstd, const float *x, const float *w, const float *b, int D,
                          float eps) {
    double s = 0.0;
#pragma omp simd reduction(+ : s) CPU_KEEP_ORDER
    for (int j = 0; j < D; j++) s += x[j];
    const double mu = s / D;
    // the variance from a second pass over x - mean: no cancellation when |mean| >> std
    double ss = 0.0;
#pragma omp simd reduction(+ : ss) CPU_KEEP_ORDER
    for (int j = 0; j < D; j++) ss += (x[j] - mu) * (x[j] - mu);
    const float m = (float)mu, r = (float)(1.0 / sqrt(ss / D + eps));
    *mean = m;
    *rstd = r;
#pragma omp simd
    for (int j = 0; j < D; j++) o[j] = ((x[j] - m) * r) * w[j] + b[j];
}

void CPU_OP(layernorm_fwd)(void *out_, float *mean, float *rstd, const float *inp, const void *wv, const void *bv, int N,
                       int D, float eps) {
    float *out = out_;  // the CPU's activations are fp32
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        layernorm_row(out + (size_t)n * D, mean + n, rstd + n, inp + (size_t)n * D, wv, bv, D, eps);
}

void CPU_OP(add_layernorm_fwd)(float *y, void *out_, float *mean, float *rstd, const float *r, const void *wv,
                           const void *bv, int N, int D, float eps) {
    float *out = out_;  // the CPU's activations are fp32
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = y + (size_t)n * D;
        const float *a = r + (size_t)n * D;
#pragma omp simd
        for (int j = 0; j < D; j++) x[j] += a[j];
        layernorm_row(out + (size_t)n * D, mean + n, rstd + n, x, wv, bv, D, eps);
    }
}

void CPU_OP(layernorm_bwd)(float *dinp, float *dw, float *db, const void *dout_, const float *inp, const void *wv,
                       const float *mean, const float *rstd, int N, int D) {
    const float *dout = dout_;  // the CPU's activations are fp32
    const float *w = wv;
    // dw, db are sums over rows: per-thread partials of static row blocks, added in thread order
    // (as in cpu_rmsnorm_bwd), so the result does not depend on timing
    float *part = mallocCheck(sizeof(float) * (size_t)omp_get_max_threads() * 2 * D);  // (threads, 2, D)
#pragma omp parallel
    {
        const int nth = omp_get_num_threads();
        float *dwp = part + (size_t)omp_get_thread_num() * 2 * D, *dbp = dwp + D;
        for (int j = 0; j < 2 * D; j++) dwp[j] = 0.0f;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * D, *dy = dout + (size_t)n * D;
            float *dx = dinp + (size_t)n * D;
            const float m = mean[n], r = rstd[n];
            // xhat = (x - m) r, g = dy w: dx = r (g - mean(g) - xhat mean(g xhat))
            double sg = 0.0, sgx = 0.0;
#pragma omp simd reduction(+ : sg, sgx) CPU_KEEP_ORDER
            for (int j = 0; j < D; j++) {
                const float g = dy[j] * w[j];
                sg += g;
                sgx += (double)g * ((x[j] - m) * r);
            }
            const float mg = (float)(sg / D), mgx = (float)(sgx / D);
#pragma omp simd
            for (int j = 0; j < D; j++) {
                const float xhat = (x[j] - m) * r;
                dx[j] += r * (dy[j] * w[j] - mg - xhat * mgx);
                dwp[j] += dy[j] * xhat;
                dbp[j] += dy[j];
            }
        }
#pragma omp for schedule(static)
        for (int j = 0; j < D; j++) {
            float sw = 0.0f, sb = 0.0f;
            for (int t = 0; t < nth; t++) {
                sw += part[(size_t)t * 2 * D + j];
                sb += part[(size_t)t * 2 * D + D + j];
            }
            dw[j] += sw;
            db[j] += sb;
        }
    }
    free(part);
}

void CPU_OP(rope_table)(float *cos_t, float *sin_t, int T, int rot, const double *inv_freq) {
    const int half = rot / 2;
    for (int i = 0; i < half; i++) {
        // double so the only rounding is the final cast (matches the float64 reference tables)
        for (int t = 0; t < T; t++) {
            double a = t * inv_freq[i];
            cos_t[(size_t)t * half + i] = (float)cos(a);
            sin_t[(size_t)t * half + i] = (float)sin(a);
        }
    }
}

// One head of hd from src into dst: its first rot dimensions (x1, x2) -> (x1 c - x2 s', x2 c + x1 s')
// with s' = sign * s over their two halves, the rest copied; a plain copy without tables (c == NULL).
// sign -1 rotates by the negative angle, the transpose (backward).
static void rope_head(float *dst, const float *src, const float *c, const float *s, int hd, int rot, float sign) {
    if (!c) {
        memcpy(dst, src, sizeof(float) * (size_t)hd);
        return;
    }
    const int half = rot / 2;
    const float *x1 = src, *x2 = src + half;
    float *o1 = dst, *o2 = dst + half;
#pragma omp simd
    for (int i = 0; i < half; i++) {
        const float a = x1[i], b = x2[i], si = sign * s[i];
        o1[i] = a * c[i] - b * si;
        o2[i] = b * c[i] + a * si;
    }
    if (rot < hd) memcpy(dst + rot, src + rot, sizeof(float) * (size_t)(hd - rot));
}

// where head h's q, k or v (part 0, 1, 2) starts inside a fused row
static size_t qkv_offset(KernQkvLayout layout, int part, int h, int H, int KV, int hd) {
    if (layout == KERN_QKV_PER_HEAD) return ((size_t)h * 3 + (size_t)part) * hd;
    return (part == 0 ? 0 : (size_t)H * hd + (part == 2 ? (size_t)KV * hd : 0)) + (size_t)h * hd;
}

// Copies one token between its fused row x and its q, k, v rows: forward (sign 1) from x, or the
// backward (sign -1) into x, rotating q and k heads when c is not NULL.
static void qkv_token(float *x, float *q, float *k, float *v, const float *c, const float *s, int H, int KV, int hd,
                      int rot, KernQkvLayout layout, float sign) {
    float *rows[3] = {q, k, v};
    for (int part = 0; part < 3; part++)
        for (int h = 0; h < (part ? KV : H); h++) {
            float *fused = x + qkv_offset(layout, part, h, H, KV, hd), *own = rows[part] + (size_t)h * hd;
            const float *cp = part < 2 ? c : NULL;
            if (sign > 0) rope_head(own, fused, cp, s, hd, rot, 1.0f);
            else rope_head(fused, own, cp, s, hd, rot, -1.0f);
        }
}

void CPU_OP(qkv_split)(void *q_, void *k_, void *v_, const void *qkv_, const float *cos_t, const float *sin_t, int B,
                   int T, int H, int KV, int hd, int rot, KernQkvLayout layout, int pos0, const int32_t *pos_t) {
    float *q = q_;  // the CPU's activations are fp32
    float *k = k_;
    float *v = v_;
    const float *qkv = qkv_;
    const size_t qd = (size_t)H * hd, kvd = (size_t)KV * hd, half = (size_t)rot / 2;
    const long rows = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long bt = 0; bt < rows; bt++) {
        const size_t pos = pos_t ? (size_t)pos_t[bt] : (size_t)(pos0 + bt % T);
        const float *c = cos_t ? cos_t + pos * half : NULL, *s = cos_t ? sin_t + pos * half : NULL;
        // the forward only reads the fused row
        qkv_token((float *)qkv + (size_t)bt * (qd + 2 * kvd), q + bt * qd, k + bt * kvd, v + bt * kvd, c, s, H, KV,
                  hd, rot, layout, 1.0f);
    }
}

void CPU_OP(qkv_merge)(void *dqkv_, const void *dq_, const void *dk_, const void *dv_, const float *cos_t,
                   const float *sin_t, int B, int T, int H, int KV, int hd, int rot, KernQkvLayout layout,
                   const int32_t *pos_t) {
    float *dqkv = dqkv_;  // the CPU's activations are fp32
    const float *dq = dq_;
    const float *dk = dk_;
    const float *dv = dv_;
    const size_t qd = (size_t)H * hd, kvd = (size_t)KV * hd, half = (size_t)rot / 2;
    const long rows = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long bt = 0; bt < rows; bt++) {
        const size_t pos = pos_t ? (size_t)pos_t[bt] : (size_t)(bt % T);
        const float *c = cos_t ? cos_t + pos * half : NULL, *s = cos_t ? sin_t + pos * half : NULL;
        // the backward only reads dq, dk, dv
        qkv_token(dqkv + (size_t)bt * (qd + 2 * kvd), (float *)dq + bt * qd, (float *)dk + bt * kvd,
                  (float *)dv + bt * kvd, c, s, H, KV, hd, rot, layout, -1.0f);
    }
}
