// CPU reference fake of the cuBLASLt subset used by kernels/cuda/matmul.cu (testing only):
// checks that layouts agree with the problem and pointers with the alignment promised.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "cuda_runtime.h"
#include "../emu_device.h"

#define CUBLAS_VER_MAJOR 13  // the soname kernels/cuda/matmul.cu opens: libcublasLt.so.13

typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
typedef int cublasComputeType_t;
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75 };
typedef int cudaDataType;
enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
typedef int cublasOperation_t;
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasLtMatmulDescAttributes_t { CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB };
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES };
struct EmuDesc { int ta = 0, tb = 0, compute, scale; };
struct EmuLayout { int rows, cols; int64_t ld; int type; };
struct EmuPref { uint32_t align[4] = {256, 256, 256, 256}; };
typedef EmuDesc *cublasLtMatmulDesc_t;
typedef EmuLayout *cublasLtMatrixLayout_t;
typedef EmuPref *cublasLtMatmulPreference_t;
typedef void *cublasLtHandle_t;
struct cublasLtMatmulAlgo_t { EmuPref pref; };
struct cublasLtMatmulHeuristicResult_t { cublasLtMatmulAlgo_t algo; size_t workspaceSize; };

#define EMU_REQUIRE(c) do { if (!(c)) { fprintf(stderr, "emu cublasLt: %s failed\n", #c); abort(); } } while (0)
inline const char *cublasLtGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_NOT_SUPPORTED ? "the requested functionality is not supported (emu)" : "emu"; }
inline size_t cublasLtGetVersion(void) { return 130100; }  // as cuBLASLt 13.1.0 answers
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (void *)1; return 0; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int c, int s) {
    EMU_REQUIRE((c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_FAST_16BF) && s == CUDA_R_32F);
    *d = new EmuDesc{0, 0, c, s}; return 0; }
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return 0; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    EMU_REQUIRE(n == sizeof(int32_t));
    (a == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = *(const int32_t *)v; return 0; }
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, int t, uint64_t r, uint64_t c, int64_t ld) {
    EMU_REQUIRE((t == CUDA_R_32F || t == CUDA_R_16BF) && ld >= (int64_t)r);
    *l = new EmuLayout{(int)r, (int)c, ld, t}; return 0; }
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = new EmuPref; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) { EMU_REQUIRE(n == 8); return 0; }
    EMU_REQUIRE(n == 4);
    p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *(const uint32_t *)v; return 0; }
