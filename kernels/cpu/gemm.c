// gemm: the CPU's matrix products. fp32 through OpenBLAS sgemm; under --precision bf16 on a CPU
// that multiplies bf16 (AVX512_BF16, AMX) through oneDNN's matmul on bf16 operands, accumulating
// and storing in fp32: Debian's OpenBLAS is built without cblas_sbgemm, and oneDNN's bf16 matmul
// runs at about twice its sgemm here (docs/DESIGN.md, "CPU kernels"). Compiled once: the
// primitives and the operands' bf16 copies are process state.
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/err.h"
#include "../../base/half.h"
#include "../../base/log.h"
#include "../backend.h"
#include "cpu_common.h"

// oneDNN is loaded at run time (as cuDNN is): the GPU machine's bundle does not carry its 40 MB,
// and a CPU without it keeps the emulation
#define DNNL_FNS(X)                                                                                                  \
    X(dnnl_engine_create) X(dnnl_matmul_desc_init) X(dnnl_memory_create) X(dnnl_memory_desc_init_by_strides)        \
    X(dnnl_memory_destroy) X(dnnl_post_ops_append_sum) X(dnnl_post_ops_create) X(dnnl_post_ops_destroy)             \
    X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_output_scales)           \
    X(dnnl_primitive_attr_set_post_ops) X(dnnl_primitive_create) X(dnnl_primitive_desc_create)                      \
    X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) X(dnnl_primitive_destroy) X(dnnl_primitive_execute) \
    X(dnnl_stream_create) X(dnnl_stream_wait) X(dnnl_version)
#define DNNL_PTR(f) static __typeof__(&f) p_##f;
DNNL_FNS(DNNL_PTR)
#define DNNL_SYM(f) ok = ok && (p_##f = (__typeof__(&f))dlsym(lib, #f)) != NULL;

// 1 once libdnnl.so.2 and every function this file calls are found
static int dnnl_load(void) {
    static int loaded;  // 1 found, -1 not
    if (loaded) return loaded > 0;
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    int ok = lib != NULL;
    DNNL_FNS(DNNL_SYM)
    loaded = ok ? 1 : -1;
    return ok;
}
#define dnnl_engine_create p_dnnl_engine_create
#define dnnl_matmul_desc_init p_dnnl_matmul_desc_init
#define dnnl_memory_create p_dnnl_memory_create
#define dnnl_memory_desc_init_by_strides p_dnnl_memory_desc_init_by_strides
#define dnnl_memory_destroy p_dnnl_memory_destroy
#define dnnl_post_ops_append_sum p_dnnl_post_ops_append_sum
#define dnnl_post_ops_create p_dnnl_post_ops_create
#define dnnl_post_ops_destroy p_dnnl_post_ops_destroy
#define dnnl_primitive_attr_create p_dnnl_primitive_attr_create
#define dnnl_primitive_attr_destroy p_dnnl_primitive_attr_destroy
#define dnnl_primitive_attr_set_output_scales p_dnnl_primitive_attr_set_output_scales
#define dnnl_primitive_attr_set_post_ops p_dnnl_primitive_attr_set_post_ops
#define dnnl_primitive_create p_dnnl_primitive_create
#define dnnl_primitive_desc_create p_dnnl_primitive_desc_create
#define dnnl_primitive_desc_destroy p_dnnl_primitive_desc_destroy
#define dnnl_primitive_desc_query p_dnnl_primitive_desc_query
#define dnnl_primitive_destroy p_dnnl_primitive_destroy
#define dnnl_primitive_execute p_dnnl_primitive_execute
#define dnnl_stream_create p_dnnl_stream_create
#define dnnl_stream_wait p_dnnl_stream_wait
#define dnnl_version p_dnnl_version

static int gemm_bf16;    // cpu_set_compute_bf16: matmuls on bf16 operands
static int bf16_wanted;  // --precision bf16, whether or not the CPU multiplies bf16
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static char impl[64];  // oneDNN's implementation of the first bf16 product, for the summary
static int onednn_ok;  // 1: a bf16 product ran, -1: oneDNN could not run one, 0: not tried yet

// one product's shape and its primitive; oneDNN takes alpha as an output scale, beta as a sum post-op
typedef struct {
    int M, N, K, ta, tb, lda, ldb, ldc;
    float alpha, beta;
    dnnl_memory_desc_t a, b, c;
    dnnl_primitive_t prim;
} GemmPrim;
enum { GEMM_CACHE = 64 };  // a model's distinct products: a handful per layer kind and batch shape
static GemmPrim cache[GEMM_CACHE];
static int cached, evict;

// bf16 copies of the operands, grown as needed
static uint16_t *abuf, *bbuf;
static size_t acap, bcap;
static int same_a;  // cpu_gemm's: A holds the values of the previous product's A
static const float *a_src;  // whose values abuf holds, and how many
static size_t a_n;

const char *cpu_gemm_line(void) {
    static char line[200];
    if (!bf16_wanted) return "";
    if (gemm_bf16) {
        const dnnl_version_t *v = dnnl_version();
        snprintf(line, sizeof line, "; --precision bf16: matmuls on bf16 operands through oneDNN %d.%d.%d (%s)", v->major,
                 v->minor, v->patch, impl);
    } else {
        snprintf(line, sizeof line, "; --precision bf16 emulated in fp32 (bf16-rounded weights, fp32 matmuls): %s",
                 !cpu_has_bf16()  ? (cpu_isa() == CPU_ISA_AVX2 ? "the AVX2 kernels" : "this CPU has no AVX512_BF16")
                 : !dnnl_load() ? "oneDNN (libdnnl.so.2, Debian's libdnnl2) is not installed"
                                : "oneDNN cannot run a bf16 matmul here");
    }
    return line;
}

