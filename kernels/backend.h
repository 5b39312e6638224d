// backend: the operations each device implements, listed once. kernels.h documents them; the CPU
// defines cpu_<op>, CUDA defines cuda_<op>, and dispatch.c routes kern_<op> to the chosen one.
// X(return type, op, parameter list, argument list)
#ifndef FSDPC_BACKEND_H
#define FSDPC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"  // KernDropout

// allocation: kern_alloc* add the memory tracker's accounting around these (dispatch.c)
#define KERN_ALLOC_OPS(X)                                                                                              \
    X(void *, alloc, (size_t bytes), (bytes))                                                                          \
    X(void, free, (void *p), (p))                                                                                      \
    X(void *, alloc_host, (size_t bytes), (bytes))                                                                     \
    X(void, free_host, (void *p), (p))                                                                                 \
    X(void, mem_held, (double *held, double *held_peak, double *cached), (held, held_peak, cached))

// the ops the CPU compiles once (kernels/cpu: memory.c, setup.c, nf4.c)
#define KERN_PLAIN_OPS(X)                                                                                              \
    X(void, upload, (void *dst, const void *host_src, size_t bytes), (dst, host_src, bytes))                           \
    X(void, download, (void *host_dst, const void *src, size_t bytes), (host_dst, src, bytes))                         \
    X(void, sync, (void), ())                                                                                          \
    X(int, download_async, (void *host_dst, const void *src, size_t bytes), (host_dst, src, bytes))                    \
    X(int, upload_async, (void *dst, const void *host_src, size_t bytes), (dst, host_src, bytes))                      \
    X(void, async_wait, (int ticket), (ticket))                                                                        \
    X(void, async_fence, (void), ())                                                                                   \
    X(void, async_fence_to, (int ticket), (ticket))                                                                    \
    X(void, async_after_kernels, (void), ())                                                                           \
    X(double, peak_mem_mib, (void), ())                                                                                \
    X(void, mem_info, (size_t *free_bytes, size_t *total_bytes), (free_bytes, total_bytes))                            \
    X(void, tokens_check, (int32_t *tokens, int32_t *targets, int N, int V, long long base), (tokens, targets, N, V, base)) \
    X(int, token_error, (long long *index, int *id), (index, id))                                                      \
    X(void, nf4_dequantize, (void *dst, int f32, const uint8_t *src, size_t n, KernSegs seg), (dst, f32, src, n, seg))

