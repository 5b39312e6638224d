// gemm: the CPU's matrix products. fp32 through OpenBLAS sgemm; under --precision bf16 on a CPU
// that multiplies bf16 (AVX512_BF16, AMX) through oneDNN's matmul on bf16 operands, accumulating
// and storing in fp32: Debian's OpenBLAS is built without cblas_sbgemm, and oneDNN's bf16 matmul
// runs at about twice its sgemm here (docs/DESIGN.md, "CPU kernels"); attention's small blocks
// through an AVX512_BF16 kernel of its own (cpu_gemm_block). Compiled once: the primitives, the
// operands' bf16 copies and the gathered weights' copies are process state.
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
#include "../kernels.h"
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

// bf16 copies of the operands, grown as needed; the memory tracker counts them with the
// activations (cpu_gemm_scratch_bytes is the estimate's share)
static uint16_t *abuf, *bbuf;
static size_t acap, bcap;
static int same_a;  // cpu_gemm's: A holds the values of the previous product's A
static const float *a_src;  // whose values abuf holds, and how many
static size_t a_n;

// the gathered units whose fp32 parameters hold the values of a bf16 copy (kern_params_bf16_copy)
typedef struct {
    const float *params;
    const uint16_t *copy;
    size_t n;
} GemmCopy;
static GemmCopy *copies;
static int ncopies, copies_cap;

void cpu_params_bf16_copy(const float *params, const uint16_t *copy, size_t n) {
    int i = 0;
    while (i < ncopies && copies[i].params != params) i++;
    if (!copy) {  // forgotten: the last entry takes its place
        if (i < ncopies) copies[i] = copies[--ncopies];
        return;
    }
    if (i == ncopies && ncopies == copies_cap) {
        GemmCopy *grown = realloc(copies, sizeof *copies * (size_t)(copies_cap ? 2 * copies_cap : 8));
        if (!grown) return;  // the products then round the weights themselves
        copies = grown;
        copies_cap = copies_cap ? 2 * copies_cap : 8;
    }
    if (i == ncopies) ncopies++;
    copies[i] = (GemmCopy){params, copy, n};
}

// the bf16 copy of the n floats at x, where a gathered unit holds them whole; else NULL
static const uint16_t *gemm_copy_of(const float *x, size_t n) {
    for (int i = 0; i < ncopies; i++)
        if (x >= copies[i].params && x + n <= copies[i].params + copies[i].n) return copies[i].copy + (x - copies[i].params);
    return NULL;
}

const char *cpu_gemm_line(void) {
    static char line[200];
    if (!bf16_wanted) return "";
    if (gemm_bf16) {
        const dnnl_version_t *v = dnnl_version();
        snprintf(line, sizeof line,
                 "; --precision bf16: matmuls on bf16 operands through oneDNN %d.%d.%d (%s), attention's through "
                 "AVX512_BF16", v->major, v->minor, v->patch, impl);
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
        kern_free_host(*buf);
        *buf = kern_alloc_host(n * sizeof **buf, KERN_MEM_ACTIVATIONS, 0);
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
    const size_t nb = tb ? gemm_span(N, K, ldb) : gemm_span(K, N, ldb);
    const uint16_t *b = gemm_copy_of(B, nb);  // weights: their gather's bf16 values as they arrived
    if (!b) b = gemm_round(&bbuf, &bcap, B, nb);
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    int bad = dnnl_memory_create(&ma, &g->a, engine, a) || dnnl_memory_create(&mb, &g->b, engine, (void *)b) ||
              dnnl_memory_create(&mc, &g->c, engine, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    bad = bad || dnnl_primitive_execute(g->prim, stream, 3, args) || dnnl_stream_wait(stream);
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    return !bad;
}

// ---- attention's per-head blocks on bf16 operands (cpu_gemm_block) ----
// Products of a few thousand to a few million multiply-adds, called from every thread of a parallel
// region: a library call each would cost about what the product does, so one AVX512_BF16 kernel
// does them. B is rounded into pairs along K for each tile of GEMM_COLS columns (the layout
// vdpbf16ps multiplies: one 32-bit lane holds the two bf16 of rows 2p and 2p+1 of one column), A's
// rows into pairs along K; the kernel keeps GEMM_ROWS x 2 vectors of sums in registers.
enum { GEMM_ROWS = 6, GEMM_COLS = 32 };  // a tile: 12 accumulators of 16 fp32 sums

typedef struct {  // one thread's packed operands, grown as needed (the threads last the process), tracked
    uint32_t *a;
    size_t acap;
} GemmPack;
static __thread GemmPack pack;

static uint32_t *pack_grow(uint32_t **buf, size_t *cap, size_t n) {
    if (n > *cap) {
        kern_free_host(*buf);
        *buf = kern_alloc_host(n * sizeof **buf, KERN_MEM_ACTIVATIONS, 0);
        *cap = n;
    }
    return *buf;
}

#define GEMM_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// n (<= 16) elements of each of rows x0 and x1 (either NULL: zeros) as n bf16 pairs (x0's low), into dst
GEMM_BF16_TARGET static inline void pack_two_rows(uint32_t *dst, const float *x0, const float *x1, int n) {
    const __mmask16 m = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    const __m512 lo = x0 ? _mm512_maskz_loadu_ps(m, x0) : _mm512_setzero_ps();
    const __m512 hi = x1 ? _mm512_maskz_loadu_ps(m, x1) : _mm512_setzero_ps();
    // words 0-15: lo's, 16-31: hi's; interleaved so that lane j holds (lo j, hi j)
    const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                         20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    _mm512_mask_storeu_epi32(dst, m, _mm512_permutexvar_epi16(idx, w));
}

// a row of K elements after lead (0 or 1) zeros as (lead + K + 1) / 2 bf16 pairs (the last one's
// high half 0 when lead + K is odd)
GEMM_BF16_TARGET static inline void pack_row(uint32_t *dst, const float *x, int K, int lead) {
    uint16_t *d = (uint16_t *)dst + lead;
    if (lead) d[-1] = 0;
    int k = 0;
    for (; k + 16 <= K; k += 16) _mm256_storeu_si256((__m256i *)(d + k), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + k)));
    if (k < K) {
        const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        _mm256_mask_storeu_epi16(d + k, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + k)));
    }
    if ((lead + K) & 1) d[K] = 0;
}

