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
    gemm(false, true, IN, OUT, N, {inp, acts}, IN, d, OUT, {dw, false}, IN, 1.0f);
}

void cuda_set_compute(int mode) { cuda_ctx.compute = mode; }
void cuda_set_params_bf16(int on) { cuda_ctx.params_bf16 = on; }
void cuda_set_acts_bf16(int on) { cuda_ctx.acts_bf16 = on; }

}  // extern "C"

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
