// elementwise: SwiGLU, GELU, bias, embedding, positions, dropout, cross-entropy, vector ops, AdamW
// and bf16.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/half.h"
#include "../../base/rng.h"
#include "../backend.h"
#include "cpu_common.h"

// The calling thread's share [lo, hi) of n items: fixed contiguous blocks by thread number, so
// reductions over them can be combined in thread order and do not depend on timing.
static void ew_thread_range(size_t n, size_t *lo, size_t *hi) {
    const size_t tid = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
    *lo = n * tid / nt;
    *hi = n * (tid + 1) / nt;
}

// The calling thread's columns [lo, hi) of D: whole 64-byte lines (16 floats), so no two threads
// write one line. A thread that owns a column and walks the rows in order sums it as a serial
// loop would: the result depends neither on timing nor on the thread count.
static void ew_col_slice(int D, size_t *lo, size_t *hi) {
    ew_thread_range(((size_t)D + 15) / 16, lo, hi);
    *lo *= 16;
    *hi = *hi * 16 < (size_t)D ? *hi * 16 : (size_t)D;
}

// ---- SwiGLU ----

void CPU_OP(swiglu_fwd)(void *h_, const void *gu_, int N, int F) {
    float *h = h_;  // the CPU's activations are fp32
    const float *gu = gu_;
#pragma omp parallel for schedule(static) if ((size_t)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = gu + (size_t)n * 2 * F, *up = gate + F;
        float *o = h + (size_t)n * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = gate[j] / (1.0f + cpu_expf(-gate[j])) * up[j];
    }
}

void CPU_OP(swiglu_bwd)(void *dgu_, const void *dh_, const void *gu_, int N, int F) {
    float *dgu = dgu_;  // the CPU's activations are fp32
    const float *dh = dh_;
    const float *gu = gu_;
#pragma omp parallel for schedule(static) if ((size_t)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = gu + (size_t)n * 2 * F, *up = gate + F, *d = dh + (size_t)n * F;
        float *dgate = dgu + (size_t)n * 2 * F, *dup = dgate + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            const float g = gate[j], sig = 1.0f / (1.0f + cpu_expf(-g));
            // d silu(g) / dg = sig * (1 + g * (1 - sig))
            dgate[j] = d[j] * up[j] * (sig * (1.0f + g * (1.0f - sig)));
            dup[j] = d[j] * (g * sig);
        }
    }
}

// ---- GELU ----
// The tanh form: 0.5 (1 + tanh(u)) = sigmoid(2u), so gelu(x) = x / (1 + exp(-2u)): no tanh (glibc's
// does not vectorise) and no cancellation in 1 + tanh(u) for very negative u.
#define GELU_C 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_A 0.044715f
#define GELU_R 0.7071067811865476f  // 1 / sqrt(2)
#define GELU_P 0.3989422804014327f  // 1 / sqrt(2 pi)

void CPU_OP(gelu_fwd)(void *out_, const void *inp_, size_t n, KernGelu form) {
    float *out = out_;  // the CPU's activations are fp32
    const float *inp = inp_;
    if (form == KERN_GELU_ERF) {
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * GELU_R));
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], u = GELU_C * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
}

void CPU_OP(gelu_bwd)(void *dinp_, const void *dout_, const void *inp_, size_t n, KernGelu form) {
    float *dinp = dinp_;  // the CPU's activations are fp32
    const float *dout = dout_;
    const float *inp = inp_;
    if (form == KERN_GELU_ERF) {
        // d/dx x Phi(x) = Phi(x) + x phi(x)
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float x = inp[i];
            dinp[i] = dout[i] * (0.5f * (1.0f + erff(x * GELU_R)) + x * GELU_P * expf(-0.5f * x * x));
        }
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], u = GELU_C * (x + GELU_A * x * x * x);
        const float s = 1.0f / (1.0f + cpu_expf(-2.0f * u)), du = GELU_C * (1.0f + 3.0f * GELU_A * x * x);
        // d/dx x sigmoid(2u) = s + 2 x s (1 - s) du
        dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
    }
}