// the roofline model's cost of a GEMM: A and B read once, C read when beta != 0, D written
inline double emu_gemm_bytes(int m, int n, int k, int ab_type, int c_type, float beta) {
    const double ab_size = ab_type == CUDA_R_16BF ? 2 : 4, c_size = c_type == CUDA_R_16BF ? 2 : 4;
    return ab_size * ((double)m * k + (double)k * n) + c_size * m * n * (beta != 0.0f ? 2 : 1);
}
// column-major D (m, n) = alpha op(A) op(B) + beta D in device memory, inside an op: A and B of type
// ab_type (fp32 ones rounded to bf16 first when round), sums in double, D fp32 or bf16
inline void emu_gemm(int ta, int tb, int m, int n, int k, float al, const void *A, int64_t lda, const void *B,
                     int64_t ldb, int ab_type, float be, void *D, int64_t ldd, int c_type, bool round) {
    auto el = [round](const void *p, size_t i, int t) {
        uint32_t u;
        if (t == CUDA_R_32F) {
            float f = ((const float *)p)[i];
            if (!round) return f;
            memcpy(&u, &f, 4);
            u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;  // to bf16, nearest even (finite inputs)
        } else {
            u = (uint32_t)((const uint16_t *)p)[i] << 16;
        }
        float f; memcpy(&f, &u, 4); return f; };
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int kk = 0; kk < k; kk++)
                s += (double)el(A, ta ? kk + (size_t)i * lda : i + (size_t)kk * lda, ab_type) *
                     el(B, tb ? j + (size_t)kk * ldb : kk + (size_t)j * ldb, ab_type);
            const size_t at = i + (size_t)j * ldd;
            float c = 0.0f;  // C as stored (never rounded by the compute type)
            if (be != 0.0f && c_type == CUDA_R_32F) c = ((const float *)D)[at];
            else if (be != 0.0f) { const uint32_t u = (uint32_t)((const uint16_t *)D)[at] << 16; memcpy(&c, &u, 4); }
            const float r = (float)(al * s + (be != 0.0f ? be * c : 0.0f));
            if (c_type == CUDA_R_32F) {
                ((float *)D)[at] = r;
            } else {  // rounded to bf16, nearest even (finite results)
                uint32_t u;
                memcpy(&u, &r, 4);
                ((uint16_t *)D)[at] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            }
        }
}
// When no algorithm fits, cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED (not zero results). Here
// none fits bf16 operands under FSDPC_EMU_LT_NO_BF16=1, or, under FSDPC_EMU_LT_BF16_LDC=N, where
// C's leading dimension is not a multiple of N elements (as tensor-core tiles can need), so the
// callers' fp32 fallback runs for some problems of a run and not others
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t la,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t p, int req,
    cublasLtMatmulHeuristicResult_t *r, int *found) {
    EMU_REQUIRE(req >= 1);
    const char *none = getenv("FSDPC_EMU_LT_NO_BF16"), *ldc = getenv("FSDPC_EMU_LT_BF16_LDC");
    const bool bf16 = la->type == CUDA_R_16BF;
    *found = 0;
    if (bf16 && ((none && *none == '1') || (ldc && atoi(ldc) > 0 && lc->ld % atoi(ldc)))) return CUBLAS_STATUS_NOT_SUPPORTED;
    r->algo.pref = *p; r->workspaceSize = 0; *found = 1; return 0; }
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
    cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta, const void *C,
    cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *,
    size_t, cudaStream_t stream) {
    EMU_REQUIRE(C == D && lc == ld);
    EMU_REQUIRE(emu_is_dev(A) && emu_is_dev(B) && emu_is_dev(C));
    EmuOp op(emu_sid(stream), "cublasLtMatmul");
    EMU_REQUIRE((uintptr_t)A % algo->pref.align[0] == 0 && (uintptr_t)B % algo->pref.align[1] == 0 &&
                (uintptr_t)C % algo->pref.align[2] == 0 && (uintptr_t)D % algo->pref.align[3] == 0);
    const int m = lc->rows, n = lc->cols, k = d->ta ? la->rows : la->cols;
    EMU_REQUIRE((d->ta ? la->cols : la->rows) == m);
    EMU_REQUIRE((d->tb ? lb->cols : lb->rows) == k && (d->tb ? lb->rows : lb->cols) == n);
    // bf16 C and D only with bf16 A and B (cuBLASLt's 32F compute with bf16 outputs)
    EMU_REQUIRE(la->type == lb->type && (lc->type == CUDA_R_32F || la->type == CUDA_R_16BF));
    const bool round = d->compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    EMU_REQUIRE(!round || la->type == CUDA_R_32F);
    emu_op_cost(emu_gemm_bytes(m, n, k, la->type, lc->type, *(const float *)beta), 2.0 * m * n * k,
                la->type == CUDA_R_16BF || round);
    emu_gemm(d->ta, d->tb, m, n, k, *(const float *)alpha, A, la->ld, B, lb->ld, la->type, *(const float *)beta, D,
             lc->ld, lc->type, round);
    return 0; }

// the library emu_dlopen hands out as libcublasLt.so.13 (FSDPC_EMU_CUBLASLT=missing: none),
// registered once for the program (an inline variable)
inline bool emu_cublaslt_register() {
    static const EmuSym syms[] = {
#define EMU_SYM(f) {#f, (void *)&f},
        EMU_SYM(cublasLtGetVersion) EMU_SYM(cublasLtGetStatusString) EMU_SYM(cublasLtCreate)
            EMU_SYM(cublasLtMatmulDescCreate) EMU_SYM(cublasLtMatmulDescDestroy) EMU_SYM(cublasLtMatmulDescSetAttribute)
                EMU_SYM(cublasLtMatrixLayoutCreate) EMU_SYM(cublasLtMatrixLayoutDestroy)
                    EMU_SYM(cublasLtMatmulPreferenceCreate) EMU_SYM(cublasLtMatmulPreferenceDestroy)
                        EMU_SYM(cublasLtMatmulPreferenceSetAttribute) EMU_SYM(cublasLtMatmulAlgoGetHeuristic)
                            EMU_SYM(cublasLtMatmul)
#undef EMU_SYM
    };
    emu_dl_register("libcublasLt.so.13", "FSDPC_EMU_CUBLASLT", syms, sizeof syms / sizeof syms[0]);
    return true;
}
inline const bool emu_cublaslt_registered = emu_cublaslt_register();
