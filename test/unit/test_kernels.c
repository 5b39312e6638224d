// test_kernels: checks every kernel in kernels/kernels.h. Forwards are compared with naive
// double-precision loops; backwards with central finite differences of L = sum(out * r).
// Prints `ok - <name>` / `not ok - <name> (<detail>)` per check; exits 1 if any failed.
// The whole suite runs once with 1 thread and once with 3 (uneven static partitions).
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_common.h"
#include "kernels/kernels.h"
#include "kernels/nf4.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/rng.h"
#include "test/unit/testutil.h"

// finite differences: step, tolerance on max|a-n| / max(max|n|, 1e-3), entries probed per tensor
#define FD_EPS 1e-2f
#define FD_TOL 2e-2
#define FD_MAX_PROBES 300

static int suite_threads;

static float *dup_vec(const float *x, size_t n) {
    float *y = malloc(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// max|a - ref| / max(max|ref|, floor)
static double rel_err(const float *a, const double *ref, size_t n, double floor) {
    double md = 0.0, mr = floor;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs(a[i] - ref[i]));
        mr = fmax(mr, fabs(ref[i]));
    }
    return md / mr;
}

static void check_close(const char *name, const float *a, const double *ref, size_t n, double tol) {
    double e = rel_err(a, ref, n, 1e-6);
    report(e < tol, name, "rel err %.3g >= %.1g", e, tol);
}

// accumulated gradient minus what was there before (before may be NULL), as double
static double *grad_delta(const float *after, const float *before, size_t n) {
    double *d = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) d[i] = (double)after[i] - (before ? before[i] : 0.0f);
    return d;
}

typedef double (*objective_fn)(void *ctx);

// Compares analytic gradient `grad` (n entries, as double) of obj with central differences in
// `param` (all entries if few, else FD_MAX_PROBES random ones).
static void check_grad(const char *name, objective_fn obj, void *ctx, float *param, const double *grad, size_t n) {
    const size_t probes = n < FD_MAX_PROBES ? n : FD_MAX_PROBES;
    double md = 0.0, mn = 1e-3;
    for (size_t s = 0; s < probes; s++) {
        const size_t i = n <= FD_MAX_PROBES ? s : (size_t)(rng_next() % n);
        const float orig = param[i], hi = orig + FD_EPS, lo = orig - FD_EPS;
        param[i] = hi;
        const double lp = obj(ctx);
        param[i] = lo;
        const double lm = obj(ctx);
        param[i] = orig;
        const double num = (lp - lm) / ((double)hi - lo);
        md = fmax(md, fabs(grad[i] - num));
        mn = fmax(mn, fabs(num));
    }
    report(md / mn < FD_TOL, name, "max|a-n| / max|n| = %.3g", md / mn);
}

// ---- matmul ----

typedef struct {
    float *inp, *w, *out, *r;
    int N, IN, OUT;
} MatmulCtx;

static double matmul_obj(void *p) {
    MatmulCtx *c = p;
    kern_matmul_fwd(c->out, KERN_F32, c->inp, c->w, c->N, c->IN, c->OUT);
    return dot(c->out, c->r, (size_t)c->N * c->OUT);
}

static void test_matmul(void) {
    {
        const int N = 33, IN = 45, OUT = 29;
        float *inp = rand_vec((size_t)N * IN, -1, 1), *w = rand_vec((size_t)OUT * IN, -1, 1);
        float *out = malloc(sizeof(float) * N * OUT);
        double *ref = malloc(sizeof(double) * N * OUT);
        kern_matmul_fwd(out, KERN_F32, inp, w, N, IN, OUT);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) {
                double s = 0.0;
                for (int i = 0; i < IN; i++) s += (double)inp[n * IN + i] * w[o * IN + i];
                ref[n * OUT + o] = s;
            }
        check_close("matmul fwd", out, ref, (size_t)N * OUT, 1e-5);
        free(inp), free(w), free(out), free(ref);
    }
    const int N = 5, IN = 7, OUT = 6;
    MatmulCtx c = {rand_vec(N * IN, -1, 1), rand_vec(OUT * IN, -1, 1), malloc(sizeof(float) * N * OUT),
                   rand_vec(N * OUT, -1, 1), N, IN, OUT};
    float *dinp0 = rand_vec(N * IN, -1, 1), *dw0 = rand_vec(OUT * IN, -1, 1);
    float *dinp = dup_vec(dinp0, N * IN), *dw = dup_vec(dw0, OUT * IN);
    kern_matmul_bwd(dinp, dw, c.r, KERN_F32, c.inp, c.w, N, IN, OUT, 1);
    double *g_inp = grad_delta(dinp, dinp0, N * IN), *g_w = grad_delta(dw, dw0, OUT * IN);
    check_grad("matmul bwd dinp (accumulate)", matmul_obj, &c, c.inp, g_inp, N * IN);
    check_grad("matmul bwd dw", matmul_obj, &c, c.w, g_w, OUT * IN);
    // overwrite form: dinp starts as garbage and must equal the gradient
    float *dinp_ow = rand_vec(N * IN, -9, 9), *dw2 = dup_vec(dw0, OUT * IN);
    kern_matmul_bwd(dinp_ow, dw2, c.r, KERN_F32, c.inp, c.w, N, IN, OUT, 0);
    check_close("matmul bwd dinp (overwrite)", dinp_ow, g_inp, N * IN, 1e-5);
    // dinp NULL skips dinp; dw must come out as in the first call
    memcpy(dw2, dw0, sizeof(float) * OUT * IN);
    kern_matmul_bwd(NULL, dw2, c.r, KERN_F32, c.inp, c.w, N, IN, OUT, 0);
    report(memcmp(dw2, dw, sizeof(float) * OUT * IN) == 0, "matmul bwd dinp=NULL", "dw differs");
    free(c.inp), free(c.w), free(c.out), free(c.r), free(dinp0), free(dw0), free(dinp), free(dw);
    free(g_inp), free(g_w), free(dinp_ow), free(dw2);
}

// fp32 products big enough for cpu_gemm to cut C into a share per thread (by rows, or by columns
// where C has fewer rows): bit for bit what one-thread sgemm gives, on any thread count (OpenBLAS's
// own threading changes the sums with it when K is 500)
static void test_matmul_split(void) {
    static const int shapes[][3] = {{300, 500, 700}, {900, 130, 70}};  // N, IN, OUT
    for (int s = 0; s < 2; s++) {
        const int N = shapes[s][0], IN = shapes[s][1], OUT = shapes[s][2];
        float *inp = rand_vec((size_t)N * IN, -1, 1), *w = rand_vec((size_t)OUT * IN, -1, 1);
        float *dout = rand_vec((size_t)N * OUT, -1, 1), *dw0 = rand_vec((size_t)OUT * IN, -1, 1);
        float *out[2] = {malloc(sizeof(float) * N * OUT), malloc(sizeof(float) * N * OUT)};
        float *dinp[2] = {malloc(sizeof(float) * N * IN), malloc(sizeof(float) * N * IN)};
        float *dw[2] = {dup_vec(dw0, (size_t)OUT * IN), dup_vec(dw0, (size_t)OUT * IN)};
        kern_matmul_fwd(out[0], KERN_F32, inp, w, N, IN, OUT);
        kern_matmul_bwd(dinp[0], dw[0], dout, KERN_F32, inp, w, N, IN, OUT, 0);
        openblas_set_num_threads(1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, inp, IN, w, IN, 0.0f, out[1], OUT);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp[1], IN);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dw[1], IN);
        openblas_set_num_threads(suite_threads);
        char name[80];
        snprintf(name, sizeof name, "matmul %dx%dx%d on the threads = one-thread sgemm", N, IN, OUT);
        report(!memcmp(out[0], out[1], sizeof(float) * N * OUT) && !memcmp(dinp[0], dinp[1], sizeof(float) * N * IN) &&
                   !memcmp(dw[0], dw[1], sizeof(float) * OUT * IN), name, "fwd %s, dinp %s, dw %s",
               memcmp(out[0], out[1], sizeof(float) * N * OUT) ? "differs" : "same",
               memcmp(dinp[0], dinp[1], sizeof(float) * N * IN) ? "differs" : "same",
               memcmp(dw[0], dw[1], sizeof(float) * OUT * IN) ? "differs" : "same");
        free(inp), free(w), free(dout), free(dw0);
        for (int k = 0; k < 2; k++) free(out[k]), free(dinp[k]), free(dw[k]);
    }
}

// the grouped form (the experts of a MoE layer): bit for bit the loop of the plain one over the
// groups, groups of 0 rows included; the backward twice, overwriting dinp and then adding to it
static void test_matmul_grouped(void) {
    enum { G = 5, IN = 9, OUT = 6 };
    const int rows[G] = {4, 0, 7, 0, 3}, N = 14;
    float *inp = rand_vec((size_t)N * IN, -1, 1), *dout = rand_vec((size_t)N * OUT, -1, 1);
    float *out[2] = {malloc(sizeof(float) * N * OUT), malloc(sizeof(float) * N * OUT)};
    float *dinp[2] = {rand_vec((size_t)N * IN, -9, 9), rand_vec((size_t)N * IN, -9, 9)};
    const void *w[G];
    float *dw[2][G];
    for (int g = 0; g < G; g++) {
        w[g] = rand_vec(OUT * IN, -1, 1);
        dw[0][g] = rand_vec(OUT * IN, -1, 1), dw[1][g] = dup_vec(dw[0][g], OUT * IN);
    }
    kern_matmul_grouped_fwd(out[0], KERN_F32, inp, w, rows, G, IN, OUT);
    for (int acc = 0; acc < 2; acc++) kern_matmul_grouped_bwd(dinp[0], dw[0], dout, KERN_F32, inp, w, rows, G, IN, OUT, acc);
    for (int g = 0, o = 0; g < G; o += rows[g++])
        if (rows[g]) {
            kern_matmul_fwd(out[1] + o * OUT, KERN_F32, inp + o * IN, w[g], rows[g], IN, OUT);
            for (int acc = 0; acc < 2; acc++)
                kern_matmul_bwd(dinp[1] + o * IN, dw[1][g], dout + o * OUT, KERN_F32, inp + o * IN, w[g], rows[g], IN, OUT, acc);
        }
    int dw_same = 1;
    for (int g = 0; g < G; g++) dw_same &= !memcmp(dw[0][g], dw[1][g], sizeof(float) * OUT * IN);
    report(!memcmp(out[0], out[1], sizeof(float) * N * OUT), "matmul grouped fwd = the loop (bits)", "out differs");
    report(!memcmp(dinp[0], dinp[1], sizeof(float) * N * IN), "matmul grouped bwd dinp = the loop, then += (bits)", "dinp differs");
    report(dw_same, "matmul grouped bwd dw += as the loop (bits)", "dw differs");
    for (int g = 0; g < G; g++) free((void *)w[g]), free(dw[0][g]), free(dw[1][g]);
    free(inp), free(dout), free(out[0]), free(out[1]), free(dinp[0]), free(dinp[1]);
}

// ---- RMSNorm ----

typedef struct {
    float *inp, *w, *out, *rstd, *r;
    int N, D;
} RmsCtx;

static const float rms_eps = 1e-5f;

static double rmsnorm_obj(void *p) {
    RmsCtx *c = p;
    kern_rmsnorm_fwd(c->out, c->rstd, c->inp, c->w, c->N, c->D, rms_eps);
    return dot(c->out, c->r, (size_t)c->N * c->D);
}

static void test_rmsnorm(void) {
    {
        const int N = 9, D = 67;
        float *inp = rand_vec(N * D, -2, 2), *w = rand_vec(D, 0.5f, 1.5f);
        float *out = malloc(sizeof(float) * N * D), *rstd = malloc(sizeof(float) * N);
        double *ref = malloc(sizeof(double) * N * D), *ref_rstd = malloc(sizeof(double) * N);
        kern_rmsnorm_fwd(out, rstd, inp, w, N, D, rms_eps);
        for (int n = 0; n < N; n++) {
            double ss = 0.0;
            for (int j = 0; j < D; j++) ss += (double)inp[n * D + j] * inp[n * D + j];
            ref_rstd[n] = 1.0 / sqrt(ss / D + rms_eps);
            for (int j = 0; j < D; j++) ref[n * D + j] = inp[n * D + j] * ref_rstd[n] * w[j];
        }
        check_close("rmsnorm fwd out", out, ref, (size_t)N * D, 1e-6);
        check_close("rmsnorm fwd rstd", rstd, ref_rstd, N, 1e-6);
        free(inp), free(w), free(out), free(rstd), free(ref), free(ref_rstd);
    }
    const int N = 7, D = 19;
    RmsCtx c = {rand_vec(N * D, -2, 2), rand_vec(D, 0.5f, 1.5f), malloc(sizeof(float) * N * D),
                malloc(sizeof(float) * N), rand_vec(N * D, -1, 1), N, D};
    rmsnorm_obj(&c);  // rstd for backward
    float *dinp0 = rand_vec(N * D, -1, 1), *dw0 = rand_vec(D, -1, 1);
    float *dinp = dup_vec(dinp0, N * D), *dw = dup_vec(dw0, D);
    kern_rmsnorm_bwd(dinp, dw, c.r, c.inp, c.w, c.rstd, N, D);
    double *g_inp = grad_delta(dinp, dinp0, N * D), *g_w = grad_delta(dw, dw0, D);
    check_grad("rmsnorm bwd dinp", rmsnorm_obj, &c, c.inp, g_inp, N * D);
    check_grad("rmsnorm bwd dw", rmsnorm_obj, &c, c.w, g_w, D);
    // dw is a reduction over rows: repeated calls must agree bit for bit
    float *dinp2 = dup_vec(dinp0, N * D), *dw2 = dup_vec(dw0, D);
    kern_rmsnorm_bwd(dinp2, dw2, c.r, c.inp, c.w, c.rstd, N, D);
    report(memcmp(dw, dw2, sizeof(float) * D) == 0 && memcmp(dinp, dinp2, sizeof(float) * N * D) == 0,
           "rmsnorm bwd deterministic", "repeated call differs");
    free(c.inp), free(c.w), free(c.out), free(c.rstd), free(c.r), free(dinp0), free(dw0), free(dinp), free(dw);
    free(g_inp), free(g_w), free(dinp2), free(dw2);
    // the residual add fused in: y += r, then the norm of y, bit for bit the two kernels' result
    const int N2 = 9, D2 = 67;
    float *y = rand_vec(N2 * D2, -2, 2), *r = rand_vec(N2 * D2, -2, 2), *w = rand_vec(D2, 0.5f, 1.5f);
    float *y2 = dup_vec(y, N2 * D2), *o1 = malloc(sizeof(float) * N2 * D2), *o2 = malloc(sizeof(float) * N2 * D2);
    float *s1 = malloc(sizeof(float) * N2), *s2 = malloc(sizeof(float) * N2);
    kern_add_rmsnorm_fwd(y, o1, s1, r, w, N2, D2, rms_eps);
    kern_add(y2, r, (size_t)N2 * D2);
    kern_rmsnorm_fwd(o2, s2, y2, w, N2, D2, rms_eps);
    report(!memcmp(y, y2, sizeof(float) * N2 * D2) && !memcmp(o1, o2, sizeof(float) * N2 * D2) &&
               !memcmp(s1, s2, sizeof(float) * N2),
           "add_rmsnorm = add, then rmsnorm (exact)", "differs");
    free(y), free(r), free(w), free(y2), free(o1), free(o2), free(s1), free(s2);
}

// ---- LayerNorm ----

typedef struct {
    float *inp, *w, *b, *out, *mean, *rstd, *r;
    int N, D;
} LnCtx;

static double layernorm_obj(void *p) {
    LnCtx *c = p;
    kern_layernorm_fwd(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->D, rms_eps);
    return dot(c->out, c->r, (size_t)c->N * c->D);
}

static void test_layernorm(void) {
    {
        const int N = 9, D = 67;
        float *inp = rand_vec(N * D, -2, 2), *w = rand_vec(D, 0.5f, 1.5f), *b = rand_vec(D, -1, 1);
        for (int j = 0; j < D; j++) inp[D + j] += 1000.0f;  // a row with |mean| >> std
        float *out = malloc(sizeof(float) * N * D), *mean = malloc(sizeof(float) * N);
        float *rstd = malloc(sizeof(float) * N);
        double *ref = malloc(sizeof(double) * N * D), *rmean = malloc(sizeof(double) * N);
        double *rrstd = malloc(sizeof(double) * N);
        kern_layernorm_fwd(out, mean, rstd, inp, w, b, N, D, rms_eps);
        for (int n = 0; n < N; n++) {
            double s = 0.0, ss = 0.0;
            for (int j = 0; j < D; j++) s += inp[n * D + j];
            rmean[n] = s / D;
            for (int j = 0; j < D; j++) ss += (inp[n * D + j] - rmean[n]) * (inp[n * D + j] - rmean[n]);
            rrstd[n] = 1.0 / sqrt(ss / D + rms_eps);
            for (int j = 0; j < D; j++) ref[n * D + j] = (inp[n * D + j] - rmean[n]) * rrstd[n] * w[j] + b[j];
        }
        check_close("layernorm fwd out", out, ref, (size_t)N * D, 1e-5);
        check_close("layernorm fwd mean", mean, rmean, N, 1e-6);
        check_close("layernorm fwd rstd", rstd, rrstd, N, 1e-6);
        free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(ref), free(rmean), free(rrstd);
    }
    const int N = 7, D = 19;
    LnCtx c = {rand_vec(N * D, -2, 2), rand_vec(D, 0.5f, 1.5f), rand_vec(D, -1, 1), malloc(sizeof(float) * N * D),
               malloc(sizeof(float) * N), malloc(sizeof(float) * N), rand_vec(N * D, -1, 1), N, D};
    layernorm_obj(&c);  // mean, rstd for backward
    float *dinp0 = rand_vec(N * D, -1, 1), *dw0 = rand_vec(D, -1, 1), *db0 = rand_vec(D, -1, 1);
    float *dinp = dup_vec(dinp0, N * D), *dw = dup_vec(dw0, D), *db = dup_vec(db0, D);
    kern_layernorm_bwd(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, N, D);
    double *g_inp = grad_delta(dinp, dinp0, N * D), *g_w = grad_delta(dw, dw0, D), *g_b = grad_delta(db, db0, D);
    check_grad("layernorm bwd dinp", layernorm_obj, &c, c.inp, g_inp, N * D);
    check_grad("layernorm bwd dw", layernorm_obj, &c, c.w, g_w, D);
    check_grad("layernorm bwd db", layernorm_obj, &c, c.b, g_b, D);
    float *dinp2 = dup_vec(dinp0, N * D), *dw2 = dup_vec(dw0, D), *db2 = dup_vec(db0, D);
    kern_layernorm_bwd(dinp2, dw2, db2, c.r, c.inp, c.w, c.mean, c.rstd, N, D);
    report(!memcmp(dw, dw2, sizeof(float) * D) && !memcmp(db, db2, sizeof(float) * D) &&
               !memcmp(dinp, dinp2, sizeof(float) * N * D),
           "layernorm bwd deterministic", "repeated call differs");
    free(dinp0), free(dw0), free(db0), free(dinp), free(dw), free(db), free(g_inp), free(g_w), free(g_b);
    free(dinp2), free(dw2), free(db2);
    // the residual add fused in (minGPT's second norm): bit for bit add, then layernorm
    float *y = rand_vec(N * D, -2, 2), *res = rand_vec(N * D, -2, 2), *y2 = dup_vec(y, N * D);
    float *o[2] = {malloc(sizeof(float) * N * D), malloc(sizeof(float) * N * D)};
    float *st[2] = {malloc(sizeof(float) * 2 * N), malloc(sizeof(float) * 2 * N)};  // mean, rstd
    kern_add_layernorm_fwd(y, o[0], st[0], st[0] + N, res, c.w, c.b, N, D, rms_eps);
    kern_add(y2, res, (size_t)N * D);
    kern_layernorm_fwd(o[1], st[1], st[1] + N, y2, c.w, c.b, N, D, rms_eps);
    report(!memcmp(y, y2, sizeof(float) * N * D) && !memcmp(o[0], o[1], sizeof(float) * N * D) &&
               !memcmp(st[0], st[1], sizeof(float) * 2 * N),
           "add_layernorm = add, then layernorm (exact)", "differs");
    free(y), free(res), free(y2), free(o[0]), free(o[1]), free(st[0]), free(st[1]);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.r);
}