// ---- bias ----

void CPU_OP(bias_add)(void *out_, KernDtype dt, const void *bv, int N, int D) {
    float *out = out_;  // the CPU's activations are fp32
    (void)dt;
    const float *b = bv;  // the CPU's parameters are fp32
#pragma omp parallel for schedule(static) if ((size_t)N * D >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * D;
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] += b[j];
    }
}

void CPU_OP(add_cols)(void *out_, KernDtype dt, int ld, int c0, const float *src, int N, int C, float s) {
    float *out = out_;  // the CPU's activations are fp32
    (void)dt;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * ld + c0;
        const float *x = src + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < C; j++) o[j] += s * x[j];
    }
}

void CPU_OP(get_cols)(float *dst, const void *src_, KernDtype dt, int ld, int c0, int N, int C, float s) {
    const float *src = src_;
    (void)dt;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = src + (size_t)n * ld + c0;
        float *o = dst + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < C; j++) o[j] = s * x[j];
    }
}

void CPU_OP(bias_bwd)(float *db, const void *dout_, KernDtype dt, int N, int D) {
    const float *dout = dout_;  // the CPU's activations are fp32
    (void)dt;
    // column slices, rows in order: the serial sum whatever the thread count
#pragma omp parallel if ((size_t)N * D >= CPU_PAR_MIN)
    {
        size_t lo, hi;
        ew_col_slice(D, &lo, &hi);
        for (int n = 0; n < N; n++) {
            const float *src = dout + (size_t)n * D;
#pragma omp simd
            for (size_t j = lo; j < hi; j++) db[j] += src[j];
        }
    }
}

// ---- embedding ----

void CPU_OP(embedding_fwd)(float *out, const int32_t *tokens, const void *wtev, int N, int D) {
    const float *wte = wtev;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, wte + (size_t)tokens[n] * D, sizeof(float) * D);
}

// whether token t falls in the rows [v0, v0 + Vl) of a vocabulary-parallel part (in 64 bits: no overflow)
static inline int in_part(int32_t t, int v0, int Vl) { return (int64_t)t - v0 >= 0 && (int64_t)t - v0 < Vl; }

// dwte (Vl, D) += the rows of dout whose token lies in [v0, v0 + Vl), at row token - v0
static void embedding_scatter(float *dwte, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl) {
    // Each thread owns a slice of the D columns and walks all rows in order: repeated tokens
    // never race and the sums are in row order.
#pragma omp parallel
    {
        size_t lo, hi;
        ew_col_slice(D, &lo, &hi);
        for (int n = 0; n < N; n++) {
            if (!in_part(tokens[n], v0, Vl)) continue;
            const float *src = dout + (size_t)n * D;
            float *dst = dwte + (size_t)(tokens[n] - v0) * D;
#pragma omp simd
            for (size_t j = lo; j < hi; j++) dst[j] += src[j];
        }
    }
}

void CPU_OP(embedding_bwd)(float *dwte, const float *dout, const int32_t *tokens, int N, int D) {
    embedding_scatter(dwte, dout, tokens, N, D, 0, INT32_MAX);
}

void CPU_OP(embedding_part_fwd)(float *out, const int32_t *tokens, const void *wte_part, int N, int D, int v0, int Vl) {
    const float *wte = wte_part;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * D;
        if (in_part(tokens[n], v0, Vl)) memcpy(o, wte + (size_t)(tokens[n] - v0) * D, sizeof(float) * D);
        else memset(o, 0, sizeof(float) * D);
    }
}

void CPU_OP(embedding_part_bwd)(float *dwte_part, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl) {
    embedding_scatter(dwte_part, dout, tokens, N, D, v0, Vl);
}

// ---- learned positions ----