// the ops the CPU compiles once per instruction set, one chosen at start-up (kernels/cpu/cpu_common.h)
#define KERN_SIMD_OPS(X)                                                                                               \
    X(void, act_copy, (void *dst, const void *src, size_t n), (dst, src, n))                                           \
    X(void, matmul_fwd, (void *out, KernDtype out_dt, const void *inp, const void *w, int N, int IN, int OUT),         \
      (out, out_dt, inp, w, N, IN, OUT))                                                                               \
    X(void, matmul_bwd,                                                                                                \
      (void *dinp, float *dw, const void *dout, KernDtype dout_dt, const void *inp, const void *w, int N, int IN,      \
       int OUT, int accumulate_dinp),                                                                                  \
      (dinp, dw, dout, dout_dt, inp, w, N, IN, OUT, accumulate_dinp))                                                  \
    X(void, matmul_grouped_fwd,                                                                                        \
      (void *out, KernDtype out_dt, const void *inp, const void *const *w, const int *rows, int G, int IN, int OUT),   \
      (out, out_dt, inp, w, rows, G, IN, OUT))                                                                         \
    X(void, matmul_grouped_bwd,                                                                                        \
      (void *dinp, float *const *dw, const void *dout, KernDtype dout_dt, const void *inp, const void *const *w,       \
       const int *rows, int G, int IN, int OUT, int accumulate_dinp),                                                  \
      (dinp, dw, dout, dout_dt, inp, w, rows, G, IN, OUT, accumulate_dinp))                                            \
    X(void, rmsnorm_fwd, (void *out, float *rstd, const float *inp, const void *w, int N, int D, float eps),           \
      (out, rstd, inp, w, N, D, eps))                                                                                  \
    X(void, rmsnorm_bwd,                                                                                               \
      (float *dinp, float *dw, const void *dout, const float *inp, const void *w, const float *rstd, int N, int D),    \
      (dinp, dw, dout, inp, w, rstd, N, D))                                                                            \
    X(void, add_rmsnorm_fwd,                                                                                           \
      (float *y, void *out, float *rstd, const float *r, const void *w, int N, int D, float eps),                      \
      (y, out, rstd, r, w, N, D, eps))                                                                                 \
    X(void, layernorm_fwd,                                                                                             \
      (void *out, float *mean, float *rstd, const float *inp, const void *w, const void *b, int N, int D,              \
       float eps),                                                                                                     \
      (out, mean, rstd, inp, w, b, N, D, eps))                                                                         \
    X(void, add_layernorm_fwd,                                                                                         \
      (float *y, void *out, float *mean, float *rstd, const float *r, const void *w, const void *b, int N, int D,      \
       float eps),                                                                                                     \
      (y, out, mean, rstd, r, w, b, N, D, eps))                                                                        \
    X(void, layernorm_bwd,                                                                                             \
      (float *dinp, float *dw, float *db, const void *dout, const float *inp, const void *w, const float *mean,        \
       const float *rstd, int N, int D),                                                                               \
      (dinp, dw, db, dout, inp, w, mean, rstd, N, D))                                                                  \
    X(void, rope_table, (float *cos_t, float *sin_t, int T, int rot, const double *inv_freq), (cos_t, sin_t, T, rot, inv_freq)) \
    X(void, qkv_split,                                                                                                 \
      (void *q, void *k, void *v, const void *qkv, const float *cos_t, const float *sin_t, int B, int T, int H,        \
       int KV, int hd, int rot, KernQkvLayout layout, int pos0, const int32_t *pos),                                   \
      (q, k, v, qkv, cos_t, sin_t, B, T, H, KV, hd, rot, layout, pos0, pos))                                           \
    X(void, qkv_merge,                                                                                                 \
      (void *dqkv, const void *dq, const void *dk, const void *dv, const float *cos_t, const float *sin_t, int B,      \
       int T, int H, int KV, int hd, int rot, KernQkvLayout layout, const int32_t *pos),                               \
      (dqkv, dq, dk, dv, cos_t, sin_t, B, T, H, KV, hd, rot, layout, pos))                                             \
    X(size_t, attention_saved_floats, (int B, int H, int Tq, int Tk), (B, H, Tq, Tk))                                  \
    X(void, attention_fwd,                                                                                             \
      (void *out, float *saved, const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int KV,     \
       int hd, size_t kv_bstride, const int32_t *kstart, int window, const KernDropout *drop),                         \
      (out, saved, q, k, v, B, Tq, Tk, H, KV, hd, kv_bstride, kstart, window, drop))                                   \
    X(size_t, attention_scratch_floats, (int B, int H, int T), (B, H, T))                                              \
    X(void, documents_loaded, (const int32_t *kstart, const int32_t *host_kstart, int ntok, int T),                    \
      (kstart, host_kstart, ntok, T))                                                                                  \
    X(void, attention_bwd,                                                                                             \
      (void *dq, void *dk, void *dv, float *scratch, const void *dout, const void *out, const float *saved,            \
       const void *q, const void *k, const void *v, int B, int T, int H, int KV, int hd, const int32_t *kstart,        \
       int window, const KernDropout *drop),                                                                           \
      (dq, dk, dv, scratch, dout, out, saved, q, k, v, B, T, H, KV, hd, kstart, window, drop))                         \
    X(void, swiglu_fwd, (void *h, const void *gu, int N, int F), (h, gu, N, F))                                        \
    X(void, swiglu_bwd, (void *dgu, const void *dh, const void *gu, int N, int F), (dgu, dh, gu, N, F))                \
    X(void, moe_route, (float *probs, int32_t *idx, float *wts, const float *logits, int N, int E, int K),             \
      (probs, idx, wts, logits, N, E, K))                                                                              \
    X(void, moe_route_bwd,                                                                                             \
      (float *dlogits, const float *dwts, const float *probs, const float *logits, const int32_t *idx,                 \
       const float *wts, const int32_t *targets, const float *gaux, float zscale, int N, int E, int K),                \
      (dlogits, dwts, probs, logits, idx, wts, targets, gaux, zscale, N, E, K))                                        \
    X(void, moe_gather, (void *xe, const void *x, const int32_t *src, int M, int D), (xe, x, src, M, D))               \
    X(void, jitter, (void *x, const void *src, size_t e0, size_t n, size_t M, float j, uint64_t key, uint64_t sample0), \
      (x, src, e0, n, M, j, key, sample0))                                                                             \
    X(void, moe_gather_bwd, (void *dx, const void *dxe, const int32_t *slot, int N, int K, int D),                     \
      (dx, dxe, slot, N, K, D))                                                                                        \
    X(void, moe_combine, (float *out, const float *ye, const int32_t *slot, const float *wts, int N, int K, int D),    \
      (out, ye, slot, wts, N, K, D))                                                                                   \
    X(void, moe_combine_bwd,                                                                                           \
      (float *dye, float *dwts, const float *dout, const float *ye, const int32_t *slot, const float *wts, int N,      \
       int K, int D),                                                                                                  \
      (dye, dwts, dout, ye, slot, wts, N, K, D))                                                                       \
    X(void, gelu_fwd, (void *out, const void *inp, size_t n, KernGelu form), (out, inp, n, form))                      \
    X(void, gelu_bwd, (void *dinp, const void *dout, const void *inp, size_t n, KernGelu form),                        \
      (dinp, dout, inp, n, form))                                                                                      \
    X(void, bias_add, (void *out, KernDtype dt, const void *b, int N, int D), (out, dt, b, N, D))                      \
    X(void, bias_bwd, (float *db, const void *dout, KernDtype dt, int N, int D), (db, dout, dt, N, D))                 \
    X(void, add_cols, (void *out, KernDtype dt, int ld, int c0, const float *src, int N, int C, float s),              \
      (out, dt, ld, c0, src, N, C, s))                                                                                 \
    X(void, get_cols, (float *dst, const void *src, KernDtype dt, int ld, int c0, int N, int C, float s),              \
      (dst, src, dt, ld, c0, N, C, s))                                                                                 \
    X(void, positions_fwd, (float *out, const void *wpe, int B, int T, int D, int pos0), (out, wpe, B, T, D, pos0))    \
    X(void, positions_bwd, (float *dwpe, const float *dout, int B, int T, int D), (dwpe, dout, B, T, D))               \
    X(void, dropout, (float *x, size_t e0, size_t n, size_t M, float p, uint64_t key, uint64_t sample0), (x, e0, n, M, p, key, sample0)) \
    X(void, embedding_fwd, (float *out, const int32_t *tokens, const void *wte, int N, int D),                         \
      (out, tokens, wte, N, D))                                                                                        \
    X(void, embedding_bwd, (float *dwte, const float *dout, const int32_t *tokens, int N, int D),                      \
      (dwte, dout, tokens, N, D))                                                                                      \
    X(void, embedding_part_fwd,                                                                                        \
      (float *out, const int32_t *tokens, const void *wte_part, int N, int D, int v0, int Vl),                         \
      (out, tokens, wte_part, N, D, v0, Vl))                                                                           \
    X(void, embedding_part_bwd,                                                                                        \
      (float *dwte_part, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl),                      \
      (dwte_part, dout, tokens, N, D, v0, Vl))                                                                         \
    X(void, crossentropy_fwd_bwd, (void *logits, const int32_t *targets, int N, int V, float dscale, double *loss),    \
      (logits, targets, N, V, dscale, loss))                                                                           \
    X(void, xent_part_max, (const void *logits, int N, int Vl, float *row_max), (logits, N, Vl, row_max))              \
    X(void, xent_part_sums,                                                                                            \
      (const void *logits, const int32_t *targets, int N, int Vl, int v0, const float *row_max, float *sums),          \
      (logits, targets, N, Vl, v0, row_max, sums))                                                                     \
    X(void, xent_part_finish,                                                                                          \
      (void *logits, const int32_t *targets, int N, int Vl, int v0, const float *row_max, const float *sums,           \
       float dscale, int add_loss, double *loss),                                                                      \
      (logits, targets, N, Vl, v0, row_max, sums, dscale, add_loss, loss))                                             \
    X(void, add, (float *y, const float *x, size_t n), (y, x, n))                                                      \
    X(void, add3, (float *out, const float *a, const float *b, size_t n), (out, a, b, n))                              \
    X(void, scale, (float *x, float s, size_t n), (x, s, n))                                                           \
    X(void, zero, (float *x, size_t n), (x, n))                                                                        \
    X(void, copy, (float *dst, const float *src, size_t n), (dst, src, n))                                             \
    X(double, sumsq, (const float *x, size_t n), (x, n))                                                               \
    X(void, sumsq_to, (double *out, const float *x, size_t n), (out, x, n))                                            \
    X(void, adamw, (float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h),     \
      (p, p_bf16, g, m, v, n, h))                                                                                      \
    X(void, f32_to_bf16, (uint16_t *dst, const float *src, size_t n), (dst, src, n))                                   \
    X(void, bf16_to_f32, (float *dst, const uint16_t *src, size_t n), (dst, src, n))                                   \
    X(void, round_bf16, (float *x, size_t n), (x, n))                                                                  \
    X(void, attention_part_fwd,                                                                                        \
      (void *out, float *lse, const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int KV,       \
       int hd, const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst, int window, int first,                 \
       const KernDropout *drop, int seq, const KernBlock *blk),                                                        \
      (out, lse, q, k, v, B, Tq, Tk, H, KV, hd, qpos, kpos, qfirst, window, first, drop, seq, blk))                    \
    X(void, attention_part_bwd,                                                                                        \
      (void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse, const void *q,               \
       const void *k, const void *v, int B, int Tq, int Tk, int H, int KV, int hd, const int32_t *qpos,                \
       const int32_t *kpos, const int32_t *qfirst, int window, const KernDropout *drop, int seq,                       \
       const KernBlock *blk),                                                                                          \
      (dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, KV, hd, qpos, kpos, qfirst, window, drop, seq, blk))