// ---- the q|k|v split with RoPE ----

typedef struct {
    float *qkv, *q, *k, *v, *rq, *rk, *rv;
    const float *cos_t, *sin_t;  // NULL: a plain split
    int B, T, H, KV, hd, rot, pos0;
    KernQkvLayout layout;
} QkvCtx;

static double qkv_obj(void *p) {
    QkvCtx *c = p;
    const size_t nq = (size_t)c->B * c->T * c->H * c->hd, nkv = (size_t)c->B * c->T * c->KV * c->hd;
    kern_qkv_split(c->q, c->k, c->v, c->qkv, c->cos_t, c->sin_t, c->B, c->T, c->H, c->KV, c->hd, c->rot, c->layout,
                   c->pos0, NULL);
    return dot(c->q, c->rq, nq) + dot(c->k, c->rk, nkv) + dot(c->v, c->rv, nkv);
}

// plain RoPE's inverse frequencies theta^(-2i/rot) of rot rotated dimensions, every third one
// divided by `scale` (a table the kernels must follow as given, as Llama-3's scaled one)
static double *rope_freqs(int rot, double theta, double scale) {
    double *f = malloc(sizeof(double) * (size_t)(rot / 2));
    for (int i = 0; i < rot / 2; i++) f[i] = 1.0 / pow(theta, 2.0 * i / rot) / (i % 3 == 2 ? scale : 1.0);
    return f;
}

// H heads, KV key/value heads, the first rot dimensions of each head rotated, the fused row in layout
static void test_qkv_split_case(int H, int KV, int rot, KernQkvLayout layout) {
    const int B = 2, T = 5, hd = 16, pos0 = 3, Tt = T + pos0, half = rot / 2;
    const float theta = 10000.0f;
    char name[160], what[80];
    snprintf(what, sizeof what, "H=%d KV=%d rot=%d %s", H, KV, rot, layout == KERN_QKV_PER_HEAD ? "per-head" : "blocked");
    float *cos_t = malloc(sizeof(float) * Tt * half), *sin_t = malloc(sizeof(float) * Tt * half);
    double *freqs = rope_freqs(rot, theta, 8.0);
    kern_rope_table(cos_t, sin_t, Tt, rot, freqs);
    double *rc = malloc(sizeof(double) * Tt * half), *rs = malloc(sizeof(double) * Tt * half);
    for (int t = 0; t < Tt; t++)
        for (int i = 0; i < half; i++) {
            double a = t / pow(theta, 2.0 * i / rot) / (i % 3 == 2 ? 8.0 : 1.0);
            rc[t * half + i] = cos(a);
            rs[t * half + i] = sin(a);
        }
    snprintf(name, sizeof name, "rope table cos (%s)", what);
    check_close(name, cos_t, rc, (size_t)Tt * half, 1e-7);
    snprintf(name, sizeof name, "rope table sin (%s)", what);
    check_close(name, sin_t, rs, (size_t)Tt * half, 1e-7);

    const int W = (H + 2 * KV) * hd;
    const size_t n = (size_t)B * T * W, nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    QkvCtx c = {rand_vec(n, -1, 1), malloc(sizeof(float) * nq), malloc(sizeof(float) * nkv), malloc(sizeof(float) * nkv),
                rand_vec(nq, -1, 1), rand_vec(nkv, -1, 1), rand_vec(nkv, -1, 1), cos_t, sin_t, B, T, H, KV, hd, rot, pos0,
                layout};
    // forward against the HF formula x * cos + rotate_half(x) * sin over the first rot dimensions
    // of each q and k head (the rest pass through), tables in double
    double *ref[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nkv), malloc(sizeof(double) * nkv)};
    for (int bt = 0; bt < B * T; bt++)
        for (int part = 0; part < 3; part++)
            for (int h = 0; h < (part ? KV : H); h++) {
                const int at = layout == KERN_QKV_PER_HEAD ? (h * 3 + part) * hd
                                                          : (part ? H * hd + (part - 1) * KV * hd : 0) + h * hd;
                const float *x = c.qkv + (size_t)bt * W + at;  // this head
                for (int i = 0; i < hd; i++) {
                    double val = x[i];
                    if (part < 2 && i < rot) {
                        const int f = i % half, t = bt % T;
                        const double cs = rc[(t + pos0) * half + f], sn = rs[(t + pos0) * half + f];
                        val = x[i] * cs + (i < half ? -x[i + half] : x[i - half]) * sn;
                    }
                    ref[part][(size_t)bt * (part ? KV : H) * hd + h * hd + i] = val;
                }
            }
    qkv_obj(&c);
    snprintf(name, sizeof name, "qkv_split rope q (pos0 > 0; %s)", what);
    check_close(name, c.q, ref[0], nq, 1e-6);
    snprintf(name, sizeof name, "qkv_split rope k (pos0 > 0; %s)", what);
    check_close(name, c.k, ref[1], nkv, 1e-6);
    snprintf(name, sizeof name, "qkv_split v (%s)", what);
    check_close(name, c.v, ref[2], nkv, 1e-12);
    // the merge is the split's transpose: its gradient, here at pos0 = 0 as training uses it
    c.pos0 = 0;
    float *dqkv = rand_vec(n, -9, 9);
    kern_qkv_merge(dqkv, c.rq, c.rk, c.rv, cos_t, sin_t, B, T, H, KV, hd, rot, layout, NULL);
    double *g = grad_delta(dqkv, NULL, n);
    snprintf(name, sizeof name, "qkv_merge (rope) = split backward (%s)", what);
    check_grad(name, qkv_obj, &c, c.qkv, g, n);
    // without tables: a plain split and merge (minGPT's c_attn), exact
    c.cos_t = c.sin_t = NULL;
    qkv_obj(&c);
    kern_qkv_merge(dqkv, c.q, c.k, c.v, NULL, NULL, B, T, H, KV, hd, rot, layout, NULL);
    snprintf(name, sizeof name, "qkv split/merge without rope round trip (%s)", what);
    report(memcmp(dqkv, c.qkv, sizeof(float) * n) == 0, name, "differs");
    free(cos_t), free(sin_t), free(freqs), free(rc), free(rs), free(c.qkv), free(c.q), free(c.k), free(c.v), free(c.rq), free(c.rk);
    free(c.rv), free(ref[0]), free(ref[1]), free(ref[2]), free(dqkv), free(g);
}

static void test_qkv_split(void) {
    test_qkv_split_case(3, 1, 16, KERN_QKV_BLOCKED);    // Llama: grouped-query, full rotation
    test_qkv_split_case(3, 3, 4, KERN_QKV_PER_HEAD);    // GPT-NeoX: per-head q, k, v, rotary_pct 0.25
    test_qkv_split_case(2, 2, 8, KERN_QKV_BLOCKED);     // partial rotation, blocked
}

// ---- attention ----

// naive causal GQA attention in double; probs (B, H, Tq, Tk); window > 0: query at position pos
// sees keys pos - window + 1 .. pos only (kernels.h)
// the dropout mask of kernels.h for P[b, h, t, j]: 1 / (1 - p) kept, 0 dropped (1 without drop)
static double att_mask(const KernDropout *drop, int b, int h, int t, int j, int Tq, int Tk) {
    if (!drop || drop->p == 0.0f) return 1.0;
    const double u = (double)(rng_splitmix64(rng_dropout_seed(drop->key, drop->sample0 + b) ^
                                               (((uint64_t)(drop->head0 + h) * Tq + t) * Tk + j)) >> 40) * 0x1p-24;
    return u >= drop->p ? 1.0 / (1.0 - (double)drop->p) : 0.0;
}

static void attention_ref(double *out, double *probs, const float *q, const float *k, const float *v, int B, int Tq,
                          int Tk, int H, int KV, int hd, size_t kv_bstride, int window, const KernDropout *drop) {
    const double scale = 1.0 / sqrt(hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / KV);
            for (int t = 0; t < Tq; t++) {
                const int pos = Tk - Tq + t, lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
                const float *qr = q + (((size_t)b * Tq + t) * H + h) * hd;
                double *pr = probs + (((size_t)b * H + h) * Tq + t) * Tk, mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < Tk; j++) {
                    pr[j] = 0.0;
                    if (j > pos || j < lo) continue;
                    const float *kr = k + b * kv_bstride + ((size_t)j * KV + g) * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++) s += (double)qr[d] * kr[d];
                    pr[j] = s * scale;
                    mx = fmax(mx, pr[j]);
                }
                for (int j = lo; j <= pos; j++) sum += pr[j] = exp(pr[j] - mx);
                double *o = out + (((size_t)b * Tq + t) * H + h) * hd;
                for (int d = 0; d < hd; d++) o[d] = 0.0;
                for (int j = lo; j <= pos; j++) {
                    pr[j] /= sum;
                    const float *vr = v + b * kv_bstride + ((size_t)j * KV + g) * hd;
                    const double pj = pr[j] * att_mask(drop, b, h, t, j, Tq, Tk);
                    for (int d = 0; d < hd; d++) o[d] += pj * vr[d];
                }
            }
        }
}

static void test_attention_fwd(const char *name, int B, int Tq, int Tk, int Tcap, int H, int KV, int hd, int window,
                               const KernDropout *drop) {
    const size_t kv_bstride = (size_t)Tcap * KV * hd, nq = (size_t)B * Tq * H * hd, np = (size_t)B * H * Tq * Tk;
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(B * kv_bstride, -1, 1), *v = rand_vec(B * kv_bstride, -1, 1);
    // cache slots past Tk must never be read: poison them
    for (int b = 0; b < B; b++)
        for (size_t i = (size_t)Tk * KV * hd; i < kv_bstride; i++) k[b * kv_bstride + i] = v[b * kv_bstride + i] = NAN;
    float *out = malloc(sizeof(float) * nq), *probs = malloc(sizeof(float) * np);
    double *rout = malloc(sizeof(double) * nq), *rprobs = malloc(sizeof(double) * np);
    kern_attention_fwd(out, probs, q, k, v, B, Tq, Tk, H, KV, hd, kv_bstride, NULL, window, drop);
    attention_ref(rout, rprobs, q, k, v, B, Tq, Tk, H, KV, hd, kv_bstride, window, drop);
    char buf[160];
    snprintf(buf, sizeof buf, "attention fwd out %s", name);
    check_close(buf, out, rout, nq, 1e-5);
    snprintf(buf, sizeof buf, "attention fwd probs %s", name);
    check_close(buf, probs, rprobs, np, 1e-5);
    size_t nonzero = 0;
    for (size_t bh = 0; bh < (size_t)B * H; bh++)
        for (int t = 0; t < Tq; t++)
            for (int j = 0; j < Tk; j++) {
                const int pos = Tk - Tq + t;
                nonzero += (j > pos || (window > 0 && j <= pos - window)) && probs[(bh * Tq + t) * Tk + j] != 0.0f;
            }
    snprintf(buf, sizeof buf, "attention fwd masked probs exactly 0 %s", name);
    report(nonzero == 0, buf, "%zu masked entries nonzero", nonzero);
    free(q), free(k), free(v), free(out), free(probs), free(rout), free(rprobs);
}

typedef struct {
    float *q, *k, *v, *out, *probs, *r;
    int B, T, H, KV, hd, window;
    const KernDropout *drop;  // a fixed key: the mask, so the function, stays the same across calls
} AttCtx;

static double attention_obj(void *p) {
    AttCtx *c = p;
    kern_attention_fwd(c->out, c->probs, c->q, c->k, c->v, c->B, c->T, c->T, c->H, c->KV, c->hd,
                       (size_t)c->T * c->KV * c->hd, NULL, c->window, c->drop);
    return dot(c->out, c->r, (size_t)c->B * c->T * c->H * c->hd);
}

static void test_attention_bwd(const char *name, int B, int T, int H, int KV, int hd, int window, const KernDropout *drop) {
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    AttCtx c = {rand_vec(nq, -1, 1), rand_vec(nk, -1, 1), rand_vec(nk, -1, 1), malloc(sizeof(float) * nq),
                malloc(sizeof(float) * B * H * T * T), rand_vec(nq, -1, 1), B, T, H, KV, hd, window, drop};
    attention_obj(&c);  // probs for backward
    // outputs start as garbage: the backward overwrites them
    float *dq = rand_vec(nq, -9, 9), *dk = rand_vec(nk, -9, 9), *dv = rand_vec(nk, -9, 9);
    float *scratch = malloc(sizeof(float) * kern_attention_scratch_floats(B, H, T));
    kern_attention_bwd(dq, dk, dv, scratch, c.r, c.out, c.probs, c.q, c.k, c.v, B, T, H, KV, hd, NULL, window, drop);
    double *gq = grad_delta(dq, NULL, nq), *gk = grad_delta(dk, NULL, nk), *gv = grad_delta(dv, NULL, nk);
    char buf[160];
    snprintf(buf, sizeof buf, "attention bwd dq %s", name);
    check_grad(buf, attention_obj, &c, c.q, gq, nq);
    snprintf(buf, sizeof buf, "attention bwd dk %s", name);
    check_grad(buf, attention_obj, &c, c.k, gk, nk);
    snprintf(buf, sizeof buf, "attention bwd dv %s", name);
    check_grad(buf, attention_obj, &c, c.v, gv, nk);
    free(c.q), free(c.k), free(c.v), free(c.out), free(c.probs), free(c.r), free(dq), free(dk), free(dv);
    free(scratch), free(gq), free(gk), free(gv);
}

// With p == 0, or the same p, key and sample0, the forward and backward are those of NULL / each
// other bit for bit; a p > 0 changes the output.
static void test_attention_drop_identity(void) {
    const int B = 2, T = 70, H = 4, KV = 2, hd = 8;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, np = (size_t)B * H * T * T;
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    float *out[3], *probs[3], *dq[3], *dk[3], *dv[3];
    float *scratch = malloc(sizeof(float) * kern_attention_scratch_floats(B, H, T));
    const KernDropout zero = {0.0f, 123, 4, 0}, on = {0.25f, 99, 7, 0};
    const KernDropout *drops[3] = {NULL, &zero, &on};
    for (int i = 0; i < 3; i++) {
        out[i] = malloc(sizeof(float) * nq), probs[i] = malloc(sizeof(float) * np);
        dq[i] = malloc(sizeof(float) * nq), dk[i] = malloc(sizeof(float) * nk), dv[i] = malloc(sizeof(float) * nk);
        kern_attention_fwd(out[i], probs[i], q, k, v, B, T, T, H, KV, hd, nk / B, NULL, 0, drops[i]);
        kern_attention_bwd(dq[i], dk[i], dv[i], scratch, dout, out[i], probs[i], q, k, v, B, T, H, KV, hd, NULL, 0, drops[i]);
    }
    report(!memcmp(out[0], out[1], sizeof(float) * nq) && !memcmp(dq[0], dq[1], sizeof(float) * nq) &&
               !memcmp(dk[0], dk[1], sizeof(float) * nk) && !memcmp(dv[0], dv[1], sizeof(float) * nk),
           "attention dropout p=0 equals none", "differs");
    report(!memcmp(probs[0], probs[2], sizeof(float) * np) && memcmp(out[0], out[2], sizeof(float) * nq),
           "attention dropout: saved P undropped, output changed", "P differs or output unchanged");
    // again with the same key: identical
    kern_attention_fwd(out[1], probs[1], q, k, v, B, T, T, H, KV, hd, nk / B, NULL, 0, &on);
    kern_attention_bwd(dq[1], dk[1], dv[1], scratch, dout, out[1], probs[1], q, k, v, B, T, H, KV, hd, NULL, 0, &on);
    report(!memcmp(out[1], out[2], sizeof(float) * nq) && !memcmp(dq[1], dq[2], sizeof(float) * nq) &&
               !memcmp(dk[1], dk[2], sizeof(float) * nk) && !memcmp(dv[1], dv[2], sizeof(float) * nk),
           "attention dropout deterministic", "repeated call differs");
    // batch row 1 alone with sample0 + 1 equals row 1 of the batch: the mask follows the sample
    const KernDropout on1 = {on.p, on.key, on.sample0 + 1, 0};
    kern_attention_fwd(out[1], probs[1], q + nq / 2, k + nk / 2, v + nk / 2, 1, T, T, H, KV, hd, nk / B, NULL, 0, &on1);
    report(!memcmp(out[1], out[2] + nq / 2, sizeof(float) * nq / 2), "attention dropout mask follows sample0 + b",
           "row 1 differs");
    for (int i = 0; i < 3; i++) free(out[i]), free(probs[i]), free(dq[i]), free(dk[i]), free(dv[i]);
    free(q), free(k), free(v), free(dout), free(scratch);
}