void CPU_OP(positions_fwd)(float *out, const void *wpev, int B, int T, int D, int pos0) {
    const float *wpe = wpev;
    const long rows = (long)B * T;
#pragma omp parallel for schedule(static) if ((size_t)rows * D >= CPU_PAR_MIN)
    for (long bt = 0; bt < rows; bt++) {
        float *o = out + (size_t)bt * D;
        const float *w = wpe + (size_t)(pos0 + bt % T) * D;
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] += w[j];
    }
}

void CPU_OP(positions_bwd)(float *dwpe, const float *dout, int B, int T, int D) {
    // every (t, j) is one thread's, summed over b in order (as the GPU does)
#pragma omp parallel for schedule(static) if ((size_t)B * T * D >= CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *d = dwpe + (size_t)t * D;
        for (int b = 0; b < B; b++) {
            const float *src = dout + ((size_t)b * T + t) * D;
#pragma omp simd
            for (int j = 0; j < D; j++) d[j] += src[j];
        }
    }
}

// ---- dropout ----

void CPU_OP(dropout)(float *x, size_t e0, size_t n, size_t M, float p, uint64_t key, uint64_t sample0) {
    if (p == 0.0f || !n) return;
    const uint32_t thr = rng_dropout_threshold(p);
    const float scale = 1.0f / (1.0f - p);
    // each thread a contiguous range of the elements, walked as row segments: one seed per segment
#pragma omp parallel if (n >= CPU_PAR_MIN)
    {
        size_t lo, hi;
        ew_thread_range(n, &lo, &hi);
        lo += e0;
        hi += e0;
        while (lo < hi) {
            const size_t b = lo / M, i0 = lo - b * M, i1 = hi - b * M < M ? hi - b * M : M;
            const uint64_t seed = rng_dropout_seed(key, sample0 + b);
            float *seg = x + (lo - e0);  // element i0 of row b
            // times 0 rather than "= 0": a select of constants vectorises (a guarded multiply does not),
            // and a NaN stays NaN, as in torch's x * mask * scale
#pragma omp simd
            for (size_t i = i0; i < i1; i++) seg[i - i0] *= rng_dropout_keep(seed, i, thr) ? scale : 0.0f;
            lo = b * M + i1;
        }
    }
}

// ---- fused softmax + cross-entropy ----

// vocabulary entries per chunk of the statistics pass: a chunk's max, then its sum of exp, both
// from L1, merged into the row's running (max, sum)
#define CE_CHUNK 1024

// loss of one row of logits x (V); with dscale != 0, x <- (softmax(x) - onehot) * dscale. A negative
// target bears no loss: 0, and a zero gradient row.
static double ce_row(float *x, int target, int V, float dscale) {
    if (target < 0) {
        if (dscale != 0.0f) memset(x, 0, sizeof(float) * (size_t)V);
        return 0.0;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 < V; j0 += CE_CHUNK) {
        const int j1 = j0 + CE_CHUNK < V ? j0 + CE_CHUNK : V;
        float cm = x[j0];
#pragma omp simd reduction(max : cm) CPU_KEEP_ORDER
        for (int j = j0; j < j1; j++) cm = x[j] > cm ? x[j] : cm;
        // a NaN makes the chunk's max NaN through the sum below, not through the max (which may skip it)
        const float m = cm > mx ? cm : mx;
        float cs = 0.0f;
#pragma omp simd reduction(+ : cs) CPU_KEEP_ORDER
        for (int j = j0; j < j1; j++) cs += cpu_expf(x[j] - m);
        sum = sum * cpu_expf(mx - m) + cs;
        mx = m;
    }
    const double loss = log((double)sum) + mx - x[target];
    if (dscale != 0.0f) {
        // recomputing exp costs less than storing it and reading it back
        const float c = dscale / sum;
#pragma omp simd
        for (int j = 0; j < V; j++) x[j] = cpu_expf(x[j] - mx) * c;
        x[target] -= dscale;
    }
    return loss;
}