// a row-major (rows, cols) operand, transposed or not, as oneDNN's logical (r, c) with strides
static void gemm_md(dnnl_memory_desc_t *md, int r, int c, int trans, int ld, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {r, c}, strides = {trans ? 1 : ld, trans ? ld : 1};
    dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static GemmPrim *gemm_prim(int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb, float beta, int ldc) {
    for (int i = 0; i < cached; i++) {
        GemmPrim *g = &cache[i];
        if (g->M == M && g->N == N && g->K == K && g->ta == ta && g->tb == tb && g->lda == lda && g->ldb == ldb &&
            g->ldc == ldc && g->alpha == alpha && g->beta == beta)
            return g->prim ? g : NULL;  // a shape oneDNN refused stays refused, without a new try
    }
    if (!engine && (dnnl_engine_create(&engine, dnnl_cpu, 0) || dnnl_stream_create(&stream, engine, dnnl_stream_default_flags)))
        return NULL;
    GemmPrim *g = cached < GEMM_CACHE ? &cache[cached++] : &cache[evict++ % GEMM_CACHE];
    if (g->prim) dnnl_primitive_destroy(g->prim);
    *g = (GemmPrim){.M = M, .N = N, .K = K, .ta = ta, .tb = tb, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta};
    gemm_md(&g->a, M, K, ta, lda, dnnl_bf16);
    gemm_md(&g->b, K, N, tb, ldb, dnnl_bf16);
    gemm_md(&g->c, M, N, 0, ldc, dnnl_f32);
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int bad = dnnl_matmul_desc_init(&desc, &g->a, &g->b, NULL, &g->c) || dnnl_primitive_attr_create(&attr) ||
              (alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha)) ||
              (beta != 0.0f && (dnnl_post_ops_create(&ops) || dnnl_post_ops_append_sum(ops, beta) ||
                                dnnl_primitive_attr_set_post_ops(attr, ops))) ||
              dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL) || dnnl_primitive_create(&g->prim, pd);
    const char *name = NULL;
    if (!bad && !impl[0] && !dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) && name)
        snprintf(impl, sizeof impl, "%s", name);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!bad) return g;
    g->prim = NULL;
    return NULL;
}

// the stored elements of a row-major operand of `rows` rows, row stride ld, `cols` used per row
static size_t gemm_span(int rows, int cols, int ld) { return rows ? (size_t)(rows - 1) * ld + cols : 0; }

// n values to bf16 with the CPU's own rounding instruction (to nearest even, as half_f32_to_bf16;
// denormals become 0, which a product's fp32 sum does not see): 4x the integer form's speed
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void gemm_cvt(uint16_t *dst, const float *src,
                                                                                   size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)v);
    }
    for (; i < n; i++) dst[i] = half_f32_to_bf16(src[i]);
}

static uint16_t *gemm_round(uint16_t **buf, size_t *cap, const float *x, size_t n) {
    if (n > *cap) {
        free(*buf);
        *buf = mallocCheck(n * sizeof **buf);
        *cap = n;
    }
    uint16_t *dst = *buf;
    // blocks of whole cache lines per thread
#pragma omp parallel if (n >= CPU_PAR_MIN)
    {
        const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num(), blocks = (n + 31) / 32;
        const size_t lo = blocks * t / nt * 32, hi = blocks * (t + 1) / nt * 32;
        if (lo < n) gemm_cvt(dst + lo, x + lo, (hi < n ? hi : n) - lo);
    }
    return dst;
}

// oneDNN's product; 0 when it cannot run it (the caller then runs sgemm)
static int gemm_onednn(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    GemmPrim *g = gemm_prim(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
    if (!g) return a_src = NULL, 0;  // abuf no longer holds A's rounding for the next product
    const size_t na = ta ? gemm_span(K, M, lda) : gemm_span(M, K, lda);
    uint16_t *a = same_a && A == a_src && na == a_n ? abuf : gemm_round(&abuf, &acap, A, na);
    a_src = A, a_n = na;
    uint16_t *b = gemm_round(&bbuf, &bcap, B, tb ? gemm_span(N, K, ldb) : gemm_span(K, N, ldb));
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    int bad = dnnl_memory_create(&ma, &g->a, engine, a) || dnnl_memory_create(&mb, &g->b, engine, b) ||
              dnnl_memory_create(&mc, &g->c, engine, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    bad = bad || dnnl_primitive_execute(g->prim, stream, 3, args) || dnnl_stream_wait(stream);
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    return !bad;
}

// Under bf16 on a CPU with AVX512_BF16, a small product first: oneDNN's implementation for the
// summary, and the emulation, said why, where oneDNN cannot run one.
void cpu_set_compute_bf16(int on) {
    bf16_wanted = on;
    gemm_bf16 = 0;
    if (on && cpu_has_bf16() && !onednn_ok && !dnnl_load()) onednn_ok = -1;
    if (on && cpu_has_bf16() && !onednn_ok) {
        float x[16 * 16] = {0}, y[16 * 16];
        same_a = 0;
        onednn_ok = gemm_onednn(0, 1, 16, 16, 16, 1.0f, x, 16, x, 16, 0.0f, y, 16) ? 1 : -1;
    }
    gemm_bf16 = on && cpu_has_bf16() && onednn_ok > 0;
}

void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int a_again) {
    same_a = a_again;
    if (gemm_bf16 && M > 0 && N > 0 && K > 0) {
        if (gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
        static int said;
        if (!said++) log_msg("fsdpc: oneDNN cannot run a bf16 matmul of %d x %d x %d: sgemm runs such products\n", M, N, K);
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
                ldb, beta, C, ldc);
}