// part (rows, n, hd) = heads [h0, h0 + n) of x (rows, H, hd)
static void att_heads(float *part, const float *x, size_t rows, int H, int h0, int n, int hd) {
    for (size_t r = 0; r < rows; r++) memcpy(part + r * n * hd, x + (r * H + h0) * hd, sizeof(float) * n * hd);
}

// Tensor parallelism splits attention by heads: a call over the query heads [h0, h0 + H/tp) and
// their kv heads, with head0 = h0, must give those heads' outputs and gradients of the whole call
// bit for bit, dropout masks included, on every tp rank.
static void test_attention_drop_heads(void) {
    const int B = 2, T = 70, H = 6, KV = 3, hd = 8, tp = 3, Hl = H / tp, KVl = KV / tp;
    const size_t rows = (size_t)B * T, nq = rows * H * hd, nk = rows * KV * hd;
    const size_t nql = rows * Hl * hd, nkl = rows * KVl * hd;  // a rank's q, and its k and v
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    float *out = malloc(sizeof(float) * nq), *probs = malloc(sizeof(float) * B * H * T * T);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    float *scratch = malloc(sizeof(float) * kern_attention_scratch_floats(B, H, T));
    const KernDropout whole = {0.25f, 77, 3, 0};
    kern_attention_fwd(out, probs, q, k, v, B, T, T, H, KV, hd, nk / B, NULL, 0, &whole);
    kern_attention_bwd(dq, dk, dv, scratch, dout, out, probs, q, k, v, B, T, H, KV, hd, NULL, 0, &whole);
    // a rank's inputs and results (l), and the whole call's for its heads (w)
    float *ql = malloc(sizeof(float) * nql), *kl = malloc(sizeof(float) * nkl), *vl = malloc(sizeof(float) * nkl);
    float *dol = malloc(sizeof(float) * nql), *ol = malloc(sizeof(float) * nql);
    float *pl = malloc(sizeof(float) * B * Hl * T * T);
    float *dql = malloc(sizeof(float) * nql), *dkl = malloc(sizeof(float) * nkl), *dvl = malloc(sizeof(float) * nkl);
    float *ow = malloc(sizeof(float) * nql), *dqw = malloc(sizeof(float) * nql), *dkw = malloc(sizeof(float) * nkl);
    float *dvw = malloc(sizeof(float) * nkl);
    int bad = 0;
    for (int r = 0; r < tp; r++) {
        const int h0 = r * Hl, g0 = r * KVl;
        const KernDropout part = {whole.p, whole.key, whole.sample0, h0};
        att_heads(ql, q, rows, H, h0, Hl, hd), att_heads(dol, dout, rows, H, h0, Hl, hd);
        att_heads(kl, k, rows, KV, g0, KVl, hd), att_heads(vl, v, rows, KV, g0, KVl, hd);
        kern_attention_fwd(ol, pl, ql, kl, vl, B, T, T, Hl, KVl, hd, nkl / B, NULL, 0, &part);
        kern_attention_bwd(dql, dkl, dvl, scratch, dol, ol, pl, ql, kl, vl, B, T, Hl, KVl, hd, NULL, 0, &part);
        att_heads(ow, out, rows, H, h0, Hl, hd), att_heads(dqw, dq, rows, H, h0, Hl, hd);
        att_heads(dkw, dk, rows, KV, g0, KVl, hd), att_heads(dvw, dv, rows, KV, g0, KVl, hd);
        bad |= memcmp(ol, ow, sizeof(float) * nql) || memcmp(dql, dqw, sizeof(float) * nql) ||
               memcmp(dkl, dkw, sizeof(float) * nkl) || memcmp(dvl, dvw, sizeof(float) * nkl);
    }
    report(!bad, "attention dropout: 3 ranks' 2 heads of 6 each (head0 its first) equal the whole call's, bit for bit",
           "a rank's output or gradients differ");
    free(ql), free(kl), free(vl), free(dol), free(ol), free(pl), free(dql), free(dkl), free(dvl);
    free(ow), free(dqw), free(dkw), free(dvw);
    free(q), free(k), free(v), free(dout), free(out), free(probs), free(dq), free(dk), free(dv), free(scratch);
}

// Document masking: a row packing documents (kstart) computes what each document alone computes,
// forward and backward, bit-near; the masked probabilities are exactly 0. Rows of 130 cover the
// block skipping (documents across and inside 64-row blocks, a 1-token document, a whole row).
// With a sliding window (> 0) too: each document alone under the same window.
static void test_attention_docs(int window) {
    const int B = 2, T = 130, H = 4, KV = 2, hd = 8;
    const int starts[2][5] = {{0, 50, 51, 100, 130}, {0, 130, 130, 130, 130}};  // documents [s_i, s_i+1)
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, np = (size_t)B * H * T * T;
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    float *out = malloc(sizeof(float) * nq), *probs = malloc(sizeof(float) * np);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    float *scratch = malloc(sizeof(float) * kern_attention_scratch_floats(B, H, T));
    int32_t ks[2 * 130];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 4; i++)
            for (int t = starts[b][i]; t < starts[b][i + 1]; t++) ks[b * T + t] = starts[b][i];
    kern_attention_fwd(out, probs, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, ks, window, NULL);
    kern_attention_bwd(dq, dk, dv, scratch, dout, out, probs, q, k, v, B, T, H, KV, hd, ks, window, NULL);
    size_t leaked = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int j = 0; j < T; j++)
                    leaked += (j < ks[b * T + t] || j > t || (window > 0 && j <= t - window)) && probs[(((size_t)b * H + h) * T + t) * T + j] != 0.0f;
    char tag[32] = "";
    if (window > 0) snprintf(tag, sizeof tag, " (window %d)", window);
    char name[96];
    snprintf(name, sizeof name, "attention docs%s: probabilities outside the document exactly 0", tag);
    report(leaked == 0, name, "%zu nonzero", leaked);
    double worst[4] = {0, 0, 0, 0};  // out, dq, dk, dv against each document alone
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 4; i++) {
            const int s = starts[b][i], n = starts[b][i + 1] - s;
            if (!n) continue;
            const float *qs = q + ((size_t)b * T + s) * H * hd, *kk = k + ((size_t)b * T + s) * KV * hd, *vs = v + ((size_t)b * T + s) * KV * hd;
            const float *ds = dout + ((size_t)b * T + s) * H * hd;
            float *o1 = malloc(sizeof(float) * n * H * hd), *p1 = malloc(sizeof(float) * H * n * n);
            float *q1 = malloc(sizeof(float) * n * H * hd), *k1 = malloc(sizeof(float) * n * KV * hd), *v1 = malloc(sizeof(float) * n * KV * hd);
            float *sc = malloc(sizeof(float) * kern_attention_scratch_floats(1, H, n));
            kern_attention_fwd(o1, p1, qs, kk, vs, 1, n, n, H, KV, hd, (size_t)n * KV * hd, NULL, window, NULL);
            kern_attention_bwd(q1, k1, v1, sc, ds, o1, p1, qs, kk, vs, 1, n, H, KV, hd, NULL, window, NULL);
            const float *got[4] = {out + ((size_t)b * T + s) * H * hd, dq + ((size_t)b * T + s) * H * hd,
                                   dk + ((size_t)b * T + s) * KV * hd, dv + ((size_t)b * T + s) * KV * hd};
            const float *want[4] = {o1, q1, k1, v1};
            const size_t len[4] = {(size_t)n * H * hd, (size_t)n * H * hd, (size_t)n * KV * hd, (size_t)n * KV * hd};
            for (int x = 0; x < 4; x++)
                for (size_t e = 0; e < len[x]; e++) worst[x] = fmax(worst[x], fabs(got[x][e] - want[x][e]) / (1e-3 + fabs(want[x][e])));
            free(o1), free(p1), free(q1), free(k1), free(v1), free(sc);
        }
    const char *what[4] = {"out", "dq", "dk", "dv"};
    for (int x = 0; x < 4; x++) {
        snprintf(name, sizeof name, "attention docs%s: %s equals each document alone", tag, what[x]);
        report(worst[x] < 1e-4, name, "max rel diff %.3g", worst[x]);
    }
    free(q), free(k), free(v), free(dout), free(out), free(probs), free(dq), free(dk), free(dv), free(scratch);
}

// Per-token positions: a table of t + 5 rotates as pos0 = 5 does, and its merge inverts it.
static void test_qkv_positions(void) {
    const int B = 2, T = 9, H = 2, KV = 1, hd = 8, W = (H + 2 * KV) * hd;
    float *qkv = rand_vec((size_t)B * T * W, -1, 1), *ct = malloc(sizeof(float) * 20 * hd / 2), *st = malloc(sizeof(float) * 20 * hd / 2);
    double *freqs = rope_freqs(hd, 10000.0, 1.0);
    kern_rope_table(ct, st, 20, hd, freqs);
    free(freqs);
    float *a[3], *b[3];
    const size_t n[3] = {(size_t)B * T * H * hd, (size_t)B * T * KV * hd, (size_t)B * T * KV * hd};
    for (int i = 0; i < 3; i++) a[i] = malloc(sizeof(float) * n[i]), b[i] = malloc(sizeof(float) * n[i]);
    int32_t pos[18];
    for (int i = 0; i < B * T; i++) pos[i] = i % T + 5;
    kern_qkv_split(a[0], a[1], a[2], qkv, ct, st, B, T, H, KV, hd, hd, KERN_QKV_BLOCKED, 5, NULL);
    kern_qkv_split(b[0], b[1], b[2], qkv, ct, st, B, T, H, KV, hd, hd, KERN_QKV_BLOCKED, 0, pos);
    int same = 1;
    for (int i = 0; i < 3; i++) same &= !memcmp(a[i], b[i], sizeof(float) * n[i]);
    float *back = malloc(sizeof(float) * B * T * W);
    kern_qkv_merge(back, b[0], b[1], b[2], ct, st, B, T, H, KV, hd, hd, KERN_QKV_BLOCKED, pos);
    double worst = 0.0;
    for (int i = 0; i < B * T * W; i++) worst = fmax(worst, fabs(back[i] - qkv[i]));
    report(same && worst < 1e-5, "qkv_split/merge with per-token positions", "same %d, merge error %.3g", same, worst);
    for (int i = 0; i < 3; i++) free(a[i]), free(b[i]);
    free(qkv), free(ct), free(st), free(back);
}

// Ring attention (context parallelism): n ranks each holding chunks r and 2n-1-r of 2n, every
// rank's queries against every rank's keys block by block (in the ring's order: its own first),
// equal whole-sequence attention in out, dq, dk and dv (dk and dv summed over the queries' ranks).
// docs: row b's documents are runs of 9 + 4b tokens (document masking across the chunks). drop:
// the probabilities' dropout, whose masks the blocks draw by the whole sequence's (query, key).
static void test_attention_ring(int n, int B, int T, int H, int KV, int hd, int window, int docs, const KernDropout *drop) {
    const int Tl = T / n, c = T / (2 * n);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, lq = nq / n, lk = nk / n;
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    float *out = malloc(sizeof(float) * nq), *probs = malloc(sizeof(float) * (size_t)B * H * T * T);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    float *scratch = malloc(sizeof(float) * kern_attention_scratch_floats(B, H, T));
    int32_t *ks = docs ? malloc(sizeof(int32_t) * B * T) : NULL, *lks = docs ? malloc(sizeof(int32_t) * B * T) : NULL;
    for (int i = 0; docs && i < B * T; i++) ks[i] = i % T - i % T % (9 + 4 * (i / T));
    kern_attention_fwd(out, probs, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, ks, window, drop);
    kern_attention_bwd(dq, dk, dv, scratch, dout, out, probs, q, k, v, B, T, H, KV, hd, ks, window, drop);
    // each rank's rows: pos[r] its positions; x[0..3][r] its q, dout (H heads), k, v (KV heads); lks its document starts
    int32_t *pos = malloc(sizeof(int32_t) * T);
    float *loc[4], *lse = malloc(sizeof(float) * (size_t)B * H * T);
    float *ldq = calloc(nq, sizeof(float)), *ldk = calloc(nk, sizeof(float)), *ldv = calloc(nk, sizeof(float));
    float *ro = malloc(sizeof(float) * nq);
    const float *whole[4] = {q, dout, k, v};
    for (int r = 0; r < n; r++)
        for (int t = 0; t < Tl; t++) pos[r * Tl + t] = t < c ? r * c + t : (2 * n - 1 - r) * c + t - c;
    for (int x = 0; x < 4; x++) {
        const size_t w = (size_t)(x < 2 ? H : KV) * hd;
        loc[x] = malloc(sizeof(float) * (x < 2 ? nq : nk));
        for (int r = 0; r < n; r++)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++)
                    memcpy(loc[x] + (((size_t)r * B + b) * Tl + t) * w, whole[x] + ((size_t)b * T + pos[r * Tl + t]) * w, sizeof(float) * w);
    }
    for (int r = 0; docs && r < n; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) lks[((size_t)r * B + b) * Tl + t] = ks[b * T + pos[r * Tl + t]];
    double worst[4] = {0, 0, 0, 0}, scale[4] = {1e-6, 1e-6, 1e-6, 1e-6};  // out, dq, dk, dv: max|diff|, max|whole's|
    for (int r = 0; r < n; r++) {
        float *lse_r = lse + (size_t)r * B * H * Tl;
        for (int s = 0; s < n; s++) {
            const int src = (r - s + n) % n;
            kern_attention_part_fwd(ro + r * lq, lse_r, loc[0] + r * lq, loc[2] + src * lk, loc[3] + src * lk, B, Tl, Tl, H, KV, hd,
                                    pos + r * Tl, pos + src * Tl, docs ? lks + (size_t)r * B * Tl : NULL, window, s == 0, drop, T, NULL);
        }
        for (int s = 0; s < n; s++) {
            const int src = (r - s + n) % n;
            kern_attention_part_bwd(ldq + r * lq, ldk + src * lk, ldv + src * lk, loc[1] + r * lq, ro + r * lq, lse_r,
                                    loc[0] + r * lq, loc[2] + src * lk, loc[3] + src * lk, B, Tl, Tl, H, KV, hd,
                                    pos + r * Tl, pos + src * Tl, docs ? lks + (size_t)r * B * Tl : NULL, window, drop, T, NULL);
        }
    }
    const float *got[4] = {ro, ldq, ldk, ldv}, *want[4] = {out, dq, dk, dv};
    for (int x = 0; x < 4; x++) {
        const size_t w = (size_t)(x < 2 ? H : KV) * hd;
        for (int r = 0; r < n; r++)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++)
                    for (size_t e = 0; e < w; e++) {
                        const float g = got[x][(((size_t)r * B + b) * Tl + t) * w + e], f = want[x][((size_t)b * T + pos[r * Tl + t]) * w + e];
                        worst[x] = fmax(worst[x], fabs(g - f));
                        scale[x] = fmax(scale[x], fabs(f));
                    }
    }
    const char *what[4] = {"out", "dq", "dk", "dv"};
    for (int x = 0; x < 4; x++) {
        char name[128];
        snprintf(name, sizeof name, "ring attention %d ranks (T=%d H=%d KV=%d window %d%s%s): %s equals whole-sequence attention's",
                 n, T, H, KV, window, docs ? ", documents" : "", drop ? ", dropout by global position" : "", what[x]);
        report(worst[x] / scale[x] < 1e-5, name, "max|diff| / max|whole| = %.3g", worst[x] / scale[x]);
    }
    for (int x = 0; x < 4; x++) free(loc[x]);
    free(q), free(k), free(v), free(dout), free(out), free(probs), free(dq), free(dk), free(dv), free(scratch);
    free(ks), free(lks), free(pos), free(lse), free(ldq), free(ldk), free(ldv), free(ro);
}

// kern_block_of on the ring's head-tail layout: rank me's block from rank src is causal by index
// (src == me), all queries against the head chunk (src < me), or the tail queries against all
// keys (src > me); other position sets are no such block
static void test_block_of(void) {
    for (int n = 1; n <= 4; n++) {
        const int c = 3, Tl = 2 * c;
        int32_t pos[8 * 3];
        for (int r = 0; r < n; r++)
            for (int t = 0; t < Tl; t++) pos[r * Tl + t] = t < c ? r * c + t : (2 * n - 1 - r) * c + t - c;
        int bad = 0;
        for (int me = 0; me < n; me++)
            for (int src = 0; src < n; src++) {
                KernBlock b;
                const KernBlock want = src == me ? (KernBlock){0, Tl, Tl, 1}
                                       : src < me ? (KernBlock){0, Tl, c, 0}
                                                  : (KernBlock){c, c, Tl, 0};
                bad += !kern_block_of(&b, pos + me * Tl, pos + src * Tl, Tl, Tl) || memcmp(&b, &want, sizeof b);
            }
        char name[96];
        snprintf(name, sizeof name, "kern_block_of: every block of a %d-rank ring is a causal square or a rectangle", n);
        report(!bad, name, "%d blocks differ", bad);
    }
    const int32_t q[2] = {0, 10}, k[3] = {0, 1, 2}, q2[4] = {5, 6, 7, 8}, k2[4] = {1, 2, 3, 4};
    KernBlock b;
    report(!kern_block_of(&b, q, k, 2, 3), "kern_block_of: rows seeing 1 and 3 keys are no block", "took it");
    const int ok = kern_block_of(&b, q2, k2, 4, 4) && b.q0 == 0 && b.nq == 4 && b.nk == 4 && !b.causal;
    report(ok, "kern_block_of: queries after every key are a full rectangle", "got %d %d %d %d", b.q0, b.nq, b.nk, b.causal);
}

