// matmul: linear layers through cuBLASLt with fp32 accumulation. In fp32 mode the operands and
// outputs are fp32 (CUBLAS_COMPUTE_32F, not TF32, so results match the CPU's sgemm to float
// rounding); in bf16 mode (--precision bf16) the weights are the gathered bf16 parameters and the
// activations bf16, both taken as they are, and outputs are written in their dtype (bf16
// activations, or fp32 for the residual stream) by the GEMM itself; only an fp32 operand (the
// residual gradient) is rounded to bf16 into reused scratch. A third mode, for measuring only
// (test_gpu --bench), hands cuBLASLt the fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF so it
// rounds them itself.
// Weights are row-major [out, in].
// cuBLASLt is column-major: a row-major (R, C) matrix is the column-major (C, R) one, so each
// row-major product below is issued as its transpose.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_v2.h>

#include "common.cuh"

#define LT_STR(x) #x
#define LT_SONAME(major) "libcublasLt.so." LT_STR(major)
// the soname of the CUDA major fsdpc was compiled against
constexpr const char *kLtLib = LT_SONAME(CUBLAS_VER_MAJOR);

CublasLtApi blaslt;

const char *cuda_cublaslt_open(void) {
    static char why[512];
    static bool open;  // a failure is tried again by the next caller
    if (open) return NULL;
    void *lib = dlopen(kLtLib, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *path = getenv("LD_LIBRARY_PATH");
        snprintf(why, sizeof why, "cannot load %s (%s; LD_LIBRARY_PATH=%s): install the CUDA toolkit's cuBLAS or add "
                 "its lib directory, e.g. a Python environment's nvidia/cublas/lib, to LD_LIBRARY_PATH, or pass "
                 "--device cpu", kLtLib, dlerror(), path && *path ? path : "(unset)");
        return why;
    }
#define CUBLASLT_LOOKUP(f)                                                     \
    if (!(*(void **)&blaslt.f = dlsym(lib, #f))) {                             \
        snprintf(why, sizeof why, "%s has no %s (too old a cuBLASLt)", kLtLib, #f); \
        return why;                                                            \
    }
    CUBLASLT_FUNCS(CUBLASLT_LOOKUP)
#undef CUBLASLT_LOOKUP
    open = true;
    return NULL;
}

namespace {

// One cuBLASLt problem: descriptors, layouts and the heuristic's algorithm, built once per shape
// and pointer alignment (the heuristic may pick kernels that need aligned operands).
struct GemmKey {
    int mode, ta, tb, m, n, k, lda, ldb, ldc, align_a, align_b, align_c;  // a CudaCompute mode
    int c_bf16;  // C and D are bf16 (else fp32)
    bool operator==(const GemmKey &o) const {
        return mode == o.mode && ta == o.ta && tb == o.tb && m == o.m && n == o.n && k == o.k && lda == o.lda &&
               ldb == o.ldb && ldc == o.ldc && align_a == o.align_a && align_b == o.align_b && align_c == o.align_c &&
               c_bf16 == o.c_bf16;
    }
};

struct GemmPlan {
    GemmKey key;
    bool found;  // false: the heuristic had no algorithm for this problem
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

constexpr int kPlanCache = 64;  // a training run uses about a dozen shapes
GemmPlan plans[kPlanCache];
int num_plans, next_victim;

// largest power of two (<= 256) dividing the address (at least 2: the size of a bf16)
uint32_t alignment_of(const void *p) {
    uint32_t a = 256;
    while (a > 2 && (uintptr_t)p % a) a /= 2;
    return a;
}

void destroy_plan(GemmPlan &p) {
    cublasCheck(blaslt.cublasLtMatrixLayoutDestroy(p.a));
    cublasCheck(blaslt.cublasLtMatrixLayoutDestroy(p.b));
    cublasCheck(blaslt.cublasLtMatrixLayoutDestroy(p.c));
    cublasCheck(blaslt.cublasLtMatmulDescDestroy(p.op));
}

// The heuristic's preference for a problem: the shared workspace and the operands' alignments
// (an algorithm that needs more alignment than a pointer has would fault).
cublasLtMatmulPreference_t heuristic_pref(const GemmKey &k) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(blaslt.cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = cuda_ctx.workspace_bytes;
    const uint32_t al[4] = {(uint32_t)k.align_a, (uint32_t)k.align_b, (uint32_t)k.align_c, (uint32_t)k.align_c};
    const cublasLtMatmulPreferenceAttributes_t at[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasCheck(blaslt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    for (int i = 0; i < 4; i++) cublasCheck(blaslt.cublasLtMatmulPreferenceSetAttribute(pref, at[i], &al[i], sizeof al[i]));
    return pref;
}

void build_plan(GemmPlan &p, const GemmKey &k) {
    p.key = k;
    cublasCheck(blaslt.cublasLtMatmulDescCreate(
        &p.op, k.mode == COMPUTE_FAST_16BF ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cudaDataType ab = k.mode == COMPUTE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasOperation_t opa = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(blaslt.cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublasCheck(blaslt.cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    // layouts describe the stored matrices, before the transposes
    cublasCheck(blaslt.cublasLtMatrixLayoutCreate(&p.a, ab, k.ta ? k.k : k.m, k.ta ? k.m : k.k, k.lda));
    cublasCheck(blaslt.cublasLtMatrixLayoutCreate(&p.b, ab, k.tb ? k.n : k.k, k.tb ? k.k : k.n, k.ldb));
    cublasCheck(blaslt.cublasLtMatrixLayoutCreate(&p.c, k.c_bf16 ? CUDA_R_16BF : CUDA_R_32F, k.m, k.n, k.ldc));

    cublasLtMatmulPreference_t pref = heuristic_pref(k);
    cublasLtMatmulHeuristicResult_t res = {};
    int found = 0;
    // cuBLASLt answers "no algorithm fits" with CUBLAS_STATUS_NOT_SUPPORTED, not with zero results
    const cublasStatus_t st = blaslt.cublasLtMatmulAlgoGetHeuristic(cuda_ctx.lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) cublas_check_at(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    cublasCheck(blaslt.cublasLtMatmulPreferenceDestroy(pref));
    p.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (!p.found && k.mode == COMPUTE_FP32)
        err_fatal("cuBLASLt has no fp32 algorithm for m=%d n=%d k=%d (ta=%d tb=%d lda=%d ldb=%d ldc=%d)", k.m, k.n,
                  k.k, k.ta, k.tb, k.lda, k.ldb, k.ldc);
    // said once per problem: plans are cached, so the fallback's later calls are silent
    if (!p.found)
        log_msg("fsdpc: note: cuBLASLt has no %s algorithm for m=%d n=%d k=%d (ta=%d tb=%d lda=%d ldb=%d ldc=%d, "
                "alignment %d/%d/%d bytes): this product runs in fp32\n",
                k.mode == COMPUTE_BF16 ? "bf16" : "fp32-fast-bf16", k.m, k.n, k.k, k.ta, k.tb, k.lda, k.ldb, k.ldc,
                k.align_a, k.align_b, k.align_c);
    p.algo = res.algo;
}

const GemmPlan &get_plan(const GemmKey &k) {
    for (int i = 0; i < num_plans; i++)
        if (plans[i].key == k) return plans[i];
    int slot = num_plans;
    if (num_plans < kPlanCache) {
        num_plans++;
    } else {  // full: replace round-robin
        slot = next_victim;
        next_victim = (next_victim + 1) % kPlanCache;
        destroy_plan(plans[slot]);
    }
    build_plan(plans[slot], k);
    return plans[slot];
}

// A GEMM operand or output as stored: fp32, or bf16 (parameters under cuda_ctx.params_bf16,
// activations under cuda_ctx.acts_bf16).
struct Operand {
    const void *p;
    bool bf16;
};

// Operands of one cuda_matmul_* call in the dtype a product takes: fp32 ones rounded to bf16 for
// the tensor cores, bf16 ones widened where a product falls back to fp32; an operand used by
// both of backward's products (dout) is converted once. Slots are reused by the next call; that
// is safe because every reader is queued on the one stream before the next conversion
// overwrites them.
struct ConvertedOperands {
    ScratchBuf buf[3];
    const void *src[3];
    int used = 0;
    void begin() { used = 0; }
    const void *get(Operand x, size_t n, bool bf16) {
        if (x.bf16 == bf16) return x.p;
        for (int i = 0; i < used; i++)
            if (src[i] == x.p) return buf[i].ptr;
        if (used == 3) err_fatal("matmul: more than 3 converted operands in one call");
        void *d = buf[used].get(n * (bf16 ? sizeof(uint16_t) : sizeof(float)));
        src[used++] = x.p;
        if (bf16) cuda_f32_to_bf16((uint16_t *)d, (const float *)x.p, n);
        else cuda_bf16_to_f32((float *)d, (const uint16_t *)x.p, n);
        return d;
    }
} converted;

void run_plan(const GemmPlan &p, const void *a, const void *b, void *C, float beta) {
    const float alpha = 1.0f;
    cublasCheck(blaslt.cublasLtMatmul(cuda_ctx.lt, p.op, &alpha, a, p.a, b, p.b, &beta, C, p.c, C, p.c, &p.algo,
                               cuda_ctx.workspace, cuda_ctx.workspace_bytes, cuda_stream()));
}

ScratchBuf c_scratch;  // an fp32 result on its way to a bf16 output (the fp32 fallback only)

// column-major C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * C, A and B contiguous. In the
// bf16 modes they go to the tensor cores as bf16 unless cuBLASLt has no such algorithm for the
// problem (odd leading dimensions), which then stays fp32 (a bf16 C then goes through fp32 scratch).
void gemm(bool ta, bool tb, int m, int n, int k, Operand A, int lda, Operand B, int ldb, Operand C, int ldc,
          float beta) {
    if (m <= 0 || n <= 0 || k <= 0) return;
    const size_t na = (size_t)(ta ? m : k) * lda, nb = (size_t)(tb ? k : n) * ldb;
    void *c = const_cast<void *>(C.p);
    const int ac = (int)alignment_of(c);
    if (cuda_ctx.compute == COMPUTE_FAST_16BF && !C.bf16) {
        const void *a = converted.get(A, na, false), *b = converted.get(B, nb, false);
        const GemmPlan &p = get_plan({COMPUTE_FAST_16BF, ta, tb, m, n, k, lda, ldb, ldc, (int)alignment_of(a),
                                      (int)alignment_of(b), ac, 0});
        if (p.found) return run_plan(p, a, b, c, beta);
    }
    if (cuda_ctx.compute == COMPUTE_BF16) {
        // an fp32 operand is rounded into 256-aligned scratch; a bf16 one is used where it lies
        const int aa = A.bf16 ? (int)alignment_of(A.p) : 256, ab = B.bf16 ? (int)alignment_of(B.p) : 256;
        const GemmPlan &p = get_plan({COMPUTE_BF16, ta, tb, m, n, k, lda, ldb, ldc, aa, ab, ac, C.bf16});
        if (p.found) return run_plan(p, converted.get(A, na, true), converted.get(B, nb, true), c, beta);
    }
    const void *a = converted.get(A, na, false), *b = converted.get(B, nb, false);
    const size_t nc = (size_t)n * ldc;
    float *c32 = C.bf16 ? (float *)c_scratch.get(sizeof(float) * nc) : (float *)c;
    if (C.bf16 && beta != 0.0f) cuda_bf16_to_f32(c32, (const uint16_t *)c, nc);
    run_plan(get_plan({COMPUTE_FP32, ta, tb, m, n, k, lda, ldb, ldc, (int)alignment_of(a), (int)alignment_of(b),
                       (int)alignment_of(c32), 0}),
             a, b, c32, beta);
    if (C.bf16) cuda_f32_to_bf16((uint16_t *)c, c32, nc);
}

}  // namespace

extern "C" {

void cuda_matmul_fwd(void *out, KernDtype out_dt, const void *inp, const void *w, int N, int IN, int OUT) {
    converted.begin();
    const bool acts = cuda_ctx.acts_bf16 != 0;
    // out^T (OUT, N) = w (OUT, IN) @ inp^T (IN, N); column-major w is (IN, OUT), inp is (IN, N)
    gemm(true, false, OUT, N, IN, {w, cuda_ctx.params_bf16 != 0}, IN, {inp, acts}, IN,
         {out, acts && out_dt == KERN_ACT}, OUT, 0.0f);
}

void cuda_matmul_bwd(void *dinp, float *dw, const void *dout, KernDtype dout_dt, const void *inp, const void *w, int N,
                     int IN, int OUT, int accumulate_dinp) {
    converted.begin();
    const bool acts = cuda_ctx.acts_bf16 != 0;
    const Operand d = {dout, acts && dout_dt == KERN_ACT};
    // dinp^T (IN, N) = w^T (IN, OUT) @ dout^T (OUT, N)
    if (dinp)
        gemm(false, false, IN, N, OUT, {w, cuda_ctx.params_bf16 != 0}, IN, d, OUT, {dinp, acts}, IN,
             accumulate_dinp ? 1.0f : 0.0f);
    // dw^T (IN, OUT) += inp^T (IN, N) @ dout (N, OUT)
    if (dw) gemm(false, true, IN, OUT, N, {inp, acts}, IN, d, OUT, {dw, false}, IN, 1.0f);
}

}  // extern "C"

// ---- grouped GEMMs: a mixture-of-experts layer's experts, one product each over its row block ----
// cuBLAS (not Lt) runs a list of GEMMs of different shapes as one call, cublasGemmGroupedBatchedEx
// (cuBLAS 12.5+). It is opened at first use, as cuBLASLt is; without it, or where its dtypes do not
// fit (it takes A, B and C of one dtype), the groups loop over the cuBLASLt products above.
#define BLAS_SONAME(major) "libcublas.so." LT_STR(major)
constexpr const char *kBlasLib = BLAS_SONAME(CUBLAS_VER_MAJOR);

namespace {

#define CUBLAS_GROUPED_FUNCS(X) X(cublasCreate_v2) X(cublasSetStream_v2) X(cublasGemmGroupedBatchedEx)
struct CublasApi {
#define CUBLAS_MEMBER(f) decltype(&::f) f;
    CUBLAS_GROUPED_FUNCS(CUBLAS_MEMBER)
#undef CUBLAS_MEMBER
};
CublasApi blas;

// NULL once blas is filled, else why not; tried once, the answer kept (a run does not switch paths)
const char *cublas_open() {
    static char why[512];
    static int state;  // 0: not tried, 1: open, 2: failed
    if (state) return state == 1 ? NULL : why;
    state = 2;
    void *lib = dlopen(kBlasLib, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, sizeof why, "cannot load %s (%s)", kBlasLib, dlerror());
        return why;
    }
#define CUBLAS_LOOKUP(f)                                                                   \
    if (!(*(void **)&blas.f = dlsym(lib, #f))) {                                           \
        snprintf(why, sizeof why, "%s has no %s (cuBLAS before 12.5)", kBlasLib, #f);      \
        return why;                                                                        \
    }
    CUBLAS_GROUPED_FUNCS(CUBLAS_LOOKUP)
#undef CUBLAS_LOOKUP
    state = 1;
    return NULL;
}

// the handle, made at the first grouped product (the device is bound by then), on the compute stream
cublasHandle_t blas_handle() {
    static cublasHandle_t h;
    if (!h) {
        cublasCheck(blas.cublasCreate_v2(&h));
        cublasCheck(blas.cublasSetStream_v2(h, cuda_stream()));
    }
    return h;
}

constexpr int kMaxGroups = 64;  // the experts of a layer on one rank (model/config.h CONFIG_MAX_EXPERTS)

// the grouped call reads each product's A, B and C from device arrays of pointers: they travel by
// value in a launch, so filling them needs no host synchronisation and no pinned staging
struct GroupPtrs {
    const void *p[3 * kMaxGroups];  // A of each product, then B, then C
};
__global__ void group_ptrs_kernel(GroupPtrs src, const void **dst, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src.p[i];
}
ScratchBuf ptr_scratch;  // rewritten in stream order: the previous grouped call has read it by then

// One product of a grouped call: column-major C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * C
struct GroupGemm {
    int m, n, k, lda, ldb, ldc;
    const void *a, *b;
    void *c;
};

// the products in one cublasGemmGroupedBatchedEx call, all of one dtype (bf16 in bf16 mode, fp32
// else) with fp32 accumulation, as gemm()'s cuBLASLt path computes them
void gemm_grouped(bool ta, bool tb, const GroupGemm *gg, int n, float beta) {
    cublasOperation_t opa[kMaxGroups], opb[kMaxGroups];
    int m[kMaxGroups], nn[kMaxGroups], k[kMaxGroups], lda[kMaxGroups], ldb[kMaxGroups], ldc[kMaxGroups],
        size[kMaxGroups];
    float alpha[kMaxGroups], betas[kMaxGroups];
    GroupPtrs ptrs;
    for (int i = 0; i < n; i++) {
        opa[i] = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb[i] = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        m[i] = gg[i].m, nn[i] = gg[i].n, k[i] = gg[i].k, lda[i] = gg[i].lda, ldb[i] = gg[i].ldb, ldc[i] = gg[i].ldc;
        size[i] = 1, alpha[i] = 1.0f, betas[i] = beta;
        ptrs.p[i] = gg[i].a, ptrs.p[n + i] = gg[i].b, ptrs.p[2 * n + i] = gg[i].c;
    }
    const void **d = (const void **)ptr_scratch.get(sizeof(void *) * 3 * kMaxGroups);
    group_ptrs_kernel<<<1, 3 * kMaxGroups, 0, cuda_stream()>>>(ptrs, d, 3 * n);
    cudaCheckLaunch();
    const cudaDataType t = cuda_ctx.compute == COMPUTE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasCheck(blas.cublasGemmGroupedBatchedEx(blas_handle(), opa, opb, m, nn, k, alpha, d, t, lda, d + n, t, ldb,
                                                betas, (void *const *)(d + 2 * n), t, ldc, n, size, CUBLAS_COMPUTE_32F));
}

// Whether a product goes to one grouped call: cuBLAS has it, the mode computes fp32 or bf16
// operands, and the operands that are not one buffer for all groups (the weights: weights == true)
// and the output are stored in that dtype already; the activations are converted once, whole.
bool grouped_takes(bool weights, bool c_bf16) {
    if (cuda_ctx.compute == COMPUTE_FAST_16BF || cublas_open()) return false;
    const bool bf16 = cuda_ctx.compute == COMPUTE_BF16;
    return c_bf16 == bf16 && (!weights || (cuda_ctx.params_bf16 != 0) == bf16);
}

// element i of a buffer of fp32 or bf16
const void *elem(const void *p, size_t i, bool bf16) { return (const char *)p + i * (bf16 ? 2 : 4); }

int count_rows(const int *rows, int G) {
    if (G > kMaxGroups) err_fatal("matmul_grouped: %d groups, at most %d", G, kMaxGroups);
    int total = 0;
    for (int g = 0; g < G; g++) total += rows[g];
    return total;
}

}  // namespace

extern "C" {

void cuda_matmul_grouped_fwd(void *out, KernDtype out_dt, const void *inp, const void *const *w, const int *rows,
                             int G, int IN, int OUT) {
    const int total = count_rows(rows, G);
    const Act o32 = act(out, out_dt), i32 = act(inp);
    if (!grouped_takes(true, o32.bf16)) {
        for (int g = 0, o = 0; g < G; o += rows[g++])
            if (rows[g]) cuda_matmul_fwd((o32 + (size_t)o * OUT).p, out_dt, (i32 + (size_t)o * IN).p, w[g], rows[g], IN, OUT);
        return;
    }
    converted.begin();
    const bool bf16 = cuda_ctx.compute == COMPUTE_BF16;
    const void *x = converted.get({inp, i32.bf16 != 0}, (size_t)total * IN, bf16);
    GroupGemm gg[kMaxGroups];
    int n = 0;
    // out^T (OUT, rows) = w (OUT, IN) @ inp^T (IN, rows), as cuda_matmul_fwd
    for (int g = 0, o = 0; g < G; o += rows[g++])
        if (rows[g])
            gg[n++] = {OUT, rows[g], IN, IN, IN, OUT, w[g], elem(x, (size_t)o * IN, bf16),
                       const_cast<void *>(elem(out, (size_t)o * OUT, bf16))};
    if (n) gemm_grouped(true, false, gg, n, 0.0f);
}

void cuda_matmul_grouped_bwd(void *dinp, float *const *dw, const void *dout, KernDtype dout_dt, const void *inp,
                             const void *const *w, const int *rows, int G, int IN, int OUT, int accumulate_dinp) {
    const int total = count_rows(rows, G);
    const Act d32 = act(dout, dout_dt), i32 = act(inp), di32 = act(dinp);
    // dw goes grouped only with dinp (the loop below computes both or dw alone): in fp32 mode
    const bool bf16 = cuda_ctx.compute == COMPUTE_BF16, dinp_grouped = grouped_takes(true, di32.bf16),
               dw_grouped = dinp_grouped && dw[0] && grouped_takes(false, false);
    converted.begin();
    GroupGemm gg[kMaxGroups];
    int n = 0;
    // dinp^T (IN, rows) = w^T (IN, OUT) @ dout^T (OUT, rows); an fp32 dout rounded to bf16 once, whole
    if (dinp_grouped) {
        const void *d = converted.get({dout, d32.bf16 != 0}, (size_t)total * OUT, bf16);
        for (int g = 0, o = 0; g < G; o += rows[g++])
            if (rows[g])
                gg[n++] = {IN, rows[g], OUT, IN, OUT, IN, w[g], elem(d, (size_t)o * OUT, bf16),
                           const_cast<void *>(elem(dinp, (size_t)o * IN, bf16))};
        if (n) gemm_grouped(false, false, gg, n, accumulate_dinp ? 1.0f : 0.0f);
        if (!dw[0]) return;  // frozen experts: no weight gradients
        // dw^T (IN, OUT) += inp^T (IN, rows) @ dout (rows, OUT)
        if (dw_grouped) {
            const void *x = converted.get({inp, i32.bf16 != 0}, (size_t)total * IN, bf16);
            n = 0;
            for (int g = 0, o = 0; g < G; o += rows[g++])
                if (rows[g])
                    gg[n++] = {IN, OUT, rows[g], IN, OUT, IN, elem(x, (size_t)o * IN, bf16),
                               elem(d, (size_t)o * OUT, bf16), dw[g]};
            if (n) gemm_grouped(false, true, gg, n, 1.0f);
            return;
        }
    }
    // the rest per group, as the loop of cuda_matmul_bwd runs it (its scratch is reused in stream
    // order); bf16 weight gradients land here, as the grouped call has no bf16 operands with fp32 C
    for (int g = 0, o = 0; g < G; o += rows[g++])
        if (rows[g])
            cuda_matmul_bwd(dinp_grouped ? NULL : (di32 + (size_t)o * IN).p, dw[g], (d32 + (size_t)o * OUT).p, dout_dt,
                            (i32 + (size_t)o * IN).p, w[g], rows[g], IN, OUT, accumulate_dinp);
}

void cuda_set_compute(int mode) { cuda_ctx.compute = mode; }
void cuda_set_params_bf16(int on) { cuda_ctx.params_bf16 = on; }
void cuda_set_acts_bf16(int on) { cuda_ctx.acts_bf16 = on; }

}  // extern "C"

extern "C" const char *cuda_cublas_grouped(void) {
    static char out[600];
    const char *why = cublas_open();
    if (why) snprintf(out, sizeof out, "none (%s): the experts' GEMMs loop over cuBLASLt", why);
    else snprintf(out, sizeof out, "cublasGemmGroupedBatchedEx (%s)", kBlasLib);
    return out;
}

extern "C" const char *cuda_cublaslt_version(void) {
    static char out[600];
    const char *why = cuda_cublaslt_open();
    if (why) {
        snprintf(out, sizeof out, "none (%s)", why);
        return out;
    }
    const size_t v = blaslt.cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
    snprintf(out, sizeof out, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    return out;
}

namespace {
// ms per run of the fastest of up to 16 algorithms cuBLASLt's heuristic offers for key's problem
// (its descriptors from the plan cache; fsdpc runs the heuristic's first), each timed over reps
// runs after one untimed; *tried counts the algorithms timed
double best_ms(const GemmKey &key, const void *a, const void *b, void *c, float beta, int reps, int *tried) {
    const GemmPlan &p = get_plan(key);
    if (!p.found) return 0;  // no bf16 algorithm at all: fsdpc runs fp32 here
    cublasLtMatmulPreference_t pref = heuristic_pref(key);
    const uint64_t ws = cuda_ctx.workspace_bytes;
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    const cublasStatus_t st = blaslt.cublasLtMatmulAlgoGetHeuristic(cuda_ctx.lt, p.op, p.a, p.b, p.c, p.c, pref, 16, res, &found);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) cublas_check_at(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    cublasCheck(blaslt.cublasLtMatmulPreferenceDestroy(pref));
    static cudaEvent_t e0, e1;
    if (!e0) {
        cudaCheck(cudaEventCreateWithFlags(&e0, cudaEventDefault));
        cudaCheck(cudaEventCreateWithFlags(&e1, cudaEventDefault));
    }
    double best = 0;
    const float alpha = 1.0f;
    for (int i = 0; i < found; i++) {
        if (res[i].workspaceSize > ws) continue;
        for (int r = 0; r <= reps; r++) {
            if (r == 1) cudaCheck(cudaEventRecord(e0, cuda_stream()));
            cublasCheck(blaslt.cublasLtMatmul(cuda_ctx.lt, p.op, &alpha, a, p.a, b, p.b, &beta, c, p.c, c, p.c, &res[i].algo,
                                       cuda_ctx.workspace, ws, cuda_stream()));
        }
        cudaCheck(cudaEventRecord(e1, cuda_stream()));
        cudaCheck(cudaEventSynchronize(e1));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        if (!best || ms / reps < best) best = ms / reps;
        ++*tried;
    }
    return best;
}
}  // namespace

// the products of cuda_matmul_fwd and _bwd with bf16 weights and activations (as --precision
// bf16 trains), as gemm() issues them
extern "C" double cuda_matmul_best_ms(int bwd, void *out, void *dinp, float *dw, const void *dout, const void *inp,
                                      const void *w, int N, int IN, int OUT, int reps, int *tried) {
    *tried = 0;
    auto al = [](const void *p) { return (int)alignment_of(p); };
    if (!bwd)
        return best_ms({COMPUTE_BF16, 1, 0, OUT, N, IN, IN, IN, OUT, al(w), al(inp), al(out), 1}, w, inp, out, 0.0f,
                       reps, tried);
    return best_ms({COMPUTE_BF16, 0, 0, IN, N, OUT, IN, OUT, IN, al(w), al(dout), al(dinp), 1}, w, dout, dinp, 0.0f,
                   reps, tried) +
           best_ms({COMPUTE_BF16, 0, 1, IN, OUT, N, IN, OUT, IN, al(inp), al(dout), al(dw), 0}, inp, dout, dw, 1.0f,
                   reps, tried);
}
