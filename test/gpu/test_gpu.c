// test_gpu: checks every CUDA kernel (cuda_<op>) against the CPU one (cpu_<op>) on random inputs.
// Errors are max|gpu - cpu| / max|cpu|. Prints `ok - gpu <name>` / `not ok - gpu <name> (<detail>)`
// per check and exits 1 if any failed; without a visible GPU it prints a skip line and exits 0.
// test_gpu --bench instead times the kernels at the shapes of make bench-gpu's ~1B model;
// test_gpu --cudnn runs the cuDNN attention checks alone, test_gpu --grouped the grouped matmuls' alone.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "comm/comm.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "test/unit/testutil.h"

// tolerances on the relative error
#define TOL_EW 1e-4   // elementwise, norms, cross-entropy
#define TOL_MM 1e-3   // matmul, attention
#define TOL_BF16 2e-2 // matmul, attention with bf16 operands (8-bit mantissas) against fp32 on the CPU

// the current CudaCompute mode of the tensor-core ops, its tolerance and a name suffix
static int compute_mode;
static const char *att_path = "";  // " [cudnn]" while cuDNN runs attention
static const char *const mode_names[] = {"", " [bf16]", " [fast-16bf]"};
// the emulation's count of the program's device-to-host copies (absent on a GPU machine)
extern long emu_reads_back __attribute__((weak));
static double tol_mm(void) { return compute_mode != COMPUTE_FP32 ? TOL_BF16 : TOL_MM; }
static const char *mode_name(void) { return mode_names[compute_mode]; }
static void set_mode(int mode) {
    compute_mode = mode;
    cuda_set_compute(mode);
}

static int32_t *rand_tokens(size_t n, int V) {
    int32_t *t = mallocCheck(sizeof(int32_t) * n);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(rng_next() % (uint64_t)V);
    return t;
}

// a device copy of host memory
static void *to_dev(const void *host, size_t bytes) {
    void *d = cuda_alloc(bytes);
    cuda_upload(d, host, bytes);
    return d;
}

static float *dev_f(const float *host, size_t n) { return to_dev(host, sizeof(float) * n); }

// max|a - ref| / max(max|ref|, 1e-6)
static double rel_err(const float *a, const float *ref, size_t n) {
    double md = 0.0, mr = 1e-6;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - ref[i]));
        mr = fmax(mr, fabs((double)ref[i]));
        if (isnan(a[i]) != isnan(ref[i])) return INFINITY;
    }
    return md / mr;
}

// compares n host floats a with the reference; tol 0 demands equal bits
static void compare(const char *name, const float *a, const float *ref, size_t n, double tol) {
    if (tol == 0.0) {
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(a + i, ref + i, sizeof(float))) bad = i;
        report(bad == n, name, "first difference at %zu: %.9g vs %.9g", bad, bad < n ? a[bad] : 0.0f,
               bad < n ? ref[bad] : 0.0f);
    } else {
        const double e = rel_err(a, ref, n);
        report(e < tol, name, "rel err %.3g >= %.1g", e, tol);
    }
}

// downloads n floats of gpu and compares them with the host reference
static void check(const char *name, const float *gpu, const float *ref, size_t n, double tol) {
    float *a = mallocCheck(sizeof(float) * n);
    cuda_download(a, gpu, sizeof(float) * n);
    compare(name, a, ref, n, tol);
    free(a);
}

// ---- activations in bf16 (--precision bf16 stores them so: cuda_set_acts_bf16) ----
// A kernel's activation operands (and KERN_ACT ones) are then bf16 on the device. dev_buf uploads
// host floats in an operand's dtype, first rounding the host copy to bf16 values so that both
// sides start from the same numbers; check_buf compares what the GPU wrote, widened, with the
// CPU's fp32 result, allowing one bf16 rounding (or, for tol 0, equal to the bf16-rounded result).
#define TOL_ACT 1e-2
static int acts;  // activations are bf16 now
static void set_acts(int on) {
    acts = on;
    cuda_set_acts_bf16(on);
}
static int bf16_dt(KernDtype dt) { return acts && dt == KERN_ACT; }
static size_t dt_bytes(KernDtype dt) { return bf16_dt(dt) ? sizeof(uint16_t) : sizeof(float); }
static void *buf_at(const void *p, size_t i, KernDtype dt) { return (char *)p + i * dt_bytes(dt); }
static void *new_buf(size_t n, KernDtype dt) { return cuda_alloc(n * dt_bytes(dt)); }
static void *dev_buf(float *host, size_t n, KernDtype dt) {
    if (!bf16_dt(dt)) return dev_f(host, n);
    uint16_t *b = mallocCheck(sizeof(uint16_t) * n);
    cpu_f32_to_bf16(b, host, n);
    cpu_bf16_to_f32(host, b, n);
    void *d = to_dev(b, sizeof(uint16_t) * n);
    free(b);
    return d;
}
static void check_buf(const char *name, const void *gpu, const float *ref, size_t n, double tol, KernDtype dt) {
    if (!bf16_dt(dt)) return check(name, gpu, ref, n, tol);
    uint16_t *b = mallocCheck(sizeof(uint16_t) * n);
    float *a = mallocCheck(sizeof(float) * n), *r = mallocCheck(sizeof(float) * n);
    cuda_download(b, gpu, sizeof(uint16_t) * n);
    cpu_bf16_to_f32(a, b, n);
    char full[256];
    snprintf(full, sizeof full, "%s [bf16 act]", name);
    if (tol == 0.0) cpu_round_bf16(memcpy(r, ref, sizeof(float) * n), n);
    compare(full, a, tol == 0.0 ? r : ref, n, tol == 0.0 ? 0.0 : fmax(tol, TOL_ACT));
    free(b), free(a), free(r);
}

// host floats dst (n) = the device's activations src (n), widened
static void download_act(float *dst, const void *src, size_t n) {
    if (!acts) return cuda_download(dst, src, sizeof(float) * n);
    uint16_t *b = mallocCheck(sizeof(uint16_t) * n);
    cuda_download(b, src, sizeof(uint16_t) * n);
    cpu_bf16_to_f32(dst, b, n);
    free(b);
}

static void check_scalar(const char *name, double gpu, double ref, double tol) {
    const double e = fabs(gpu - ref) / fmax(fabs(ref), 1e-12);
    report(e < tol, name, "%.12g vs %.12g, rel err %.3g", gpu, ref, e);
}

// ---- memory ----

static void test_memory(void) {
    const size_t n = 3000;
    float *h = rand_vec(n, -1, 1), *back = mallocCheck(sizeof(float) * n);
    float *d = dev_f(h, n);
    cuda_download(back, d, sizeof(float) * n);
    report(!memcmp(h, back, sizeof(float) * n), "upload/download round trip", "data differs");
    cuda_free(d);
    // a reused block must come back zeroed
    float *z = cuda_alloc(sizeof(float) * n);
    cuda_download(back, z, sizeof(float) * n);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= back[i] == 0.0f;
    report(zero, "alloc after free is zeroed", "nonzero data");
    cuda_free(z);
    report(cuda_peak_mem_mib() > 0.0, "peak_mem_mib", "%.3f", cuda_peak_mem_mib());
    // pinned host buffers: zeroed, and usable as copy source and destination
    float *pin = cuda_alloc_host(sizeof(float) * n);
    zero = 1;
    for (size_t i = 0; i < n; i++) zero &= pin[i] == 0.0f;
    memcpy(pin, h, sizeof(float) * n);
    d = cuda_alloc(sizeof(float) * n);
    cuda_upload(d, pin, sizeof(float) * n);
    memset(pin, 0, sizeof(float) * n);
    cuda_download(pin, d, sizeof(float) * n);
    report(zero && !memcmp(pin, h, sizeof(float) * n), "alloc_host zeroed, round trip through it", "zeroed=%d", zero);
    // async copies: a download waits for the kernels before it, kernels after a fence see an upload
    cuda_scale(d = dev_f(h, n), 2.0f, n);
    cuda_async_wait(cuda_download_async(pin, d, sizeof(float) * n));
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= pin[i] == 2.0f * h[i], pin[i] += 1.0f;
    const int up = cuda_upload_async(d, pin, sizeof(float) * n);
    cuda_async_fence();
    cuda_scale(d, 0.5f, n);
    cuda_async_wait(up);
    cuda_download(back, d, sizeof(float) * n);
    for (size_t i = 0; i < n; i++) ok &= back[i] == (2.0f * h[i] + 1.0f) * 0.5f;
    report(ok, "download_async/upload_async ordered against kernels", "data differs");
    cuda_free(d);
    cuda_free_host(pin);
    free(h);
    free(back);
}

// ---- matmul ----

// inp and dinp are activations; out and dout have dtype dt (the residual stream's GEMMs: KERN_F32)
static void test_matmul(int N, int IN, int OUT, int misalign, KernDtype dt) {
    char name[128];
    const int o = misalign;  // offset in elements: pointers off 16-byte alignment
    const KernDtype A = KERN_ACT;
    float *inp = rand_vec(N * IN + o, -1, 1), *w = rand_vec(OUT * IN + o, -1, 1), *dout = rand_vec(N * OUT + o, -1, 1);
    float *out = mallocCheck(sizeof(float) * (N * OUT + o));
    float *dinp = rand_vec(N * IN + o, -1, 1), *dw = rand_vec(OUT * IN + o, -1, 1);
    void *d_inp = dev_buf(inp, N * IN + o, A), *d_dout = dev_buf(dout, N * OUT + o, dt), *d_out = new_buf(N * OUT + o, dt);
    void *d_dinp = dev_buf(dinp, N * IN + o, A);
    float *d_w = dev_f(w, OUT * IN + o), *d_dw = dev_f(dw, OUT * IN + o);
    const char *dtn = dt == KERN_F32 && acts ? " fp32 out" : "";

    cpu_matmul_fwd(out + o, dt, inp + o, w + o, N, IN, OUT);
    cuda_matmul_fwd(buf_at(d_out, o, dt), dt, buf_at(d_inp, o, A), d_w + o, N, IN, OUT);
    snprintf(name, sizeof name, "matmul_fwd N=%d IN=%d OUT=%d offset=%d%s%s", N, IN, OUT, o, mode_name(), dtn);
    check_buf(name, buf_at(d_out, o, dt), out + o, N * OUT, tol_mm(), dt);

    for (int acc = 0; acc <= 1; acc++) {  // dinp overwritten, then accumulated; dw accumulates both times
        cpu_matmul_bwd(dinp + o, dw + o, dout + o, dt, inp + o, w + o, N, IN, OUT, acc);
        cuda_matmul_bwd(buf_at(d_dinp, o, A), d_dw + o, buf_at(d_dout, o, dt), dt, buf_at(d_inp, o, A), d_w + o, N, IN,
                        OUT, acc);
        snprintf(name, sizeof name, "matmul_bwd dinp acc=%d N=%d IN=%d OUT=%d offset=%d%s%s", acc, N, IN, OUT, o,
                 mode_name(), dtn);
        check_buf(name, buf_at(d_dinp, o, A), dinp + o, N * IN, tol_mm(), A);
        snprintf(name, sizeof name, "matmul_bwd dw += (pass %d) N=%d IN=%d OUT=%d offset=%d%s%s", acc, N, IN, OUT, o,
                 mode_name(), dtn);
        check(name, d_dw + o, dw + o, OUT * IN, tol_mm());
    }
    cpu_matmul_bwd(NULL, dw + o, dout + o, dt, inp + o, w + o, N, IN, OUT, 0);
    cuda_matmul_bwd(NULL, d_dw + o, buf_at(d_dout, o, dt), dt, buf_at(d_inp, o, A), d_w + o, N, IN, OUT, 0);
    snprintf(name, sizeof name, "matmul_bwd dinp=NULL dw N=%d IN=%d OUT=%d offset=%d%s%s", N, IN, OUT, o, mode_name(),
             dtn);
    check(name, d_dw + o, dw + o, OUT * IN, tol_mm());

    float *bufs[] = {inp, w, dout, out, dinp, dw};
    void *dbufs[] = {d_inp, d_w, d_dout, d_out, d_dinp, d_dw};
    for (int i = 0; i < 6; i++) free(bufs[i]), cuda_free(dbufs[i]);
}

// ---- grouped matmuls (a mixture-of-experts layer's experts) ----

int emu_cudnn_plans_built(void) __attribute__((weak));  // present on the emulator only

// host floats dst (n) = device src (n) of dtype dt, widened
static void download_dt(float *dst, const void *src, size_t n, KernDtype dt) {
    if (dt == KERN_ACT) return download_act(dst, src, n);
    cuda_download(dst, src, sizeof(float) * n);
}

// kern_matmul_grouped_* against the loop of cuda_matmul_fwd / _bwd over the groups (some of 0 rows),
// with weights of the parameters' dtype (bf16 in bf16 mode: what the grouped call takes);
// out and dout have dtype dt. Either way through cuBLAS's grouped call or, where it is missing
// (FSDPC_EMU_CUBLAS=missing) or cannot take a product, through that same loop.
static void test_matmul_grouped(int IN, int OUT, KernDtype dt) {
    enum { G = 7 };
    const int rows[G] = {5, 0, 17, 0, 0, 9, 1}, N = 32;
    const int pbf16 = compute_mode == COMPUTE_BF16;
    const size_t nw = (size_t)OUT * IN;
    char name[160];
    const char *path = cuda_cublas_grouped();
    const char *miss = getenv("FSDPC_EMU_CUBLAS");
    if (emu_cudnn_plans_built != NULL) {  // the emulator: the path its environment asks for
        const char *want = miss && !strcmp(miss, "missing") ? "none" : "cublasGemmGroupedBatchedEx";
        snprintf(name, sizeof name, "matmul_grouped runs through %s", want);
        report(!strncmp(path, want, strlen(want)), name, "%s", path);
    }
    cuda_set_params_bf16(pbf16);
    float *inp = rand_vec((size_t)N * IN, -1, 1), *dout = rand_vec((size_t)N * OUT, -1, 1);
    float *dinp0 = rand_vec((size_t)N * IN, -9, 9), *a = mallocCheck(sizeof(float) * N * (IN > OUT ? IN : OUT));
    float *b = mallocCheck(sizeof(float) * N * (IN > OUT ? IN : OUT));
    void *d_inp = dev_buf(inp, (size_t)N * IN, KERN_ACT), *d_dout = dev_buf(dout, (size_t)N * OUT, dt);
    void *d_out[2] = {new_buf((size_t)N * OUT, dt), new_buf((size_t)N * OUT, dt)};
    void *d_dinp[2] = {dev_buf(dinp0, (size_t)N * IN, KERN_ACT), dev_buf(dinp0, (size_t)N * IN, KERN_ACT)};
    const void *w[G];
    float *dw[2][G], *dwh = mallocCheck(sizeof(float) * nw), *dwr = mallocCheck(sizeof(float) * nw);
    for (int g = 0; g < G; g++) {
        float *h = rand_vec(nw, -1, 1), *d0 = rand_vec(nw, -1, 1);
        uint16_t *h16 = mallocCheck(sizeof(uint16_t) * nw);
        cpu_f32_to_bf16(h16, h, nw);
        w[g] = pbf16 ? to_dev(h16, sizeof(uint16_t) * nw) : dev_f(h, nw);
        dw[0][g] = dev_f(d0, nw), dw[1][g] = dev_f(d0, nw);  // accumulated into from the same start
        free(h), free(h16), free(d0);
    }
    const char *sfx = dt == KERN_F32 && acts ? " fp32 out" : "";
    cuda_matmul_grouped_fwd(d_out[0], dt, d_inp, w, rows, G, IN, OUT);
    for (int g = 0, o = 0; g < G; o += rows[g++])
        if (rows[g]) cuda_matmul_fwd(buf_at(d_out[1], (size_t)o * OUT, dt), dt, buf_at(d_inp, (size_t)o * IN, KERN_ACT), w[g], rows[g], IN, OUT);
    download_dt(a, d_out[0], (size_t)N * OUT, dt), download_dt(b, d_out[1], (size_t)N * OUT, dt);
    snprintf(name, sizeof name, "matmul_grouped_fwd G=%d IN=%d OUT=%d%s%s", G, IN, OUT, mode_name(), sfx);
    compare(name, a, b, (size_t)N * OUT, tol_mm());
    for (int pass = 0; pass < 2; pass++) {  // dinp overwritten, then added to (accumulate_dinp); dw accumulated
        cuda_matmul_grouped_bwd(d_dinp[0], dw[0], d_dout, dt, d_inp, w, rows, G, IN, OUT, pass);
        for (int g = 0, o = 0; g < G; o += rows[g++])
            if (rows[g])
                cuda_matmul_bwd(buf_at(d_dinp[1], (size_t)o * IN, KERN_ACT), dw[1][g], buf_at(d_dout, (size_t)o * OUT, dt),
                                dt, buf_at(d_inp, (size_t)o * IN, KERN_ACT), w[g], rows[g], IN, OUT, pass);
        download_act(a, d_dinp[0], (size_t)N * IN), download_act(b, d_dinp[1], (size_t)N * IN);
        snprintf(name, sizeof name, "matmul_grouped_bwd dinp (pass %d) G=%d IN=%d OUT=%d%s%s", pass, G, IN, OUT,
                 mode_name(), sfx);
        compare(name, a, b, (size_t)N * IN, tol_mm());
        for (int g = 0; g < G; g++) {
            cuda_download(dwh, dw[0][g], sizeof(float) * nw), cuda_download(dwr, dw[1][g], sizeof(float) * nw);
            snprintf(name, sizeof name, "matmul_grouped_bwd dw[%d] += (pass %d, %d rows) G=%d IN=%d OUT=%d%s%s", g, pass,
                     rows[g], G, IN, OUT, mode_name(), sfx);
            compare(name, dwh, dwr, nw, tol_mm());
        }
    }
    for (int g = 0; g < G; g++) cuda_free((void *)w[g]), cuda_free(dw[0][g]), cuda_free(dw[1][g]);
    void *dbufs[] = {d_inp, d_dout, d_out[0], d_out[1], d_dinp[0], d_dinp[1]};
    for (int i = 0; i < 6; i++) cuda_free(dbufs[i]);
    free(inp), free(dout), free(dinp0), free(a), free(b), free(dwh), free(dwr);
    cuda_set_params_bf16(0);
}