static void test_attention(void) {
    test_block_of();
    test_qkv_positions();
    test_attention_docs(0);
    test_attention_docs(20);
    test_attention_fwd("(T=130 H=4 KV=2)", 2, 130, 130, 130, 4, 2, 16, 0, NULL);
    test_attention_fwd("(kv cache Tq=5 Tk=21 cap=32 H=6 KV=2)", 2, 5, 21, 32, 6, 2, 16, 0, NULL);
    test_attention_fwd("(decode Tq=1 Tk=70 cap=80 H=4 KV=4)", 3, 1, 70, 80, 4, 4, 8, 0, NULL);
    test_attention_bwd("(T=130 H=4 KV=2)", 2, 130, 4, 2, 8, 0, NULL);
    test_attention_bwd("(T=37 H=KV=2)", 2, 37, 2, 2, 8, 0, NULL);
    test_attention_bwd("(T=9 H=3 KV=1)", 1, 9, 3, 1, 4, 0, NULL);
    // sliding windows: inside a 64-row block, across blocks, of one key, and on the kv cache's form
    test_attention_fwd("window 20 (T=130 H=4 KV=2)", 2, 130, 130, 130, 4, 2, 16, 20, NULL);
    test_attention_fwd("window 70 (T=130 H=4 KV=2)", 2, 130, 130, 130, 4, 2, 16, 70, NULL);
    test_attention_fwd("window 1 (T=37 H=2 KV=1)", 1, 37, 37, 37, 2, 1, 8, 1, NULL);
    test_attention_fwd("window 7 (kv cache Tq=5 Tk=21 cap=32 H=6 KV=2)", 2, 5, 21, 32, 6, 2, 16, 7, NULL);
    test_attention_fwd("window 9 (decode Tq=1 Tk=70 cap=80 H=4 KV=4)", 3, 1, 70, 80, 4, 4, 8, 9, NULL);
    test_attention_bwd("window 20 (T=130 H=4 KV=2)", 2, 130, 4, 2, 8, 20, NULL);
    test_attention_bwd("window 70 (T=130 H=4 KV=2)", 1, 130, 4, 2, 8, 70, NULL);
    test_attention_bwd("window 3 (T=37 H=KV=2)", 2, 37, 2, 2, 8, 3, NULL);
    const KernDropout drop = {0.3f, 0x5eedULL, 11, 0};
    test_attention_fwd("dropout p=0.3 (T=130 H=4 KV=2)", 2, 130, 130, 130, 4, 2, 16, 0, &drop);
    test_attention_fwd("dropout p=0.3 (kv cache Tq=5 Tk=21 cap=32 H=6 KV=2)", 2, 5, 21, 32, 6, 2, 16, 0, &drop);
    test_attention_bwd("dropout p=0.3 (T=130 H=4 KV=2)", 2, 130, 4, 2, 8, 0, &drop);
    test_attention_bwd("dropout p=0.3 (T=9 H=3 KV=1)", 1, 9, 3, 1, 4, 0, &drop);
    test_attention_bwd("dropout p=0.3 window 5 (T=37 H=4 KV=2)", 1, 37, 4, 2, 8, 5, &drop);
    const KernDropout drop5 = {0.3f, 0x5eedULL, 11, 5};  // a tensor-parallel rank's heads from global head 5
    test_attention_fwd("dropout p=0.3 head0 5 (T=70 H=4 KV=2)", 2, 70, 70, 70, 4, 2, 16, 0, &drop5);
    test_attention_bwd("dropout p=0.3 head0 5 (T=37 H=4 KV=2)", 1, 37, 4, 2, 8, 0, &drop5);
    test_attention_drop_identity();
    test_attention_drop_heads();
    test_attention_ring(2, 2, 132, 4, 2, 8, 0, 0, NULL);  // chunks of 33: a rank's 66 queries cross a 64-row block
    test_attention_ring(4, 1, 40, 2, 2, 8, 0, 0, NULL);
    test_attention_ring(3, 2, 36, 4, 1, 8, 0, 0, NULL);
    test_attention_ring(4, 2, 48, 4, 2, 8, 7, 0, NULL);  // a window shorter than a chunk: some blocks see nothing
    test_attention_ring(2, 1, 40, 2, 1, 8, 15, 0, NULL);
    test_attention_ring(2, 2, 132, 4, 2, 8, 0, 1, NULL);  // documents across chunks and row blocks
    test_attention_ring(4, 2, 48, 4, 2, 8, 0, 1, NULL);
    test_attention_ring(3, 2, 36, 4, 1, 8, 5, 1, NULL);  // documents and a window
    // minGPT's attention-probability dropout (a tp rank's heads from 2: head0), with documents
    const KernDropout ring_drop = {0.3f, 0xd20bULL, 5, 2};
    test_attention_ring(2, 2, 132, 4, 2, 8, 0, 0, &ring_drop);
    test_attention_ring(4, 2, 48, 4, 4, 8, 0, 1, &ring_drop);
}

// ---- SwiGLU on the fused gate|up ----

typedef struct {
    float *gu, *h, *r;
    int N, F;
} SwigluCtx;

static double swiglu_obj(void *p) {
    SwigluCtx *c = p;
    kern_swiglu_fwd(c->h, c->gu, c->N, c->F);
    return dot(c->h, c->r, (size_t)c->N * c->F);
}

static void test_swiglu(void) {
    const int N = 5, F = 9;
    const size_t n = (size_t)N * F;
    SwigluCtx c = {rand_vec(2 * n, -6, 6), malloc(sizeof(float) * n), rand_vec(n, -1, 1), N, F};
    c.gu[0] = -120.0f, c.gu[1] = 120.0f;  // saturated ends
    double *ref = malloc(sizeof(double) * n);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            const double g = c.gu[i * 2 * F + j], u = c.gu[i * 2 * F + F + j];
            ref[i * F + j] = g / (1.0 + exp(-g)) * u;
        }
    swiglu_obj(&c);
    check_close("swiglu fwd (fused gate|up)", c.h, ref, n, 1e-6);
    float *dgu = rand_vec(2 * n, -9, 9);
    kern_swiglu_bwd(dgu, c.r, c.gu, N, F);
    double *g = grad_delta(dgu, NULL, 2 * n);
    check_grad("swiglu bwd d(gate|up)", swiglu_obj, &c, c.gu, g, 2 * n);
    const float nan_in[2] = {NAN, 1.0f};
    float nan_out;
    kern_swiglu_fwd(&nan_out, nan_in, 1, 1);
    report(isnan(nan_out), "swiglu NaN propagates", "silu(NaN) = %g", nan_out);
    free(c.gu), free(c.h), free(c.r), free(ref), free(dgu), free(g);
}

// ---- GELU ----

typedef struct {
    float *inp, *out, *r;
    size_t n;
    KernGelu form;
} GeluCtx;

static double gelu_obj(void *p) {
    GeluCtx *c = p;
    kern_gelu_fwd(c->out, c->inp, c->n, c->form);
    return dot(c->out, c->r, c->n);
}

static void test_gelu_form(KernGelu form) {
    const size_t n = 60;
    const char *what = form == KERN_GELU_ERF ? "erf form" : "tanh form";
    char name[120];
    GeluCtx c = {rand_vec(n, -6, 6), malloc(sizeof(float) * n), rand_vec(n, -1, 1), n, form};
    c.inp[0] = -120.0f, c.inp[1] = 120.0f, c.inp[2] = 0.0f, c.inp[3] = -1e-6f;  // saturated ends, around 0
    double *ref = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) {
        const double x = c.inp[i];
        ref[i] = form == KERN_GELU_ERF ? 0.5 * x * (1.0 + erf(x / sqrt(2.0)))
                                       : 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    gelu_obj(&c);
    snprintf(name, sizeof name, "gelu fwd (%s)", what);
    check_close(name, c.out, ref, n, 1e-6);
    float *dinp = rand_vec(n, -9, 9);
    kern_gelu_bwd(dinp, c.r, c.inp, n, form);
    double *g = grad_delta(dinp, NULL, n);
    snprintf(name, sizeof name, "gelu bwd (%s)", what);
    check_grad(name, gelu_obj, &c, c.inp, g, n);
    float *inplace = dup_vec(c.r, n);  // dinp == dout
    kern_gelu_bwd(inplace, inplace, c.inp, n, form);
    snprintf(name, sizeof name, "gelu bwd in place (dinp == dout; %s)", what);
    report(!memcmp(inplace, dinp, sizeof(float) * n), name, "differs");
    // the parallel path gives the same bits as the serial one
    const size_t big = 100003;
    float *x = rand_vec(big, -8, 8), *y = malloc(sizeof(float) * big), *y1 = malloc(sizeof(float) * big);
    kern_gelu_fwd(y, x, big, form);
    for (size_t i = 0; i < big; i += 4096) kern_gelu_fwd(y1 + i, x + i, big - i < 4096 ? big - i : 4096, form);
    snprintf(name, sizeof name, "gelu fwd n=100003 (parallel) equals chunks (%s)", what);
    report(!memcmp(y, y1, sizeof(float) * big), name, "differs");
    const float nan_in = NAN;
    float nan_out;
    kern_gelu_fwd(&nan_out, &nan_in, 1, form);
    snprintf(name, sizeof name, "gelu NaN propagates (%s)", what);
    report(isnan(nan_out), name, "gelu(NaN) = %g", nan_out);
    free(c.inp), free(c.out), free(c.r), free(ref), free(dinp), free(g), free(inplace), free(x), free(y), free(y1);
}

static void test_gelu(void) {
    test_gelu_form(KERN_GELU_TANH);
    test_gelu_form(KERN_GELU_ERF);
}

// ---- bias ----

typedef struct {
    float *base, *b, *out, *r;
    int N, D;
} BiasCtx;

static double bias_obj(void *p) {
    BiasCtx *c = p;
    memcpy(c->out, c->base, sizeof(float) * c->N * c->D);
    kern_bias_add(c->out, KERN_F32, c->b, c->N, c->D);
    return dot(c->out, c->r, (size_t)c->N * c->D);
}

static void test_bias(void) {
    const int shapes[2][2] = {{7, 37}, {700, 301}};  // below and above the parallel threshold
    for (int si = 0; si < 2; si++) {
        const int N = shapes[si][0], D = shapes[si][1];
        BiasCtx c = {rand_vec((size_t)N * D, -1, 1), rand_vec(D, -1, 1), malloc(sizeof(float) * N * D),
                     rand_vec((size_t)N * D, -1, 1), N, D};
        bias_obj(&c);
        int ok = 1;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < D; j++) ok &= c.out[(size_t)n * D + j] == c.base[(size_t)n * D + j] + c.b[j];
        char buf[96];
        snprintf(buf, sizeof buf, "bias add (exact) N=%d D=%d", N, D);
        report(ok, buf, "mismatch");
        float *db0 = rand_vec(D, -1, 1), *db = dup_vec(db0, D), *ref = dup_vec(db0, D);
        kern_bias_bwd(db, c.r, KERN_F32, N, D);
        if (si == 0) {
            double *g = grad_delta(db, db0, D);
            check_grad("bias bwd", bias_obj, &c, c.b, g, D);
            free(g);
        }
        // deterministic whatever the thread count: the serial row-order sum
        for (int n = 0; n < N; n++)
            for (int j = 0; j < D; j++) ref[j] += c.r[(size_t)n * D + j];
        snprintf(buf, sizeof buf, "bias bwd row-order sum N=%d D=%d", N, D);
        report(!memcmp(ref, db, sizeof(float) * D), buf, "differs from serial sum");
        free(c.base), free(c.b), free(c.out), free(c.r), free(db0), free(db), free(ref);
    }
}

// ---- learned positions ----

typedef struct {
    float *base, *wpe, *out, *r;
    int B, T, D, pos0;
} PosCtx;

static double positions_obj(void *p) {
    PosCtx *c = p;
    memcpy(c->out, c->base, sizeof(float) * c->B * c->T * c->D);
    kern_positions_fwd(c->out, c->wpe, c->B, c->T, c->D, c->pos0);
    return dot(c->out, c->r, (size_t)c->B * c->T * c->D);
}

static void test_positions(void) {
    const int B = 3, T = 11, D = 45, pos0 = 4, P = 20;  // wpe has P >= pos0 + T rows
    const size_t n = (size_t)B * T * D;
    PosCtx c = {rand_vec(n, -1, 1), rand_vec((size_t)P * D, -1, 1), malloc(sizeof(float) * n), rand_vec(n, -1, 1), B,
                T, D, pos0};
    positions_obj(&c);
    int ok = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < D; j++) {
                const size_t i = ((size_t)b * T + t) * D + j;
                ok &= c.out[i] == c.base[i] + c.wpe[(size_t)(pos0 + t) * D + j];
            }
    report(ok, "positions fwd (exact, pos0 > 0)", "mismatch");
    // dwpe (T, D) of rows pos0.. of wpe: the gradient lands at dwpe + pos0 * D
    float *dwpe0 = rand_vec((size_t)P * D, -1, 1), *dwpe = dup_vec(dwpe0, (size_t)P * D);
    float *ref = dup_vec(dwpe0, (size_t)P * D);
    kern_positions_bwd(dwpe + (size_t)pos0 * D, c.r, B, T, D);
    double *g = grad_delta(dwpe, dwpe0, (size_t)P * D);
    check_grad("positions bwd", positions_obj, &c, c.wpe, g, (size_t)P * D);
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < D; j++) ref[(size_t)(pos0 + t) * D + j] += c.r[((size_t)b * T + t) * D + j];
    report(!memcmp(ref, dwpe, sizeof(float) * P * D), "positions bwd b-order sum", "differs from serial sum");
    free(c.base), free(c.wpe), free(c.out), free(c.r), free(dwpe0), free(dwpe), free(ref), free(g);
}

// ---- router jitter ----
// Element i of row b times 1 - j + 2 j u(key, sample0 + b, i); a call on elements [e0, e0 + n) (a
// cp rank's chunk of a row, or a range across rows) draws what the whole batch's call draws there.
static void test_jitter(void) {
    const int B = 3;
    const size_t M = 1000, n = (size_t)B * M;
    const float j = 0.1f;
    const uint64_t key = 0xbeefULL, sample0 = 77;
    float *x = rand_vec(n, -2, 2), *y = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n);
    kern_jitter(y, x, 0, n, M, j, key, sample0);
    size_t bad = 0;
    for (size_t e = 0; e < n; e++) {
        const float u = rng_unit(rng_dropout_seed(key, sample0 + e / M), e % M);
        bad += fabs(y[e] - x[e] * (1.0 - j + 2.0 * j * u)) > 1e-6 * fabs(x[e]);  // (up to a contracted multiply-add)
    }
    report(bad == 0, "jitter: element i of row b times 1 - j + 2 j u(key, sample0 + b, i)", "%zu differ", bad);
    const size_t ranges[3][2] = {{M / 4, M / 4}, {M + 3 * M / 4, M / 4}, {M / 2, M + 7}};  // head, tail chunks; across rows
    for (int r = 0; r < 3; r++) {
        const size_t e0 = ranges[r][0], len = ranges[r][1];
        memset(z, 0, sizeof(float) * n);
        kern_jitter(z + e0, x + e0, e0, len, M, j, key, sample0);
        char name[96];
        snprintf(name, sizeof name, "jitter of elements [%zu, +%zu) (rows of %zu) equals theirs in the whole call", e0, len, M);
        report(!memcmp(z + e0, y + e0, sizeof(float) * len), name, "differs");
    }
    memcpy(z, x, sizeof(float) * n);
    kern_jitter(z, z, 0, n, M, j, key, sample0);  // in place, as the backward runs it
    report(!memcmp(z, y, sizeof(float) * n), "jitter in place (x == src)", "differs");
    free(x), free(y), free(z);
}

// ---- dropout ----

static uint64_t drop_hash_first;  // hash of a dropout result in the 1-thread suite, checked in the 3-thread one

static uint64_t hash_floats(const float *x, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        h = rng_splitmix64(h ^ u);
    }
    return h;
}

