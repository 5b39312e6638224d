// matmul: linear layers through OpenBLAS sgemm (row-major; weights are [out, in]).
#include <cblas.h>

#include "../backend.h"

void cpu_matmul_fwd(void *out_, KernDtype out_dt, const void *inp_, const void *w, int N, int IN, int OUT) {
    float *out = out_;  // the CPU's activations are fp32
    const float *inp = inp_;
    (void)out_dt;
    // (N, OUT) = (N, IN) @ (OUT, IN)^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, inp, IN, w, IN, 0.0f, out, OUT);
}

void cpu_matmul_bwd(void *dinp_, float *dw, const void *dout_, KernDtype dout_dt, const void *inp_, const void *w,
                     int N, int IN, int OUT, int accumulate_dinp) {
    float *dinp = dinp_;  // the CPU's activations are fp32
    const float *dout = dout_;
    const float *inp = inp_;
    (void)dout_dt;
    if (dinp) {
        // (N, IN) = (N, OUT) @ (OUT, IN)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN,
                    accumulate_dinp ? 1.0f : 0.0f, dinp, IN);
    }
    // (OUT, IN) += (N, OUT)^T @ (N, IN)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
}