// acc (rows of the tile, 2 x 16 columns) into C = alpha acc + beta C: lanes lo..n of the tile
// (c: its lane 0), the others masked
GEMM_BF16_TARGET static inline void gemm_tile_store(
    float *c, int ldc, int rows, int lo, int n, float alpha, float beta, __m512 acc[GEMM_ROWS][2]) {
    const uint32_t keep = (n >= 32 ? 0xffffffffu : (1u << n) - 1) & ~((1u << lo) - 1);
    const __mmask16 m0 = (__mmask16)keep, m1 = (__mmask16)(keep >> 16);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < rows; r++) {
        float *cr = c + (size_t)r * ldc;
        for (int h = 0; h < 2; h++) {
            const __mmask16 m = h ? m1 : m0;
            __m512 v = _mm512_mul_ps(acc[r][h], va);
            if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, cr + 16 * h), vb, v);
            _mm512_mask_storeu_ps(cr + 16 * h, m, v);
        }
    }
}

// C (M, N) = alpha op(A) op(B) + beta C from the packed operands: pair p of op(A)'s row i at
// pa[i * si + p * sp] (rows padded to GEMM_ROWS with zeros), B's pairs by column tile, tiles
// tstride words apart: pb[tile * tstride + p * GEMM_COLS + lane]. C's column 0 is lane skip of
// the first tile (a packed B's columns from n0 on: skip = n0 % GEMM_COLS). tri and d (packed K
// index, lead included) say what a causal block may leave out (CpuGemmTri).
GEMM_BF16_TARGET static void gemm_block_run(int M, int N, int skip, int K2, const uint32_t *pa, size_t si, size_t sp,
                                            const uint32_t *pb, size_t tstride, CpuGemmTri tri, int d, float alpha,
                                            float beta, float *C, int ldc) {
    for (int t = 0; t * GEMM_COLS < N + skip; t++) {
        const uint32_t *bt = pb + (size_t)t * tstride;
        const int j0 = t * GEMM_COLS - skip;  // C's column of the tile's lane 0
        for (int i0 = 0; i0 < M; i0 += GEMM_ROWS) {
            const int last = d + i0 + GEMM_ROWS - 1;  // the bound of the tile's last row
            if (tri == CPU_GEMM_TRI_COLS && j0 > last) continue;
            const int p0 = tri == CPU_GEMM_TRI_K_FROM && d + i0 > 0 ? (d + i0) / 2 : 0;
            const int p1 = tri != CPU_GEMM_TRI_K_TO ? K2 : last < 0 ? 0 : last / 2 + 1 < K2 ? last / 2 + 1 : K2;
            const uint32_t *at = pa + (size_t)i0 * si;
            __m512 acc[GEMM_ROWS][2];
            for (int r = 0; r < GEMM_ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
            for (int p = p0; p < p1; p++) {
                const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bt + (size_t)p * GEMM_COLS);
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bt + (size_t)p * GEMM_COLS + 16);
                for (int r = 0; r < GEMM_ROWS; r++) {
                    const __m512bh a = (__m512bh)_mm512_set1_epi32((int)at[r * si + p * sp]);
                    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
                    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
                }
            }
            const int rows = M - i0 < GEMM_ROWS ? M - i0 : GEMM_ROWS;
            // the first tile's lanes before skip (j0 < 0) are masked: nothing before C is touched
            gemm_tile_store(C + ((ptrdiff_t)i0 * ldc + j0), ldc, rows, t ? 0 : skip, N - j0, alpha, beta, acc);
        }
    }
}