static void test_dropout(void) {
    const int B = 4;
    const size_t M = 250001, n = (size_t)B * M;
    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    const uint64_t key = 0xfeedULL, sample0 = 1000;
    // no zeros in x: a 0 in y means dropped. Not from rng_next, so both suites see the same x.
    float *x = malloc(sizeof(float) * n);
    for (size_t e = 0; e < n; e++) x[e] = 0.5f + (float)(e % 1009) * 1e-3f;
    float *y = dup_vec(x, n);
    kern_dropout(y, 0, n, M, p, key, sample0);
    size_t dropped = 0, bad_scale = 0, bad_mask = 0;
    for (int b = 0; b < B; b++) {
        const uint64_t seed = rng_dropout_seed(key, sample0 + b);
        for (size_t i = 0; i < M; i++) {
            const size_t e = (size_t)b * M + i;
            // the definition in kernels.h / rng.h, with the float compare u >= p
            const int keep = (float)(rng_splitmix64(seed ^ i) >> 40) * 0x1p-24f >= p;
            dropped += y[e] == 0.0f;
            bad_mask += keep != (y[e] != 0.0f);
            bad_scale += y[e] != 0.0f && y[e] != x[e] * scale;
        }
    }
    const double frac = (double)dropped / n;  // binomial: sd sqrt(p (1 - p) / n) ~ 5e-4
    report(fabs(frac - p) < 3e-3, "dropout fraction dropped ~ p", "%.5f vs %.2f", frac, p);
    report(bad_scale == 0, "dropout kept elements scaled by 1/(1-p) exactly", "%zu differ", bad_scale);
    report(bad_mask == 0, "dropout mask is u(key, sample, i) >= p", "%zu differ", bad_mask);
    // the integer threshold test is the float one, at and around every boundary tested
    size_t bad_thr = 0;
    for (int t = 0; t < 20000; t++) {
        const float pt = t < 10000 ? rng_uniform(0, 1) : (float)(rng_next() % (1u << 24)) * 0x1p-24f;
        const uint32_t thr = rng_dropout_threshold(pt), v0 = (uint32_t)(pt * 16777216.0f);
        for (uint32_t v = v0 > 2 ? v0 - 2 : 0; v <= v0 + 2 && v < (1u << 24); v++)
            bad_thr += (v >= thr) != ((float)v * 0x1p-24f >= pt);
    }
    report(bad_thr == 0, "dropout threshold equals the float compare u >= p", "%zu differ", bad_thr);
    // deterministic, and the same for 1 and 3 threads
    float *y2 = dup_vec(x, n);
    kern_dropout(y2, 0, n, M, p, key, sample0);
    report(!memcmp(y, y2, sizeof(float) * n), "dropout deterministic", "repeated call differs");
    const uint64_t h = hash_floats(y, n);
    if (suite_threads == 1) drop_hash_first = h;
    else report(h == drop_hash_first, "dropout same as with 1 thread", "differs");
    // rows 2..3 as their own call with sample0 + 2 equal rows 2..3 of the 4-row call
    memcpy(y2, x, sizeof(float) * n);
    kern_dropout(y2 + 2 * M, 0, 2 * M, M, p, key, sample0 + 2);
    report(!memcmp(y2 + 2 * M, y + 2 * M, sizeof(float) * 2 * M), "dropout mask depends on (key, sample0+b, i) only",
           "rows 2..3 differ");
    // a range that starts and ends inside rows (a sequence-parallel rank's rows): the same elements
    const size_t e0 = M / 3, len = 2 * M + M / 2;
    memcpy(y2, x, sizeof(float) * n);
    kern_dropout(y2 + e0, e0, len, M, p, key, sample0);
    report(!memcmp(y2 + e0, y + e0, sizeof(float) * len) && !memcmp(y2, x, sizeof(float) * e0) &&
               !memcmp(y2 + e0 + len, x + e0 + len, sizeof(float) * (n - e0 - len)),
           "dropout of elements [e0, e0+n) inside rows equals theirs in the whole call", "differs");
    // another key, another mask
    memcpy(y2, x, sizeof(float) * n);
    kern_dropout(y2, 0, n, M, p, key + 1, sample0);
    report(memcmp(y2, y, sizeof(float) * n) != 0, "dropout: another key, another mask", "same mask");
    // p == 0: untouched (even NaN stays as it was)
    memcpy(y2, x, sizeof(float) * n);
    y2[5] = NAN;
    kern_dropout(y2, 0, n, M, 0.0f, key, sample0);
    report(!memcmp(y2, x, sizeof(float) * 5) && isnan(y2[5]) && !memcmp(y2 + 6, x + 6, sizeof(float) * (n - 6)),
           "dropout p=0 is the identity", "changed");
    // a NaN where the mask drops stays NaN (x * 0, as torch): dropout does not hide it
    size_t first_drop = 0;
    while (y[first_drop] != 0.0f) first_drop++;
    memcpy(y2, x, sizeof(float) * n);
    y2[first_drop] = NAN;
    kern_dropout(y2, 0, n, M, p, key, sample0);
    report(isnan(y2[first_drop]), "dropout NaN at a dropped element stays NaN", "got %g", y2[first_drop]);
    // small rows, below the parallel threshold
    float *s1 = rand_vec(3 * 10, 0.5f, 1.5f), *s2 = dup_vec(s1, 30);
    kern_dropout(s1, 0, 30, 10, 0.5f, 7, 3);
    for (int b = 0; b < 3; b++) kern_dropout(s2 + 10 * b, 0, 10, 10, 0.5f, 7, 3 + b);
    report(!memcmp(s1, s2, sizeof(float) * 30), "dropout small rows one at a time", "differs");
    free(x), free(y), free(y2), free(s1), free(s2);
}

// ---- embedding ----

typedef struct {
    float *wte, *out, *r;
    const int32_t *tokens;
    int N, D;
} EmbCtx;

static double embedding_obj(void *p) {
    EmbCtx *c = p;
    kern_embedding_fwd(c->out, c->tokens, c->wte, c->N, c->D);
    return dot(c->out, c->r, (size_t)c->N * c->D);
}

static void test_embedding(void) {
    const int V = 7, N = 11, D = 37;  // D not a multiple of the 16-float column slices
    const int32_t tokens[11] = {3, 0, 6, 3, 3, 1, 6, 2, 0, 5, 3};
    EmbCtx c = {rand_vec(V * D, -1, 1), malloc(sizeof(float) * N * D), rand_vec(N * D, -1, 1), tokens, N, D};
    embedding_obj(&c);
    int same = 1;
    for (int n = 0; n < N; n++) same &= memcmp(c.out + n * D, c.wte + tokens[n] * D, sizeof(float) * D) == 0;
    report(same, "embedding fwd", "rows differ from wte");
    float *dwte0 = rand_vec(V * D, -1, 1), *dwte = dup_vec(dwte0, V * D), *ref = dup_vec(dwte0, V * D);
    kern_embedding_bwd(dwte, c.r, tokens, N, D);
    double *g = grad_delta(dwte, dwte0, V * D);
    check_grad("embedding bwd", embedding_obj, &c, c.wte, g, V * D);
    // deterministic: the same float sums, in row order, as a serial loop
    for (int n = 0; n < N; n++)
        for (int j = 0; j < D; j++) ref[tokens[n] * D + j] += c.r[n * D + j];
    report(memcmp(ref, dwte, sizeof(float) * V * D) == 0, "embedding bwd row-order sum", "differs from serial sum");
    free(c.wte), free(c.out), free(c.r), free(dwte0), free(dwte), free(ref), free(g);
}

// ---- cross-entropy ----

typedef struct {
    float *logits, *work;
    const int32_t *targets;
    int N, V;
} CeCtx;

// the loss sum of one call (the kernel adds to an accumulator)
static double ce(float *logits, const int32_t *targets, int N, int V, float dscale) {
    double loss = 0.0;
    kern_crossentropy_fwd_bwd(logits, targets, N, V, dscale, &loss);
    return loss;
}

static double crossentropy_obj(void *p) {
    CeCtx *c = p;
    memcpy(c->work, c->logits, sizeof(float) * c->N * c->V);
    return ce(c->work, c->targets, c->N, c->V, 0.0f);
}

static void test_crossentropy(int V) {
    const int N = 7;
    char name[96];
    int32_t targets[7];
    for (int n = 0; n < N; n++) targets[n] = (int32_t)(rng_next() % V);
    CeCtx c = {rand_vec(N * V, -3, 3), malloc(sizeof(float) * N * V), targets, N, V};
    {
        // value on large, shifted logits (stability) against a double log-sum-exp
        float *big = rand_vec(N * V, 60, 140), *before = dup_vec(big, N * V);
        big[V + V - 1] = 200.0f;  // the last chunk's max above the earlier ones'
        memcpy(before, big, sizeof(float) * N * V);
        double ref = 0.0;
        for (int n = 0; n < N; n++) {
            double mx = -INFINITY, s = 0.0;
            for (int j = 0; j < V; j++) mx = fmax(mx, big[n * V + j]);
            for (int j = 0; j < V; j++) s += exp(big[n * V + j] - mx);
            ref += log(s) + mx - big[n * V + targets[n]];
        }
        double loss = 0.5;  // the kernel adds to what is there
        kern_crossentropy_fwd_bwd(big, targets, N, V, 0.0f, &loss);
        snprintf(name, sizeof name, "crossentropy value V=%d", V);
        report(fabs(loss - 0.5 - ref) <= 1e-5 * fabs(ref), name, "%.9g vs %.9g", loss - 0.5, ref);
        snprintf(name, sizeof name, "crossentropy dscale=0 leaves logits V=%d", V);
        report(memcmp(big, before, sizeof(float) * N * V) == 0, name, "logits changed");
        free(big), free(before);
    }
    float *grad = dup_vec(c.logits, N * V), *grad4 = dup_vec(c.logits, N * V);
    const double loss0 = crossentropy_obj(&c), loss1 = ce(grad, targets, N, V, 1.0f);
    ce(grad4, targets, N, V, 0.25f);
    snprintf(name, sizeof name, "crossentropy loss same with dscale V=%d", V);
    report(loss0 == loss1, name, "%.17g vs %.17g", loss0, loss1);
    double *g = grad_delta(grad, NULL, N * V), *g4 = malloc(sizeof(double) * N * V);
    snprintf(name, sizeof name, "crossentropy bwd V=%d", V);
    check_grad(name, crossentropy_obj, &c, c.logits, g, N * V);
    for (int i = 0; i < N * V; i++) g4[i] = 0.25 * g[i];
    snprintf(name, sizeof name, "crossentropy bwd dscale V=%d", V);
    check_close(name, grad4, g4, N * V, 1e-6);
    // a negative target bears no loss and gets a zero gradient row; the other rows are unchanged
    {
        int32_t masked[7];
        memcpy(masked, targets, sizeof masked);
        masked[2] = -1, masked[5] = -100;
        float *gm = dup_vec(c.logits, N * V), *g1 = dup_vec(c.logits, N * V);
        double lm = ce(gm, masked, N, V, 1.0f), lall = 0.0;
        for (int n = 0; n < N; n++) {
            double l = 0.0;
            float *row = dup_vec(c.logits + (size_t)n * V, V);
            kern_crossentropy_fwd_bwd(row, &targets[n], 1, V, 0.0f, &l);
            if (n != 2 && n != 5) lall += l;
            free(row);
        }
        ce(g1, targets, N, V, 1.0f);
        int zero = 1, same = 1;
        for (int j = 0; j < V; j++) zero &= gm[2 * V + j] == 0.0f && gm[5 * V + j] == 0.0f;
        for (int n = 0; n < N; n++)
            if (n != 2 && n != 5) same &= !memcmp(gm + (size_t)n * V, g1 + (size_t)n * V, sizeof(float) * V);
        snprintf(name, sizeof name, "crossentropy ignores negative targets V=%d", V);
        report(fabs(lm - lall) <= 1e-9 * fabs(lall) && zero && same, name, "loss %.9g vs %.9g, zero rows %d, others same %d", lm, lall, zero, same);
        free(gm), free(g1);
    }
    // a NaN logit (not the target) must surface in the loss, not be absorbed by the softmax
    c.logits[3 * V + (targets[3] + 1) % V] = NAN;
    const double nan_loss = crossentropy_obj(&c);
    snprintf(name, sizeof name, "crossentropy NaN propagates V=%d", V);
    report(isnan(nan_loss), name, "loss %g", nan_loss);
    free(c.logits), free(c.work), free(grad), free(grad4), free(g), free(g4);
}

// ---- vocabulary-parallel embedding and cross-entropy (tensor parallelism) ----
// tp ranks hold equal column (logits) or row (tables) slices [p * Vl, (p + 1) * Vl) of the vocabulary,
// Vl = V / tp; the host plays the all-reduces between the kernels.

// the rows of a (N, V) matrix's columns [v0, v0 + Vl) as a (N, Vl) matrix, and back
static void cols_get(float *part, const float *full, int N, int V, int v0, int Vl) {
    for (int n = 0; n < N; n++) memcpy(part + (size_t)n * Vl, full + (size_t)n * V + v0, sizeof(float) * Vl);
}
static void cols_put(float *full, const float *part, int N, int V, int v0, int Vl) {
    for (int n = 0; n < N; n++) memcpy(full + (size_t)n * V + v0, part + (size_t)n * Vl, sizeof(float) * Vl);
}

// The three calls on tp column slices of logits (N, V), the maxes combined with max and the sums
// added in rank order between them; rank 0 adds the loss. With dscale != 0 logits (N, V) becomes
// the gradient, put together from the slices. Returns the loss.
static double xent_tp(float *logits, const int32_t *targets, int N, int V, int tp, float dscale) {
    const int Vl = V / tp;
    float *part = malloc(sizeof(float) * N * Vl), *mx = malloc(sizeof(float) * N), *pm = malloc(sizeof(float) * N);
    float *sums = calloc(2 * (size_t)N, sizeof(float)), *ps = malloc(sizeof(float) * 2 * N);
    for (int n = 0; n < N; n++) mx[n] = -INFINITY;
    for (int p = 0; p < tp; p++) {
        cols_get(part, logits, N, V, p * Vl, Vl);
        kern_xent_part_max(part, N, Vl, pm);
        for (int n = 0; n < N; n++) mx[n] = pm[n] > mx[n] ? pm[n] : mx[n];
    }
    for (int p = 0; p < tp; p++) {
        cols_get(part, logits, N, V, p * Vl, Vl);
        kern_xent_part_sums(part, targets, N, Vl, p * Vl, mx, ps);
        for (int i = 0; i < 2 * N; i++) sums[i] += ps[i];
    }
    double loss = 0.0, other = 0.0;
    for (int p = 0; p < tp; p++) {
        cols_get(part, logits, N, V, p * Vl, Vl);
        kern_xent_part_finish(part, targets, N, Vl, p * Vl, mx, sums, dscale, p == 0, p == 0 ? &loss : &other);
        if (dscale != 0.0f) cols_put(logits, part, N, V, p * Vl, Vl);
    }
    if (other != 0.0) loss = NAN;  // a rank without add_loss added to its loss
    free(part), free(mx), free(pm), free(sums), free(ps);
    return loss;
}

typedef struct {
    float *logits, *work;
    const int32_t *targets;
    int N, V, tp;
} XentTpCtx;

static double xent_tp_obj(void *p) {
    XentTpCtx *c = p;
    memcpy(c->work, c->logits, sizeof(float) * c->N * c->V);
    return xent_tp(c->work, c->targets, c->N, c->V, c->tp, 0.0f);
}

static void test_xent_tp(int V, int tp) {
    enum { N = 12 };
    const int Vl = V / tp;
    char name[112];
    int32_t targets[N];
    // every part holds some row's target; rows 2 and 7 bear no loss
    for (int n = 0; n < N; n++) targets[n] = (n % tp) * Vl + (int32_t)(rng_next() % Vl);
    targets[2] = -1, targets[7] = -100;
    float *logits = rand_vec((size_t)N * V, -3, 3);
    for (int j = 0; j < V; j++) logits[V + j] += 100.0f;  // a shifted row: the statistics stay stable
    logits[4 * V + V - 1] = 9.0f;  // a row whose max lies in the last part
    float *fused = dup_vec(logits, N * V), *parts = dup_vec(logits, N * V), *evalp = dup_vec(logits, N * V);
    const float dscale = 1.0f / 3;
    double lf = 0.0;
    kern_crossentropy_fwd_bwd(fused, targets, N, V, dscale, &lf);
    const double lp = xent_tp(parts, targets, N, V, tp, dscale), le = xent_tp(evalp, targets, N, V, tp, 0.0f);
    // each part's row maxes, exactly
    float *part = malloc(sizeof(float) * N * Vl), *pm = malloc(sizeof(float) * N);
    int max_ok = 1;
    for (int p = 0; p < tp; p++) {
        cols_get(part, logits, N, V, p * Vl, Vl);
        kern_xent_part_max(part, N, Vl, pm);
        for (int n = 0; n < N; n++) {
            float m = -INFINITY;
            for (int j = 0; j < Vl; j++) m = fmaxf(m, part[n * Vl + j]);
            max_ok &= pm[n] == m;
        }
    }
    snprintf(name, sizeof name, "xent_part_max of each part V=%d tp=%d", V, tp);
    report(max_ok, name, "a row max differs");
    free(part), free(pm);
    snprintf(name, sizeof name, "xent_part loss = crossentropy V=%d tp=%d", V, tp);
    report(fabs(lp - lf) <= 1e-6 * fabs(lf), name, "%.12g vs %.12g", lp, lf);
    snprintf(name, sizeof name, "xent_part dlogits = crossentropy V=%d tp=%d", V, tp);
    double *ref = grad_delta(fused, NULL, N * V);
    check_close(name, parts, ref, N * V, 1e-6);
    int zero = 1;
    for (int j = 0; j < V; j++) zero &= parts[2 * V + j] == 0.0f && parts[7 * V + j] == 0.0f;
    snprintf(name, sizeof name, "xent_part rows of negative targets are 0 V=%d tp=%d", V, tp);
    report(zero, name, "a nonzero gradient");
    snprintf(name, sizeof name, "xent_part dscale=0: same loss, logits untouched V=%d tp=%d", V, tp);
    report(le == lp && !memcmp(evalp, logits, sizeof(float) * N * V), name, "loss %.17g vs %.17g", le, lp);
    // the combined loss's gradient by finite differences (dscale 1)
    XentTpCtx c = {logits, malloc(sizeof(float) * N * V), targets, N, V, tp};
    float *g1 = dup_vec(logits, N * V);
    xent_tp(g1, targets, N, V, tp, 1.0f);
    double *g = grad_delta(g1, NULL, N * V);
    snprintf(name, sizeof name, "xent_part bwd (finite differences) V=%d tp=%d", V, tp);
    check_grad(name, xent_tp_obj, &c, logits, g, N * V);
    // a NaN logit in the last part (not the target) surfaces in the loss: the max skips it, the sums do not
    logits[3 * V + V - 1 - (targets[3] == V - 1)] = NAN;
    snprintf(name, sizeof name, "xent_part NaN propagates V=%d tp=%d", V, tp);
    const double nan_loss = xent_tp_obj(&c);
    report(isnan(nan_loss), name, "loss %g", nan_loss);
    free(logits), free(fused), free(parts), free(evalp), free(ref), free(c.work), free(g1), free(g);
}

static void test_embedding_tp(int tp) {
    const int V = 12, N = 15, D = 37, Vl = V / tp;
    const int32_t tokens[15] = {3, 0, 11, 3, 3, 1, 6, 2, 0, 5, 3, 9, 7, 11, 8};
    float *wte = rand_vec(V * D, -1, 1), *out = malloc(sizeof(float) * N * D), *sum = calloc((size_t)N * D, sizeof(float));
    float *part_out = rand_vec(N * D, -9, 9);  // garbage: every row must be written
    kern_embedding_fwd(out, tokens, wte, N, D);
    for (int p = 0; p < tp; p++) {
        kern_embedding_part_fwd(part_out, tokens, wte + (size_t)p * Vl * D, N, D, p * Vl, Vl);
        for (int i = 0; i < N * D; i++) sum[i] += part_out[i];
    }
    char name[96];
    snprintf(name, sizeof name, "embedding_part fwd: the parts add up to embedding fwd tp=%d", tp);
    report(!memcmp(sum, out, sizeof(float) * N * D), name, "differs");
    float *dout = rand_vec(N * D, -1, 1), *dwte = rand_vec(V * D, -1, 1), *dpart = dup_vec(dwte, V * D);
    kern_embedding_bwd(dwte, dout, tokens, N, D);
    for (int p = 0; p < tp; p++) kern_embedding_part_bwd(dpart + (size_t)p * Vl * D, dout, tokens, N, D, p * Vl, Vl);
    snprintf(name, sizeof name, "embedding_part bwd: each part's rows of embedding bwd tp=%d", tp);
    report(!memcmp(dpart, dwte, sizeof(float) * V * D), name, "differs");
    free(wte), free(out), free(sum), free(part_out), free(dout), free(dwte), free(dpart);
}