#define KERN_OPS(X) KERN_PLAIN_OPS(X) KERN_SIMD_OPS(X)

#define KERN_DECLARE(prefix) KERN_ALLOC_OPS(KERN_DECLARE_##prefix) KERN_OPS(KERN_DECLARE_##prefix)
// A buffer a backend allocated on its device itself, entered in (and taken out of) the memory
// tracker under cat (dispatch.c): scratch that is a category's memory, whichever device dispatch
// routes to (test_gpu calls the CUDA ops directly). Returns p.
void *kern_mem_track(void *p, size_t bytes, KernMem cat);
void kern_mem_untrack(void *p);
#define KERN_DECLARE_cpu(ret, op, params, args) ret cpu_##op params;
#define KERN_DECLARE_cuda(ret, op, params, args) ret cuda_##op params;
KERN_DECLARE(cpu)
const char *cpu_init(int num_threads);
int cpu_num_threads(void);
const char *cpu_isa_line(void);  // kern_cpu_isa
// --precision bf16 on the CPU: bf16 matmuls where the CPU has AVX512_BF16 (kernels/cpu/gemm.c),
// else the fp32 emulation; cpu_gemm_line says which for the summary ("" without bf16)
void cpu_set_compute_bf16(int on);
const char *cpu_gemm_line(void);
size_t cpu_gemm_scratch_bytes(size_t rows, size_t widest, size_t widest_in, int T, int hd, int threads);  // kern_matmul_scratch_bytes
void cpu_params_bf16_copy(const float *params, const uint16_t *copy, size_t n);  // kern_params_bf16_copy
#ifdef FSDPC_CUDA
KERN_DECLARE(cuda)
// CUDA device setup (kernels/cuda): number of visible GPUs (0 when none or no driver), bind one.
int cuda_device_count(void);
// makes device current for this process; its name and its UUID (hex) for the caller. Opens
// cuBLASLt first: NULL, or why it cannot be loaded (nothing is bound then).
const char *cuda_bind(int device, char *name, size_t len, char *uuid, size_t uuid_len);
int cuda_sm_clock_mhz(void);  // the bound GPU's peak SM clock
// fsdpc --version (memory.cu): "name: version" lines for the CUDA driver and runtime,
// cuBLASLt, cuDNN (cuda_cudnn_version) and the GPUs visible; needs no GPU
const char *cuda_library_versions(void);
const char *cuda_cublaslt_version(void);  // "major.minor.patch" (cublasLtGetVersion), or "none (why)"
// how kern_matmul_grouped_* run: "cublasGemmGroupedBatchedEx (libcublas.so.N)", or "none (why): ..." when
// they loop over cuBLASLt
const char *cuda_cublas_grouped(void);
// test_gpu --bench: cuBLASLt's own best for cuda_matmul_fwd's product (bwd 0) or cuda_matmul_bwd's
// two (bwd 1, their sum) in bf16 (bf16 weights and activations, fp32 dw): the fastest of the
// algorithms its heuristic offers, ms per run over reps runs; *tried: how many were timed
double cuda_matmul_best_ms(int bwd, void *out, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                           int N, int IN, int OUT, int reps, int *tried);
const char *cuda_cudnn_version(void);  // "9.13.0", or "none (why)"