// the grouped matmuls in fp32 and bf16 (test_gpu --grouped runs these alone)
static void test_grouped(void) {
    set_mode(COMPUTE_FP32);
    test_matmul_grouped(24, 40, KERN_ACT);
    test_matmul_grouped(13, 7, KERN_ACT);  // odd sizes
    set_mode(COMPUTE_BF16);
    set_acts(1);
    test_matmul_grouped(24, 40, KERN_ACT);
    test_matmul_grouped(40, 24, KERN_F32);  // fp32 out, fp32 dout rounded to bf16 (the experts' w2)
    set_acts(0);
    set_mode(COMPUTE_FP32);
}

// ---- bf16 parameters (--precision bf16 on a GPU): every kernel that reads a parameter ----

// The weights as the GPU holds them (bf16) against the CPU on the same values widened to fp32:
// matmuls within the bf16 tolerance (their activations are rounded too), the rest to float
// rounding, since widening bf16 is exact.
static void test_bf16_params(int N, int IN, int OUT) {
    char name[96];
    const size_t nw = (size_t)OUT * IN;
    float *w = rand_vec(nw, -1, 1), *inp = rand_vec((size_t)N * IN, -1, 1), *dout = rand_vec((size_t)N * OUT, -1, 1);
    uint16_t *w16 = mallocCheck(sizeof(uint16_t) * nw);
    cpu_f32_to_bf16(w16, w, nw);
    cpu_bf16_to_f32(w, w16, nw);  // the values the GPU's weights hold
    float *out = mallocCheck(sizeof(float) * N * OUT), *dinp = mallocCheck(sizeof(float) * N * IN);
    float *dw = calloc(nw, sizeof(float)), *rstd = mallocCheck(sizeof(float) * N), *mean = mallocCheck(sizeof(float) * N);
    void *d_w = to_dev(w16, sizeof(uint16_t) * nw);
    float *d_inp = dev_f(inp, (size_t)N * IN), *d_dout = dev_f(dout, (size_t)N * OUT);
    float *d_out = cuda_alloc(sizeof(float) * N * OUT), *d_dinp = cuda_alloc(sizeof(float) * N * IN);
    float *d_dw = cuda_alloc(sizeof(float) * nw), *d_rstd = cuda_alloc(sizeof(float) * N);
    float *d_mean = cuda_alloc(sizeof(float) * N);
    set_mode(COMPUTE_BF16);
    cuda_set_params_bf16(1);
    cpu_matmul_fwd(out, KERN_F32, inp, w, N, IN, OUT);
    cuda_matmul_fwd(d_out, KERN_F32, d_inp, d_w, N, IN, OUT);
    snprintf(name, sizeof name, "bf16 params: matmul_fwd N=%d IN=%d OUT=%d", N, IN, OUT);
    check(name, d_out, out, (size_t)N * OUT, TOL_BF16);
    cpu_matmul_bwd(dinp, dw, dout, KERN_F32, inp, w, N, IN, OUT, 0);
    cuda_matmul_bwd(d_dinp, d_dw, d_dout, KERN_F32, d_inp, d_w, N, IN, OUT, 0);
    snprintf(name, sizeof name, "bf16 params: matmul_bwd dinp N=%d IN=%d OUT=%d", N, IN, OUT);
    check(name, d_dinp, dinp, (size_t)N * IN, TOL_BF16);
    snprintf(name, sizeof name, "bf16 params: matmul_bwd dw (fp32) N=%d IN=%d OUT=%d", N, IN, OUT);
    check(name, d_dw, dw, nw, TOL_BF16);
    // the first IN weights as a norm's weight (and the next IN as LayerNorm's bias), rows of IN
    cpu_rmsnorm_fwd(dinp, rstd, inp, w, N, IN, 1e-5f);
    cuda_rmsnorm_fwd(d_dinp, d_rstd, d_inp, d_w, N, IN, 1e-5f);
    check("bf16 params: rmsnorm_fwd", d_dinp, dinp, (size_t)N * IN, TOL_EW);
    memset(dinp, 0, sizeof(float) * N * IN);
    cuda_upload(d_dinp, dinp, sizeof(float) * N * IN);
    memset(dw, 0, sizeof(float) * IN);
    cuda_upload(d_dw, dw, sizeof(float) * IN);
    cpu_rmsnorm_bwd(dinp, dw, inp, inp, w, rstd, N, IN);
    cuda_rmsnorm_bwd(d_dinp, d_dw, d_inp, d_inp, d_w, d_rstd, N, IN);
    check("bf16 params: rmsnorm_bwd dinp", d_dinp, dinp, (size_t)N * IN, TOL_EW);
    float *y = rand_vec((size_t)N * IN, -1, 1), *d_y = dev_f(y, (size_t)N * IN);
    cpu_add_rmsnorm_fwd(y, dinp, rstd, inp, w, N, IN, 1e-5f);
    cuda_add_rmsnorm_fwd(d_y, d_dinp, d_rstd, d_inp, d_w, N, IN, 1e-5f);
    check("bf16 params: add_rmsnorm_fwd", d_dinp, dinp, (size_t)N * IN, TOL_EW);
    const void *d_b = (const char *)d_w + sizeof(uint16_t) * IN;
    cpu_layernorm_fwd(dinp, mean, rstd, inp, w, w + IN, N, IN, 1e-5f);
    cuda_layernorm_fwd(d_dinp, d_mean, d_rstd, d_inp, d_w, d_b, N, IN, 1e-5f);
    check("bf16 params: layernorm_fwd", d_dinp, dinp, (size_t)N * IN, TOL_EW);
    memset(dinp, 0, sizeof(float) * N * IN);
    cuda_upload(d_dinp, dinp, sizeof(float) * N * IN);
    cpu_layernorm_bwd(dinp, dw, dw + IN, inp, inp, w, mean, rstd, N, IN);
    cuda_layernorm_bwd(d_dinp, d_dw, d_dw + IN, d_inp, d_inp, d_w, d_mean, d_rstd, N, IN);
    check("bf16 params: layernorm_bwd dinp", d_dinp, dinp, (size_t)N * IN, TOL_EW);
    cpu_bias_add(inp, KERN_F32, w, N, IN);
    cuda_bias_add(d_inp, KERN_F32, d_w, N, IN);
    check("bf16 params: bias_add", d_inp, inp, (size_t)N * IN, TOL_EW);
    cpu_positions_fwd(inp, w, 1, N, IN, 0);  // OUT >= N rows of IN as position embeddings
    cuda_positions_fwd(d_inp, d_w, 1, N, IN, 0);
    check("bf16 params: positions_fwd", d_inp, inp, (size_t)N * IN, TOL_EW);
    int32_t *tok = rand_tokens(N, OUT), *d_tok = to_dev(tok, sizeof(int32_t) * N);
    cpu_embedding_fwd(dinp, tok, w, N, IN);
    cuda_embedding_fwd(d_dinp, d_tok, d_w, N, IN);
    check("bf16 params: embedding_fwd (exact)", d_dinp, dinp, (size_t)N * IN, 0.0);
    const int v0 = OUT / 3, Vl = OUT / 3;  // a vocabulary-parallel part of the OUT rows
    cpu_embedding_part_fwd(dinp, tok, w + (size_t)v0 * IN, N, IN, v0, Vl);
    cuda_embedding_part_fwd(d_dinp, d_tok, (const uint16_t *)d_w + (size_t)v0 * IN, N, IN, v0, Vl);
    check("bf16 params: embedding_part_fwd (exact)", d_dinp, dinp, (size_t)N * IN, 0.0);
    cuda_set_params_bf16(0);
    set_mode(COMPUTE_FP32);
    float *bufs[] = {w, inp, dout, out, dinp, dw, rstd, mean, y};
    for (int i = 0; i < 9; i++) free(bufs[i]);
    float *dbufs[] = {d_inp, d_dout, d_out, d_dinp, d_dw, d_rstd, d_mean, d_y};
    for (int i = 0; i < 8; i++) cuda_free(dbufs[i]);
    cuda_free(d_w), cuda_free(d_tok);
    free(w16), free(tok);
}

// ---- RMSNorm ----

static void test_rmsnorm(int N, int D) {
    char name[64];
    float *inp = rand_vec((size_t)N * D, -2, 2), *w = rand_vec(D, 0.5f, 1.5f), *dout = rand_vec((size_t)N * D, -1, 1);
    float *out = mallocCheck(sizeof(float) * N * D), *rstd = mallocCheck(sizeof(float) * N);
    float *dinp = rand_vec((size_t)N * D, -1, 1), *dw = rand_vec(D, -1, 1);
    float *d_inp = dev_f(inp, (size_t)N * D), *d_w = dev_f(w, D);
    void *d_dout = dev_buf(dout, (size_t)N * D, KERN_ACT), *d_out = new_buf((size_t)N * D, KERN_ACT);
    float *d_rstd = cuda_alloc(sizeof(float) * N);
    float *d_dinp = dev_f(dinp, (size_t)N * D), *d_dw = dev_f(dw, D);
    cpu_rmsnorm_fwd(out, rstd, inp, w, N, D, 1e-5f);
    cuda_rmsnorm_fwd(d_out, d_rstd, d_inp, d_w, N, D, 1e-5f);
    snprintf(name, sizeof name, "rmsnorm_fwd out N=%d D=%d", N, D);
    check_buf(name, d_out, out, (size_t)N * D, TOL_EW, KERN_ACT);
    snprintf(name, sizeof name, "rmsnorm_fwd rstd N=%d D=%d", N, D);
    check(name, d_rstd, rstd, N, TOL_EW);
    cpu_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, D);
    cuda_rmsnorm_bwd(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, D);
    snprintf(name, sizeof name, "rmsnorm_bwd dinp += N=%d D=%d", N, D);
    check(name, d_dinp, dinp, (size_t)N * D, TOL_EW);
    snprintf(name, sizeof name, "rmsnorm_bwd dw += N=%d D=%d", N, D);
    check(name, d_dw, dw, D, TOL_EW);
    float *bufs[] = {inp, w, dout, out, rstd, dinp, dw};
    void *dbufs[] = {d_inp, d_w, d_dout, d_out, d_rstd, d_dinp, d_dw};
    for (int i = 0; i < 7; i++) free(bufs[i]), cuda_free(dbufs[i]);
}

// the residual add fused into the norm after it (RMSNorm: Llama; LayerNorm: minGPT): y += r, then
// the norm of the new y
static void test_add_norm(int N, int D, int layer) {
    char name[80];
    const char *op = layer ? "add_layernorm_fwd" : "add_rmsnorm_fwd";
    const size_t n = (size_t)N * D, ns = layer ? 2 * (size_t)N : (size_t)N;  // statistics: (mean,) rstd
    float *y = rand_vec(n, -2, 2), *r = rand_vec(n, -2, 2), *w = rand_vec(D, 0.5f, 1.5f), *b = rand_vec(D, -1, 1);
    float *out = mallocCheck(sizeof(float) * n), *st = mallocCheck(sizeof(float) * ns);
    float *d_y = dev_f(y, n), *d_r = dev_f(r, n), *d_w = dev_f(w, D), *d_b = dev_f(b, D);
    void *d_out = new_buf(n, KERN_ACT);
    float *d_st = cuda_alloc(sizeof(float) * ns);
    if (layer) {
        cpu_add_layernorm_fwd(y, out, st, st + N, r, w, b, N, D, 1e-5f);
        cuda_add_layernorm_fwd(d_y, d_out, d_st, d_st + N, d_r, d_w, d_b, N, D, 1e-5f);
    } else {
        cpu_add_rmsnorm_fwd(y, out, st, r, w, N, D, 1e-5f);
        cuda_add_rmsnorm_fwd(d_y, d_out, d_st, d_r, d_w, N, D, 1e-5f);
    }
    snprintf(name, sizeof name, "%s y += r (exact) N=%d D=%d", op, N, D);
    check(name, d_y, y, n, 0.0);
    snprintf(name, sizeof name, "%s out N=%d D=%d", op, N, D);
    check_buf(name, d_out, out, n, TOL_EW, KERN_ACT);
    snprintf(name, sizeof name, "%s statistics N=%d D=%d", op, N, D);
    check(name, d_st, st, ns, TOL_EW);
    float *bufs[] = {y, r, w, b, out, st};
    void *dbufs[] = {d_y, d_r, d_w, d_b, d_out, d_st};
    for (int i = 0; i < 6; i++) free(bufs[i]), cuda_free(dbufs[i]);
}

// ---- LayerNorm ----

static void test_layernorm(int N, int D) {
    char name[80];
    float *inp = rand_vec((size_t)N * D, -2, 2), *w = rand_vec(D, 0.5f, 1.5f), *b = rand_vec(D, -1, 1);
    float *dout = rand_vec((size_t)N * D, -1, 1);
    for (int j = 0; j < D; j++) inp[j] += 50.0f;  // a row whose mean dwarfs its spread
    float *out = mallocCheck(sizeof(float) * N * D), *mean = mallocCheck(sizeof(float) * N);
    float *rstd = mallocCheck(sizeof(float) * N);
    float *dinp = rand_vec((size_t)N * D, -1, 1), *dw = rand_vec(D, -1, 1), *db = rand_vec(D, -1, 1);
    float *d_inp = dev_f(inp, (size_t)N * D), *d_w = dev_f(w, D), *d_b = dev_f(b, D);
    void *d_dout = dev_buf(dout, (size_t)N * D, KERN_ACT), *d_out = new_buf((size_t)N * D, KERN_ACT);
    float *d_mean = cuda_alloc(sizeof(float) * N);
    float *d_rstd = cuda_alloc(sizeof(float) * N);
    float *d_dinp = dev_f(dinp, (size_t)N * D), *d_dw = dev_f(dw, D), *d_db = dev_f(db, D);
    float *d_dinp2 = dev_f(dinp, (size_t)N * D), *d_dw2 = dev_f(dw, D), *d_db2 = dev_f(db, D);
    cpu_layernorm_fwd(out, mean, rstd, inp, w, b, N, D, 1e-5f);
    cuda_layernorm_fwd(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, D, 1e-5f);
    snprintf(name, sizeof name, "layernorm_fwd out N=%d D=%d", N, D);
    check_buf(name, d_out, out, (size_t)N * D, TOL_EW, KERN_ACT);
    snprintf(name, sizeof name, "layernorm_fwd mean N=%d D=%d", N, D);
    check(name, d_mean, mean, N, TOL_EW);
    snprintf(name, sizeof name, "layernorm_fwd rstd N=%d D=%d", N, D);
    check(name, d_rstd, rstd, N, TOL_EW);
    cpu_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, D);
    cuda_layernorm_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, D);
    snprintf(name, sizeof name, "layernorm_bwd dinp += N=%d D=%d", N, D);
    check(name, d_dinp, dinp, (size_t)N * D, TOL_EW);
    snprintf(name, sizeof name, "layernorm_bwd dw += N=%d D=%d", N, D);
    check(name, d_dw, dw, D, TOL_EW);
    snprintf(name, sizeof name, "layernorm_bwd db += N=%d D=%d", N, D);
    check(name, d_db, db, D, TOL_EW);
    // the column sums run in a fixed order: a second run from the same start gives the same bits
    float *first = mallocCheck(sizeof(float) * (size_t)N * D);
    cuda_layernorm_bwd(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w, d_mean, d_rstd, N, D);
    const float *runs[3][2] = {{d_dinp, d_dinp2}, {d_dw, d_dw2}, {d_db, d_db2}};
    const size_t len[3] = {(size_t)N * D, (size_t)D, (size_t)D};
    const char *what[3] = {"dinp", "dw", "db"};
    for (int i = 0; i < 3; i++) {
        cuda_download(first, runs[i][0], sizeof(float) * len[i]);
        snprintf(name, sizeof name, "layernorm_bwd %s deterministic N=%d D=%d", what[i], N, D);
        check(name, runs[i][1], first, len[i], 0.0);
    }
    free(first);
    float *bufs[] = {inp, w, b, dout, out, mean, rstd, dinp, dw, db};
    void *dbufs[] = {d_inp, d_w, d_b, d_dout, d_out, d_mean, d_rstd, d_dinp, d_dw, d_db, d_dinp2, d_dw2, d_db2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++) cuda_free(dbufs[i]);
}

// ---- packed documents ----

// kstart (B*T, host) of rows packed with documents: row b takes the lengths of layout b % 4 in
// order, the rest of the row being one document (padding, or a document that runs to the end).
// Documents cross 64-row tiles, some are one token long, and one row is a single document.
static int32_t *doc_kstart(int B, int T) {
    static const int layout[4][10] = {{1, 70, 1, 60, 68}, {0}, {150}, {3, 1, 17, 40, 2, 1, 1, 30, 64}};
    int32_t *ks = mallocCheck(sizeof(int32_t) * (size_t)B * T);
    for (int b = 0; b < B; b++) {
        const int *len = layout[b % 4];
        int start = 0, i = 0, end = len[0] ? len[0] : T;
        for (int t = 0; t < T; t++) {
            if (t >= end) start = t, i++, end = len[i] ? start + len[i] : T;
            ks[(size_t)b * T + t] = start;
        }
    }
    return ks;
}

// the positions that restart per document (model_load_batch's)
static int32_t *doc_pos(const int32_t *ks, int B, int T) {
    int32_t *pos = mallocCheck(sizeof(int32_t) * (size_t)B * T);
    for (size_t n = 0; n < (size_t)B * T; n++) pos[n] = (int32_t)(n % T) - ks[n];
    return pos;
}

// ---- RoPE and the q|k|v split ----