void CPU_OP(crossentropy_fwd_bwd)(void *logits_, const int32_t *targets, int N, int V, float dscale, double *loss) {
    float *logits = logits_;  // the CPU's activations are fp32
    const int nth = omp_get_max_threads();
    double part[CPU_MAX_THREADS];  // per-thread loss sums, added in thread order
    for (int t = 0; t < nth; t++) part[t] = 0.0;
#pragma omp parallel
    {
        size_t lo, hi;
        ew_thread_range((size_t)N, &lo, &hi);
        double s = 0.0;
        for (size_t n = lo; n < hi; n++) s += ce_row(logits + n * V, targets[n], V, dscale);
        part[omp_get_thread_num()] = s;
    }
    double sum = 0.0;
    for (int t = 0; t < nth; t++) sum += part[t];
    *loss += sum;
}

// ---- vocabulary-parallel cross-entropy ----

void CPU_OP(xent_part_max)(const void *logits_, int N, int Vl, float *row_max) {
    const float *logits = logits_;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float m = -INFINITY;
#pragma omp simd reduction(max : m) CPU_KEEP_ORDER
        for (int j = 0; j < Vl; j++) m = x[j] > m ? x[j] : m;
        row_max[n] = m;
    }
}

void CPU_OP(xent_part_sums)(const void *logits_, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                        float *sums) {
    const float *logits = logits_;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        if (targets[n] < 0) {
            sums[2 * n] = sums[2 * n + 1] = 0.0f;
            continue;
        }
        const float m = row_max[n];
        // float sums over L1-sized chunks (vectorised), added up in double
        double s = 0.0;
        for (int j0 = 0; j0 < Vl; j0 += CE_CHUNK) {
            const int j1 = j0 + CE_CHUNK < Vl ? j0 + CE_CHUNK : Vl;
            float cs = 0.0f;
#pragma omp simd reduction(+ : cs) CPU_KEEP_ORDER
            for (int j = j0; j < j1; j++) cs += cpu_expf(x[j] - m);
            s += cs;
        }
        sums[2 * n] = (float)s;
        sums[2 * n + 1] = in_part(targets[n], v0, Vl) ? x[targets[n] - v0] : 0.0f;
    }
}

void CPU_OP(xent_part_finish)(void *logits_, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                          const float *sums, float dscale, int add_loss, double *loss) {
    float *logits = logits_;
    if (dscale == 0.0f && !add_loss) return;
    const int nth = omp_get_max_threads();
    double part[CPU_MAX_THREADS];  // per-thread loss sums, added in thread order (as the fused kernel)
    for (int t = 0; t < nth; t++) part[t] = 0.0;
#pragma omp parallel
    {
        size_t lo, hi;
        ew_thread_range((size_t)N, &lo, &hi);
        double s = 0.0;
        for (size_t n = lo; n < hi; n++) {
            float *x = logits + n * Vl;
            if (targets[n] < 0) {
                if (dscale != 0.0f) memset(x, 0, sizeof(float) * (size_t)Vl);
                continue;
            }
            const float mx = row_max[n], sum = sums[2 * n];
            s += log((double)sum) + mx - sums[2 * n + 1];
            if (dscale != 0.0f) {
                const float c = dscale / sum;
#pragma omp simd
                for (int j = 0; j < Vl; j++) x[j] = cpu_expf(x[j] - mx) * c;
                if (in_part(targets[n], v0, Vl)) x[targets[n] - v0] -= dscale;
            }
        }
        part[omp_get_thread_num()] = s;
    }
    if (!add_loss) return;
    double sum = 0.0;
    for (int t = 0; t < nth; t++) sum += part[t];
    *loss += sum;
}

// ---- elementwise and reductions ----