static void test_vocab_parallel(void) {
    test_xent_tp(300, 1);  // v0 = 0, Vl = V: the fused kernel's numbers
    test_xent_tp(2500, 1);
    test_xent_tp(300, 2);
    test_xent_tp(300, 4);
    test_xent_tp(2500, 2);  // parts longer than a chunk of the sums
    test_xent_tp(2500, 4);
    test_embedding_tp(1);
    test_embedding_tp(2);
    test_embedding_tp(4);
}

// ---- AdamW ----

static void test_adamw(void) {
    const float lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    KernAdamW h = {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd, .grad_scale = 1.0f, .step = 1,
                   .ndecay = 1, .decay = {{0, 1}}};
    {
        // by hand: m = 0.05, v = 0.00025, m/(1-b1) = 0.5, sqrt(v/(1-b2)) = 0.5,
        // p = 1 * (1 - 0.01) - 0.1 * 0.5 / (0.5 + 1e-8) = 0.89
        float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
        kern_adamw(&p, NULL, &g, &m, &v, 1, &h);
        // (m and v are off in the 7th digit: 1 - b1 and 1 - b2 are rounded float betas)
        report(fabsf(p - 0.89f) < 1e-6f && fabsf(m - 0.05f) < 1e-7f && fabsf(v - 0.00025f) < 1e-8f,
               "adamw hand-computed step", "p %.9g m %.9g v %.9g", p, m, v);
    }
    // several steps against the header formula in double: two decay ranges with gaps around and
    // between them, a clip coefficient, and the bf16 copy of p
    const size_t n = 40000, ranges[2][2] = {{100, 15000}, {15000 + 333, 39000}};
    const float gs = 0.7f;
    h = (KernAdamW){.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd, .grad_scale = gs, .ndecay = 2,
                    .decay = {{ranges[0][0], ranges[0][1]}, {ranges[1][0], ranges[1][1]}}};
    float *p = rand_vec(n, -1, 1), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    uint16_t *pb = calloc(n, sizeof(uint16_t)), *pb_ref = calloc(n, sizeof(uint16_t));
    double *rp = malloc(sizeof(double) * n), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) rp[i] = p[i];
    for (int step = 1; step <= 3; step++) {
        float *g = rand_vec(n, -1, 1);
        h.step = step;
        kern_adamw(p, pb, g, m, v, n, &h);
        const double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
        for (size_t i = 0; i < n; i++) {
            const int decayed = (i >= ranges[0][0] && i < ranges[0][1]) || (i >= ranges[1][0] && i < ranges[1][1]);
            const double gi = (double)g[i] * gs;
            if (decayed) rp[i] *= 1.0 - (double)lr * wd;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
        free(g);
    }
    check_close("adamw 3 steps p (decay ranges, clip scale)", p, rp, n, 1e-5);
    check_close("adamw 3 steps m", m, rm, n, 1e-5);
    check_close("adamw 3 steps v", v, rv, n, 1e-5);
    kern_f32_to_bf16(pb_ref, p, n);
    report(!memcmp(pb, pb_ref, sizeof(uint16_t) * n), "adamw writes the bf16 copy of p", "differs");
    free(p), free(m), free(v), free(pb), free(pb_ref), free(rp), free(rm), free(rv);
}

// ---- bf16 ----

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// round-to-nearest-even reference, done by comparing distances in double. As IEEE rounding does,
// it treats the step above the largest finite bf16 as 2^128, so that overflow rounds to Inf.
static uint16_t bf16_ref(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    if (isinf(f)) return (uint16_t)(u >> 16);
    const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    const double vhi = (hi & 0x7f80) == 0x7f80 ? copysign(0x1p128, f) : bits_to_f32((uint32_t)hi << 16);
    const double dl = fabs((double)f - bits_to_f32((uint32_t)lo << 16)), dh = fabs((double)f - vhi);
    if (dl != dh) return dl < dh ? lo : hi;
    return (lo & 1) ? hi : lo;
}

static void test_bf16(void) {
    // (input bits, expected bf16): exact, ties to even both ways, above tie, negative, overflow, Inf
    static const uint32_t cases[][2] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81},
        {0xbfc00000u, 0xbfc0}, {0x7f7fffffu, 0x7f80}, {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},
        {0x00000001u, 0x0000}, {0x80000000u, 0x8000},
    };
    const size_t nc = sizeof cases / sizeof cases[0];
    int ok = 1;
    for (size_t i = 0; i < nc; i++) {
        const float f = bits_to_f32(cases[i][0]);
        uint16_t b;
        kern_f32_to_bf16(&b, &f, 1);
        if (b != cases[i][1]) {
            report(0, "bf16 rounding cases", "0x%08x -> 0x%04x, want 0x%04x", (unsigned)cases[i][0], b,
                   (unsigned)cases[i][1]);
            ok = 0;
            break;
        }
    }
    if (ok) report(1, "bf16 rounding cases", "");
    // NaNs (quiet, signalling, negative, payload only in low bits) stay NaN
    const float nans[4] = {bits_to_f32(0x7fc00000u), bits_to_f32(0x7f800001u), bits_to_f32(0xffc00000u),
                           bits_to_f32(0x7f80ffffu)};
    uint16_t nb[4];
    float back[4];
    kern_f32_to_bf16(nb, nans, 4);
    kern_bf16_to_f32(back, nb, 4);
    report(isnan(back[0]) && isnan(back[1]) && isnan(back[2]) && isnan(back[3]), "bf16 NaN stays NaN", "lost NaN");
    // many values (parallel path) against the reference; then bf16 -> f32 -> bf16 is the identity
    const size_t n = 100003;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint16_t *b = malloc(sizeof(uint16_t) * n), *b2 = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rng_next();
        if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
        x[i] = isnan(bits_to_f32(u)) ? 1.0f : bits_to_f32(u);
    }
    kern_f32_to_bf16(b, x, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += b[i] != bf16_ref(x[i]);
    report(bad == 0, "bf16 rounding vs reference", "%zu of %zu differ", bad, n);
    kern_bf16_to_f32(y, b, n);
    kern_f32_to_bf16(b2, y, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += b2[i] != b[i] || bits_to_f32((uint32_t)b[i] << 16) != y[i];
    report(bad == 0, "bf16 round trip", "%zu of %zu differ", bad, n);
    free(x), free(y), free(b), free(b2);
}

// ---- NF4 storage (test/ref/nf4_ref.py checks the values against the published algorithm) ----

static void test_nf4(void) {
    // (n, bytes): one block, a block and one element, 768 blocks in 3 groups, 257 blocks in 2
    static const size_t sizes[][2] = {{1, 44}, {64, 44}, {65, 76}, {64 * 768, 25360}, {64 * 256 + 1, 8496}};
    int ok = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) ok &= kern_nf4_bytes(sizes[i][0]) == sizes[i][1];
    report(ok, "nf4 packed sizes", "kern_nf4_bytes(65) = %zu", kern_nf4_bytes(65));
    // enough elements for the parallel path; the packing must not depend on the thread count
    const size_t n = 64 * 256 * 3 + 1001, bytes = kern_nf4_bytes(n);
    static uint8_t *first;  // the first thread count's packing
    float *x = rand_vec(n, -1, 1), *host = mallocCheck(sizeof(float) * n), *dev_out = mallocCheck(sizeof(float) * n);
    for (size_t i = 0; i < n; i += 997) x[i] *= 50.0f;  // outliers
    uint8_t *q = mallocCheck(bytes);
    kern_nf4_quantize(q, x, n);
    if (!first) first = memcpy(mallocCheck(bytes), q, bytes);
    else report(!memcmp(first, q, bytes), "nf4 quantize: the same bytes at every thread count", "bytes differ");
    kern_nf4_dequantize_host(host, q, n);
    uint8_t *d_q = kern_alloc(bytes, KERN_MEM_PARAMS);
    float *d_y = kern_alloc(sizeof(float) * n, KERN_MEM_GATHERED);
    kern_upload(d_q, q, bytes);
    kern_nf4_dequantize(d_y, 0, d_q, n, (KernSegs){1, n, n, 0});
    kern_download(dev_out, d_y, sizeof(float) * n);
    report(!memcmp(host, dev_out, sizeof(float) * n), "nf4 dequantize on the device equals the host's", "values differ");
    // a tp rank's part (model_tp_segments): runs across block and group edges pick the whole's values
    const KernSegs seg = {5, 4096 + 37, 9000, 1003};
    kern_nf4_dequantize(d_y, 1, d_q, n, seg);
    kern_download(dev_out, d_y, sizeof(float) * seg.n * seg.len);
    int same = 1;
    for (size_t i = 0; i < seg.n * seg.len; i++) same &= dev_out[i] == host[i / seg.len * seg.stride + seg.off + i % seg.len];
    report(same, "nf4 dequantize of a tp rank's segments equals those elements of the whole", "values differ");
    // within a block: half NF4's widest gap (0.304) of the block's absmax, plus the scale's error,
    // half the dynamic map's widest gap (0.0141) of the group's absmax2
    const Nf4Layout l = nf4_layout(n);
    double worst = 0.0;
    for (size_t b = 0; b < l.blocks; b++) {
        double amax = 0.0, err = 0.0;
        for (size_t i = b * NF4_BLOCK; i < n && i < (b + 1) * NF4_BLOCK; i++) {
            amax = fmax(amax, fabsf(x[i]));
            err = fmax(err, fabs((double)host[i] - x[i]));
        }
        float absmax2;
        memcpy(&absmax2, q + l.absmax2 + sizeof(float) * (b / NF4_GROUP), sizeof absmax2);
        worst = fmax(worst, err / (0.153 * amax + 0.0071 * absmax2));
    }
    report(worst <= 1.0, "nf4 round trip: error within a block within its two quantisations' bounds", "%.3g of the bound",
           worst);
    kern_free(d_q), kern_free(d_y);
    free(x), free(host), free(dev_out), free(q);
}

// test_kernels --nf4 TABLES FILE.f32...: test/ref/nf4_ref.py's side. Writes the NF4 values and the
// dynamic map as compiled (16 then 256 fp32) to TABLES and, for each file of fp32 values FILE.f32,
// FILE.nf4 (kern_nf4_quantize), FILE.deq (kern_nf4_dequantize_host) and FILE.dev
// (kern_nf4_dequantize on the CPU device).
static int nf4_write(const char *path, const char *suffix, const void *p, size_t bytes) {
    char name[4096];
    snprintf(name, sizeof name, "%.*s%s", (int)(strlen(path) - strlen(".f32")), path, suffix);
    FILE *f = fopen(name, "wb");
    const int written = f && fwrite(p, 1, bytes, f) == bytes, ok = f && !fclose(f) && written;
    if (!ok) fprintf(stderr, "test_kernels: cannot write %s\n", name);
    return ok;
}

static int nf4_files(int argc, char **argv) {
    static const float tables[16 + 256] = {NF4_VALUES, NF4_DYNAMIC_MAP};
    FILE *t = fopen(argv[2], "wb");
    if (!t || fwrite(tables, sizeof tables, 1, t) != 1 || fclose(t)) return fprintf(stderr, "cannot write %s\n", argv[2]), 1;
    kern_init(2);
    for (int a = 3; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        long len = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
        if (len < (long)sizeof(float) || len % sizeof(float) || fseek(f, 0, SEEK_SET))
            return fprintf(stderr, "test_kernels: %s: not a file of fp32 values\n", argv[a]), 1;
        const size_t n = (size_t)len / sizeof(float), bytes = kern_nf4_bytes(n);
        float *x = mallocCheck((size_t)len), *y = mallocCheck((size_t)len);
        uint8_t *q = mallocCheck(bytes);
        if (fread(x, 1, (size_t)len, f) != (size_t)len) return fprintf(stderr, "test_kernels: cannot read %s\n", argv[a]), 1;
        fclose(f);
        kern_nf4_quantize(q, x, n);
        kern_nf4_dequantize_host(y, q, n);
        int ok = nf4_write(argv[a], ".nf4", q, bytes) && nf4_write(argv[a], ".deq", y, (size_t)len);
        uint8_t *d_q = kern_alloc(bytes, KERN_MEM_PARAMS);
        float *d_y = kern_alloc((size_t)len, KERN_MEM_GATHERED);
        kern_upload(d_q, q, bytes);
        kern_nf4_dequantize(d_y, 0, d_q, n, (KernSegs){1, n, n, 0});
        kern_download(y, d_y, (size_t)len);
        ok = ok && nf4_write(argv[a], ".dev", y, (size_t)len);
        kern_free(d_q), kern_free(d_y);
        free(x), free(y), free(q);
        if (!ok) return 1;
    }
    return 0;
}

// ---- elementwise and reductions ----

static void test_vector_ops(void) {
    const size_t sizes[2] = {1000, 100003};  // below and above the parallel threshold
    for (int si = 0; si < 2; si++) {
        const size_t n = sizes[si];
        float *a = rand_vec(n, -2, 2), *b = rand_vec(n, -2, 2), *y = dup_vec(a, n), *o = malloc(sizeof(float) * n);
        int ok = 1;
        kern_add(y, b, n);
        for (size_t i = 0; i < n; i++) ok &= y[i] == a[i] + b[i];
        kern_add3(o, a, b, n);
        for (size_t i = 0; i < n; i++) ok &= o[i] == a[i] + b[i];
        kern_scale(y, 0.37f, n);
        for (size_t i = 0; i < n; i++) ok &= y[i] == (a[i] + b[i]) * 0.37f;
        kern_copy(o, a, n);
        ok &= memcmp(o, a, sizeof(float) * n) == 0;
        kern_zero(o, n);
        for (size_t i = 0; i < n; i++) ok &= o[i] == 0.0f;
        char buf[96];
        snprintf(buf, sizeof buf, "add/add3/scale/copy/zero n=%zu", n);
        report(ok, buf, "mismatch");
        double ref = 0.0;
        for (size_t i = 0; i < n; i++) ref += (double)a[i] * a[i];
        const double s1 = kern_sumsq(a, n), s2 = kern_sumsq(a, n);
        snprintf(buf, sizeof buf, "sumsq n=%zu", n);
        report(fabs(s1 - ref) <= 1e-12 * ref && s1 == s2, buf, "%.17g vs %.17g (again %.17g)", s1, ref, s2);
        double s3 = -1.0;
        kern_sumsq_to(&s3, a, n);
        snprintf(buf, sizeof buf, "sumsq_to n=%zu", n);
        report(s3 == s1, buf, "%.17g vs %.17g", s3, s1);
        free(a), free(b), free(y), free(o);
    }
}

// The memory tracker (kernels/dispatch.c): the bytes per category now and at peak follow every
// allocation and free, device and host, through the table's growth and frees in random order.
static void test_mem_tracker(void) {
    enum { NB = 3000 };
    KernMemStats s0, s;
    kern_mem_stats(&s0);
    void **p = malloc(NB * sizeof *p);
    size_t *len = malloc(NB * sizeof *len), *order = malloc(NB * sizeof *order);
    double want[KERN_MEM_NCAT] = {0}, peak[KERN_MEM_NCAT];
    int zeroed = 1;
    for (size_t i = 0; i < NB; i++) {
        len[i] = 1 + rng_next() % 5000;
        KernMem cat = (KernMem)(i % KERN_MEM_NCAT);
        p[i] = i % 3 == 0 ? kern_alloc_host(len[i], cat, (int)(i % 2)) : kern_alloc(len[i], cat);
        for (size_t k = 0; k < len[i]; k++) zeroed &= ((unsigned char *)p[i])[k] == 0;
        memset(p[i], 0xab, len[i]);
        want[cat] += (double)len[i];
        order[i] = i;
    }
    report(zeroed, "memory tracker: allocations are zeroed", "a buffer held nonzero bytes");
    kern_mem_stats(&s);
    int ok = 1;
    double total = 0;
    for (int c = 0; c < KERN_MEM_NCAT; c++) {
        peak[c] = s0.now[c] + want[c];
        ok &= s.now[c] == peak[c] && s.peak[c] == fmax(s0.peak[c], peak[c]);
        total += want[c];
    }
    report(ok && s.total == s0.total + total && s.total_peak >= s.total, "memory tracker: bytes per category after 3000 allocations",
           "params now %.0f peak %.0f, want %.0f", s.now[0], s.peak[0], peak[0]);
    for (size_t i = NB - 1; i > 0; i--) {  // free in a random order
        size_t j = rng_next() % (i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (size_t n = 0; n < NB; n++) {
        size_t i = order[n];
        if (i % 3 == 0) kern_free_host(p[i]);
        else kern_free(p[i]);
        want[i % KERN_MEM_NCAT] -= (double)len[i];
        if (n == NB / 2) {  // half freed: the rest still counted, the peaks kept
            kern_mem_stats(&s);
            ok = 1;
            for (int c = 0; c < KERN_MEM_NCAT; c++) ok &= s.now[c] == s0.now[c] + want[c] && s.peak[c] >= peak[c];
            report(ok, "memory tracker: half freed in random order", "params now %.0f, want %.0f", s.now[0], s0.now[0] + want[0]);
        }
    }
    kern_mem_stats(&s);
    ok = s.total == s0.total;
    for (int c = 0; c < KERN_MEM_NCAT; c++) ok &= s.now[c] == s0.now[c] && s.peak[c] >= peak[c];
    report(ok, "memory tracker: all freed, back to the start, peaks kept", "total %.0f vs %.0f", s.total, s0.total);
    report(s.held > 0 && s.held_peak >= s.held && s.cached == 0 && s.host == 0, "memory tracker: the CPU's view is the resident memory",
           "held %.0f peak %.0f cached %.0f host %.0f", s.held, s.held_peak, s.cached, s.host);
    free(p), free(len), free(order);
}

// ---- the AVX-512 kernels against the AVX2 ones ----
// Both builds run the same inputs and must agree bit for bit: the elementwise ops compute each
// element alike, and the AVX-512 build's reductions keep AVX2's order (cpu_common.h, CPU_KEEP_ORDER).
static void isa_same(const char *name, const void *a512, const void *a2, size_t bytes) {
    report(!memcmp(a512, a2, bytes), name, "the AVX-512 result differs from the AVX2 one");
}

// the same, saying by how much they differ
static void isa_close(const char *name, const float *a512, const float *a2, size_t n) {
    double md = 0.0, mr = 1e-30;
    for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)a512[i] - a2[i])), mr = fmax(mr, fabs((double)a2[i]));
    report(!memcmp(a512, a2, n * sizeof *a2), name, "max rel diff %.3g", md / mr);
}