// docs: positions per token (restarting per packed document) instead of pos0 + t
// rot: the rotated dimensions of each head (hd: all); per_head: GPT-NeoX's fused layout (H == KV)
static void test_qkv_layout(int B, int T, int H, int KV, int hd, int pos0, int rope, int docs, int rot, int per_head) {
    char name[160];
    const KernQkvLayout layout = per_head ? KERN_QKV_PER_HEAD : KERN_QKV_BLOCKED;
    const int Tt = T + pos0, half = rot / 2, W = (H + 2 * KV) * hd;
    const size_t nt = (size_t)Tt * half, n = (size_t)B * T * W, nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    float *c = mallocCheck(sizeof(float) * nt), *s = mallocCheck(sizeof(float) * nt);
    float *d_c = cuda_alloc(sizeof(float) * nt), *d_s = cuda_alloc(sizeof(float) * nt);
    // Llama-3's kind of table: some frequencies scaled down, which both backends must follow
    double *freqs = mallocCheck(sizeof(double) * half);
    for (int i = 0; i < half; i++) freqs[i] = 1.0 / pow(10000.0, 2.0 * i / rot) / (i >= half / 2 ? 8.0 : 1.0);
    cpu_rope_table(c, s, Tt, rot, freqs);
    cuda_rope_table(d_c, d_s, Tt, rot, freqs);
    free(freqs);
    if (rope) {
        check("rope_table cos", d_c, c, nt, 0.0);
        check("rope_table sin", d_s, s, nt, 0.0);
    }
    const float *ct = rope ? c : NULL, *st = rope ? s : NULL, *d_ct = rope ? d_c : NULL, *d_st = rope ? d_s : NULL;
    float *x = rand_vec(n, -1, 1);
    void *d_x = dev_buf(x, n, KERN_ACT);
    float *q = mallocCheck(sizeof(float) * nq), *k = mallocCheck(sizeof(float) * nkv), *v = mallocCheck(sizeof(float) * nkv);
    void *d_q = new_buf(nq, KERN_ACT), *d_k = new_buf(nkv, KERN_ACT), *d_v = new_buf(nkv, KERN_ACT);
    int32_t *ks = docs ? doc_kstart(B, T) : NULL, *pos = docs ? doc_pos(ks, B, T) : NULL;
    int32_t *d_pos = docs ? to_dev(pos, sizeof(int32_t) * B * T) : NULL;
    cpu_qkv_split(q, k, v, x, ct, st, B, T, H, KV, hd, rot, layout, pos0, pos);
    cuda_qkv_split(d_q, d_k, d_v, d_x, d_ct, d_st, B, T, H, KV, hd, rot, layout, pos0, d_pos);
    snprintf(name, sizeof name, "qkv_split%s q B=%d T=%d H=%d KV=%d hd=%d rot=%d%s pos0=%d%s", rope ? " rope" : "", B, T,
             H, KV, hd, rot, per_head ? " per-head" : "", pos0, docs ? " positions per document" : "");
    check_buf(name, d_q, q, nq, rope ? TOL_EW : 0.0, KERN_ACT);
    snprintf(name, sizeof name, "qkv_split%s k", rope ? " rope" : "");
    check_buf(name, d_k, k, nkv, rope ? TOL_EW : 0.0, KERN_ACT);
    snprintf(name, sizeof name, "qkv_split%s v (exact)", rope ? " rope" : "");
    check_buf(name, d_v, v, nkv, 0.0, KERN_ACT);
    // backward from the forward's outputs as the GPU holds them
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_v);
    d_q = dev_buf(q, nq, KERN_ACT), d_k = dev_buf(k, nkv, KERN_ACT), d_v = dev_buf(v, nkv, KERN_ACT);
    cpu_qkv_merge(x, q, k, v, ct, st, B, T, H, KV, hd, rot, layout, pos);
    cuda_qkv_merge(d_x, d_q, d_k, d_v, d_ct, d_st, B, T, H, KV, hd, rot, layout, d_pos);
    snprintf(name, sizeof name, "qkv_merge%s%s rot=%d%s", rope ? " rope" : "", docs ? " positions per document" : "", rot,
             per_head ? " per-head" : "");
    check_buf(name, d_x, x, n, rope ? TOL_EW : 0.0, KERN_ACT);
    free(c), free(s), free(x), free(q), free(k), free(v), free(ks), free(pos);
    if (d_pos) cuda_free(d_pos);
    cuda_free(d_c), cuda_free(d_s), cuda_free(d_x), cuda_free(d_q), cuda_free(d_k), cuda_free(d_v);
}

static void test_qkv(int B, int T, int H, int KV, int hd, int pos0, int rope, int docs) {
    test_qkv_layout(B, T, H, KV, hd, pos0, rope, docs, hd, 0);
}

// ---- attention ----

// Forward with Tq queries over Tk keys (kv batch stride kv_bstride); with Tq == Tk and a
// contiguous kv also backward, run twice on the GPU to check it is deterministic. drop: dropout
// on the probabilities (NULL: none), the same on both sides. kstart: document masks (B*Tq, host;
// NULL: plain causal), and window a sliding window (0: none), the same on both sides.
static void test_attention_docs(int B, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride,
                                const int32_t *kstart, int window, const KernDropout *drop) {
    char name[224], cfg[160];
    char dname[80] = "";
    int n = drop ? snprintf(dname, sizeof dname, " dropout p=%g", drop->p) : 0;
    if (drop && drop->head0) n += snprintf(dname + n, sizeof dname - n, " head0 %d", drop->head0);
    if (window) snprintf(dname + n, sizeof dname - n, " window %d", window);
    snprintf(cfg, sizeof cfg, "B=%d Tq=%d Tk=%d H=%d KV=%d hd=%d kv_bstride=%zu%s%s%s%s", B, Tq, Tk, H, KV, hd,
             kv_bstride, kstart ? " documents" : "", dname, mode_name(), att_path);
    int32_t *d_ks = kstart ? to_dev(kstart, sizeof(int32_t) * B * Tq) : NULL;
    if (kstart && Tq == Tk) cuda_documents_loaded(d_ks, kstart, B * Tq, Tq);  // as the model's batch load does
    const long reads0 = &emu_reads_back ? emu_reads_back : 0;
    const size_t nq = (size_t)B * Tq * H * hd, nkv = (size_t)B * kv_bstride;
    float *q = rand_vec(nq, -2, 2), *k = rand_vec(nkv, -2, 2), *v = rand_vec(nkv, -1, 1);
    float *out = mallocCheck(sizeof(float) * nq);
    float *saved = mallocCheck(sizeof(float) * cpu_attention_saved_floats(B, H, Tq, Tk));
    void *d_q = dev_buf(q, nq, KERN_ACT), *d_k = dev_buf(k, nkv, KERN_ACT), *d_v = dev_buf(v, nkv, KERN_ACT);
    void *d_out = new_buf(nq, KERN_ACT);
    float *d_saved = cuda_alloc(sizeof(float) * cuda_attention_saved_floats(B, H, Tq, Tk));
    cpu_attention_fwd(out, saved, q, k, v, B, Tq, Tk, H, KV, hd, kv_bstride, kstart, window, drop);
    cuda_attention_fwd(d_out, d_saved, d_q, d_k, d_v, B, Tq, Tk, H, KV, hd, kv_bstride, d_ks, window, drop);
    if (&emu_reads_back && kstart && Tq == Tk) {  // the document table comes from the loaded batch, not a read-back
        snprintf(name, sizeof name, "attention_fwd reads nothing back from the device %s", cfg);
        report(emu_reads_back == reads0, name, "%ld device-to-host copies", emu_reads_back - reads0);
    }
    snprintf(name, sizeof name, "attention_fwd %s", cfg);
    check_buf(name, d_out, out, nq, tol_mm(), KERN_ACT);
    if (acts) {  // backward takes out as the GPU holds it (bf16); the CPU the same values
        float *held = mallocCheck(sizeof(float) * nq);
        uint16_t *b = mallocCheck(sizeof(uint16_t) * nq);
        cuda_download(b, d_out, sizeof(uint16_t) * nq);
        cpu_bf16_to_f32(held, b, nq);
        memcpy(out, held, sizeof(float) * nq);
        free(held), free(b);
    }

    if (Tq == Tk && kv_bstride == (size_t)Tk * KV * hd) {
        const int T = Tq;
        float *dout = rand_vec(nq, -1, 1), *dq = mallocCheck(sizeof(float) * nq);
        float *dk = mallocCheck(sizeof(float) * nkv), *dv = mallocCheck(sizeof(float) * nkv);
        float *scratch = mallocCheck(sizeof(float) * cpu_attention_scratch_floats(B, H, T));
        // the GPU outputs start as garbage: backward must overwrite them
        float *junk = rand_vec(nq, -3, 3);
        void *d_dout = dev_buf(dout, nq, KERN_ACT), *d_dq = dev_buf(junk, nq, KERN_ACT);
        void *d_dk = dev_buf(junk, nkv, KERN_ACT), *d_dv = dev_buf(junk, nkv, KERN_ACT);
        free(junk);
        cpu_attention_bwd(dq, dk, dv, scratch, dout, out, saved, q, k, v, B, T, H, KV, hd, kstart, window, drop);
        float *d_scratch = cuda_alloc(sizeof(float) * cuda_attention_scratch_floats(B, H, T));
        cuda_attention_bwd(d_dq, d_dk, d_dv, d_scratch, d_dout, d_out, d_saved, d_q, d_k, d_v, B, T, H, KV, hd, d_ks, window, drop);
        const void *gpu[3] = {d_dq, d_dk, d_dv};
        const float *ref[3] = {dq, dk, dv};
        const size_t len[3] = {nq, nkv, nkv};
        const char *what[3] = {"dq", "dk", "dv"};
        void *first[3];
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "attention_bwd %s %s", what[i], cfg);
            check_buf(name, gpu[i], ref[i], len[i], tol_mm(), KERN_ACT);
            first[i] = mallocCheck(sizeof(float) * len[i]);
            cuda_download(first[i], gpu[i], dt_bytes(KERN_ACT) * len[i]);
        }
        cuda_attention_bwd(d_dq, d_dk, d_dv, d_scratch, d_dout, d_out, d_saved, d_q, d_k, d_v, B, T, H, KV, hd, d_ks, window, drop);
        for (int i = 0; i < 3; i++) {  // the same bytes again
            char *again = mallocCheck(sizeof(float) * len[i]);
            cuda_download(again, gpu[i], dt_bytes(KERN_ACT) * len[i]);
            snprintf(name, sizeof name, "attention_bwd %s deterministic %s", what[i], cfg);
            report(!memcmp(again, first[i], dt_bytes(KERN_ACT) * len[i]), name, "bytes differ between two runs");
            free(first[i]), free(again);
        }
        free(dout), free(dq), free(dk), free(dv), free(scratch);
        cuda_free(d_dout), cuda_free(d_dq), cuda_free(d_dk), cuda_free(d_dv), cuda_free(d_scratch);
    }
    free(q), free(k), free(v), free(out), free(saved);
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(d_out), cuda_free(d_saved);
    if (d_ks) cuda_free(d_ks);
}

static void test_attention(int B, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride, const KernDropout *drop) {
    test_attention_docs(B, Tq, Tk, H, KV, hd, kv_bstride, NULL, 0, drop);
}

// a sliding window of `window` keys, over packed documents (doc_kstart's layouts) when docs
static void test_attention_window(int B, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride, int window, int docs,
                                  const KernDropout *drop) {
    int32_t *ks = docs ? doc_kstart(B, Tq) : NULL;
    test_attention_docs(B, Tq, Tk, H, KV, hd, kv_bstride, ks, window, drop);
    free(ks);
}

// packed rows (doc_kstart's layouts, one per row) in the training form
static void test_attention_packed(int B, int T, int H, int KV, int hd, const KernDropout *drop) {
    int32_t *ks = doc_kstart(B, T);
    test_attention_docs(B, T, T, H, KV, hd, (size_t)T * KV * hd, ks, 0, drop);
    free(ks);
}

// One document per row, given as kstart = 0: the document-masked kernels must give the plain
// causal kernels' bytes (forward, statistics, backward), so their masks and tile bounds add nothing.
static void test_attention_one_doc(int B, int T, int H, int KV, int hd) {
    char name[160];
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd, ns = cuda_attention_saved_floats(B, H, T, T);
    float *q = rand_vec(nq, -2, 2), *k = rand_vec(nkv, -2, 2), *v = rand_vec(nkv, -1, 1), *dout = rand_vec(nq, -1, 1);
    int32_t *zeros = calloc((size_t)B * T, sizeof(int32_t));
    void *d_q = dev_buf(q, nq, KERN_ACT), *d_k = dev_buf(k, nkv, KERN_ACT), *d_v = dev_buf(v, nkv, KERN_ACT);
    void *d_dout = dev_buf(dout, nq, KERN_ACT);
    int32_t *d_ks = to_dev(zeros, sizeof(int32_t) * B * T);
    float *d_scratch = cuda_alloc(sizeof(float) * cuda_attention_scratch_floats(B, H, T));
    const size_t len[5] = {nq, ns, nq, nkv, nkv};
    const size_t bytes[5] = {dt_bytes(KERN_ACT) * nq, sizeof(float) * ns, dt_bytes(KERN_ACT) * nq,
                             dt_bytes(KERN_ACT) * nkv, dt_bytes(KERN_ACT) * nkv};
    void *res[2][5];
    char *host[2][5];
    for (int run = 0; run < 2; run++) {
        const int32_t *ks = run ? d_ks : NULL;
        for (int i = 0; i < 5; i++) res[run][i] = i == 1 ? cuda_alloc(bytes[i]) : new_buf(len[i], KERN_ACT);
        cuda_attention_fwd(res[run][0], res[run][1], d_q, d_k, d_v, B, T, T, H, KV, hd, nkv / B, ks, 0, NULL);
        cuda_attention_bwd(res[run][2], res[run][3], res[run][4], d_scratch, d_dout, res[run][0], res[run][1], d_q, d_k,
                           d_v, B, T, H, KV, hd, ks, 0, NULL);
        for (int i = 0; i < 5; i++) {
            host[run][i] = mallocCheck(bytes[i]);
            cuda_download(host[run][i], res[run][i], bytes[i]);
        }
    }
    const char *what[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "attention one document per row = causal, %s bitwise B=%d T=%d H=%d KV=%d hd=%d%s%s",
                 what[i], B, T, H, KV, hd, mode_name(), acts ? " [bf16 act]" : "");
        report(!memcmp(host[0][i], host[1][i], bytes[i]), name, "bytes differ");
        for (int run = 0; run < 2; run++) free(host[run][i]), cuda_free(res[run][i]);
    }
    free(q), free(k), free(v), free(dout), free(zeros);
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(d_dout), cuda_free(d_ks), cuda_free(d_scratch);
}

