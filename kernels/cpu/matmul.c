// matmul: linear layers through cpu_gemm (row-major; weights are [out, in]): sgemm, or bf16
// products under --precision bf16 where the CPU has AVX512_BF16.

#include "../backend.h"
#include "cpu_common.h"

void CPU_OP(matmul_fwd)(void *out_, KernDtype out_dt, const void *inp_, const void *w, int N, int IN, int OUT) {
    float *out = out_;  // the CPU's activations are fp32
    const float *inp = inp_;
    (void)out_dt;
    // (N, OUT) = (N, IN) @ (OUT, IN)^T
    cpu_gemm(0, 1, N, OUT, IN, 1.0f, inp, IN, w, IN, 0.0f, out, OUT, 0);
}

void CPU_OP(matmul_bwd)(void *dinp_, float *dw, const void *dout_, KernDtype dout_dt, const void *inp_, const void *w,
                     int N, int IN, int OUT, int accumulate_dinp) {
    float *dinp = dinp_;  // the CPU's activations are fp32
    const float *dout = dout_;
    const float *inp = inp_;
    (void)dout_dt;
    if (dinp) {
        // (N, IN) = (N, OUT) @ (OUT, IN)
        cpu_gemm(0, 0, N, IN, OUT, 1.0f, dout, OUT, w, IN, accumulate_dinp ? 1.0f : 0.0f, dinp, IN, 0);
    }
    // (OUT, IN) += (N, OUT)^T @ (N, IN)
    if (dw) cpu_gemm(1, 0, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN, dinp != NULL);
}

void CPU_OP(matmul_grouped_fwd)(void *out_, KernDtype out_dt, const void *inp_, const void *const *w, const int *rows,
                            int G, int IN, int OUT) {
    float *out = out_;
    const float *inp = inp_;
    for (int g = 0, o = 0; g < G; o += rows[g++])
        if (rows[g]) CPU_OP(matmul_fwd)(out + (size_t)o * OUT, out_dt, inp + (size_t)o * IN, w[g], rows[g], IN, OUT);
}

void CPU_OP(matmul_grouped_bwd)(void *dinp_, float *const *dw, const void *dout_, KernDtype dout_dt, const void *inp_,
                            const void *const *w, const int *rows, int G, int IN, int OUT, int accumulate_dinp) {
    float *dinp = dinp_;
    const float *dout = dout_;
    const float *inp = inp_;
    for (int g = 0, o = 0; g < G; o += rows[g++])
        if (rows[g])
            CPU_OP(matmul_bwd)(dinp + (size_t)o * IN, dw[g], dout + (size_t)o * OUT, dout_dt, inp + (size_t)o * IN, w[g],
                           rows[g], IN, OUT, accumulate_dinp);
}