// op(A) (M, K) after lead (0 or 1) zero columns into pairs along K: a row of op(A) contiguous (not
// ta) packs by rows, pa[i * K2 + p]; else two rows of A make pairs for 16 of op(A)'s rows at once,
// pa[p * Mp + i]
GEMM_BF16_TARGET static void pack_a(uint32_t *pa, int ta, int M, int Mp, int K, int lead, const float *A, int lda,
                                    size_t *si, size_t *sp) {
    const int K2 = (lead + K + 1) / 2;
    if (!ta) {
        for (int i = 0; i < M; i++) pack_row(pa + (size_t)i * K2, A + (size_t)i * lda, K, lead);
        memset(pa + (size_t)M * K2, 0, sizeof *pa * (size_t)(Mp - M) * K2);
        *si = (size_t)K2, *sp = 1;
        return;
    }
    for (int p = 0; p < K2; p++) {
        const int r = 2 * p - lead;  // the pair's first row of A
        const float *r0 = r >= 0 ? A + (size_t)r * lda : NULL, *r1 = r + 1 < K ? A + (size_t)(r + 1) * lda : NULL;
        for (int i = 0; i < Mp; i += 16) {
            const int n = M - i < 16 ? (M - i > 0 ? M - i : 0) : 16;
            uint32_t *d = pa + (size_t)p * Mp + i;
            if (n) pack_two_rows(d, r0 ? r0 + i : NULL, r1 ? r1 + i : NULL, n);
            for (int z = n; z < 16 && i + z < Mp; z++) d[z] = 0;
        }
    }
    *si = 1, *sp = (size_t)Mp;
}