// ---- ring attention's blocks (context parallelism: kern_attention_part_*) ----
// n ranks of a cp group, each holding chunks r and 2n-1-r of every row of T: the GPU's ring over
// their blocks (forward merged by log-sum-exp, backward summed) against the CPU's part kernels on
// the same blocks, and, gathered back into sequence order, against whole-sequence attention on the
// CPU. docs: document masks of varying lengths per row (each query's document start). drop: the
// probabilities' dropout, each block drawing the whole sequence's masks of its (query, key) pairs,
// forward and backward, so the GPU's ring equals the CPU's and whole-sequence attention with it.
static void test_attention_ring(int n, int B, int T, int H, int KV, int hd, int window, int docs, const KernDropout *drop) {
    const int Tl = T / n, c = T / (2 * n);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, lq = nq / n, lk = nk / n;
    float *whole[4] = {rand_vec(nq, -1, 1), rand_vec(nq, -1, 1), rand_vec(nk, -1, 1), rand_vec(nk, -1, 1)};  // q, dout, k, v
    if (acts)  // both sides start from the values the GPU holds
        for (int x = 0; x < 4; x++) cpu_round_bf16(whole[x], x < 2 ? nq : nk);
    float *out = mallocCheck(sizeof(float) * nq), *saved = mallocCheck(sizeof(float) * cpu_attention_saved_floats(B, H, T, T));
    float *grad[3] = {mallocCheck(sizeof(float) * nq), mallocCheck(sizeof(float) * nk), mallocCheck(sizeof(float) * nk)};
    float *scratch = mallocCheck(sizeof(float) * cpu_attention_scratch_floats(B, H, T));
    int32_t *ks = docs ? mallocCheck(sizeof(int32_t) * B * T) : NULL, *lks = docs ? mallocCheck(sizeof(int32_t) * B * T) : NULL;
    for (int i = 0; docs && i < B * T; i++) ks[i] = i % T - i % T % (9 + 4 * (i / T));
    cpu_attention_fwd(out, saved, whole[0], whole[2], whole[3], B, T, T, H, KV, hd, (size_t)T * KV * hd, ks, window, drop);
    cpu_attention_bwd(grad[0], grad[1], grad[2], scratch, whole[1], out, saved, whole[0], whole[2], whole[3], B, T, H, KV, hd,
                      ks, window, drop);
    // rank r's rows: pos its positions, loc[x] its q, dout, k, v, lks its document starts
    int32_t *pos = mallocCheck(sizeof(int32_t) * T);
    for (int r = 0; r < n; r++)
        for (int t = 0; t < Tl; t++) pos[r * Tl + t] = t < c ? r * c + t : (2 * n - 1 - r) * c + t - c;
    float *loc[4];
    for (int x = 0; x < 4; x++) {
        const size_t w = (size_t)(x < 2 ? H : KV) * hd;
        loc[x] = mallocCheck(sizeof(float) * (x < 2 ? nq : nk));
        for (int r = 0; r < n; r++)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++)
                    memcpy(loc[x] + (((size_t)r * B + b) * Tl + t) * w, whole[x] + ((size_t)b * T + pos[r * Tl + t]) * w,
                           sizeof(float) * w);
    }
    for (int r = 0; docs && r < n; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) lks[((size_t)r * B + b) * Tl + t] = ks[b * T + pos[r * Tl + t]];
    // the ring on both devices: out, lse, then dq, dk, dv (zeroed first, as model/context.c does)
    float *zero = calloc(nq, sizeof(float)), *ro = mallocCheck(sizeof(float) * nq), *lse = mallocCheck(sizeof(float) * B * H * T);
    float *rg[3] = {calloc(nq, sizeof(float)), calloc(nk, sizeof(float)), calloc(nk, sizeof(float))};
    void *d_loc[4], *d_ro = new_buf(nq, KERN_ACT), *d_rg[3];
    for (int x = 0; x < 4; x++) d_loc[x] = dev_buf(loc[x], x < 2 ? nq : nk, KERN_ACT);
    for (int x = 0; x < 3; x++) d_rg[x] = dev_buf(zero, x ? nk : nq, KERN_ACT);
    float *d_lse = cuda_alloc(sizeof(float) * B * H * T);
    int32_t *d_pos = to_dev(pos, sizeof(int32_t) * T), *d_lks = docs ? to_dev(lks, sizeof(int32_t) * B * T) : NULL;
    for (int r = 0; r < n; r++)
        for (int bwd = 0; bwd < 2; bwd++)
            for (int s = 0; s < n; s++) {
                const int src = (r - s + n) % n;
                const size_t oq = r * lq, ok = src * lk, ol = (size_t)r * B * H * Tl;
                const int32_t *qf = docs ? lks + (size_t)r * B * Tl : NULL, *d_qf = docs ? d_lks + (size_t)r * B * Tl : NULL;
                KernBlock kb;  // the host's view of the block, as model/context.c passes it (cuDNN may take it)
                const KernBlock *blk = !docs && !window && kern_block_of(&kb, pos + r * Tl, pos + src * Tl, Tl, Tl) ? &kb : NULL;
                if (!bwd) {
                    cpu_attention_part_fwd(ro + oq, lse + ol, loc[0] + oq, loc[2] + ok, loc[3] + ok, B, Tl, Tl, H, KV, hd,
                                           pos + r * Tl, pos + src * Tl, qf, window, s == 0, drop, T, NULL);
                    cuda_attention_part_fwd(buf_at(d_ro, oq, KERN_ACT), d_lse + ol, buf_at(d_loc[0], oq, KERN_ACT),
                                            buf_at(d_loc[2], ok, KERN_ACT), buf_at(d_loc[3], ok, KERN_ACT), B, Tl, Tl, H, KV,
                                            hd, d_pos + r * Tl, d_pos + src * Tl, d_qf, window, s == 0, drop, T, blk);
                    continue;
                }
                cpu_attention_part_bwd(rg[0] + oq, rg[1] + ok, rg[2] + ok, loc[1] + oq, ro + oq, lse + ol, loc[0] + oq,
                                       loc[2] + ok, loc[3] + ok, B, Tl, Tl, H, KV, hd, pos + r * Tl, pos + src * Tl, qf, window,
                                       drop, T, NULL);
                cuda_attention_part_bwd(buf_at(d_rg[0], oq, KERN_ACT), buf_at(d_rg[1], ok, KERN_ACT),
                                        buf_at(d_rg[2], ok, KERN_ACT), buf_at(d_loc[1], oq, KERN_ACT),
                                        buf_at(d_ro, oq, KERN_ACT), d_lse + ol, buf_at(d_loc[0], oq, KERN_ACT),
                                        buf_at(d_loc[2], ok, KERN_ACT), buf_at(d_loc[3], ok, KERN_ACT), B, Tl, Tl, H, KV, hd,
                                        d_pos + r * Tl, d_pos + src * Tl, d_qf, window, drop, T, blk);
            }
    char cfg[160], name[256];
    snprintf(cfg, sizeof cfg, "%d ranks B=%d T=%d H=%d KV=%d hd=%d window %d%s%s%s%s", n, B, T, H, KV, hd, window,
             docs ? " documents" : "", drop ? " dropout" : "", mode_name(), att_path);
    const char *what[4] = {"out", "dq", "dk", "dv"};
    const void *gpu[4] = {d_ro, d_rg[0], d_rg[1], d_rg[2]};
    const float *cpu_ring[4] = {ro, rg[0], rg[1], rg[2]}, *want[4] = {out, grad[0], grad[1], grad[2]};
    for (int x = 0; x < 4; x++) {
        const size_t len = x < 2 ? nq : nk, w = (size_t)(x < 2 ? H : KV) * hd;
        snprintf(name, sizeof name, "ring attention part kernels %s: %s equals the CPU's", cfg, what[x]);
        check_buf(name, gpu[x], cpu_ring[x], len, tol_mm(), KERN_ACT);
        float *got = mallocCheck(sizeof(float) * len), *seq = mallocCheck(sizeof(float) * len);
        download_act(got, gpu[x], len);
        for (int r = 0; r < n; r++)  // back into sequence order
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++)
                    memcpy(seq + ((size_t)b * T + pos[r * Tl + t]) * w, got + (((size_t)r * B + b) * Tl + t) * w, sizeof(float) * w);
        snprintf(name, sizeof name, "ring attention part kernels %s: %s equals whole-sequence attention's%s", cfg, what[x],
                 acts ? " [bf16 act]" : "");
        compare(name, seq, want[x], len, acts ? TOL_ACT : tol_mm());
        free(got), free(seq);
    }
    snprintf(name, sizeof name, "ring attention part kernels %s: lse equals the CPU's", cfg);
    check(name, d_lse, lse, (size_t)B * H * T, tol_mm());
    for (int x = 0; x < 4; x++) free(whole[x]), free(loc[x]), cuda_free(d_loc[x]);
    for (int x = 0; x < 3; x++) free(grad[x]), free(rg[x]), cuda_free(d_rg[x]);
    free(out), free(saved), free(scratch), free(ks), free(lks), free(pos), free(zero), free(ro), free(lse);
    cuda_free(d_ro), cuda_free(d_lse), cuda_free(d_pos);
    if (d_lks) cuda_free(d_lks);
}

// ---- attention through cuDNN (--attention) ----

// the emulation's fake libcudnn counts the plans it finalized (absent on a GPU machine)
int emu_cudnn_plans_built(void) __attribute__((weak));
int emu_cudnn_doc_execs(void) __attribute__((weak));  // and executed document-masked graphs
int emu_cudnn_block_execs(void) __attribute__((weak));  // and ring blocks


// padded rows: row b one document of len[b] tokens (0: the whole row), the rest padding, which
// kernels.h makes a document of its own
static void test_attention_padded(int B, int T, int H, int KV, int hd, const int *len) {
    int32_t *ks = mallocCheck(sizeof(int32_t) * (size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) ks[(size_t)b * T + t] = len[b] && t >= len[b] ? len[b] : 0;
    test_attention_docs(B, T, T, H, KV, hd, (size_t)T * KV * hd, ks, 0, NULL);
    free(ks);
}

// selects attention as --attention want would, and checks the log line (or error) it gives
static const char *select_att(KernAttention want, int bf16, int hd, int want_failed, const char *want_text) {
    int failed;
    const char *line = cuda_attention_select(want, bf16, hd, &failed);
    report(failed == want_failed && strstr(line, want_text), line, "expected%s '%s'", want_failed ? " an error with" : "",
           want_text);
    return line;
}

// The start-up selection, each fallback with its reason (the emulation's FSDPC_EMU_CUDNN makes
// cuDNN missing, refuse to build, or disagree), then cuDNN's attention against the CPU's.
static void test_cudnn_attention(void) {
    set_mode(COMPUTE_BF16);
    const int emu = emu_cudnn_plans_built != NULL;
    select_att(KERN_ATTENTION_NATIVE, 1, 64, 0, "native flash kernel (--attention native)");
    select_att(KERN_ATTENTION_AUTO, 0, 64, 0, "--precision float32 keeps the fp32 native kernel");
    select_att(KERN_ATTENTION_CUDNN, 0, 64, 1, "--attention cudnn: cuDNN's fused attention runs bf16 operands only");
    select_att(KERN_ATTENTION_AUTO, 1, 80, 0, "head dim 80: cuDNN attention is used at head dims 64 and 128");
    if (emu) {
        static const struct {
            const char *mode, *reason;
        } fallbacks[] = {{"missing", "cannot load libcudnn.so.9 (libcudnn.so.9: cannot open shared object file"},
                         {"nofinalize", "none of the 1 engines cuDNN offers finalizes into a plan"},
                         {"wrong", "cuDNN and the native kernel disagree on a 4-head hd 64 check at T=96: output rel err"}};
        for (int i = 0; i < 3; i++) {
            setenv("FSDPC_EMU_CUDNN", fallbacks[i].mode, 1);
            select_att(KERN_ATTENTION_AUTO, 1, 64, 0, fallbacks[i].reason);
            select_att(KERN_ATTENTION_CUDNN, 1, 64, 1, fallbacks[i].reason);
        }
        unsetenv("FSDPC_EMU_CUDNN");
    }
    for (int hd = 64; hd <= 128; hd += 64) {
        const char *line = cuda_attention_select(KERN_ATTENTION_CUDNN, 1, hd, &(int){0});
        if (!emu && strstr(line, "cannot load")) {
            printf("# %s: cuDNN checks skipped\n", line);
            break;
        }
        select_att(KERN_ATTENTION_CUDNN, 1, hd, 0, "attention: cuDNN ");
        att_path = " [cudnn]";
        const int built = emu ? emu_cudnn_plans_built() : 0, doc_execs = emu ? emu_cudnn_doc_execs() : 0;
        if (hd == 64) {
            test_attention(2, 256, 256, 8, 2, 64, (size_t)256 * 2 * 64, NULL);  // GQA, groups of 4
            test_attention(1, 100, 100, 4, 4, 64, (size_t)100 * 4 * 64, NULL);  // no grouping, T off the tiles
            const KernDropout drop = {0.2f, 0xabcdefULL, 5, 0};  // dropout and the KV cache: the native kernel
            test_attention(2, 130, 130, 4, 2, 64, (size_t)130 * 2 * 64, &drop);
            test_attention(1, 7, 100, 8, 2, 64, (size_t)(128) * 2 * 64, NULL);
            // document masks as cuDNN's padding mask over ragged rows, one document per entry:
            // packed rows (18 documents: the 32-entry bucket), then padded rows (a document and its
            // padding per row, 5 documents: the first bucket, 6 entries) twice, a new plan once
            test_attention_packed(4, 200, 4, 2, 64, NULL);
            const int len[3] = {77, 0, 1};
            test_attention_padded(3, 130, 4, 2, 64, len);
            const int len2[3] = {129, 64, 0};
            test_attention_padded(3, 130, 4, 2, 64, len2);
            test_attention_packed(1, 200, 4, 4, 64, NULL);  // no grouping; 5 documents, 8 entries
            int32_t *tokens = mallocCheck(sizeof(int32_t) * 200);  // 100 two-token documents: native
            for (int t = 0; t < 200; t++) tokens[t] = t & ~1;
            test_attention_docs(1, 200, 200, 4, 2, 64, (size_t)200 * 2 * 64, tokens, 0, NULL);
            free(tokens);
            test_attention_window(2, 256, 256, 8, 2, 64, (size_t)256 * 2 * 64, 100, 0, NULL);  // cuDNN declines: native
        } else {
            test_attention(1, 130, 130, 4, 2, 128, (size_t)130 * 2 * 128, NULL);
            const int len[2] = {100, 3};
            test_attention_padded(2, 130, 4, 2, 128, len);
        }
        if (emu) {  // new shapes, forward and backward, built once each
            const int want = hd == 64 ? 10 : 4, got = emu_cudnn_plans_built() - built;
            report(got == want, "cuDNN plans are built once per shape", "%d plans built, expected %d", got, want);
            // each document-masked test: a forward and two backward calls, all through cuDNN
            const int want_docs = hd == 64 ? 12 : 3, got_docs = emu_cudnn_doc_execs() - doc_execs;
            report(got_docs == want_docs, "cuDNN runs the document-masked calls",
                   "%d document-masked graphs executed, expected %d", got_docs, want_docs);
        }
    }
    att_path = "";
    select_att(KERN_ATTENTION_NATIVE, 1, 64, 0, "native");
    set_mode(COMPUTE_FP32);
}

// The ring's blocks through cuDNN (bf16 activations, --attention cudnn): against the CPU's part
// kernels and whole-sequence attention (test_attention_ring), every plain causal block taken by
// cuDNN (the emulation counts the blocks it runs by the formulas: the n - 1 rectangles forward, and
// backward those and the own causal block, whose Stats is the merged log-sum-exp; the own block's
// forward is the whole-sequence graph), documents, windows and dropout left to the native kernels.
static void test_cudnn_ring(void) {
    set_mode(COMPUTE_BF16);
    set_acts(1);
    const int emu = emu_cudnn_block_execs != NULL;
    static const struct {
        int n, B, T, H, KV, hd, window, docs, blocks;  // blocks: cuDNN's ring-block executions (-1: none, with dropout)
    } cases[] = {{2, 2, 256, 4, 2, 64, 0, 0, 2 * 3},  // n ranks: n - 1 rectangles forward, n blocks backward
                 {4, 1, 512, 4, 4, 64, 0, 0, 4 * 7},  // no GQA; chunks of 64
                 {2, 1, 384, 4, 2, 128, 0, 0, 2 * 3},
                 {2, 2, 256, 4, 2, 64, 0, 1, 0},
                 {2, 2, 256, 4, 2, 64, 9, 0, 0},
                 {2, 2, 256, 4, 2, 64, 0, 0, -1}};  // -1: with attention dropout, none
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const __typeof__(cases[0]) *c = &cases[i];
        const char *line = cuda_attention_select(KERN_ATTENTION_CUDNN, 1, c->hd, &(int){0});
        if (!emu && strstr(line, "cannot load")) {
            printf("# %s: cuDNN ring checks skipped\n", line);
            break;
        }
        report(!!strstr(line, "attention: cuDNN "), line, "expected cuDNN chosen");
        att_path = " [cudnn ring]";
        const int before = emu ? emu_cudnn_block_execs() : 0;
        const KernDropout drop = {0.2f, 0xabcdefULL, 5, 0};
        test_attention_ring(c->n, c->B, c->T, c->H, c->KV, c->hd, c->window, c->docs, c->blocks < 0 ? &drop : NULL);
        if (emu) {
            char name[160];
            snprintf(name, sizeof name, "cuDNN takes the ring's plain causal blocks: %d ranks T=%d hd=%d window %d%s%s", c->n,
                     c->T, c->hd, c->window, c->docs ? " documents" : "", c->blocks < 0 ? " dropout" : "");
            const int got = emu_cudnn_block_execs() - before;
            report(got == (c->blocks < 0 ? 0 : c->blocks), name, "%d ring blocks ran through cuDNN, expected %d", got,
                   c->blocks < 0 ? 0 : c->blocks);
        }
    }
    // the frontend's backward rules at their last versions (the accumulator zeroed before 9.6, a
    // padding mask of whole lengths while s_kv % 128 != 0 up to 9.15: the rectangles' 64 keys here),
    // without which the emulated cuDNN corrupts the gradients as the real one would
    static const char *const versions[][2] = {{"90500", "9.5.0"}, {"91500", "9.15.0"}};
    for (int i = 0; emu && i < 2; i++) {
        char path[48];
        setenv("FSDPC_EMU_CUDNN_VERSION", versions[i][0], 1);
        select_att(KERN_ATTENTION_CUDNN, 1, 64, 0, "attention: cuDNN ");
        snprintf(path, sizeof path, " [cudnn ring %s]", versions[i][1]);
        att_path = path;
        test_attention_ring(2, 2, 256, 4, 2, 64, 0, 0, NULL);
    }
    unsetenv("FSDPC_EMU_CUDNN_VERSION");
    att_path = "";
    cuda_attention_select(KERN_ATTENTION_NATIVE, 1, 64, &(int){0});
    set_acts(0);
    set_mode(COMPUTE_FP32);
}

// The emulated cuDNN refuses what real cuDNN refuses, by name: each graph with one deliberate
// mistake (cuda_cudnn_probe) against the words of its refusal, and every graph fsdpc builds
// accepted. FSDPC_EMU_SM / FSDPC_EMU_CUDNN_VERSION play other GPUs and cuDNN versions.
static void test_cudnn_strict(void) {
    if (emu_cudnn_plans_built == NULL) return;  // real cuDNN: gpu-check lists its acceptance
    static const struct {
        int bwd, docs, B, T, H, KV, hd, mistake;
        const char *sm, *version, *want;  // want: NULL = accepted
    } cases[] = {
        // the graphs fsdpc builds: forward and backward, GQA and not, hd 64 and 128, document masked
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_NONE, NULL, NULL, NULL},
        {1, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_NONE, NULL, NULL, NULL},
        {0, 0, 1, 130, 4, 4, 128, CUDNN_PROBE_NONE, NULL, NULL, NULL},
        {1, 0, 1, 130, 4, 4, 128, CUDNN_PROBE_NONE, NULL, NULL, NULL},
        {0, 1, 8, 64, 8, 2, 64, CUDNN_PROBE_NONE, NULL, NULL, NULL},
        {1, 1, 8, 64, 8, 2, 64, CUDNN_PROBE_NONE, NULL, NULL, NULL},
        {1, 0, 2, 128, 4, 2, 128, CUDNN_PROBE_NONE, NULL, NULL, NULL},  // T == hd
        {0, 0, 2, 96, 4, 2, 128, CUDNN_PROBE_NONE, "80", "90900", NULL},  // Ampere, cuDNN 9.9
        {1, 1, 8, 64, 8, 2, 64, CUDNN_PROBE_NONE, "80", "91900", NULL},   // ragged on Ampere, 9.18.1+
        // one mistake each
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_P_FLOAT, NULL, NULL, "intermediate data type: tensor"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_P_FLOAT, NULL, NULL, "P before P.V, is FLOAT; the fused pattern takes BFLOAT16"},
        {1, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_PT_FLOAT, NULL, NULL, "P^T (for dV) or dS^T (for dK), is FLOAT"},
        {1, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_DS_FLOAT, NULL, NULL, "P^T (for dV) or dS^T (for dK), is FLOAT"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_SCORES_HALF, NULL, NULL, "is HALF; the fused pattern takes FLOAT"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_STATS_BF16, NULL, NULL, "Stats data type: it is BFLOAT16"},
        {1, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_STATS_BF16, NULL, NULL, "Stats data type: it is BFLOAT16"},
        {1, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_SUM_BF16, NULL, NULL, "softmax_sum data type: it is BFLOAT16"},
        {1, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_DQ_ACCUM_BF16, NULL, NULL, "dQ accumulator: it is BFLOAT16"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_STATS_LAYOUT, NULL, NULL, "Stats layout"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_IO_FLOAT, NULL, NULL, "I/O data type: Q is FLOAT"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_NONE, "75", NULL, "SM80: fused flash attention needs an Ampere"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_HEAD_STRIDE2, NULL, NULL, "head-dim stride: tensor 1 has stride 2"},
        {0, 0, 2, 96, 4, 2, 60, CUDNN_PROBE_NONE, NULL, NULL, "head dim: 60 is not a multiple of 8"},
        {1, 0, 2, 96, 4, 2, 20, CUDNN_PROBE_NONE, NULL, NULL, "head dim: 20 is not a multiple of 8"},
        {0, 0, 1, 64, 2, 2, 192, CUDNN_PROBE_NONE, "80", "90900", "head dim: 192 > 128, the most on Ampere"},
        {0, 0, 1, 64, 2, 2, 264, CUDNN_PROBE_NONE, "90", "90900", "head dim: 264 > 256, the most on Hopper"},
        {0, 0, 1, 64, 2, 2, 192, CUDNN_PROBE_NONE, "90", "90900", NULL},  // within Hopper's 256
        {0, 0, 2, 96, 4, 3, 64, CUDNN_PROBE_NONE, NULL, NULL, "heads % kv_heads: 4 query heads are not a multiple of 3"},
        {1, 0, 2, 96, 6, 4, 64, CUDNN_PROBE_NONE, NULL, NULL, "heads % kv_heads: 6 query heads"},
        {1, 0, 4, 64, 4, 2, 64, CUDNN_PROBE_RAGGED_NO_PADDING, NULL, NULL, "ragged offsets: they are only supported with a padding mask"},
        {0, 1, 8, 64, 4, 2, 64, CUDNN_PROBE_NO_SEQ_LEN_KV, NULL, NULL, "padding mask: it requires both seq_len_q and seq_len_kv"},
        {1, 1, 8, 64, 4, 2, 64, CUDNN_PROBE_NO_SEQ_LEN_KV, NULL, NULL, "padding mask: it requires both seq_len_q and seq_len_kv"},
        {0, 1, 8, 64, 8, 2, 64, CUDNN_PROBE_NONE, "80", "91800", "ragged offsets: THD (ragged offset) needs Hopper"},
        {1, 1, 8, 64, 8, 2, 64, CUDNN_PROBE_NONE, "90", "90500", "group-query attention with ragged offsets needs cuDNN 9.6"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_MASK_BEFORE_SCALE, NULL, NULL,
         "operation order: the scores go Q.K^T, causal mask, scale, then the softmax"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_UNIFIED, NULL, NULL, "this attention needs the composite SDPA graph"},
        {0, 0, 2, 96, 4, 2, 64, CUDNN_PROBE_UNIFIED, NULL, "91300", "unified SDPA node requires cuDNN 9.13.1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const __typeof__(cases[0]) *c = &cases[i];
        if (c->sm) setenv("FSDPC_EMU_SM", c->sm, 1);
        if (c->version) setenv("FSDPC_EMU_CUDNN_VERSION", c->version, 1);
        const char *why = cuda_cudnn_probe(c->bwd, c->docs, c->B, c->T, c->H, c->KV, c->hd, c->mistake);
        unsetenv("FSDPC_EMU_SM"), unsetenv("FSDPC_EMU_CUDNN_VERSION");
        char name[160];
        snprintf(name, sizeof name, "strict cuDNN: %s %s%s B=%d T=%d H=%d KV=%d hd=%d mistake %d (SM%s, %s)",
                 c->want ? "refuses" : "accepts", c->docs ? "document-masked " : "", c->bwd ? "backward" : "forward",
                 c->B, c->T, c->H, c->KV, c->hd, c->mistake, c->sm ? c->sm : "90", c->version ? c->version : "91900");
        if (!c->want)
            report(why == NULL, name, "refused: %s", why);
        else
            report(why && strstr(why, c->want), name, "expected a refusal with '%s', got %s", c->want, why ? why : "a plan");
    }
}