// Opt-in GPU time per category (kern_timers_*): events around an op on the compute stream.
// cuda_timer_start returns a handle for cuda_timer_stop; cuda_timer_mark records a step boundary;
// cuda_timer_totals waits for the device and adds the milliseconds per category since the first
// mark (ms[KERN_TIMER_N]: the last entry is the marked span), returning the marks' count.
// Each timed op is also counted under its name: cuda_timer_op gives a name its index (the first
// KERN_TIMER_OPS - 1 names each their own, later ones share the last), and cuda_timer_ops the
// milliseconds and calls per index since the first mark, with the names, returning their count.
enum { KERN_TIMER_OPS = 96 };
int cuda_timer_op(const char *name);
int cuda_timer_start(int category, int op);
void cuda_timer_stop(int handle);
void cuda_timer_mark(void);
int cuda_timer_totals(double *ms);
int cuda_timer_ops(double *ms, long *calls, const char **names);
// How matmuls and attention compute: fp32 operands; bf16 operands on the tensor cores with fp32
// accumulation (--precision bf16); or, for comparison in test_gpu --bench only, fp32 matmul operands
// that cuBLASLt rounds to bf16 itself (attention as in COMPUTE_BF16).
enum CudaCompute { COMPUTE_FP32, COMPUTE_BF16, COMPUTE_FAST_16BF };
void cuda_set_compute(int mode);
// Whether the parameters the kernels get (kernels.h kern_params_bf16) are bf16; fp32 when 0.
void cuda_set_params_bf16(int on);
// Whether activations (kern_acts_bf16) are bf16; fp32 when 0.
void cuda_set_acts_bf16(int on);
#endif

#endif