void CPU_OP(add)(float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void CPU_OP(add3)(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void CPU_OP(scale)(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void CPU_OP(zero)(float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

void CPU_OP(copy)(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

void CPU_OP(act_copy)(void *dst, const void *src, size_t n) { CPU_OP(copy)(dst, src, n); }

double CPU_OP(sumsq)(const float *x, size_t n) {
    const int nth = omp_get_max_threads();
    double part[CPU_MAX_THREADS];  // per-thread partial sums, added in thread order
    for (int t = 0; t < nth; t++) part[t] = 0.0;
#pragma omp parallel if (n >= CPU_PAR_MIN)
    {
        size_t lo, hi;
        ew_thread_range(n, &lo, &hi);
        double s = 0.0;
#pragma omp simd reduction(+ : s) CPU_KEEP_ORDER
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
        part[omp_get_thread_num()] = s;
    }
    double sum = 0.0;
    for (int t = 0; t < nth; t++) sum += part[t];
    return sum;
}

void CPU_OP(sumsq_to)(double *out, const float *x, size_t n) { *out = CPU_OP(sumsq)(x, n); }

// ---- AdamW (torch.optim.AdamW, single-tensor form) ----

typedef struct {
    float b1, b2, b1c, b2c, gs, eps, decay, step_size, bc2_sqrt;
} AdamwConst;

// element i's update; returns the new p[i]
static inline float adamw_elem(float *p, const float *g, float *m, float *v, size_t i, const AdamwConst *c) {
    const float gi = g[i] * c->gs;
    const float mi = c->b1 * m[i] + c->b1c * gi, vi = c->b2 * v[i] + c->b2c * gi * gi;
    m[i] = mi;
    v[i] = vi;
    return p[i] = p[i] * c->decay - c->step_size * (mi / (sqrtf(vi) / c->bc2_sqrt + c->eps));
}

// elements [lo, hi) with one weight decay factor; two loops, as a test of pb inside one keeps
// GCC from vectorising the loop without the bf16 copy
static void adamw_range(float *p, uint16_t *pb, const float *g, float *m, float *v, size_t lo, size_t hi,
                        const AdamwConst *c) {
    if (pb) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= CPU_PAR_MIN)
        for (size_t i = lo; i < hi; i++) pb[i] = half_f32_to_bf16(adamw_elem(p, g, m, v, i, c));
    } else {
#pragma omp parallel for simd schedule(static) if (hi - lo >= CPU_PAR_MIN)
        for (size_t i = lo; i < hi; i++) adamw_elem(p, g, m, v, i, c);
    }
}

void CPU_OP(adamw)(float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h) {
    const double bc1 = 1.0 - pow(h->beta1, h->step), bc2 = 1.0 - pow(h->beta2, h->step);
    AdamwConst c = {h->beta1, h->beta2, 1.0f - h->beta1, 1.0f - h->beta2, h->grad_scale, h->eps, 1.0f,
                    (float)(h->lr / bc1), (float)sqrt(bc2)};
    const float decay = (float)(1.0 - (double)h->lr * h->weight_decay);
    // the ranges in order, the gaps between them without decay (p * 1.0f is exact)
    size_t at = 0;
    for (int r = 0; r <= h->ndecay; r++) {
        const size_t lo = r < h->ndecay ? h->decay[r][0] : n, hi = r < h->ndecay ? h->decay[r][1] : n;
        c.decay = 1.0f;
        if (lo > at) adamw_range(p, p_bf16, g, m, v, at, lo, &c);
        c.decay = decay;
        if (hi > lo) adamw_range(p, p_bf16, g, m, v, lo, hi, &c);
        if (hi > at) at = hi;
    }
}

// ---- bf16 ----

void CPU_OP(f32_to_bf16)(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = half_f32_to_bf16(src[i]);
}

void CPU_OP(round_bf16)(float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)half_f32_to_bf16(x[i]) << 16;
        memcpy(x + i, &u, sizeof u);
    }
}

void CPU_OP(bf16_to_f32)(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = half_bf16_to_f32(src[i]);
}