// o2, o5 (declared by the caller): the AVX2 and AVX-512 outputs (n floats each) of a call on copies of the same inputs
#define ISA_PAIR(n, call2, call5) \
    o2 = calloc((n) + 1, sizeof(float)), o5 = calloc((n) + 1, sizeof(float)); \
    { float *out = o2; call2; } { float *out = o5; call5; }

static void test_isa_elementwise(void) {
    float *o2, *o5;
    const size_t n = 70001;  // parallel, and a tail no vector fills
    float *x = rand_vec(n, -6, 6), *y = rand_vec(n, -6, 6), *z = rand_vec(2 * n, -6, 6);
    {
        ISA_PAIR(n, (memcpy(out, y, n * 4), cpu_add_avx2(out, x, n)), (memcpy(out, y, n * 4), cpu_add_avx512(out, x, n)))
        isa_same("avx512 = avx2: add", o5, o2, n * 4), free(o2), free(o5);
    }
    {
        ISA_PAIR(n, cpu_add3_avx2(out, x, y, n), cpu_add3_avx512(out, x, y, n))
        isa_same("avx512 = avx2: add3", o5, o2, n * 4), free(o2), free(o5);
    }
    {
        ISA_PAIR(n, (memcpy(out, x, n * 4), cpu_scale_avx2(out, 0.37f, n)), (memcpy(out, x, n * 4), cpu_scale_avx512(out, 0.37f, n)))
        isa_same("avx512 = avx2: scale", o5, o2, n * 4), free(o2), free(o5);
    }
    for (int f = 0; f < 2; f++) {
        const KernGelu form = f ? KERN_GELU_ERF : KERN_GELU_TANH;
        ISA_PAIR(n, cpu_gelu_fwd_avx2(out, x, n, form), cpu_gelu_fwd_avx512(out, x, n, form))
        isa_same(f ? "avx512 = avx2: gelu erf fwd" : "avx512 = avx2: gelu tanh fwd", o5, o2, n * 4), free(o2), free(o5);
        ISA_PAIR(n, cpu_gelu_bwd_avx2(out, y, x, n, form), cpu_gelu_bwd_avx512(out, y, x, n, form))
        isa_same(f ? "avx512 = avx2: gelu erf bwd" : "avx512 = avx2: gelu tanh bwd", o5, o2, n * 4), free(o2), free(o5);
    }
    const int N = 101, F = 693;  // swiglu rows, bias and norms over (N, F)
    {
        ISA_PAIR((size_t)N * F, cpu_swiglu_fwd_avx2(out, z, N, F), cpu_swiglu_fwd_avx512(out, z, N, F))
        isa_same("avx512 = avx2: swiglu fwd", o5, o2, (size_t)N * F * 4), free(o2), free(o5);
    }
    {
        ISA_PAIR((size_t)2 * N * F, cpu_swiglu_bwd_avx2(out, x, z, N, F), cpu_swiglu_bwd_avx512(out, x, z, N, F))
        isa_same("avx512 = avx2: swiglu bwd", o5, o2, (size_t)2 * N * F * 4), free(o2), free(o5);
    }
    {
        ISA_PAIR((size_t)N * F, (memcpy(out, x, (size_t)N * F * 4), cpu_bias_add_avx2(out, KERN_F32, y, N, F)),
                 (memcpy(out, x, (size_t)N * F * 4), cpu_bias_add_avx512(out, KERN_F32, y, N, F)))
        isa_same("avx512 = avx2: bias add", o5, o2, (size_t)N * F * 4), free(o2), free(o5);
    }
    {
        ISA_PAIR((size_t)F, cpu_bias_bwd_avx2(out, x, KERN_F32, N, F), cpu_bias_bwd_avx512(out, x, KERN_F32, N, F))
        isa_same("avx512 = avx2: bias bwd", o5, o2, (size_t)F * 4), free(o2), free(o5);
    }
    {
        uint16_t *b2 = calloc(n, 2), *b5 = calloc(n, 2);
        cpu_f32_to_bf16_avx2(b2, x, n), cpu_f32_to_bf16_avx512(b5, x, n);
        isa_same("avx512 = avx2: f32 to bf16", b5, b2, n * 2);
        ISA_PAIR(n, cpu_bf16_to_f32_avx2(out, b2, n), cpu_bf16_to_f32_avx512(out, b2, n))
        isa_same("avx512 = avx2: bf16 to f32", o5, o2, n * 4), free(o2), free(o5), free(b2), free(b5);
    }
    {
        const double s2 = cpu_sumsq_avx2(x, n), s5 = cpu_sumsq_avx512(x, n);
        report(s5 == s2, "avx512 = avx2: sumsq", "%.17g vs %.17g", s5, s2);
    }
    {
        // AdamW: two decay ranges and the bf16 copy; p, m, v and the copy bit for bit
        KernAdamW h = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.6f,
                       .step = 3, .ndecay = 2, .decay = {{10, 30000}, {30100, 70000}}};
        float *m2 = rand_vec(n, -0.1f, 0.1f), *v2 = rand_vec(n, 0, 0.01f), *m5 = dup_vec(m2, n), *v5 = dup_vec(v2, n);
        uint16_t *b2 = calloc(n, 2), *b5 = calloc(n, 2);
        ISA_PAIR(n, (memcpy(out, x, n * 4), cpu_adamw_avx2(out, b2, y, m2, v2, n, &h)),
                 (memcpy(out, x, n * 4), cpu_adamw_avx512(out, b5, y, m5, v5, n, &h)))
        isa_same("avx512 = avx2: adamw p", o5, o2, n * 4);
        isa_same("avx512 = avx2: adamw m, v", m5, m2, n * 4), isa_same("avx512 = avx2: adamw v", v5, v2, n * 4);
        isa_same("avx512 = avx2: adamw bf16 copy", b5, b2, n * 2);
        free(o2), free(o5), free(m2), free(v2), free(m5), free(v5), free(b2), free(b5);
    }
    free(x), free(y), free(z);
}

static void test_isa_rows(void) {
    float *o2, *o5;
    const int N = 67, D = 333, V = 1500;
    float *x = rand_vec((size_t)N * D, -3, 3), *r = rand_vec((size_t)N * D, -1, 1), *w = rand_vec(D, 0.5f, 1.5f);
    float *b = rand_vec(D, -1, 1), *dy = rand_vec((size_t)N * D, -1, 1);
    float st2[2 * 67], st5[2 * 67];
    {
        ISA_PAIR((size_t)N * D, cpu_rmsnorm_fwd_avx2(out, st2, x, w, N, D, 1e-5f), cpu_rmsnorm_fwd_avx512(out, st5, x, w, N, D, 1e-5f))
        isa_close("avx512 = avx2: rmsnorm fwd", o5, o2, (size_t)N * D), isa_close("avx512 = avx2: rmsnorm rstd", st5, st2, N);
        float *dw2 = calloc(D, 4), *dw5 = calloc(D, 4);
        free(o2), free(o5);
        ISA_PAIR((size_t)N * D, cpu_rmsnorm_bwd_avx2(out, dw2, dy, x, w, st2, N, D), cpu_rmsnorm_bwd_avx512(out, dw5, dy, x, w, st2, N, D))
        isa_close("avx512 = avx2: rmsnorm bwd dx", o5, o2, (size_t)N * D), isa_close("avx512 = avx2: rmsnorm bwd dw", dw5, dw2, D);
        free(o2), free(o5), free(dw2), free(dw5);
    }
    {
        float *y2 = dup_vec(x, (size_t)N * D), *y5 = dup_vec(x, (size_t)N * D);
        ISA_PAIR((size_t)N * D, cpu_add_rmsnorm_fwd_avx2(y2, out, st2, r, w, N, D, 1e-5f),
                 cpu_add_rmsnorm_fwd_avx512(y5, out, st5, r, w, N, D, 1e-5f))
        isa_same("avx512 = avx2: add_rmsnorm sum", y5, y2, (size_t)N * D * 4), isa_close("avx512 = avx2: add_rmsnorm", o5, o2, (size_t)N * D);
        free(o2), free(o5), free(y2), free(y5);
    }
    {
        ISA_PAIR((size_t)N * D, cpu_layernorm_fwd_avx2(out, st2, st2 + N, x, w, b, N, D, 1e-5f),
                 cpu_layernorm_fwd_avx512(out, st5, st5 + N, x, w, b, N, D, 1e-5f))
        isa_close("avx512 = avx2: layernorm fwd", o5, o2, (size_t)N * D), isa_close("avx512 = avx2: layernorm stats", st5, st2, 2 * N);
        float *dw2 = calloc(2 * D, 4), *dw5 = calloc(2 * D, 4);
        free(o2), free(o5);
        ISA_PAIR((size_t)N * D, cpu_layernorm_bwd_avx2(out, dw2, dw2 + D, dy, x, w, st2, st2 + N, N, D),
                 cpu_layernorm_bwd_avx512(out, dw5, dw5 + D, dy, x, w, st2, st2 + N, N, D))
        isa_close("avx512 = avx2: layernorm bwd dx", o5, o2, (size_t)N * D), isa_close("avx512 = avx2: layernorm bwd dw, db", dw5, dw2, 2 * D);
        free(o2), free(o5), free(dw2), free(dw5);
    }
    {
        int32_t t[67];
        for (int i = 0; i < N; i++) t[i] = i % 5 == 4 ? -100 : (int32_t)((i * 7919) % V);
        float *l = rand_vec((size_t)N * V, -8, 8);
        double loss2 = 0.0, loss5 = 0.0;
        ISA_PAIR((size_t)N * V, (memcpy(out, l, (size_t)N * V * 4), cpu_crossentropy_fwd_bwd_avx2(out, t, N, V, 0.01f, &loss2)),
                 (memcpy(out, l, (size_t)N * V * 4), cpu_crossentropy_fwd_bwd_avx512(out, t, N, V, 0.01f, &loss5)))
        report(loss5 == loss2, "avx512 = avx2: cross-entropy loss", "%.17g vs %.17g", loss5, loss2);
        isa_close("avx512 = avx2: cross-entropy dlogits", o5, o2, (size_t)N * V);
        free(o2), free(o5), free(l);
    }
    free(x), free(r), free(w), free(b), free(dy);
}

static void test_isa_attention(void) {
    float *o2, *o5;
    const int B = 2, T = 150, H = 4, KV = 2, hd = 16;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    float *p2 = calloc(cpu_attention_saved_floats(B, H, T, T), 4), *p5 = calloc(cpu_attention_saved_floats(B, H, T, T), 4);
    float *scratch = calloc(cpu_attention_scratch_floats(B, H, T), 4);
    ISA_PAIR(nq, cpu_attention_fwd_avx2(out, p2, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, NULL, 0, NULL),
             cpu_attention_fwd_avx512(out, p5, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, NULL, 0, NULL))
    isa_close("avx512 = avx2: attention fwd", o5, o2, nq);
    float *d2 = calloc(nq + 2 * nk, 4), *d5 = calloc(nq + 2 * nk, 4);
    cpu_attention_bwd_avx2(d2, d2 + nq, d2 + nq + nk, scratch, dout, o2, p2, q, k, v, B, T, H, KV, hd, NULL, 0, NULL);
    cpu_attention_bwd_avx512(d5, d5 + nq, d5 + nq + nk, scratch, dout, o2, p2, q, k, v, B, T, H, KV, hd, NULL, 0, NULL);
    isa_close("avx512 = avx2: attention bwd dq, dk, dv", d5, d2, nq + 2 * nk);
    free(o2), free(o5), free(d2), free(d5), free(q), free(k), free(v), free(dout), free(p2), free(p5), free(scratch);
}

// bf16 matmuls (--precision bf16 on a CPU with AVX512_BF16): each of the three products equals the
// double-precision one of the operands rounded to bf16, to fp32 accumulation's error
static void test_gemm_bf16(void) {
    if (!cpu_has_bf16()) {
        printf("ok - %sbf16 matmuls # SKIP %s\n", test_prefix,
               cpu_isa() == CPU_ISA_AVX2 ? "the AVX2 kernels emulate bf16" : "this CPU has no AVX512_BF16");
        return;
    }
    const int N = 37, IN = 70, OUT = 45;
    float *x = rand_vec((size_t)N * IN, -1, 1), *w = rand_vec((size_t)OUT * IN, -1, 1), *dout = rand_vec((size_t)N * OUT, -1, 1);
    float *xr = dup_vec(x, (size_t)N * IN), *wr = dup_vec(w, (size_t)OUT * IN), *dr = dup_vec(dout, (size_t)N * OUT);
    kern_round_bf16(xr, (size_t)N * IN), kern_round_bf16(wr, (size_t)OUT * IN), kern_round_bf16(dr, (size_t)N * OUT);
    float *out = calloc((size_t)N * OUT, 4), *dinp = rand_vec((size_t)N * IN, -1, 1), *dw = rand_vec((size_t)OUT * IN, -1, 1);
    double *ro = calloc((size_t)N * OUT, 8), *rd = calloc((size_t)N * IN, 8), *rw = calloc((size_t)OUT * IN, 8);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            for (int i = 0; i < IN; i++) ro[n * OUT + o] += (double)xr[n * IN + i] * wr[o * IN + i];
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IN; i++) {
            rd[n * IN + i] = dinp[n * IN + i];  // accumulate_dinp
            for (int o = 0; o < OUT; o++) rd[n * IN + i] += (double)dr[n * OUT + o] * wr[o * IN + i];
        }
    for (int o = 0; o < OUT; o++)
        for (int i = 0; i < IN; i++) {
            rw[o * IN + i] = dw[o * IN + i];
            for (int n = 0; n < N; n++) rw[o * IN + i] += (double)dr[n * OUT + o] * xr[n * IN + i];
        }
    cpu_set_compute_bf16(1);
    kern_matmul_fwd(out, KERN_F32, x, w, N, IN, OUT);
    kern_matmul_bwd(dinp, dw, dout, KERN_F32, x, w, N, IN, OUT, 1);
    check_close("bf16 matmul fwd = the product of bf16-rounded operands", out, ro, (size_t)N * OUT, 1e-5);
    check_close("bf16 matmul bwd dinp (accumulated)", dinp, rd, (size_t)N * IN, 1e-5);
    check_close("bf16 matmul bwd dw (accumulated)", dw, rw, (size_t)OUT * IN, 1e-5);
    // weights with a bf16 copy (a gathered unit, kern_params_bf16_copy): the products read the copy.
    // A copy of w's rounding gives the same output bit for bit; a copy of other values (-w) is what
    // they read, until forgotten; the weights are a part of the unit (an offset into it).
    float *unit = calloc((size_t)OUT * IN + 64, 4), *w2 = unit + 64, *o2 = calloc((size_t)N * OUT, 4);
    uint16_t *copy = calloc((size_t)OUT * IN + 64, 2);
    memcpy(w2, wr, sizeof(float) * OUT * IN);
    kern_f32_to_bf16(copy, unit, (size_t)OUT * IN + 64);
    kern_params_bf16_copy(unit, copy, (size_t)OUT * IN + 64);
    kern_matmul_fwd(o2, KERN_F32, x, w2, N, IN, OUT);
    report(!memcmp(o2, out, sizeof(float) * N * OUT), "bf16 matmul fwd from the weights' bf16 copy = from the weights", "differ");
    for (size_t i = 64; i < (size_t)OUT * IN + 64; i++) copy[i] ^= 0x8000;  // the copy now holds -w
    kern_matmul_fwd(o2, KERN_F32, x, w2, N, IN, OUT);
    double md = 0;
    for (size_t i = 0; i < (size_t)N * OUT; i++) md = fmax(md, fabs(o2[i] + out[i]));
    report(md == 0, "bf16 matmul fwd reads the weights' bf16 copy", "max |o + o(-w)| %.3g", md);
    kern_params_bf16_copy(unit, NULL, 0);
    kern_matmul_fwd(o2, KERN_F32, x, w2, N, IN, OUT);
    report(!memcmp(o2, out, sizeof(float) * N * OUT), "bf16 matmul fwd: a forgotten copy is not read", "differ");
    cpu_set_compute_bf16(0);
    free(unit), free(o2), free(copy);
    free(x), free(w), free(dout), free(xr), free(wr), free(dr), free(out), free(dinp), free(dw), free(ro), free(rd), free(rw);
}