// The cuDNN frontend's version rules, which fsdpc applies itself (it calls the backend API): at
// each version the emulated cuDNN accepts fsdpc's graphs and corrupts where the real one would
// without the rule (a dQ accumulator not zeroed before 9.6, a backward at T % 128 != 0 without a
// padding mask up to 9.15, a padding-masked backward without the second mask from 9.0 to 9.9),
// so the start-up check and the attention checks pass only while each rule holds; 9.10.0 and
// 9.10.1 are refused by name. Each backward runs twice on the workspace earlier calls left.
static void test_cudnn_versions(void) {
    if (emu_cudnn_plans_built == NULL) return;  // one version on a GPU machine
    set_mode(COMPUTE_BF16);
    for (int patch = 0; patch <= 1; patch++) {
        char ver[8], why[64], line[128];
        snprintf(ver, sizeof ver, "9100%d", patch);
        snprintf(why, sizeof why, "cuDNN 9.10.%d has known bugs in its fused attention", patch);
        setenv("FSDPC_EMU_CUDNN_VERSION", ver, 1);
        snprintf(line, sizeof line, "attention: the native flash kernel (%s", why);
        select_att(KERN_ATTENTION_AUTO, 1, 64, 0, line);
        snprintf(line, sizeof line, "--attention cudnn: %s", why);
        select_att(KERN_ATTENTION_CUDNN, 1, 64, 1, line);
    }
    // each version with the calls its rules are about (the start-up check covers T=96 and T=128 at
    // each): T a multiple of 128 (the accumulator alone), T not (the padding mask up to 9.15, the
    // second one at 9.x), ragged rows (the second one); 9.9 and 9.15 are the rules' last versions
    static const struct {
        const char *env, *name;
        int t128, t100, ragged;
    } versions[] = {{"90500", "9.5.0", 1, 1, 1}, {"90900", "9.9.0", 0, 0, 1}, {"91500", "9.15.0", 0, 1, 0}};
    for (int i = 0; i < 3; i++) {
        char want[64], path[32];
        setenv("FSDPC_EMU_CUDNN_VERSION", versions[i].env, 1);
        snprintf(want, sizeof want, "attention: cuDNN %s fused flash attention", versions[i].name);
        select_att(KERN_ATTENTION_CUDNN, 1, 64, 0, want);
        snprintf(path, sizeof path, " [cudnn %s]", versions[i].name);
        att_path = path;
        if (versions[i].t128) test_attention(1, 128, 128, 4, 2, 64, (size_t)128 * 2 * 64, NULL);
        if (versions[i].t100) test_attention(2, 100, 100, 4, 2, 64, (size_t)100 * 2 * 64, NULL);
        if (versions[i].ragged) test_attention_packed(2, 100, 4, 4, 64, NULL);  // no GQA: ragged GQA's needs 9.6
    }
    unsetenv("FSDPC_EMU_CUDNN_VERSION");
    att_path = "";
    select_att(KERN_ATTENTION_NATIVE, 1, 64, 0, "native");
    set_mode(COMPUTE_FP32);
}

// ---- SwiGLU on the fused gate|up ----

static void test_swiglu(int N, int F) {
    const size_t n = (size_t)N * F;
    float *gu = rand_vec(2 * n, -6, 6), *dh = rand_vec(n, -1, 1);
    float *h = mallocCheck(sizeof(float) * n), *dgu = mallocCheck(sizeof(float) * 2 * n);
    void *d_gu = dev_buf(gu, 2 * n, KERN_ACT), *d_dh = dev_buf(dh, n, KERN_ACT);
    void *d_h = new_buf(n, KERN_ACT), *d_dgu = new_buf(2 * n, KERN_ACT);
    cpu_swiglu_fwd(h, gu, N, F);
    cuda_swiglu_fwd(d_h, d_gu, N, F);
    check_buf("swiglu_fwd (fused gate|up)", d_h, h, n, TOL_EW, KERN_ACT);
    cpu_swiglu_bwd(dgu, dh, gu, N, F);
    cuda_swiglu_bwd(d_dgu, d_dh, d_gu, N, F);
    check_buf("swiglu_bwd d(gate|up)", d_dgu, dgu, 2 * n, TOL_EW, KERN_ACT);
    float *bufs[] = {gu, dh, h, dgu};
    void *dbufs[] = {d_gu, d_dh, d_h, d_dgu};
    for (int i = 0; i < 4; i++) free(bufs[i]), cuda_free(dbufs[i]);
}

// ---- GELU ----

static void test_gelu_form(size_t N, KernGelu form) {
    const char *what = form == KERN_GELU_ERF ? " (erf form)" : "";
    char name[80];
    float *x = rand_vec(N, -8, 8), *dy = rand_vec(N, -1, 1);
    x[0] = -120.0f, x[1] = 120.0f, x[2] = 0.0f;  // saturated ends and 0
    float *y = mallocCheck(sizeof(float) * N), *dx = mallocCheck(sizeof(float) * N);
    void *d_x = dev_buf(x, N, KERN_ACT), *d_dy = dev_buf(dy, N, KERN_ACT), *d_y = new_buf(N, KERN_ACT);
    void *d_dx = new_buf(N, KERN_ACT);
    cpu_gelu_fwd(y, x, N, form);
    cuda_gelu_fwd(d_y, d_x, N, form);
    snprintf(name, sizeof name, "gelu_fwd%s", what);
    check_buf(name, d_y, y, N, TOL_EW, KERN_ACT);
    cpu_gelu_bwd(dx, dy, x, N, form);
    cuda_gelu_bwd(d_dx, d_dy, d_x, N, form);
    snprintf(name, sizeof name, "gelu_bwd%s", what);
    check_buf(name, d_dx, dx, N, TOL_EW, KERN_ACT);
    cuda_gelu_bwd(d_dy, d_dy, d_x, N, form);  // in place: dinp == dout
    snprintf(name, sizeof name, "gelu_bwd in place (dinp == dout)%s", what);
    check_buf(name, d_dy, dx, N, TOL_EW, KERN_ACT);
    free(x), free(dy), free(y), free(dx);
    cuda_free(d_x), cuda_free(d_dy), cuda_free(d_y), cuda_free(d_dx);
}

static void test_gelu(size_t N) {
    test_gelu_form(N, KERN_GELU_TANH);
    test_gelu_form(N, KERN_GELU_ERF);
}

// ---- bias and learned positions ----

// on a tensor of dtype dt (activations, or the residual stream's fp32)
static void test_bias(int N, int D, KernDtype dt) {
    char name[80];
    float *out = rand_vec((size_t)N * D, -1, 1), *b = rand_vec(D, -1, 1), *db = rand_vec(D, -1, 1);
    void *d_out = dev_buf(out, (size_t)N * D, dt);
    float *d_b = dev_f(b, D), *d_db = dev_f(db, D), *d_db2 = dev_f(db, D);
    cpu_bias_add(out, dt, b, N, D);
    cuda_bias_add(d_out, dt, d_b, N, D);
    snprintf(name, sizeof name, "bias_add (exact) N=%d D=%d", N, D);
    check_buf(name, d_out, out, (size_t)N * D, 0.0, dt);
    if (bf16_dt(dt)) cpu_round_bf16(out, (size_t)N * D);  // the sums below read out as the GPU holds it
    cpu_bias_bwd(db, out, dt, N, D);  // the column sums of out
    cuda_bias_bwd(d_db, d_out, dt, N, D);
    snprintf(name, sizeof name, "bias_bwd db += N=%d D=%d", N, D);
    check(name, d_db, db, D, TOL_EW);
    float *first = mallocCheck(sizeof(float) * D);
    cuda_download(first, d_db, sizeof(float) * D);
    cuda_download(db, d_db2, sizeof(float) * D);  // db as it was before
    cuda_bias_bwd(d_db2, d_out, dt, N, D);
    snprintf(name, sizeof name, "bias_bwd deterministic N=%d D=%d", N, D);
    check(name, d_db2, first, D, 0.0);
    free(out), free(b), free(db), free(first);
    cuda_free(d_out), cuda_free(d_b), cuda_free(d_db), cuda_free(d_db2);
}

static void test_positions(void) {
    const int B = 3, T = 50, D = 96, pos0 = 7, P = 64;  // wpe (P, D), P >= pos0 + T
    const size_t n = (size_t)B * T * D;
    float *out = rand_vec(n, -1, 1), *wpe = rand_vec((size_t)P * D, -1, 1), *dout = rand_vec(n, -1, 1);
    float *dwpe = rand_vec((size_t)T * D, -1, 1);
    float *d_out = dev_f(out, n), *d_wpe = dev_f(wpe, (size_t)P * D), *d_dout = dev_f(dout, n);
    float *d_dwpe = dev_f(dwpe, (size_t)T * D);
    cpu_positions_fwd(out, wpe, B, T, D, pos0);
    cuda_positions_fwd(d_out, d_wpe, B, T, D, pos0);
    check("positions_fwd (exact) pos0=7", d_out, out, n, 0.0);
    // the same additions in the same (b) order as the CPU
    cpu_positions_bwd(dwpe, dout, B, T, D);
    cuda_positions_bwd(d_dwpe, d_dout, B, T, D);
    check("positions_bwd (exact)", d_dwpe, dwpe, (size_t)T * D, 0.0);
    free(out), free(wpe), free(dout), free(dwpe);
    cuda_free(d_out), cuda_free(d_wpe), cuda_free(d_dout), cuda_free(d_dwpe);
}

// ---- router jitter ----
// elements [e0, e0 + len) of rows of M (a cp rank's chunk of a row, or across rows): the GPU draws
// the CPU's noise for them (up to a contracted multiply-add)
static void test_jitter(size_t e0, size_t len, size_t M, float j, uint64_t key, uint64_t sample0) {
    char name[112];
    float *x = rand_vec(len, -2, 2), *y = mallocCheck(sizeof(float) * len);
    void *d_x = dev_buf(x, len, KERN_ACT);
    cpu_jitter(y, x, e0, len, M, j, key, sample0);
    cuda_jitter(d_x, d_x, e0, len, M, j, key, sample0);
    snprintf(name, sizeof name, "jitter of [%zu, +%zu) M=%zu j=%g equals the CPU's", e0, len, M, j);
    check_buf(name, d_x, y, len, 1e-6, KERN_ACT);
    free(x), free(y);
    cuda_free(d_x);
}

// ---- dropout ----

// elements [e0, e0 + len) of rows of M: the GPU's range equals the CPU's
static void test_dropout_range(size_t e0, size_t len, size_t M, float p, uint64_t key, uint64_t sample0, const char *what) {
    char name[112];
    float *y = rand_vec(len, -2, 2), *d_y = dev_f(y, len);
    cpu_dropout(y, e0, len, M, p, key, sample0);
    cuda_dropout(d_y, e0, len, M, p, key, sample0);
    snprintf(name, sizeof name, "dropout of [%zu, +%zu) %s (exact) M=%zu", e0, len, what, M);
    check(name, d_y, y, len, 0.0);
    free(y);
    cuda_free(d_y);
}

// The GPU draws the CPU's mask bit for bit, and scales kept elements by the same float.
static void test_dropout(int B, size_t M, float p, uint64_t key, uint64_t sample0) {
    char name[112];
    const size_t n = (size_t)B * M;
    float *x = rand_vec(n, -2, 2), *d_x = dev_f(x, n);
    cpu_dropout(x, 0, n, M, p, key, sample0);
    cuda_dropout(d_x, 0, n, M, p, key, sample0);
    snprintf(name, sizeof name, "dropout (exact, same mask) B=%d M=%zu p=%g sample0=%llu", B, M, p,
             (unsigned long long)sample0);
    check(name, d_x, x, n, 0.0);
    // elements [e0, e0 + len) that start and end inside rows, as a sequence-parallel rank's; then
    // fewer than a row's, across a row boundary (the grid spans n, not M)
    const size_t e0 = M / 3 + 1, e1 = M / 2, len1 = M / 2 + 3 < n - e1 ? M / 2 + 3 : n - e1;
    test_dropout_range(e0, n - e0 - M / 2, M, p, key, sample0, "inside rows");
    test_dropout_range(e1, len1, M, p, key, sample0, "across a row boundary");
    free(x);
    cuda_free(d_x);
}

// ---- embedding ----

static void test_embedding(void) {
    const int V = 50, N = 700, D = 300;
    int32_t *tok = rand_tokens(N, 7);  // few distinct tokens: long runs of repeats
    for (int n = 100; n < 400; n++) tok[n] = 42;  // and one token seen 300 times in a row
    tok[N - 1] = V - 1;
    float *wte = rand_vec((size_t)V * D, -1, 1), *dout = rand_vec((size_t)N * D, -1, 1);
    float *out = mallocCheck(sizeof(float) * N * D);
    int32_t *d_tok = to_dev(tok, sizeof(int32_t) * N);
    float *d_wte = dev_f(wte, (size_t)V * D), *d_dout = dev_f(dout, (size_t)N * D);
    float *d_out = cuda_alloc(sizeof(float) * N * D);
    cpu_embedding_fwd(out, tok, wte, N, D);
    cuda_embedding_fwd(d_out, d_tok, d_wte, N, D);
    check("embedding_fwd (exact)", d_out, out, (size_t)N * D, 0.0);
    // dwte += ...: wte itself serves as the prior gradient; same additions in the same order
    cpu_embedding_bwd(wte, dout, tok, N, D);
    cuda_embedding_bwd(d_wte, d_dout, d_tok, N, D);
    check("embedding_bwd repeated tokens (exact)", d_wte, wte, (size_t)V * D, 0.0);
    // vocabulary-parallel parts: rows [20, 35) of the table; the other tokens give zero rows (over
    // the garbage out held) and no gradient
    const int v0 = 20, Vl = 15;
    for (int i = 0; i < N; i += 5) tok[i] = v0 + i % Vl;
    cuda_upload(d_tok, tok, sizeof(int32_t) * N);
    cpu_embedding_part_fwd(out, tok, wte + (size_t)v0 * D, N, D, v0, Vl);
    cuda_embedding_part_fwd(d_out, d_tok, d_wte + (size_t)v0 * D, N, D, v0, Vl);
    check("embedding_part_fwd (exact)", d_out, out, (size_t)N * D, 0.0);
    cpu_embedding_part_bwd(wte + (size_t)v0 * D, dout, tok, N, D, v0, Vl);
    cuda_embedding_part_bwd(d_wte + (size_t)v0 * D, d_dout, d_tok, N, D, v0, Vl);
    check("embedding_part_bwd (exact, the other rows untouched)", d_wte, wte, (size_t)V * D, 0.0);
    free(tok), free(wte), free(dout), free(out);
    cuda_free(d_tok), cuda_free(d_wte), cuda_free(d_dout), cuda_free(d_out);
}

// ---- token ids ----

