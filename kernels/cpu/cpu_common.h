// cpu_common: helpers shared by the CPU kernels (not part of the kernels API).
#ifndef FSDPC_CPU_COMMON_H
#define FSDPC_CPU_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../backend.h"

// The kernel files (attention, elementwise, matmul, moe, norm) are compiled twice: for AVX2 (the
// binary's -march=x86-64-v3) and, with CPU_AVX512 defined, for AVX-512 (-march=x86-64-v4, 512-bit
// vectors). Each op is defined as CPU_OP(op): cpu_<op>_avx2 or cpu_<op>_avx512; setup.c's cpu_<op>
// calls the one chosen once at start-up (cpu_isa).
#ifdef CPU_AVX512
#define CPU_OP(op) cpu_##op##_avx512
#else
#define CPU_OP(op) cpu_##op##_avx2
#endif
// The reductions (`omp simd reduction`) of the AVX-512 build add in AVX2's order: 8 float lanes, as
// the AVX2 build's 256-bit vectors hold, so both builds give the same sums bit for bit (the losses
// of the suites that compare layouts and devices stay as they were); the elementwise loops run on
// 512-bit vectors.
#ifdef CPU_AVX512
#define CPU_KEEP_ORDER simdlen(8)
#else
#define CPU_KEEP_ORDER
#endif
#define CPU_DECLARE_ISA(ret, op, params, args) ret cpu_##op##_avx2 params; ret cpu_##op##_avx512 params;
KERN_SIMD_OPS(CPU_DECLARE_ISA)
typedef enum { CPU_ISA_AVX2, CPU_ISA_AVX512 } CpuIsa;
// The kernels' instruction set: AVX-512 where the CPU has F, BW, DQ and VL, unless FSDPC_CPU_ISA=avx2
// (kernels.h, kern_cpu_isa); chosen at the first call.
CpuIsa cpu_isa(void);
// whether the CPU multiplies bf16 in hardware (AVX512_BF16), and the kernels may use it
int cpu_has_bf16(void);
// C (M, N) = alpha op(A) op(B) + beta C, row-major as cblas_sgemm (ta, tb: transposed): sgemm, or
// under cpu_set_compute_bf16 on a CPU with AVX512_BF16 oneDNN's matmul on A and B rounded to bf16
// (to nearest even), accumulating in fp32 (gemm.c). a_again: A is the previous call's A, its values
// unchanged (a layer's backward reads dout twice): its bf16 copy is reused. Not from inside a
// parallel region.
void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int a_again);
// The same product for attention's per-head blocks, from inside a parallel region (each thread
// its own): under cpu_set_compute_bf16 on a CPU with AVX512_BF16, A and B rounded to bf16 (to
// nearest even) and multiplied with fp32 sums by an AVX512_BF16 kernel (gemm.c), else sgemm.
void cpu_gemm_block(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc);
// Attention's operands that several block products read (a head's keys, values, queries, output
// gradients): under bf16, cpu_gemm_pack_b packs op(B) (K, N) once into the calling thread's slot
// (0 .. CPU_GEMM_SLOTS - 1); else it does nothing. cpu_gemm_block_b is then cpu_gemm_block on
// op(B)'s rows k0..k0+K and columns n0..n0+N: from the slot under bf16, from B (the whole op(B),
// as packed) otherwise. tri and d tell the bf16 kernel what of a causal block it may leave out
// (sgemm computes it all).
#define CPU_GEMM_SLOTS 4
typedef enum {
    CPU_GEMM_TRI_NONE,
    CPU_GEMM_TRI_COLS,    // C's row i is read only in columns up to d + i: later ones may hold anything
    CPU_GEMM_TRI_K_TO,    // op(A)'s row i is 0 past column d + i
    CPU_GEMM_TRI_K_FROM,  // op(A)'s row i is 0 before column d + i
} CpuGemmTri;
void cpu_gemm_pack_b(int slot, int tb, int N, int K, const float *B, int ldb);
void cpu_gemm_block_b(int slot, int ta, int tb, int M, int N, int K, int n0, int k0, CpuGemmTri tri, int d, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

// attention's blocks of query rows (and, in backward, key columns)
#define CPU_ATT_BLOCK 64

// Elementwise loops shorter than this run on one thread: a parallel region costs a few
// microseconds, more than the loop itself.
#define CPU_PAR_MIN 32768
// threads per rank at most (OMP_NUM_THREADS or --num_threads above it are capped): per-thread
// partial sums live in fixed arrays of this size, not in stack arrays sized by input
#define CPU_MAX_THREADS 1024

// exp(x) for x in float, written so that a `#pragma omp simd` loop calling it vectorises
// (glibc only offers a vector expf under -ffast-math). Max error about 1.3 ulp. x is clamped to
// [-87, 88], so tiny results bottom out at exp(-87) ~ 1.6e-38 instead of going denormal or 0,
// and large ones saturate at exp(88) ~ 1.7e38 instead of overflowing. NaN stays NaN.
static inline float cpu_expf(float x) {
    // Every select below is an integer min or bit arithmetic on its own statement. Float compares
    // may trap (default -ftrapping-math), so GCC will not if-convert them, and a select that feeds
    // a constant into the rest lets GCC split the path; either way the loop is left scalar.
    // Check with -fopt-info-vec after editing.
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t ul = u < 0xC2AE0000u ? u : 0xC2AE0000u;  // as unsigned, negatives below -87 are larger
    int32_t i = (int32_t)ul;
    i = i < 0x42B00000 ? i : 0x42B00000;  // as signed, positives above 88 (0x42B00000) are larger
    float xc;
    memcpy(&xc, &i, sizeof xc);
    // exp(x) = 2^k * exp(r), k = round(x / ln2), |r| <= ln2 / 2; adding 1.5*2^23 rounds to integer
    float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    // Cody-Waite split of ln2 so that r is exact to float precision
    float r = fmaf(-k, 0.693145751953125f, xc);
    r = fmaf(-k, 1.42860682030941723212e-6f, r);
    // Taylor series to degree 7: truncation error < 5e-9 on |r| <= 0.347
    float p = fmaf(r, 1.0f / 5040.0f, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t bits = ((int32_t)k + 127) << 23;  // 2^k as a float bit pattern; k in [-126, 127]
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    // The clamp turned NaN into a number: OR a quiet-NaN pattern back in. The NaN test is
    // arithmetic (|x| bits > 0x7f800000 makes the subtraction wrap) since a select here gets
    // turned back into a branch.
    float y = p * scale;
    uint32_t yb;
    memcpy(&yb, &y, sizeof yb);
    yb |= (0u - ((0x7f800000u - (u & 0x7fffffffu)) >> 31)) & 0x7fc00000u;
    memcpy(&y, &yb, sizeof y);
    return y;
}

#endif