// attention's block products on bf16 operands (cpu_gemm_block): every transposition, odd sizes
// (a K pair padded, row and column tiles cut), alpha, and beta 0 (C's old values, NaN here, unread)
// and 1, against the product of the bf16-rounded operands; run from threads, as attention runs them
static void test_gemm_block_bf16(void) {
    if (!cpu_has_bf16()) {
        printf("ok - %sbf16 block products # SKIP %s\n", test_prefix,
               cpu_isa() == CPU_ISA_AVX2 ? "the AVX2 kernels emulate bf16" : "this CPU has no AVX512_BF16");
        return;
    }
    static const int shapes[][3] = {{64, 77, 32}, {37, 32, 129}, {5, 3, 1}, {70, 50, 33}, {16, 16, 64}};
    cpu_set_compute_bf16(1);
    for (int c = 0; c < 16; c++) {
        const int ta = c & 1, tb = (c >> 1) & 1, acc = (c >> 2) & 1, *sh = shapes[(c >> 3) + (c & 3)];
        const int M = sh[0], N = sh[1], K = sh[2], lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const float alpha = acc ? 1.0f : 0.125f;
        float *a = rand_vec((size_t)(ta ? K : M) * lda, -1, 1), *b = rand_vec((size_t)(tb ? N : K) * ldb, -1, 1);
        float *cc = rand_vec((size_t)M * ldc, -1, 1), *ar = dup_vec(a, (size_t)(ta ? K : M) * lda);
        float *br = dup_vec(b, (size_t)(tb ? N : K) * ldb);
        kern_round_bf16(ar, (size_t)(ta ? K : M) * lda), kern_round_bf16(br, (size_t)(tb ? N : K) * ldb);
        double *ref = calloc((size_t)M * N, 8);
        float *got = malloc(sizeof(float) * (size_t)M * N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double sum = 0;
                for (int k = 0; k < K; k++)
                    sum += (double)(ta ? ar[(size_t)k * lda + i] : ar[(size_t)i * lda + k]) *
                           (tb ? br[(size_t)j * ldb + k] : br[(size_t)k * ldb + j]);
                ref[(size_t)i * N + j] = alpha * sum + (acc ? cc[(size_t)i * ldc + j] : 0.0);
                if (!acc) cc[(size_t)i * ldc + j] = NAN;
            }
#pragma omp parallel num_threads(2)
        if (omp_get_thread_num() == omp_get_num_threads() - 1)
            cpu_gemm_block(ta, tb, M, N, K, alpha, a, lda, b, ldb, acc ? 1.0f : 0.0f, cc, ldc);
        for (int i = 0; i < M; i++) memcpy(got + (size_t)i * N, cc + (size_t)i * ldc, sizeof(float) * N);
        char name[160];
        snprintf(name, sizeof name, "bf16 block product ta=%d tb=%d %dx%dx%d beta=%d = the product of bf16-rounded operands",
                 ta, tb, M, N, K, acc);
        int finite = 1;  // rel_err's fmax passes NaN over
        for (size_t i = 0; i < (size_t)M * N; i++) finite &= isfinite(got[i]) != 0;
        const double e = rel_err(got, ref, (size_t)M * N, 1e-6);
        report(finite && e < 1e-5, name, "rel err %.3g (1e-5), %s", e, finite ? "finite" : "not finite");
        free(a), free(b), free(cc), free(ar), free(br), free(ref), free(got);
    }
    cpu_set_compute_bf16(0);
}

// attention under --precision bf16: its products run on bf16 operands. With q, k, v already bf16
// values the scores agree with fp32's to the sums' rounding, and P (and dS in backward) rounded to
// bf16 for the next product moves the results by about bf16's precision: more than fp32's sums
// would (the bf16 products ran) and less than 1e-2 (they compute the same attention). Plain causal,
// documents and a sliding window (blocks whose first key is odd or inside a column tile), dropout.
static void test_attention_bf16(void) {
    if (!cpu_has_bf16()) {
        printf("ok - %sbf16 attention # SKIP %s\n", test_prefix,
               cpu_isa() == CPU_ISA_AVX2 ? "the AVX2 kernels emulate bf16" : "this CPU has no AVX512_BF16");
        return;
    }
    const int B = 2, T = 150, H = 4, KV = 2, hd = 16;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, np = cpu_attention_saved_floats(B, H, T, T);
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    kern_round_bf16(q, nq), kern_round_bf16(k, nk), kern_round_bf16(v, nk), kern_round_bf16(dout, nq);
    float *o[2], *p[2], *d[2], *scratch = calloc(cpu_attention_scratch_floats(B, H, T), 4);
    int32_t *ks = malloc(sizeof(int32_t) * B * T);  // documents starting at 0, 37 and 101 (b 0), 0 and 67 (b 1)
    for (int t = 0; t < T; t++) ks[t] = t < 37 ? 0 : t < 101 ? 37 : 101, ks[T + t] = t < 67 ? 0 : 67;
    const KernDropout drop = {0.2f, 99, 5, 0};
    static const char *const cases[4] = {"causal", "documents", "window 50", "dropout 0.2"};
    for (int c = 0; c < 4; c++) {
        const int32_t *kstart = c == 1 ? ks : NULL;
        const int window = c == 2 ? 50 : 0;
        const KernDropout *dr = c == 3 ? &drop : NULL;
        for (int bf = 0; bf < 2; bf++) {
            o[bf] = calloc(nq, 4), p[bf] = calloc(np, 4), d[bf] = calloc(nq + 2 * nk, 4);
            cpu_set_compute_bf16(bf);
            kern_attention_fwd(o[bf], p[bf], q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, kstart, window, dr);
            kern_attention_bwd(d[bf], d[bf] + nq, d[bf] + nq + nk, scratch, dout, o[bf], p[bf], q, k, v, B, T, H, KV, hd,
                               kstart, window, dr);
        }
        cpu_set_compute_bf16(0);
        for (int w = 0; w < 2; w++) {
            const size_t n = w ? nq + 2 * nk : nq;
            const float *got = w ? d[1] : o[1], *ref = w ? d[0] : o[0];
            double md = 0, mr = 0;
            for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)got[i] - ref[i])), mr = fmax(mr, fabs(ref[i]));
            char name[120];
            snprintf(name, sizeof name, "bf16 attention %s, %s: bf16 products, within 1e-2 of fp32's",
                     w ? "bwd" : "fwd", cases[c]);
            report(md / mr > 1e-5 && md / mr < 1e-2, name, "%s rel diff %.3g (want 1e-5 .. 1e-2)",
                   w ? "dq, dk, dv" : "out", md / mr);
        }
        for (int bf = 0; bf < 2; bf++) free(o[bf]), free(p[bf]), free(d[bf]);
    }
    free(q), free(k), free(v), free(dout), free(scratch), free(ks);
}

static void test_isa(void) {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vl"))) {
        printf("ok - %savx512 = avx2 # SKIP this CPU has no AVX-512 F, BW, DQ and VL\n", test_prefix);
        return;
    }
    test_isa_elementwise();
    test_isa_rows();
    test_isa_attention();
}

// ---- --bench-adamw: AdamW's bandwidth against a copy of the same bytes ----
// One step of kern_adamw over n elements reads p, g, m, v and writes p, m, v (and the bf16 copy of
// p): 28 (30) bytes each. The yardstick is memcpy moving half that many bytes per element from one
// buffer to another (a read and a write of each), split over the same threads, timed in the same
// run just before. Prints GB/s for both and their ratio, best of `reps` runs each.
static double bench_copy(char *dst, const char *src, size_t bytes) {
    const double t0 = clock_now_s();
#pragma omp parallel
    {
        const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        const size_t lo = bytes * t / nt / 64 * 64, hi = t + 1 == nt ? bytes : bytes * (t + 1) / nt / 64 * 64;
        memcpy(dst + lo, src + lo, hi - lo);
    }
    return clock_now_s() - t0;
}

static int bench_adamw(int threads) {
    kern_init(threads);
    const size_t n = (size_t)8 << 20;  // 224 MiB of state: far beyond any cache
    const int reps = 10;
    float *p = rand_vec(n, -1, 1), *g = rand_vec(n, -1, 1), *m = malloc(n * 4), *v = malloc(n * 4);
    uint16_t *pb = malloc(n * 2);
    memset(m, 0, n * 4), memset(v, 0, n * 4), memset(pb, 0, n * 2);  // every page mapped before the timing
    printf("adamw over %zu M elements, %d thread(s), CPU kernels %s\n", n >> 20, kern_num_threads(), kern_cpu_isa());
    for (int bf = 0; bf < 2; bf++) {
        const size_t bytes = n * (bf ? 15 : 14);  // copied once each way: the 28 (30) bytes AdamW moves
        char *src = malloc(bytes), *dst = malloc(bytes);
        memset(src, 1, bytes), memset(dst, 0, bytes);
        KernAdamW h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f,
                       .ndecay = 1, .decay = {{0, n}}};
        double tc = 1e30, ta = 1e30;
        for (int r = 0; r < reps; r++) {
            tc = fmin(tc, bench_copy(dst, src, bytes));
            h.step = r + 1;
            const double t0 = clock_now_s();
            kern_adamw(p, bf ? pb : NULL, g, m, v, n, &h);
            ta = fmin(ta, clock_now_s() - t0);
        }
        printf("adamw%s: %.1f GB/s, memcpy of the same bytes: %.1f GB/s, ratio %.2f\n", bf ? " + bf16 copy" : "",
               2.0 * bytes / ta / 1e9, 2.0 * bytes / tc / 1e9, tc / ta);
        free(src), free(dst);
    }
    free(p), free(g), free(m), free(v), free(pb);
    return 0;
}

// ---- --bench-gemm: the machine's GEMM peaks, for make bench's fractions ----
// A 2048^3 product (what the fractions have been measured against: numpy's sgemm on the same
// threads) through OpenBLAS sgemm on its own threads (as numpy calls it; not cpu_gemm's split)
// and, where the CPU has AVX512_BF16, through the bf16 matmuls
// --precision bf16 runs (oneDNN, operands rounded as they are there): GFLOP/s, best of 5 runs each,
// by the wall clock and, for make bench's one-thread table on a shared machine, by the process's
// CPU time (which the other jobs' time slices do not add to; with one thread, the thread's time).
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_gemm(int threads) {
    kern_init(threads);
    const int n = 2048;
    const double flops = 2.0 * n * n * n;
    float *a = rand_vec((size_t)n * n, -1, 1), *b = rand_vec((size_t)n * n, -1, 1), *c = calloc((size_t)n * n, 4);
    for (int bf = 0; bf < 1 + cpu_has_bf16(); bf++) {
        cpu_set_compute_bf16(bf);
        double best = 1e30, best_cpu = 1e30;
        for (int r = 0; r < 6; r++) {  // the first warms the threads and oneDNN's primitive
            const double t0 = clock_now_s(), c0 = cpu_seconds();
            if (bf) cpu_gemm(0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, r > 0);
            else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            if (r) best = fmin(best, clock_now_s() - t0), best_cpu = fmin(best_cpu, cpu_seconds() - c0);
        }
        printf("%s GFLOP/s: %.1f\n", bf ? "bf16" : "sgemm", flops / best / 1e9);
        printf("%s GFLOP per CPU second: %.1f\n", bf ? "bf16" : "sgemm", flops / best_cpu / 1e9);
    }
    cpu_set_compute_bf16(0);
    free(a), free(b), free(c);
    return 0;
}

// --bench-gemm-shapes: the fp32 products of make bench's models (each layer's forward, input and
// weight gradients; the head's) through cpu_gemm's split and through OpenBLAS's own threading,
// interleaved, best wall time of REPS each (a shared machine's quiet moments), as GFLOP/s and as a
// fraction of the 2048^3 peak timed the same way; the totals weigh each product by its count per step
typedef struct {
    const char *what;
    int M, N, K, ta, tb, count;
} BenchShape;

static double bench_shape_s(const BenchShape *s, const float *a, const float *b, float *c, int split) {
    const int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    const double t0 = clock_now_s();
    if (split) cpu_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N, 0);
    else cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->M, s->N,
                     s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
    return clock_now_s() - t0;
}

static int bench_gemm_shapes(int threads, int reps) {
    kern_init(threads);
    // Llama D256 L4 H8/4 F688 T256 B8 (q|k|v 512 wide, gate|up 1376) and GPT-2 124M B4 T64
    static const BenchShape shapes[] = {
        {"peak", 2048, 2048, 2048, 0, 1, 0},
        {"llama qkv", 2048, 512, 256, 0, 1, 4}, {"llama o", 2048, 256, 256, 0, 1, 4},
        {"llama gate|up", 2048, 1376, 256, 0, 1, 4}, {"llama down", 2048, 256, 688, 0, 1, 4},
        {"llama head", 2048, 256, 256, 0, 1, 1},
        {"llama qkv dx", 2048, 256, 512, 0, 0, 4}, {"llama o dx", 2048, 256, 256, 0, 0, 4},
        {"llama gate|up dx", 2048, 256, 1376, 0, 0, 4}, {"llama down dx", 2048, 688, 256, 0, 0, 4},
        {"llama head dx", 2048, 256, 256, 0, 0, 1},
        {"llama qkv dw", 512, 256, 2048, 1, 0, 4}, {"llama o dw", 256, 256, 2048, 1, 0, 4},
        {"llama gate|up dw", 1376, 256, 2048, 1, 0, 4}, {"llama down dw", 256, 688, 2048, 1, 0, 4},
        {"llama head dw", 256, 256, 2048, 1, 0, 1},
        {"gpt2 qkv", 256, 2304, 768, 0, 1, 12}, {"gpt2 proj", 256, 768, 768, 0, 1, 12},
        {"gpt2 fc", 256, 3072, 768, 0, 1, 12}, {"gpt2 fc proj", 256, 768, 3072, 0, 1, 12},
        {"gpt2 head", 256, 50304, 768, 0, 1, 1},
        {"gpt2 qkv dx", 256, 768, 2304, 0, 0, 12}, {"gpt2 proj dx", 256, 768, 768, 0, 0, 12},
        {"gpt2 fc dx", 256, 768, 3072, 0, 0, 12}, {"gpt2 fc proj dx", 256, 3072, 768, 0, 0, 12},
        {"gpt2 head dx", 256, 768, 50304, 0, 0, 1},
        {"gpt2 qkv dw", 2304, 768, 256, 1, 0, 12}, {"gpt2 proj dw", 768, 768, 256, 1, 0, 12},
        {"gpt2 fc dw", 3072, 768, 256, 1, 0, 12}, {"gpt2 fc proj dw", 768, 3072, 256, 1, 0, 12},
        {"gpt2 head dw", 50304, 768, 256, 1, 0, 1}};
    const size_t most = (size_t)50304 * 768;
    float *a = rand_vec(most, -1, 1), *b = rand_vec(most, -1, 1), *c = calloc(most, 4);
    double peak[2] = {0, 0}, total[2][2] = {{0, 0}, {0, 0}}, flops_all[2] = {0, 0};
    printf("%-18s %5s %5s %5s %2s  %22s  %22s\n", "product", "M", "N", "K", "t", "OpenBLAS threads GF/s pk",
           "split GF/s pk");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const BenchShape *s = &shapes[i];
        double best[2] = {1e30, 1e30};
        for (int r = 0; r <= reps; r++)  // the first warms
            for (int split = 0; split < 2; split++) {
                const double t = bench_shape_s(s, a, b, c, split);
                if (r) best[split] = fmin(best[split], t);
            }
        const double flops = 2.0 * s->M * s->N * s->K;
        if (!i) peak[0] = flops / best[0], peak[1] = flops / best[1];
        const int model = strncmp(s->what, "gpt2", 4) == 0;
        for (int k = 0; k < 2 && i; k++) total[model][k] += s->count * best[k];
        if (i) flops_all[model] += s->count * flops;
        printf("%-18s %5d %5d %5d %d%d  %14.1f %6.2f  %14.1f %6.2f\n", s->what, s->M, s->N, s->K, s->ta, s->tb,
               flops / best[0] / 1e9, flops / best[0] / peak[0], flops / best[1] / 1e9, flops / best[1] / peak[0]);
    }
    for (int m = 0; m < 2; m++)
        printf("%s step's products: %.1f ms at %.2f of the peak through OpenBLAS's threads, %.1f ms at %.2f split\n",
               m ? "gpt2" : "llama", 1e3 * total[m][0], flops_all[m] / total[m][0] / peak[0], 1e3 * total[m][1],
               flops_all[m] / total[m][1] / peak[0]);
    free(a), free(b), free(c);
    return 0;
}

// --bench-attention: attention's forward and backward on the Llama bench shape (B8 T256 H8 KV4
// hd32), fp32 and bf16 products, best CPU seconds of 5 (one thread: the thread's time)
static int bench_attention(void) {
    kern_init(1);
    const int B = 8, T = 256, H = 8, KV = 4, hd = 32;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    float *q = rand_vec(nq, -1, 1), *k = rand_vec(nk, -1, 1), *v = rand_vec(nk, -1, 1), *dout = rand_vec(nq, -1, 1);
    float *o = calloc(nq, 4), *p = calloc(cpu_attention_saved_floats(B, H, T, T), 4), *d = calloc(nq + 2 * nk, 4);
    float *scratch = calloc(cpu_attention_scratch_floats(B, H, T), 4);
    for (int bf = 0; bf < 1 + cpu_has_bf16(); bf++) {
        cpu_set_compute_bf16(bf);
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < 6; r++) {
            const double c0 = cpu_seconds();
            kern_attention_fwd(o, p, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, NULL, 0, NULL);
            const double c1 = cpu_seconds();
            kern_attention_bwd(d, d + nq, d + nq + nk, scratch, dout, o, p, q, k, v, B, T, H, KV, hd, NULL, 0, NULL);
            if (r) best[0] = fmin(best[0], c1 - c0), best[1] = fmin(best[1], cpu_seconds() - c1);
        }
        printf("%s attention fwd %.2f ms, bwd %.2f ms (CPU time)\n", bf ? "bf16" : "fp32", 1e3 * best[0], 1e3 * best[1]);
    }
    cpu_set_compute_bf16(0);
    free(q), free(k), free(v), free(dout), free(o), free(p), free(d), free(scratch);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--nf4")) return nf4_files(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--bench-adamw")) return bench_adamw(argc > 2 ? atoi(argv[2]) : 0);
    if (argc > 1 && !strcmp(argv[1], "--bench-gemm")) return bench_gemm(argc > 2 ? atoi(argv[2]) : 0);
    if (argc > 1 && !strcmp(argv[1], "--bench-attention")) return bench_attention();
    if (argc > 1 && !strcmp(argv[1], "--bench-gemm-shapes"))
        return bench_gemm_shapes(argc > 2 ? atoi(argv[2]) : 0, argc > 3 ? atoi(argv[3]) : 20);
    static const int thread_counts[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        suite_threads = thread_counts[i];
        snprintf(test_prefix, sizeof test_prefix, "[%d thr] ", suite_threads);
        rng_state = 0x853c49e6748fea9bULL;  // both thread counts see the same inputs
        kern_init(suite_threads);
        report(kern_num_threads() == suite_threads, "kern_init sets threads", "got %d", kern_num_threads());
        test_matmul();
        test_matmul_split();
        test_matmul_grouped();
        test_rmsnorm();
        test_layernorm();
        test_qkv_split();
        test_attention();
        test_swiglu();
        test_gelu();
        test_bias();
        test_positions();
        test_dropout();
        test_jitter();
        test_embedding();
        test_crossentropy(301);
        test_crossentropy(2500);  // several vocabulary chunks
        test_vocab_parallel();
        test_adamw();
        test_bf16();
        test_nf4();
        test_vector_ops();
        test_isa();
        test_gemm_bf16();
        test_gemm_block_bf16();
        test_attention_bf16();
    }
    test_prefix[0] = 0;
    test_mem_tracker();
    printf("%s: %d failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