// Tokens outside [0, V) and targets of V or more become 0 on both devices, and both note the first
// place (tokens, then targets), offset by the batch's base; the GPU's note is fetched by
// cuda_token_error, once. Negative targets bear no loss: legal, left as they are.
static void test_tokens_check(void) {
    const int N = 600, V = 50;
    int32_t *tok = rand_tokens(N, V), *tgt = rand_tokens(N, V);
    tgt[3] = -100, tgt[7] = -3, tgt[500] = V, tok[401] = V + 1000, tok[599] = -1;  // the first is tok[401]
    int32_t *d_tok = to_dev(tok, sizeof(int32_t) * N), *d_tgt = to_dev(tgt, sizeof(int32_t) * N);
    long long ci = -1, gi = -1;
    int cid = 0, gid = 0;
    cpu_tokens_check(tok, tgt, N, V, 3LL * 2 * N);
    cuda_tokens_check(d_tok, d_tgt, N, V, 3LL * 2 * N);
    const int cpu_noted = cpu_token_error(&ci, &cid);
    const int gpu_noted = cuda_token_error(&gi, &gid), again = cuda_token_error(&gi, &gid);
    report(cpu_noted && ci == 3LL * 2 * N + 401 && cid == V + 1000, "tokens_check: the CPU notes the first bad id",
           "%d %lld %d", cpu_noted, ci, cid);
    report(gpu_noted && !again && gi == 3LL * 2 * N + 401 && gid == V + 1000,
           "tokens_check: the GPU notes the first bad id, fetched once", "%d %d %lld %d", gpu_noted, again, gi, gid);
    int32_t *back = mallocCheck(sizeof(int32_t) * N);
    cuda_download(back, d_tgt, sizeof(int32_t) * N);
    report(!memcmp(back, tgt, sizeof(int32_t) * N) && tgt[500] == 0, "tokens_check: bad ids become 0",
           "targets differ");
    report(tgt[3] == -100 && tgt[7] == -3, "tokens_check: negative targets (no loss) stay", "%d %d", tgt[3], tgt[7]);
    cuda_download(back, d_tok, sizeof(int32_t) * N);
    report(!memcmp(back, tok, sizeof(int32_t) * N) && tok[401] == 0 && tok[599] == 0,
           "tokens_check: bad ids become 0 (tokens, negative ones too)", "tokens differ");
    // targets alone: a negative one is no error, one of V or more is
    int32_t only[4] = {-100, 3, -1, 0};
    int32_t *d_only = to_dev(only, sizeof only), *d_tok4 = to_dev(only + 1, sizeof(int32_t));
    cpu_tokens_check(only + 1, only, 1, V, 0);
    cuda_tokens_check(d_tok4, d_only, 1, V, 0);
    report(!cpu_token_error(&ci, &cid) && !cuda_token_error(&gi, &gid), "tokens_check: a negative target is no error",
           "noted");
    cuda_free(d_only), cuda_free(d_tok4);
    free(tok), free(tgt), free(back);
    cuda_free(d_tok), cuda_free(d_tgt);
}

// ---- cross-entropy ----

// the loss sum of one call: the GPU's accumulates on the device (from 0.25 here), fetched after
static double ce_gpu(void *d_logits, const int32_t *d_tgt, int N, int V, float dscale) {
    const double start = 0.25;
    double *d_loss = to_dev(&start, sizeof start), loss;
    cuda_crossentropy_fwd_bwd(d_logits, d_tgt, N, V, dscale, d_loss);
    cuda_download(&loss, d_loss, sizeof loss);
    cuda_free(d_loss);
    return loss - start;
}

static double ce_cpu(float *logits, const int32_t *tgt, int N, int V, float dscale) {
    double loss = 0.0;
    cpu_crossentropy_fwd_bwd(logits, tgt, N, V, dscale, &loss);
    return loss;
}

// masked: some targets are negative (no loss: 0, and a zero gradient row), the first and last among them
static void test_crossentropy(int N, int V, int masked) {
    char name[96];
    const size_t n = (size_t)N * V;
    float *logits = rand_vec(n, -8, 8), *orig = mallocCheck(sizeof(float) * n);
    int32_t *tgt = rand_tokens(N, V);
    if (masked)
        for (int i = 0; i < N; i++)
            if (i == 0 || i == N - 1 || i % 3 == 1) tgt[i] = i % 2 ? -100 : -1;
    void *d_logits = dev_buf(logits, n, KERN_ACT);
    memcpy(orig, logits, sizeof(float) * n);
    int32_t *d_tgt = to_dev(tgt, sizeof(int32_t) * N);
    // evaluation: logits untouched
    const double le_cpu = ce_cpu(logits, tgt, N, V, 0.0f), le_gpu = ce_gpu(d_logits, d_tgt, N, V, 0.0f);
    const char *mk = masked ? " negative targets" : "";
    snprintf(name, sizeof name, "crossentropy loss (eval) N=%d V=%d%s", N, V, mk);
    check_scalar(name, le_gpu, le_cpu, 1e-5);
    snprintf(name, sizeof name, "crossentropy dscale=0 leaves logits N=%d V=%d%s", N, V, mk);
    check_buf(name, d_logits, orig, n, 0.0, KERN_ACT);
    const float dscale = 1.0f / N;
    const double l_cpu = ce_cpu(logits, tgt, N, V, dscale), l_gpu = ce_gpu(d_logits, d_tgt, N, V, dscale);
    snprintf(name, sizeof name, "crossentropy loss N=%d V=%d%s", N, V, mk);
    check_scalar(name, l_gpu, l_cpu, 1e-5);
    snprintf(name, sizeof name, "crossentropy dlogits N=%d V=%d%s", N, V, mk);
    check_buf(name, d_logits, logits, n, TOL_EW, KERN_ACT);
    if (masked) {  // the rows without loss are exactly 0 on the GPU
        float *back = mallocCheck(sizeof(float) * n);
        download_act(back, d_logits, n);
        int zero = 1;
        for (int i = 0; i < N; i++)
            for (int j = 0; tgt[i] < 0 && j < V; j++) zero &= back[(size_t)i * V + j] == 0.0f;
        snprintf(name, sizeof name, "crossentropy dlogits rows of negative targets are 0 N=%d V=%d", N, V);
        report(zero, name, "a nonzero gradient");
        free(back);
    }
    free(logits), free(orig), free(tgt);
    cuda_free(d_logits), cuda_free(d_tgt);
}

// ---- vocabulary-parallel cross-entropy ----

// Each of the three calls on one rank's part, columns [v0, v0 + Vl) of V, against the CPU's on the
// same inputs. The other ranks' share is played by the host: a larger max on some rows, more exp
// sums, the target's logit where the target lies elsewhere. Targets fall inside the part, outside
// it, and some are negative (no loss).
static void test_xent_part(int N, int Vl, int v0, int V) {
    char name[112];
    const size_t n = (size_t)N * Vl;
    float *logits = rand_vec(n, -8, 8), *orig = mallocCheck(sizeof(float) * n), *back = mallocCheck(sizeof(float) * n);
    int32_t *tgt = rand_tokens(N, V);
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0) tgt[i] = v0 + (int32_t)(rng_next() % Vl);  // the target here
        if (i % 4 == 1) tgt[i] = i % 2 ? -100 : -1;                // no loss
    }
    logits[2 * (size_t)Vl + Vl - 1] = 9.0f, logits[3 * (size_t)Vl] = 9.0f;  // maxes in a row's last and first column
    void *d_logits = dev_buf(logits, n, KERN_ACT);
    memcpy(orig, logits, sizeof(float) * n);
    int32_t *d_tgt = to_dev(tgt, sizeof(int32_t) * N);
    float *mx = mallocCheck(sizeof(float) * N), *sums = mallocCheck(sizeof(float) * 2 * N);
    float *d_mx = cuda_alloc(sizeof(float) * N), *d_sums = cuda_alloc(sizeof(float) * 2 * N);
    cpu_xent_part_max(logits, N, Vl, mx);
    cuda_xent_part_max(d_logits, N, Vl, d_mx);
    snprintf(name, sizeof name, "xent_part_max (exact) N=%d Vl=%d", N, Vl);
    check(name, d_mx, mx, N, 0.0);
    for (int i = 0; i < N; i += 2) mx[i] += 0.75f;  // another rank's larger max
    cuda_upload(d_mx, mx, sizeof(float) * N);
    cpu_xent_part_sums(logits, tgt, N, Vl, v0, mx, sums);
    cuda_xent_part_sums(d_logits, d_tgt, N, Vl, v0, d_mx, d_sums);
    snprintf(name, sizeof name, "xent_part_sums N=%d Vl=%d v0=%d", N, Vl, v0);
    check(name, d_sums, sums, 2 * (size_t)N, TOL_EW);
    for (int i = 0; i < N; i++)  // the other ranks' sums and target logits
        if (tgt[i] >= 0) {
            sums[2 * i] += 0.5f * Vl;
            if (tgt[i] < v0 || tgt[i] >= v0 + Vl) sums[2 * i + 1] = 3.0f;
        }
    cuda_upload(d_sums, sums, sizeof(float) * 2 * N);
    double l_cpu = 0.0, l_gpu, start = 0.25;
    double *d_loss = to_dev(&start, sizeof start);
    // evaluation: the loss, logits untouched
    cpu_xent_part_finish(logits, tgt, N, Vl, v0, mx, sums, 0.0f, 1, &l_cpu);
    cuda_xent_part_finish(d_logits, d_tgt, N, Vl, v0, d_mx, d_sums, 0.0f, 1, d_loss);
    cuda_download(&l_gpu, d_loss, sizeof l_gpu);
    snprintf(name, sizeof name, "xent_part_finish loss (eval) N=%d Vl=%d v0=%d", N, Vl, v0);
    check_scalar(name, l_gpu - start, l_cpu, 1e-5);
    snprintf(name, sizeof name, "xent_part_finish dscale=0 leaves logits N=%d Vl=%d", N, Vl);
    check_buf(name, d_logits, orig, n, 0.0, KERN_ACT);
    // training on a rank that does not add the loss
    const float dscale = 1.0f / N;
    cuda_upload(d_loss, &start, sizeof start);
    cpu_xent_part_finish(logits, tgt, N, Vl, v0, mx, sums, dscale, 0, &l_cpu);
    cuda_xent_part_finish(d_logits, d_tgt, N, Vl, v0, d_mx, d_sums, dscale, 0, d_loss);
    cuda_download(&l_gpu, d_loss, sizeof l_gpu);
    snprintf(name, sizeof name, "xent_part_finish dlogits N=%d Vl=%d v0=%d", N, Vl, v0);
    check_buf(name, d_logits, logits, n, TOL_EW, KERN_ACT);
    download_act(back, d_logits, n);
    int zero = 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; tgt[i] < 0 && j < Vl; j++) zero &= back[(size_t)i * Vl + j] == 0.0f;
    snprintf(name, sizeof name, "xent_part_finish: rows of negative targets are 0, no loss added N=%d Vl=%d", N, Vl);
    report(zero && l_gpu == start, name, "zero rows %d, loss %.17g", zero, l_gpu);
    free(logits), free(orig), free(back), free(tgt), free(mx), free(sums);
    cuda_free(d_logits), cuda_free(d_tgt), cuda_free(d_mx), cuda_free(d_sums), cuda_free(d_loss);
}

// The three calls with v0 = 0 and Vl = V (one rank: no all-reduce between them) against the fused kernel.
static void test_xent_whole(int N, int V) {
    char name[96];
    const size_t n = (size_t)N * V;
    float *logits = rand_vec(n, -8, 8), *ref = mallocCheck(sizeof(float) * n);
    int32_t *tgt = rand_tokens(N, V);
    tgt[1] = -100;
    void *d_a = dev_buf(logits, n, KERN_ACT), *d_b = dev_buf(logits, n, KERN_ACT);
    int32_t *d_tgt = to_dev(tgt, sizeof(int32_t) * N);
    float *d_mx = cuda_alloc(sizeof(float) * N), *d_sums = cuda_alloc(sizeof(float) * 2 * N);
    const float dscale = 1.0f / N;
    const double l_fused = ce_gpu(d_a, d_tgt, N, V, dscale);
    double *d_loss = cuda_alloc(sizeof(double)), l_part;
    cuda_xent_part_max(d_b, N, V, d_mx);
    cuda_xent_part_sums(d_b, d_tgt, N, V, 0, d_mx, d_sums);
    cuda_xent_part_finish(d_b, d_tgt, N, V, 0, d_mx, d_sums, dscale, 1, d_loss);
    cuda_download(&l_part, d_loss, sizeof l_part);
    snprintf(name, sizeof name, "xent_part at tp=1: the fused kernel's loss N=%d V=%d", N, V);
    check_scalar(name, l_part, l_fused, 1e-6);
    download_act(ref, d_a, n);
    snprintf(name, sizeof name, "xent_part at tp=1: the fused kernel's dlogits N=%d V=%d", N, V);
    check_buf(name, d_b, ref, n, 1e-6, KERN_ACT);
    free(logits), free(ref), free(tgt);
    cuda_free(d_a), cuda_free(d_b), cuda_free(d_tgt), cuda_free(d_mx), cuda_free(d_sums), cuda_free(d_loss);
}

static void test_vocab_parallel(void) {
    test_xent_part(13, 1000, 3000, 4000);
    test_xent_part(5, 16000, 16000, 32000);  // half of a 32000 vocabulary
    test_xent_part(7, 333, 0, 333);          // the whole vocabulary, Vl not a multiple of the block
    test_xent_whole(13, 1000);
    test_xent_whole(5, 32000);
}

// ---- vector ops, sumsq, AdamW ----

static void test_vector_ops(void) {
    const size_t n = 100003;
    float *a = rand_vec(n, -1, 1), *b = rand_vec(n, -1, 1), *c = mallocCheck(sizeof(float) * n);
    float *d_a = dev_f(a, n), *d_b = dev_f(b, n), *d_c = cuda_alloc(sizeof(float) * n);
    cpu_add3(c, a, b, n);
    cuda_add3(d_c, d_a, d_b, n);
    check("add3 (exact)", d_c, c, n, 0.0);
    cpu_add(a, b, n);
    cuda_add(d_a, d_b, n);
    check("add (exact)", d_a, a, n, 0.0);
    cpu_scale(a, 0.37f, n);
    cuda_scale(d_a, 0.37f, n);
    check("scale (exact)", d_a, a, n, 0.0);
    cpu_copy(c, a, n);
    cuda_copy(d_c, d_a, n);
    check("copy (exact)", d_c, c, n, 0.0);
    cpu_zero(c, n - 1);
    cuda_zero(d_c, n - 1);
    check("zero (exact)", d_c, c, n, 0.0);
    free(a), free(b), free(c);
    cuda_free(d_a), cuda_free(d_b), cuda_free(d_c);
}

static void test_sumsq(size_t n) {
    char name[64];
    float *x = rand_vec(n, -3, 3), *d_x = dev_f(x, n);
    const double ref = cpu_sumsq(x, n), got = cuda_sumsq(d_x, n);
    snprintf(name, sizeof name, "sumsq n=%zu", n);
    check_scalar(name, got, ref, 1e-9);
    snprintf(name, sizeof name, "sumsq deterministic n=%zu", n);
    const double again = cuda_sumsq(d_x, n);
    report(!memcmp(&got, &again, sizeof got), name, "%.17g vs %.17g", got, again);
    double *d_sum = cuda_alloc(sizeof(double)), to;
    cuda_sumsq_to(d_sum, d_x, n);  // into device memory, as the gradient norm's per-unit sums
    cuda_download(&to, d_sum, sizeof to);
    snprintf(name, sizeof name, "sumsq_to n=%zu", n);
    report(!memcmp(&got, &to, sizeof got), name, "%.17g vs %.17g", to, got);
    cuda_free(d_sum);
    free(x);
    cuda_free(d_x);
}

// one launch per unit shard: decay ranges, the clip coefficient, the bf16 copy of p
static void test_adamw(void) {
    const size_t n = 10007;
    float *p = rand_vec(n, -1, 1), *g = rand_vec(n, -0.1f, 0.1f), *m = rand_vec(n, -0.01f, 0.01f);
    float *v = rand_vec(n, 0.0f, 1e-4f);
    float *d_p = dev_f(p, n), *d_g = dev_f(g, n), *d_m = dev_f(m, n), *d_v = dev_f(v, n);
    uint16_t *pb = mallocCheck(sizeof(uint16_t) * n), *pb_gpu = mallocCheck(sizeof(uint16_t) * n);
    uint16_t *d_pb = cuda_alloc(sizeof(uint16_t) * n);
    KernAdamW h = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.6f,
                   .ndecay = 3, .decay = {{0, 17}, {40, 5000}, {5001, n}}};
    for (int step = 1; step <= 3; step++) {
        h.step = step;
        cpu_adamw(p, pb, g, m, v, n, &h);
        cuda_adamw(d_p, d_pb, d_g, d_m, d_v, n, &h);
    }
    check("adamw p (3 steps, decay ranges, clip scale)", d_p, p, n, 1e-5);
    check("adamw m", d_m, m, n, 1e-5);
    check("adamw v", d_v, v, n, 1e-5);
    float *pg = mallocCheck(sizeof(float) * n);  // the GPU's own p, rounded, is what its copy must hold
    cuda_download(pg, d_p, sizeof(float) * n);
    cpu_f32_to_bf16(pb, pg, n);
    cuda_download(pb_gpu, d_pb, sizeof(uint16_t) * n);
    report(!memcmp(pb, pb_gpu, sizeof(uint16_t) * n), "adamw bf16 copy of p (exact)", "bits differ");
    free(p), free(g), free(m), free(v), free(pb), free(pb_gpu), free(pg);
    cuda_free(d_p), cuda_free(d_g), cuda_free(d_m), cuda_free(d_v), cuda_free(d_pb);
}

// ---- bf16 ----

