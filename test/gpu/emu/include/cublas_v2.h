// CPU reference fake of the cuBLAS subset used by kernels/cuda/matmul.cu (testing only): the
// grouped GEMM, with cuBLAS's documented rules checked (host shape and scalar arrays, device
// arrays of device pointers, its dtype combinations), each product as the fake cuBLASLt's.
#pragma once
#include "cublasLt.h"

enum { CUBLAS_STATUS_INVALID_VALUE = 7 };
struct EmuBlas {
    cudaStream_t stream;
};
typedef EmuBlas *cublasHandle_t;

inline cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = new EmuBlas{}; return 0; }
inline cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { h->stream = s; return 0; }
// only A, B and C of one dtype, fp32 or bf16, with 32F compute: what cuBLAS 12.5+ takes (no bf16
// operands with an fp32 C, unlike cuBLASLt)
inline cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[], const int n_array[], const int k_array[],
    const void *alpha_array, const void *const Aarray[], cudaDataType Atype, const int lda_array[],
    const void *const Barray[], cudaDataType Btype, const int ldb_array[], const void *beta_array,
    void *const Carray[], cudaDataType Ctype, const int ldc_array[], int group_count, const int group_size[],
    cublasComputeType_t computeType) {
    if (computeType != CUBLAS_COMPUTE_32F || Atype != Btype || Atype != Ctype ||
        (Atype != CUDA_R_32F && Atype != CUDA_R_16BF))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const void *host[] = {transa_array, transb_array, m_array, n_array, k_array, alpha_array, lda_array, ldb_array,
                          beta_array, ldc_array, group_size};
    for (const void *p : host) EMU_REQUIRE(p && !emu_is_dev(p));
    EMU_REQUIRE(emu_is_dev(Aarray) && emu_is_dev(Barray) && emu_is_dev(Carray));
    EmuOp op(emu_sid(h->stream), "cublasGemmGroupedBatchedEx");
    double bytes = 0, flops = 0;
    for (int g = 0, idx = 0; g < group_count; g++) {
        const int m = m_array[g], n = n_array[g], k = k_array[g], ta = transa_array[g], tb = transb_array[g];
        if (m < 0 || n < 0 || k < 0 || group_size[g] < 0 || lda_array[g] < (ta ? k : m) || lda_array[g] < 1 ||
            ldb_array[g] < (tb ? n : k) || ldb_array[g] < 1 || ldc_array[g] < m || ldc_array[g] < 1)
            return CUBLAS_STATUS_INVALID_VALUE;
        const float al = ((const float *)alpha_array)[g], be = ((const float *)beta_array)[g];
        for (int j = 0; j < group_size[g]; j++, idx++) {
            const void *A = Aarray[idx], *B = Barray[idx];
            void *C = Carray[idx];
            EMU_REQUIRE(emu_is_dev(A) && emu_is_dev(B) && emu_is_dev(C));
            bytes += emu_gemm_bytes(m, n, k, Atype, Ctype, be);
            flops += 2.0 * m * n * k;
            emu_gemm(ta, tb, m, n, k, al, A, lda_array[g], B, ldb_array[g], Atype, be, C, ldc_array[g], Ctype, false);
        }
    }
    emu_op_cost(bytes, flops, Atype == CUDA_R_16BF);
    return 0;
}

// the library emu_dlopen hands out as libcublas.so.13 (FSDPC_EMU_CUBLAS=missing: none, as where
// cuBLAS is not installed), registered once for the program (an inline variable)
inline bool emu_cublas_register() {
    static const EmuSym syms[] = {
#define EMU_SYM(f) {#f, (void *)&f},
        EMU_SYM(cublasCreate_v2) EMU_SYM(cublasSetStream_v2) EMU_SYM(cublasGemmGroupedBatchedEx)
#undef EMU_SYM
    };
    emu_dl_register("libcublas.so.13", "FSDPC_EMU_CUBLAS", syms, sizeof syms / sizeof syms[0]);
    return true;
}
inline const bool emu_cublas_registered = emu_cublas_register();