// x[0..15] (16 lanes of 32 bits each) transposed: lane j of the result i is lane i of x[j]
GEMM_BF16_TARGET static inline void gemm_transpose16(__m512i x[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        x[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        x[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        x[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        x[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(x[h + i], x[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(x[h + i], x[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        x[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        x[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

// 16 columns j..j+15 of op(B) (B's rows, n of them real) at pairs p0..p0+15 (K elements in all)
// into their tile: rows converted to pairs, then transposed so that each pair's 16 columns are one vector
GEMM_BF16_TARGET static inline void pack_b_rows16(uint32_t *dst, const float *B, int ldb, int n, int p0, int K) {
    __m512i x[16];
    const int k0 = 2 * p0, left = K - k0 < 32 ? K - k0 : 32;
    const __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
    for (int r = 0; r < 16; r++) {
        const float *row = B + (size_t)r * ldb + k0;
        x[r] = r < n ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, row + 16), _mm512_maskz_loadu_ps(m0, row))
                     : _mm512_setzero_si512();
    }
    gemm_transpose16(x);
    const int pairs = (left + 1) / 2;
    for (int q = 0; q < pairs; q++) _mm512_storeu_si512(dst + (size_t)q * GEMM_COLS, x[q]);
}

// op(B) (K, N) into column tiles of pairs along K: B's rows hold op(B)'s columns (tb), converted
// 16 rows at a time and transposed into the tile; else two rows of B make 16 columns' pairs at once
GEMM_BF16_TARGET static void pack_b(uint32_t *pb, int tb, int N, int Np, int K, const float *B, int ldb) {
    const int K2 = (K + 1) / 2;
    for (int j0 = 0; j0 < Np; j0 += GEMM_COLS) {
        uint32_t *bt = pb + (size_t)j0 * K2;
        if (tb) {
            for (int h = 0; h < GEMM_COLS; h += 16) {
                const int j = j0 + h, n = N - j < 16 ? (N - j > 0 ? N - j : 0) : 16;
                for (int p0 = 0; p0 < K2; p0 += 16)
                    pack_b_rows16(bt + (size_t)p0 * GEMM_COLS + h, B + (size_t)j * ldb, ldb, n, p0, K);
            }
            continue;
        }
        for (int p = 0; p < K2; p++) {
            const float *r0 = B + (size_t)2 * p * ldb, *r1 = 2 * p + 1 < K ? r0 + ldb : NULL;
            for (int h = 0; h < GEMM_COLS; h += 16) {
                const int j = j0 + h, n = N - j < 16 ? (N - j > 0 ? N - j : 0) : 16;
                uint32_t *d = bt + (size_t)p * GEMM_COLS + h;
                if (n) pack_two_rows(d, r0 + j, r1 ? r1 + j : NULL, n);
                for (int z = n; z < 16; z++) d[z] = 0;
            }
        }
    }
}

// the 32-bit words one product's packed operands take: A's pairs (M rounded up to whole tiles,
// then to 16 for the transposed packing), *na of them, then B's tiles
static size_t gemm_pack_words(int M, int N, int K, size_t *na) {
    const size_t K2 = (size_t)(K + 1) / 2, Mp = (size_t)(M + GEMM_ROWS - 1) / GEMM_ROWS * GEMM_ROWS;
    const size_t Np = (size_t)(N + GEMM_COLS - 1) / GEMM_COLS * GEMM_COLS;
    *na = (Mp + 15) / 16 * 16 * K2;
    return *na + Np * K2;
}

// the bf16 kernel's product
static void gemm_block_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                           int ldb, float beta, float *C, int ldc) {
    const int K2 = (K + 1) / 2, Mp = (M + GEMM_ROWS - 1) / GEMM_ROWS * GEMM_ROWS;
    const int Np = (N + GEMM_COLS - 1) / GEMM_COLS * GEMM_COLS;
    size_t na;
    uint32_t *buf = pack_grow(&pack.a, &pack.acap, gemm_pack_words(M, N, K, &na));
    size_t si, sp;
    pack_a(buf, ta, M, ta ? (Mp + 15) / 16 * 16 : Mp, K, 0, A, lda, &si, &sp);
    pack_b(buf + na, tb, N, Np, K, B, ldb);
    gemm_block_run(M, N, 0, K2, buf, si, sp, buf + na, (size_t)GEMM_COLS * K2, CPU_GEMM_TRI_NONE, 0, alpha, beta, C,
                   ldc);
}

void cpu_gemm_block(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc) {
    if (gemm_bf16 && M > 0 && N > 0 && K > 0) {
        gemm_block_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
                ldb, beta, C, ldc);
}

// each thread's operands packed once for several products (cpu_gemm_pack_b): K2 pairs per tile
typedef struct {
    uint32_t *w;
    size_t cap;
    int K2;
} GemmSlot;
static __thread GemmSlot slots[CPU_GEMM_SLOTS];

// the words a packed op(B) of (K, N) takes
static size_t gemm_slot_words(int N, int K) {
    return (size_t)(N + GEMM_COLS - 1) / GEMM_COLS * GEMM_COLS * (size_t)((K + 1) / 2);
}

void cpu_gemm_pack_b(int slot, int tb, int N, int K, const float *B, int ldb) {
    if (!gemm_bf16 || N <= 0 || K <= 0) return;
    GemmSlot *s = &slots[slot];
    pack_grow(&s->w, &s->cap, gemm_slot_words(N, K));
    pack_b(s->w, tb, N, (N + GEMM_COLS - 1) / GEMM_COLS * GEMM_COLS, K, B, ldb);
    s->K2 = (K + 1) / 2;
}

void cpu_gemm_block_b(int slot, int ta, int tb, int M, int N, int K, int n0, int k0, CpuGemmTri tri, int d, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (!gemm_bf16 || M <= 0 || N <= 0 || K <= 0) {
        cpu_gemm_block(ta, tb, M, N, K, alpha, A, lda, tb ? B + (size_t)n0 * ldb + k0 : B + (size_t)k0 * ldb + n0, ldb,
                       beta, C, ldc);
        return;
    }
    // the slot's pairs start at even rows of op(B): from an odd k0, A gets a zero column in front
    const int lead = k0 & 1, K2 = (lead + K + 1) / 2, Mp = (M + GEMM_ROWS - 1) / GEMM_ROWS * GEMM_ROWS;
    const int Mpa = ta ? (Mp + 15) / 16 * 16 : Mp;
    uint32_t *pa = pack_grow(&pack.a, &pack.acap, (size_t)Mpa * K2);
    size_t si, sp;
    pack_a(pa, ta, M, Mpa, K, lead, A, lda, &si, &sp);
    const GemmSlot *s = &slots[slot];
    const size_t tstride = (size_t)GEMM_COLS * s->K2;
    gemm_block_run(M, N, n0 % GEMM_COLS, K2, pa, si, sp,
                   s->w + (size_t)(n0 / GEMM_COLS) * tstride + (size_t)(k0 / 2) * GEMM_COLS, tstride, tri,
                   tri == CPU_GEMM_TRI_COLS ? d : d + lead, alpha, beta, C, ldc);
}

size_t cpu_gemm_scratch_bytes(size_t rows, size_t widest, size_t widest_in, int T, int hd, int threads) {
    if (!gemm_bf16) return 0;
    // A: a product's input or output gradient rows (rows x widest); B: a weight gradient's input
    // rows (the weights themselves come from their gather's bf16 copy)
    size_t bytes = sizeof(uint16_t) * rows * (widest + widest_in), na, words = 0;
    // attention's blocks: block query rows against up to T keys (QK^T, dO V^T), the probabilities
    // against V (PV, dS K), and key blocks' transposed products over up to T queries (dS^T Q, P^T dO)
    const int block = CPU_ATT_BLOCK < T ? CPU_ATT_BLOCK : T, shapes[][3] = {{block, T, hd}, {block, hd, T}, {T, hd, block}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const size_t w = gemm_pack_words(shapes[i][0], shapes[i][1], shapes[i][2], &na);
        words = w > words ? w : words;
    }
    // and the slots: a (batch, head)'s keys, values, queries or output gradients, either way round
    const size_t kv = gemm_slot_words(T, hd), vk = gemm_slot_words(hd, T);
    return bytes + sizeof(uint32_t) * (words + CPU_GEMM_SLOTS * (kv > vk ? kv : vk)) * (size_t)threads;
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

// ---- fp32 products on the rank's threads ----
// OpenBLAS's own threading of a model's products (a few thousand rows against a few hundred
// columns) waits on the other threads several times per product, which costs most when they are
// not all free at once, and its split of K changes the sums with the thread count. Instead C's
// rows (or columns, where C has fewer rows) are cut into one share per thread, each a one-thread
// sgemm (OpenBLAS runs one inside a parallel region): one wait per product, and every element
// summed as a one-thread sgemm of the whole product sums it. Shares are whole multiples of the
// kernels' tiles (the last takes the rest) and stay above the size where OpenBLAS's AVX-512
// builds switch to small-matrix kernels, which sum in another order.
enum { GEMM_SHARE = 64 };
#define GEMM_SMALL 1e6  // OpenBLAS's small-matrix kernels take products of up to 100^3 multiply-adds

static void gemm_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                       float beta, float *C, int ldc) {
    const CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
    const int by_rows = M >= N, dim = by_rows ? M : N, units = dim / GEMM_SHARE;
    const int parts = omp_get_max_threads() < units ? omp_get_max_threads() : units;
    if (parts < 2 || omp_in_parallel() || (double)(units / parts) * GEMM_SHARE * (by_rows ? N : M) * K <= GEMM_SMALL) {
        cblas_sgemm(CblasRowMajor, oa, ob, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(parts)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        const int lo = units * t / n * GEMM_SHARE, hi = t == n - 1 ? dim : units * (t + 1) / n * GEMM_SHARE;
        if (by_rows)
            cblas_sgemm(CblasRowMajor, oa, ob, hi - lo, N, K, alpha, ta ? A + lo : A + (size_t)lo * lda, lda, B, ldb, beta,
                        C + (size_t)lo * ldc, ldc);
        else
            cblas_sgemm(CblasRowMajor, oa, ob, M, hi - lo, K, alpha, A, lda, tb ? B + (size_t)lo * ldb : B + lo, ldb, beta,
                        C + lo, ldc);
    }
}

void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int a_again) {
    same_a = a_again;
    if (gemm_bf16 && M > 0 && N > 0 && K > 0) {
        if (gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
        static int said;
        if (!said++) log_msg("fsdpc: oneDNN cannot run a bf16 matmul of %d x %d x %d: sgemm runs such products\n", M, N, K);
    }
    gemm_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