// n values at element offset off of their device buffers: whole 16-byte groups, a tail, and
// pointers off 16-byte alignment (the one-at-a-time path)
static void test_bf16_at(size_t n, size_t off) {
    char name[120];
    float *x = rand_vec(n, -100, 100);
    // specials: NaNs, infinities, signed zeros, exact ties (round to even both ways), overflow to Inf
    const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x00000000u,
                                0x80000000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u, 0x807fffffu};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(x + i, special + i, sizeof(float));
    uint16_t *h = mallocCheck(sizeof(uint16_t) * n), *hg = mallocCheck(sizeof(uint16_t) * n);
    float *y = mallocCheck(sizeof(float) * n);
    float *d_x0 = cuda_alloc(sizeof(float) * (n + off)), *d_y0 = cuda_alloc(sizeof(float) * (n + off));
    uint16_t *d_h0 = cuda_alloc(sizeof(uint16_t) * (n + off));
    float *d_x = d_x0 + off, *d_y = d_y0 + off;
    uint16_t *d_h = d_h0 + off;
    cuda_upload(d_x, x, sizeof(float) * n);
    const char *at = off ? ", unaligned" : n % 8 ? ", with a tail" : "";
    cpu_f32_to_bf16(h, x, n);
    cuda_f32_to_bf16(d_h, d_x, n);
    cuda_download(hg, d_h, sizeof(uint16_t) * n);
    snprintf(name, sizeof name, "f32_to_bf16 (exact, with NaN/Inf/ties) n=%zu%s", n, at);
    report(!memcmp(h, hg, sizeof(uint16_t) * n), name, "bits differ");
    cpu_bf16_to_f32(y, h, n);
    cuda_bf16_to_f32(d_y, d_h, n);
    snprintf(name, sizeof name, "bf16_to_f32 (exact) n=%zu%s", n, at);
    check(name, d_y, y, n, 0.0);
    cpu_round_bf16(x, n);
    cuda_round_bf16(d_x, n);
    snprintf(name, sizeof name, "round_bf16 in place (exact, with NaN/Inf/ties) n=%zu%s", n, at);
    check(name, d_x, x, n, 0.0);
    report(!memcmp(x, y, sizeof(float) * n), "round_bf16 equals the round trip through bf16 (CPU)", "bits differ");
    free(x), free(h), free(hg), free(y);
    cuda_free(d_x0), cuda_free(d_y0), cuda_free(d_h0);
}

static void test_bf16(void) {
    test_bf16_at(4096, 0);
    test_bf16_at(4101, 0);
    test_bf16_at(4101, 1);
}

// ---- NF4: a packed tensor dequantised on the GPU equals the CPU's bit for bit, and as bf16
// parameters equals the CPU's values rounded ----

static void test_nf4_at(size_t n) {
    char name[120];
    float *x = rand_vec(n, -1, 1), *ref = mallocCheck(sizeof(float) * n), *got = mallocCheck(sizeof(float) * n);
    // blocks of different scales, so that the scales' products are not small beside their offset
    for (size_t i = 0; i < n; i++) x[i] *= (float)(1 + i / 64 % 7);
    x[n / 2] = 40.0f;  // an outlier
    if (n > 200) memset(x + 64, 0, sizeof(float) * 64);  // a zero block
    const size_t bytes = kern_nf4_bytes(n);
    uint8_t *q = mallocCheck(bytes);
    kern_nf4_quantize(q, x, n);
    const KernSegs all = {1, n, n, 0};
    cpu_nf4_dequantize(ref, 1, q, n, all);
    uint8_t *d_q = to_dev(q, bytes);
    float *d_y = cuda_alloc(sizeof(float) * n);
    cuda_nf4_dequantize(d_y, 0, d_q, n, all);
    snprintf(name, sizeof name, "nf4_dequantize (exact) n=%zu", n);
    check(name, d_y, ref, n, 0.0);
    if (n >= 64 * 6) {  // a tp rank's part: 3 runs of a sixth, from its second sixth
        const KernSegs seg = {3, n / 6, n / 3, n / 6};
        float *part = mallocCheck(sizeof(float) * n);
        cpu_nf4_dequantize(part, 1, q, n, seg);
        cuda_nf4_dequantize(d_y, 0, d_q, n, seg);
        snprintf(name, sizeof name, "nf4_dequantize of a tp rank's segments (exact) n=%zu", n);
        check(name, d_y, part, seg.n * seg.len, 0.0);
        cuda_set_params_bf16(1);  // fp32 asked for: fp32 even under bf16 parameters
        cuda_nf4_dequantize(d_y, 1, d_q, n, seg);
        cuda_set_params_bf16(0);
        snprintf(name, sizeof name, "nf4_dequantize to fp32 under bf16 parameters (exact) n=%zu", n);
        check(name, d_y, part, seg.n * seg.len, 0.0);
        free(part);
    }
    uint16_t *h = mallocCheck(sizeof(uint16_t) * n), *d_h = cuda_alloc(sizeof(uint16_t) * n);
    cuda_set_params_bf16(1);
    cuda_nf4_dequantize(d_h, 0, d_q, n, all);
    cuda_set_params_bf16(0);
    cuda_download(h, d_h, sizeof(uint16_t) * n);
    cpu_bf16_to_f32(got, h, n);
    cpu_round_bf16(ref, n);
    snprintf(name, sizeof name, "nf4_dequantize [bf16 params] (the fp32 values rounded) n=%zu", n);
    compare(name, got, ref, n, 0.0);
    free(x), free(ref), free(got), free(q), free(h);
    cuda_free(d_q), cuda_free(d_y), cuda_free(d_h);
}

static void test_nf4(void) {
    test_nf4_at(1);
    test_nf4_at(1000);
    test_nf4_at(64 * 256 * 2 + 77);  // three groups, the last block partial
}

// ---- --precision bf16's activations: every kernel that reads or writes them, on bf16 ----

static void test_bf16_activations(void) {
    set_mode(COMPUTE_BF16);
    set_acts(1);
    test_matmul(64, 128, 96, 0, KERN_ACT);
    test_matmul(64, 128, 96, 0, KERN_F32);  // the residual stream's GEMMs: fp32 out, fp32 dout rounded
    test_matmul(67, 45, 83, 1, KERN_ACT);   // odd sizes, 2-byte aligned operands
    if (emu_cudnn_plans_built != NULL) {     // no bf16 algorithm: the fp32 fallback, bf16 out through fp32 scratch
        setenv("FSDPC_EMU_LT_NO_BF16", "1", 1);
        test_matmul(61, 45, 83, 1, KERN_ACT);
        unsetenv("FSDPC_EMU_LT_NO_BF16");
    }
    test_attention(2, 256, 256, 8, 2, 64, (size_t)256 * 2 * 64, NULL);
    test_attention(2, 77, 77, 6, 3, 24, (size_t)77 * 3 * 24, NULL);
    test_attention(1, 7, 100, 8, 2, 64, (size_t)(128) * 2 * 64, NULL);  // KV cache
    const KernDropout drop = {0.2f, 0xabcdefULL, 5, 0};
    test_attention(2, 130, 130, 4, 2, 64, (size_t)130 * 2 * 64, &drop);
    test_attention_packed(4, 200, 4, 2, 64, NULL);
    test_attention_one_doc(2, 130, 4, 2, 64);
    test_attention_ring(2, 2, 96, 4, 2, 32, 0, 1, NULL);  // the ring's blocks and sums as bf16 activations
    // cuDNN reads and writes the bf16 activations where they lie
    const char *line = cuda_attention_select(KERN_ATTENTION_CUDNN, 1, 64, &(int){0});
    if (emu_cudnn_plans_built != NULL || !strstr(line, "cannot load")) {
        att_path = " [cudnn]";
        test_attention(2, 256, 256, 8, 2, 64, (size_t)256 * 2 * 64, NULL);
        test_attention(1, 100, 100, 4, 4, 64, (size_t)100 * 4 * 64, NULL);
        att_path = "";
    }
    cuda_attention_select(KERN_ATTENTION_NATIVE, 1, 64, &(int){0});
    test_rmsnorm(37, 300);
    test_rmsnorm(5, 2048);  // eight columns at a time, bf16 out and weights
    test_add_norm(300, 4096, 0);
    test_add_norm(37, 300, 1);
    test_layernorm(37, 300);
    test_qkv(2, 9, 4, 2, 24, 5, 1, 0);
    test_qkv(2, 5, 4, 4, 8, 0, 0, 0);
    test_qkv(4, 90, 2, 2, 16, 0, 1, 1);
    test_qkv_layout(2, 9, 4, 4, 16, 3, 1, 0, 4, 1);
    test_qkv(2, 33, 4, 2, 128, 0, 1, 1);             // eight at a time: Llama's head, documents
    test_qkv_layout(2, 9, 4, 2, 64, 5, 1, 0, 32, 0); // ... partial rotation in halves of 16
    test_swiglu(37, 2731);
    test_swiglu(5, 344);  // rows of whole 16-byte groups
    test_gelu(100003);
    test_bias(37, 300, KERN_ACT);
    test_bias(37, 300, KERN_F32);
    test_crossentropy(13, 1000, 0);
    test_crossentropy(13, 1000, 1);
    test_vocab_parallel();
    set_acts(0);
    set_mode(COMPUTE_FP32);
}

// ---- --bench: kernel timings at the ~1B model's shapes, or TEST_GPU_BENCH's ----

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// milliseconds per run of stmt: one untimed run, then reps timed ones
#define TIME_MS(reps, stmt)                                   \
    ({                                                        \
        stmt;                                                 \
        cuda_sync();                                          \
        const double t0_ = now_ms();                          \
        for (int rep_ = 0; rep_ < (reps); rep_++) { stmt; }   \
        cuda_sync();                                          \
        (now_ms() - t0_) / (reps);                            \
    })

// n uniform floats in [-1, 1) on the device: timings on zeros would flatter the hardware (zero
// operands draw less power, so the clocks stay higher). A random block of at most 4M floats is
// repeated: generating a large buffer on the host would take longer than the timings.
static float *dev_rand(size_t n) {
    const size_t blk = n < ((size_t)1 << 22) ? n : (size_t)1 << 22;
    float *h = rand_vec(blk, -1, 1), *d = cuda_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i += blk) cuda_upload(d + i, h, sizeof(float) * (n - i < blk ? n - i : blk));
    free(h);
    return d;
}

// a bf16 device copy of n device floats
static uint16_t *bf16_copy(const float *src, size_t n) {
    uint16_t *d = cuda_alloc(sizeof(uint16_t) * (n ? n : 1));
    cuda_f32_to_bf16(d, src, n);
    return d;
}

// n random bf16 values on the device
static uint16_t *dev_rand_bf16(size_t n) {
    float *f = dev_rand(n);
    uint16_t *d = bf16_copy(f, n);
    cuda_free(f);
    return d;
}

// The --bench shapes: make bench-gpu's ~1B Llama, or TEST_GPU_BENCH="B T D F H KV V" (make
// gpu-check's dry run times a tiny one on the emulator)
typedef struct {
    int B, T, D, F, H, KV, V;
} BenchShape;

static BenchShape bench_shape(void) {
    BenchShape s = {4, 2048, 2048, 5632, 16, 8, 32000};
    const char *e = getenv("TEST_GPU_BENCH");
    if (e && sscanf(e, "%d %d %d %d %d %d %d", &s.B, &s.T, &s.D, &s.F, &s.H, &s.KV, &s.V) != 7) {
        fprintf(stderr, "TEST_GPU_BENCH=\"%s\": want \"B T D F H KV V\"\n", e);
        exit(2);
    }
    return s;
}

// GEMMs: each linear layer of the model, as --precision bf16 trains it (bf16 weights and
// activations, fp32 weight gradients), fsdpc's product against cuBLASLt's own best for the shape
// (the fastest of the algorithms its heuristic offers; fsdpc runs the first). Forward 2NKM FLOPs,
// backward both products.
static void bench_gemm(BenchShape s, int reps) {
    const int N = s.B * s.T, hd = s.D / s.H;
    const struct {
        const char *name;
        int in, out;
    } layers[] = {{"q|k|v", s.D, s.D + 2 * s.KV * hd}, {"attention out", s.D, s.D}, {"gate|up", s.D, 2 * s.F},
                  {"down", s.F, s.D}, {"lm head", s.D, s.V}};
    int max_in = 0, max_out = 0;
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        max_in = layers[i].in > max_in ? layers[i].in : max_in;
        max_out = layers[i].out > max_out ? layers[i].out : max_out;
    }
    uint16_t *x = dev_rand_bf16((size_t)N * max_in), *w = dev_rand_bf16((size_t)max_in * max_out);
    uint16_t *y = dev_rand_bf16((size_t)N * max_out), *dy = dev_rand_bf16((size_t)N * max_out);
    uint16_t *dx = dev_rand_bf16((size_t)N * max_in);
    float *dw = dev_rand((size_t)max_in * max_out);
    cuda_set_compute(COMPUTE_BF16);
    cuda_set_params_bf16(1);
    cuda_set_acts_bf16(1);
    printf("# GEMM, bf16 weights and activations, N=%d            fwd ms TFLOP/s  best ratio |  bwd ms TFLOP/s  best ratio\n", N);
    double worst = 1e30, sum_fsdpc = 0, sum_best = 0;
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        const int IN = layers[i].in, OUT = layers[i].out;
        const double flops = 2.0 * N * IN * OUT;
        const double f = TIME_MS(reps, cuda_matmul_fwd(y, KERN_ACT, x, w, N, IN, OUT));
        const double b = TIME_MS(reps, cuda_matmul_bwd(dx, dw, dy, KERN_ACT, x, w, N, IN, OUT, 0));
        int tf, tb;
        const double bf = cuda_matmul_best_ms(0, y, dx, dw, dy, x, w, N, IN, OUT, reps, &tf);
        const double bb = cuda_matmul_best_ms(1, y, dx, dw, dy, x, w, N, IN, OUT, reps, &tb);
        char name[64];
        snprintf(name, sizeof name, "%s (%d -> %d)", layers[i].name, IN, OUT);
        printf("  %-34s %8.3f %7.1f %5.1f %5.2f | %7.3f %7.1f %5.1f %5.2f  (%d, %d algorithms timed)\n", name, f,
               flops / f * 1e-9, bf > 0 ? flops / bf * 1e-9 : 0.0, bf > 0 ? bf / f : 0.0, b, 2 * flops / b * 1e-9,
               bb > 0 ? 2 * flops / bb * 1e-9 : 0.0, bb > 0 ? bb / b : 0.0, tf, tb);
        if (bf > 0 && bf / f < worst) worst = bf / f;
        if (bb > 0 && bb / b < worst) worst = bb / b;
        sum_fsdpc += f + b, sum_best += (bf > 0 ? bf : f) + (bb > 0 ? bb : b);
    }
    cuda_set_params_bf16(0);
    cuda_set_acts_bf16(0);
    cuda_set_compute(COMPUTE_FP32);
    // make gpu-check's row: the model's GEMM time against the sum of cuBLASLt's bests
    printf("# summary gemm: %.2f of cuBLASLt's best over the model's GEMMs (the worst product %.2f)\n",
           sum_best / sum_fsdpc, worst);
    void *bufs[] = {x, w, y, dy, dx, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cuda_free(bufs[i]);
}

// attention: causal FLOPs (half the square). Forward runs 2 products (Q K^T, P V); backward,
// as executed by the native kernels, 7 (the dK/dV kernel recomputes S and dP and forms dV and
// dK, the dQ kernel recomputes S and dP again and forms dQ), by cuDNN 5 (S, dP, dV, dK, dQ)
static void bench_attention(BenchShape s, int reps) {
    const int B = s.B, T = s.T, H = s.H, KV = s.KV, hd = s.D / s.H, N = B * T;
    const size_t nND = (size_t)N * s.D, nkv = (size_t)N * KV * hd;
    float *q = dev_rand(nND), *o = cuda_alloc(sizeof(float) * nND), *dout = dev_rand(nND);
    float *k = dev_rand(nkv), *v = dev_rand(nkv);
    float *saved = cuda_alloc(sizeof(float) * cuda_attention_saved_floats(B, H, T, T));
    float *dq = cuda_alloc(sizeof(float) * nND), *dk = cuda_alloc(sizeof(float) * nkv), *dv = cuda_alloc(sizeof(float) * nkv);
    float *scratch = cuda_alloc(sizeof(float) * cuda_attention_scratch_floats(B, H, T));
    uint16_t *qb = bf16_copy(q, nND), *kb = bf16_copy(k, nkv), *vb = bf16_copy(v, nkv), *doutb = bf16_copy(dout, nND);
    uint16_t *ob = bf16_copy(q, nND), *dqb = bf16_copy(q, nND), *dkb = bf16_copy(k, nkv), *dvb = bf16_copy(k, nkv);
    const double af = 2.0 * 2.0 * B * H * (double)T * T * hd / 2;
    printf("# attention (B=%d T=%d H=%d KV=%d hd=%d)          fwd ms TFLOP/s |  bwd ms TFLOP/s\n", B, T, H, KV, hd);
    static const struct {
        const char *what, *key;
        int compute, want, acts_bf16;
    } runs[] = {{"native fp32 (CUDA cores)", "native_fp32", COMPUTE_FP32, KERN_ATTENTION_NATIVE, 0},
                {"native bf16 (WMMA), bf16 activations", "native", COMPUTE_BF16, KERN_ATTENTION_NATIVE, 1},
                {"cuDNN bf16, bf16 activations", "cudnn", COMPUTE_BF16, KERN_ATTENTION_CUDNN, 1}};
    char summary[400] = "";
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        cuda_set_compute(runs[r].compute);
        int failed;
        const char *att = cuda_attention_select(runs[r].want, runs[r].compute != COMPUTE_FP32, hd, &failed);
        if (failed) {
            printf("  %s: %s\n", runs[r].what, att);
            snprintf(summary + strlen(summary), sizeof summary - strlen(summary), "; %s none", runs[r].key);
            continue;
        }
        const int ab = runs[r].acts_bf16;
        cuda_set_acts_bf16(ab);
        void *Q = ab ? (void *)qb : q, *K = ab ? (void *)kb : k, *Vv = ab ? (void *)vb : v, *O = ab ? (void *)ob : o;
        void *dO = ab ? (void *)doutb : dout, *dQ = ab ? (void *)dqb : dq, *dK = ab ? (void *)dkb : dk;
        void *dV = ab ? (void *)dvb : dv;
        const double f =
            TIME_MS(reps, cuda_attention_fwd(O, saved, Q, K, Vv, B, T, T, H, KV, hd, (size_t)T * KV * hd, NULL, 0, NULL));
        const double b =
            TIME_MS(reps, cuda_attention_bwd(dQ, dK, dV, scratch, dO, O, saved, Q, K, Vv, B, T, H, KV, hd, NULL, 0, NULL));
        cuda_set_acts_bf16(0);
        const double bwd_products = runs[r].want == KERN_ATTENTION_CUDNN ? 5 : 7;
        printf("  %-44s %7.3f %7.1f | %7.3f %7.1f\n", runs[r].what, f, af / f * 1e-9, b, bwd_products / 2 * af / b * 1e-9);
        snprintf(summary + strlen(summary), sizeof summary - strlen(summary), "; %s fwd %.0f bwd %.0f", runs[r].key,
                 af / f * 1e-9, bwd_products / 2 * af / b * 1e-9);
    }
    cuda_attention_select(KERN_ATTENTION_NATIVE, 0, hd, &(int){0});
    cuda_set_compute(COMPUTE_FP32);
    printf("# summary attention TFLOP/s: %s\n", summary + 2);
    void *bufs[] = {q, k, v, o, dout, saved, dq, dk, dv, scratch, qb, kb, vb, doutb, ob, dqb, dkb, dvb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cuda_free(bufs[i]);
}

// memory-bound kernels: effective bandwidth (bytes read + written) against the device's own
// copy (cudaMemcpy device to device, read + write) of the same number of bytes
static void bench_bandwidth(BenchShape s, int reps) {
    const size_t N = (size_t)s.B * s.T, nND = N * s.D, nNF = N * s.F, nDF = (size_t)s.D * s.F;
    float *x = dev_rand(nND), *w = dev_rand(nDF), *y = dev_rand(2 * nNF), *dw = dev_rand(nDF);
    float *out = cuda_alloc(sizeof(float) * 2 * nNF), *rstd = cuda_alloc(sizeof(float) * N);
    float *m = cuda_alloc(sizeof(float) * nDF), *v = cuda_alloc(sizeof(float) * nDF);
    const double copy = TIME_MS(reps, cuda_copy(out, y, 2 * nNF));
    const double copy_gbs = 2 * nNF * 8.0 / copy * 1e-6;
    printf("# bandwidth (GB/s, bytes read + written)         ms    GB/s  of copy\n");
    printf("  %-40s %7.3f %7.0f   1.00\n", "device copy (cudaMemcpy)", copy, copy_gbs);
    const KernAdamW ah = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                          .grad_scale = 1.0f, .step = 1, .ndecay = 1, .decay = {{0, nDF}}};
    typedef struct {
        const char *what;
        double ms, bytes;
    } Timed;
    Timed k[6];
    int n = 0;
    k[n++] = (Timed){"rmsnorm_fwd (fp32)", TIME_MS(reps, cuda_rmsnorm_fwd(out, rstd, x, w, (int)N, s.D, 1e-5f)), nND * 8.0};
    k[n++] = (Timed){"adamw (fp32 state)", TIME_MS(reps, cuda_adamw(w, NULL, dw, m, v, nDF, &ah)), nDF * 28.0};
    k[n++] = (Timed){"f32_to_bf16", TIME_MS(reps, cuda_f32_to_bf16((uint16_t *)out, y, 2 * nNF)), 2 * nNF * 6.0};
    // as --precision bf16 trains: bf16 weights and activations
    uint16_t *wb = bf16_copy(w, s.D), *gu = dev_rand_bf16(2 * nNF), *h = dev_rand_bf16(nNF);
    cuda_set_compute(COMPUTE_BF16);
    cuda_set_params_bf16(1);
    cuda_set_acts_bf16(1);
    k[n++] = (Timed){"rmsnorm_fwd (bf16 out)", TIME_MS(reps, cuda_rmsnorm_fwd(out, rstd, x, wb, (int)N, s.D, 1e-5f)),
                     nND * 6.0};
    k[n++] = (Timed){"swiglu_fwd (bf16)", TIME_MS(reps, cuda_swiglu_fwd(h, gu, (int)N, s.F)), nNF * 6.0};
    k[n++] = (Timed){"swiglu_bwd (bf16)", TIME_MS(reps, cuda_swiglu_bwd(out, h, gu, (int)N, s.F)), nNF * 10.0};
    cuda_set_params_bf16(0);
    cuda_set_acts_bf16(0);
    cuda_set_compute(COMPUTE_FP32);
    double lo = 1e30, hi = 0;
    for (int i = 0; i < n; i++) {
        const double gbs = k[i].bytes / k[i].ms * 1e-6;
        printf("  %-40s %7.3f %7.0f   %4.2f\n", k[i].what, k[i].ms, gbs, gbs / copy_gbs);
        lo = gbs / copy_gbs < lo ? gbs / copy_gbs : lo, hi = gbs / copy_gbs > hi ? gbs / copy_gbs : hi;
    }
    printf("# summary bandwidth: copy %.0f GB/s; elementwise kernels %.2f to %.2f of it\n", copy_gbs, lo, hi);
    void *bufs[] = {x, w, y, dw, out, rstd, m, v, wb, gu, h};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cuda_free(bufs[i]);
}

// --bench: kernel timings at the ~1B model's shapes, on random inputs, FLOPs as executed
static void bench(void) {
    const BenchShape s = bench_shape();
    const int reps = getenv("TEST_GPU_BENCH") ? 2 : 10;
    printf("# --bench: B=%d T=%d D=%d F=%d H=%d KV=%d V=%d; random inputs in [-1, 1)\n", s.B, s.T, s.D, s.F, s.H, s.KV, s.V);
    bench_gemm(s, reps);
    bench_attention(s, reps);
    bench_bandwidth(s, reps);
}

// --cudnn_shapes (make gpu-check): whether cuDNN builds each attention graph shape the project
// builds, forward and backward, one line per graph with cuDNN's refusal; exits 0 when it takes
// all, 1 when it refuses one, 2 when libcudnn cannot be used at all
static int cudnn_shapes(void) {
    static const struct {
        const char *what;
        int docs, B, T, H, KV, hd;  // docs: B is the ragged graph's entry count (a bucket, B*2^k)
    } shapes[] = {
        {"start-up self-check, GQA", 0, 2, 96, 4, 2, 64},
        {"start-up self-check, GQA", 0, 2, 96, 4, 2, 128},
        {"GQA 4:1", 0, 2, 256, 8, 2, 64},
        {"no grouping, T off the tiles", 0, 1, 100, 4, 4, 64},
        {"GQA, T off the tiles", 0, 1, 130, 4, 2, 128},
        {"make test-gpu's model", 0, 8, 256, 4, 2, 64},
        {"1B Llama (make gpu-check), GQA 2:1", 0, 4, 2048, 16, 8, 128},
        {"1B Llama without grouping", 0, 4, 2048, 16, 16, 128},
        {"context 2048 at head dim 64", 0, 4, 2048, 32, 8, 64},
        {"documents: packed rows", 1, 32, 200, 4, 2, 64},
        {"documents: padded rows", 1, 6, 130, 4, 2, 64},
        {"documents: padded rows", 1, 4, 130, 4, 2, 128},
        {"documents: 1B Llama, packed", 1, 8, 2048, 16, 8, 128},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bwd = 0; bwd <= 1; bwd++) {
            const char *why = cuda_cudnn_graph_check(bwd, shapes[i].docs, shapes[i].B, shapes[i].T, shapes[i].H,
                                                     shapes[i].KV, shapes[i].hd);
            if (why && strstr(why, "cannot load libcudnn")) {
                printf("# %s\n", why);
                return 2;
            }
            failed += why != NULL;
            printf("%s - cudnn %s %s %s=%d T=%d H=%d KV=%d hd=%d (%s)%s%s\n", why ? "not ok" : "ok",
                   bwd ? "backward" : "forward", shapes[i].docs ? "document-masked" : "causal",
                   shapes[i].docs ? "entries" : "B", shapes[i].B, shapes[i].T, shapes[i].H, shapes[i].KV, shapes[i].hd,
                   shapes[i].what, why ? ": " : "", why ? why : "");
        }
    // context parallelism's ring blocks (--cp n: a rank's T tokens, chunks of T / 2): the own block
    // causal, and the rectangles of all queries against a lower rank's head chunk and of the tail
    // queries against a higher rank's keys
    static const struct {
        const char *what;
        int B, T, H, KV, hd;
    } rings[] = {{"make test-gpu's model at cp 2", 8, 128, 4, 2, 64}, {"1B Llama at cp 2", 4, 1024, 16, 8, 128},
                 {"7B Llama at 32K, cp 8", 1, 4096, 32, 32, 128}};
    for (size_t i = 0; i < sizeof rings / sizeof rings[0]; i++)
        for (int blk = 0; blk < 3; blk++)
            for (int bwd = 0; bwd <= 1; bwd++) {
                const int T = rings[i].T, c = T / 2, Tq = blk == 2 ? c : T, Tk = blk == 1 ? c : T;
                const char *why = cuda_cudnn_block_check(bwd, rings[i].B, Tq, Tk, T, blk == 0, rings[i].H, rings[i].KV,
                                                         rings[i].hd);
                failed += why != NULL;
                printf("%s - cudnn %s ring block %s B=%d Tq=%d Tk=%d H=%d KV=%d hd=%d (%s)%s%s\n", why ? "not ok" : "ok",
                       bwd ? "backward" : "forward", blk ? "full" : "causal", rings[i].B, Tq, Tk, rings[i].H, rings[i].KV,
                       rings[i].hd, rings[i].what, why ? ": " : "", why ? why : "");
            }
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    cpu_init(2);
    snprintf(test_prefix, sizeof test_prefix, "gpu ");
    if (argc > 1 && !strcmp(argv[1], "--version")) {  // the CUDA libraries it loaded (make gpu-check's stage 0)
        printf("%s", cuda_library_versions());
        comm_finalize();
        return 0;
    }
    if (cuda_device_count() == 0) {
        printf("# no GPU visible: skipped\n");
        comm_finalize();
        return 0;
    }
    char name[128];
    const char *why = cuda_bind(0, name, sizeof name, NULL, 0);
    if (why) {
        fprintf(stderr, "fsdpc: error: %s\n", why);
        comm_finalize();
        return 1;
    }
    printf("# device: %s\n", name);
    if (argc > 1 && !strcmp(argv[1], "--cudnn_shapes")) {
        const int rc = cudnn_shapes();
        comm_finalize();
        return rc;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        comm_finalize();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--cudnn")) {  // the cuDNN checks alone
        test_cudnn_attention();
        test_cudnn_ring();
        test_cudnn_strict();
        test_cudnn_versions();
        printf("# %s\n", failures ? "FAILED" : "all passed");
        comm_finalize();
        return failures ? 1 : 0;
    }

    if (argc > 1 && !strcmp(argv[1], "--grouped")) {
        test_grouped();
        printf("# %s\n", failures ? "FAILED" : "all passed");
        comm_finalize();
        return failures ? 1 : 0;
    }

    test_memory();
    test_grouped();
    for (int mode = COMPUTE_FP32; mode <= COMPUTE_FAST_16BF; mode++) {  // the ops with tensor-core forms
        set_mode(mode);
        test_matmul(64, 128, 96, 0, KERN_ACT);
        test_matmul(67, 45, 83, 1, KERN_ACT);  // odd sizes, pointers off 16-byte alignment
        if (mode == COMPUTE_FAST_16BF) break;  // attention as in COMPUTE_BF16
        test_attention(2, 256, 256, 8, 2, 64, (size_t)256 * 2 * 64, NULL);    // GQA, whole tiles
        test_attention(1, 130, 130, 4, 2, 128, (size_t)130 * 2 * 128, NULL);  // hd 128, T not a tile multiple
        test_attention(2, 77, 77, 6, 3, 24, (size_t)77 * 3 * 24, NULL);       // hd padded to 32
        test_attention(1, 200, 200, 4, 1, 80, (size_t)200 * 1 * 80, NULL);    // hd padded to 128, one kv head
        test_attention(1, 1, 37, 8, 2, 64, (size_t)(37 + 11) * 2 * 64, NULL); // KV cache: one new token
        test_attention(1, 7, 100, 8, 2, 64, (size_t)(128) * 2 * 64, NULL);    // KV cache: a prompt chunk
        test_attention(2, 7, 100, 4, 4, 128, (size_t)(150) * 4 * 128, NULL);  // KV cache, two sequences, hd 128
        // dropout on the probabilities: the GPU regenerates the CPU's mask in forward and backward
        const KernDropout drop = {0.2f, 0xabcdefULL, 5, 0};
        const KernDropout drop_h3 = {0.2f, 0xabcdefULL, 5, 3};  // a tensor-parallel rank's heads from global head 3
        test_attention(2, 130, 130, 4, 2, 64, (size_t)130 * 2 * 64, &drop);  // GQA, T not a multiple of the tile
        test_attention(1, 77, 77, 3, 3, 128, (size_t)77 * 3 * 128, &drop_h3);  // hd 128 (other tile sizes)
        test_attention(2, 7, 100, 4, 2, 24, (size_t)(110) * 2 * 24, &drop);  // KV cache form, hd padded to 32
        // packed documents: four row layouts (documents across tiles, one token, a whole row, padding)
        test_attention_packed(4, 200, 4, 2, 64, NULL);   // GQA
        test_attention_packed(4, 200, 3, 3, 128, NULL);  // hd 128: 32-row tiles on some sides
        test_attention_packed(4, 133, 4, 1, 24, NULL);   // hd padded to 32, T off the tiles
        test_attention_packed(2, 200, 4, 2, 64, &drop);  // with dropout
        test_attention_one_doc(2, 130, 4, 2, 64);
        // sliding windows: across tiles, inside one, of two keys; the KV cache forms; with documents, dropout
        test_attention_window(2, 200, 200, 4, 2, 64, (size_t)200 * 2 * 64, 50, 0, NULL);
        test_attention_window(1, 130, 130, 4, 2, 128, (size_t)130 * 2 * 128, 20, 0, NULL);
        test_attention_window(2, 77, 77, 6, 3, 24, (size_t)77 * 3 * 24, 2, 0, NULL);  // (with 1, dq and dk are 0 up to rounding)
        test_attention_window(1, 7, 100, 8, 2, 64, (size_t)128 * 2 * 64, 30, 0, NULL);
        test_attention_window(1, 1, 37, 8, 2, 64, (size_t)(37 + 11) * 2 * 64, 9, 0, NULL);
        test_attention_window(4, 200, 200, 4, 2, 64, (size_t)200 * 2 * 64, 40, 1, NULL);
        test_attention_window(2, 130, 130, 4, 2, 64, (size_t)130 * 2 * 64, 33, 0, &drop_h3);
        if (mode != COMPUTE_FP32) continue;  // the ring's blocks have no tensor-core form
        // ring attention's blocks: causal, across tiles and within one, with documents and windows
        test_attention_ring(2, 2, 160, 4, 2, 32, 0, 0, NULL);
        test_attention_ring(4, 1, 128, 4, 1, 24, 0, 1, NULL);
        test_attention_ring(2, 2, 96, 2, 2, 64, 7, 0, NULL);
        test_attention_ring(4, 2, 64, 4, 2, 16, 5, 1, NULL);
        // with dropout (minGPT's): across tiles; a tp rank's heads from head 3, documents and a window
        test_attention_ring(2, 2, 160, 4, 2, 32, 0, 0, &drop);
        test_attention_ring(4, 2, 64, 4, 2, 16, 5, 1, &drop_h3);
    }
    test_cudnn_attention();
    test_cudnn_ring();
    test_cudnn_strict();
    test_cudnn_versions();
    test_bf16_params(64, 128, 96);
    test_bf16_params(37, 45, 83);  // odd sizes: the matmuls fall back to fp32, widening the weights
    set_mode(COMPUTE_FP32);
    test_rmsnorm(37, 300);
    test_rmsnorm(300, 4096);
    test_layernorm(37, 300);
    test_layernorm(300, 768);
    test_add_norm(37, 300, 0);
    test_add_norm(300, 4096, 0);
    test_add_norm(37, 300, 1);
    test_add_norm(300, 768, 1);
    test_qkv(2, 9, 4, 2, 24, 5, 1, 0);   // GQA, RoPE at an offset (the KV-cache form)
    test_qkv(1, 7, 3, 3, 16, 0, 1, 0);   // training form
    test_qkv(2, 5, 4, 4, 8, 0, 0, 0);    // minGPT's c_attn: a plain split
    test_qkv(4, 200, 4, 2, 24, 0, 1, 1); // packed documents: positions restart per document
    test_qkv(4, 90, 2, 2, 16, 7, 1, 1);  // pos0 is ignored when positions are given
    test_qkv_layout(2, 9, 4, 4, 16, 3, 1, 0, 4, 1);   // GPT-NeoX: per-head q|k|v, rotary_pct 0.25
    test_qkv_layout(3, 40, 2, 2, 32, 0, 1, 1, 8, 1);  // ... with packed documents
    test_qkv_layout(2, 9, 4, 2, 24, 5, 1, 0, 12, 0);  // partial rotation, blocked and grouped
    test_qkv_layout(3, 40, 2, 2, 32, 0, 1, 1, 16, 1); // eight at a time: per-head, partial, documents
    test_qkv_layout(2, 9, 4, 2, 64, 5, 1, 0, 32, 0);  // ... blocked and grouped, at an offset
    report(cuda_attention_saved_floats(2, 8, 7, 100) == (size_t)2 * 8 * 7, "attention_saved_floats", "%zu",
           cuda_attention_saved_floats(2, 8, 7, 100));
    report(cuda_attention_scratch_floats(2, 8, 100) >= (size_t)2 * 8 * 100, "attention_scratch_floats", "%zu",
           cuda_attention_scratch_floats(2, 8, 100));
    test_swiglu(37, 2731);
    test_swiglu(5, 344);  // rows of whole 16-byte groups
    test_gelu(100003);
    test_bias(37, 300, KERN_ACT);
    test_bias(600, 768, KERN_ACT);
    test_positions();
    test_dropout(4, 100003, 0.1f, 0x1234ULL, 0);
    test_dropout(3, 77, 0.5f, 42, 1ULL << 40);  // rows shorter than a block, a large sample index
    test_dropout(2, 1000, 0.0f, 42, 0);         // p = 0: both untouched
    test_dropout(3000, 5, 0.3f, 9, 17);         // more rows than the grid has: blocks loop over rows
    test_jitter(0, 3 * 640, 640, 0.1f, 0xbeef, 7);  // whole rows
    test_jitter(1000, 160, 640, 0.1f, 0xbeef, 7);   // a cp rank's chunk inside row 1
    test_jitter(500, 300, 640, 0.3f, 0xbeef, 7);    // across a row boundary
    test_embedding();
    test_tokens_check();
    test_crossentropy(13, 1000, 0);
    test_crossentropy(5, 32000, 0);
    test_crossentropy(13, 1000, 1);
    test_crossentropy(5, 32000, 1);
    test_vocab_parallel();
    test_vector_ops();
    test_sumsq(1000003);
    test_sumsq(5);
    test_adamw();
    test_bf16();
    test_nf4();
    test_bf16_activations();
    cuda_sync();

    printf("# %s\n", failures ? "FAILED" : "all passed");
    comm_finalize();
    return failures ? 1 : 0;
}
