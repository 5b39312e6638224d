// kernels: the one compute API that model/ and shard/ are written against.
// The CPU implementation (kernels/cpu) uses OpenBLAS sgemm and OpenMP; callers never
// see BLAS, OpenMP or a device. All tensors are row-major fp32 unless stated.
// Naming: N = rows (tokens, B*T), D = width. "+=" in a comment means the kernel
// accumulates into that output instead of overwriting it.
#ifndef FSDPC_KERNELS_H
#define FSDPC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// ---- device and memory ----
typedef enum { KERN_DEVICE_AUTO, KERN_DEVICE_CPU, KERN_DEVICE_CUDA } KernDevice;  // --device
// Picks the device for every kernel: the CPU, CUDA, or auto (CUDA when this build has it and
// a GPU is visible). Rank local_rank of the local_world ranks on its node takes GPU local_rank.
// Returns NULL, or a message saying why not (no GPU for --device cuda, more ranks than GPUs).
// A node's ranks may instead each see one GPU (CUDA_VISIBLE_DEVICES per rank, Slurm's
// --gpus-per-task / --gpu-bind): each then takes the one it sees; kern_device_uuid tells whether
// two ranks landed on the same GPU.
const char *kern_select_device(KernDevice want, int local_rank, int local_world);
// UUID of the bound GPU ("" on the CPU)
const char *kern_device_uuid(void);
int kern_on_gpu(void);
// fsdpc plan sizes a GPU run on a machine that may have none: from this call on, the size queries
// (kern_attention_*_floats) answer as the CUDA backend's, and no kernel may run. NULL, or why not
// (a build without CUDA).
const char *kern_size_as_gpu(void);
const char *kern_device_name(void);  // e.g. "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)"
// --precision bf16 on a GPU: matmuls and attention round their operands to bf16 and run on the
// tensor cores, accumulating in fp32 (outputs stay fp32). The CPU always computes in fp32.
void kern_set_compute_bf16(int on);
// --attention: how causal attention runs on a GPU. auto: cuDNN's fused flash attention when it
// loads, supports the run (bf16, head dim 64 or 128) and agrees with the native kernel on a
// start-up check, else the native kernel; cudnn: the same, and any reason against it is an error;
// native: the native kernel. The CPU device always runs the CPU kernel (cudnn is an error there).
typedef enum { KERN_ATTENTION_AUTO, KERN_ATTENTION_CUDNN, KERN_ATTENTION_NATIVE } KernAttention;
// After kern_select_device and kern_set_compute_bf16. Returns the line to log (NULL: nothing to
// say); *failed when it is instead the error that ends the run.
const char *kern_select_attention(KernAttention want, int bf16, int head_dim, int *failed);
// threads used by the CPU kernels (0 = library default)
void kern_init(int num_threads);
int kern_num_threads(void);
// Zeroed buffers on the device (host memory on CPU), and copies between them and the host.
void *kern_alloc(size_t bytes);
void kern_free(void *p);
// Zeroed host memory the device copies to and from fast (pinned on CUDA).
void *kern_alloc_host(size_t bytes);
void kern_free_host(void *p);
void kern_upload(void *dst, const void *host_src, size_t bytes);
void kern_download(void *host_dst, const void *src, size_t bytes);
void kern_sync(void);                // waits for queued device work
// Copies on a second device queue, so they overlap host work and kernels (pinned host memory).
// A download starts once the kernels queued before it are done. Each returns a ticket:
// kern_async_wait(ticket) blocks until that copy is done (and the host buffer is free again);
// kern_async_fence() makes kernels queued after it wait for every copy queued so far. On the
// CPU they are plain copies, done on return.
int kern_download_async(void *host_dst, const void *src, size_t bytes);
int kern_upload_async(void *dst, const void *host_src, size_t bytes);
void kern_async_wait(int ticket);
void kern_async_fence(void);
double kern_peak_mem_mib(void);      // device memory high-water mark (0 on CPU)
// The device's free and total memory now (cudaMemGetInfo), for the memory check before
// allocating; 0 and 0 on the CPU, which is not a device (host memory is checked apart).
void kern_mem_info(size_t *free_bytes, size_t *total_bytes);
double kern_peak_flops(void);        // dense bf16 peak of the GPU for MFU (0: CPU or unknown GPU)
// profiler ranges (NVTX on CUDA, nothing on CPU) so nsys shows units, phases and collectives
void kern_range_push(const char *name);
void kern_range_pop(void);

// ---- linear layers (weights are [out, in], like torch nn.Linear.weight) ----
// out (N, OUT) = inp (N, IN) @ w^T
void kern_matmul_fwd(float *out, const float *inp, const float *w, int N, int IN, int OUT);
// dinp (N, IN) = dout @ w   (or += when accumulate_dinp; dinp may be NULL to skip)
// dw (OUT, IN) += dout^T @ inp
void kern_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int N, int IN, int OUT, int accumulate_dinp);

// ---- RMSNorm: out = inp * rstd * w, rstd = 1/sqrt(mean(inp^2) + eps) ----
// rstd (N) is saved for backward.
void kern_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int D, float eps);
// dinp (N, D) += ..., dw (D) += ...
void kern_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                      const float *rstd, int N, int D);

// ---- LayerNorm (torch.nn.LayerNorm): out = (inp - mean) * rstd * w + b ----
// inp, out (N, D); w, b (D); biased variance, rstd = 1/sqrt(var + eps); mean, rstd (N) are saved
// for backward
void kern_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        int N, int D, float eps);
// dinp (N, D) +=, dw (D) +=, db (D) +=; the sums over rows are deterministic
void kern_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int N, int D);

// ---- RoPE, Hugging Face rotate_half convention ----
// cos/sin tables are (T, hd/2): angle(t, i) = t * theta^(-2i/hd).
void kern_rope_table(float *cos_t, float *sin_t, int T, int hd, float theta);
// x (B, T, nh, hd) rotated in place; row t uses table position pos0 + t.
void kern_rope_fwd(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int hd, int pos0);
// the inverse rotation, applied in place to a gradient (B, T, nh, hd)
void kern_rope_bwd(float *dx, const float *cos_t, const float *sin_t, int B, int T, int nh, int hd, int pos0);

// ---- dropout ----
// The mask is a pure function of (key, sample, element) (kernels/rng.h: kept iff u(key, s, i) >= p),
// so losses do not depend on the world size, the micro-batching or the device, and a resumed run
// draws the masks it would have drawn. Callers give each dropout site and step its own key.
// 0 <= p < 1; p == 0 is no dropout.
typedef struct {
    float p;
    uint64_t key, sample0;  // row b of the batch is sample sample0 + b
} KernDropout;
// x (B, M) in place: element i of row b is kept (times 1/(1-p)) iff u(key, sample0 + b, i) >= p,
// else multiplied by 0 (so 0, but NaN and Inf become NaN, as in torch). The same call on the
// gradient is the backward. p == 0 returns at once.
void kern_dropout(float *x, int B, size_t M, float p, uint64_t key, uint64_t sample0);

// ---- causal grouped-query attention ----
// q (B, Tq, H, hd); k, v (B, Tk, KV, hd) with batch stride kv_bstride floats (>= Tk*KV*hd);
// query t sits at position (Tk - Tq) + t and sees keys 0..that position.
// H % KV == 0; query head h uses kv head h / (H / KV). Scale 1/sqrt(hd).
// out (B, Tq, H, hd); saved: what backward needs, kern_attention_saved_floats(B, H, Tq, Tk)
// floats (the CPU keeps the softmax probabilities (B, H, Tq, Tk); a GPU only row statistics).
// drop (NULL or p == 0: none): dropout on the probabilities P (B, H, Tq, Tk) after the softmax,
// out = (mask * P) V / (1 - p); P[b, h, t, j] is kept iff u(key, sample0 + b, (h*Tq + t)*Tk + j) >= p.
// Backward must get the same drop as its forward.
size_t kern_attention_saved_floats(int B, int H, int Tq, int Tk);
void kern_attention_fwd(float *out, float *saved, const float *q, const float *k, const float *v,
                        int B, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride, const KernDropout *drop);
// training form (Tq == Tk == T, kv contiguous). dq (B,T,H,hd), dk, dv (B,T,KV,hd) are overwritten.
// out is the forward's output; scratch: at least kern_attention_scratch_floats(B, H, T) floats,
// sized after kern_init (it may depend on the thread count).
size_t kern_attention_scratch_floats(int B, int H, int T);
void kern_attention_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                        const float *saved, const float *q, const float *k, const float *v,
                        int B, int T, int H, int KV, int hd, const KernDropout *drop);

// ---- SwiGLU: h = silu(gate) * up, all (N) elements ----
void kern_swiglu_fwd(float *h, const float *gate, const float *up, size_t N);
// dgate, dup overwritten
void kern_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up, size_t N);

// ---- GELU, tanh approximation (torch gelu(approximate='tanh'), minGPT's NewGELU), all (n) elements ----
// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void kern_gelu_fwd(float *out, const float *inp, size_t n);
// dinp overwritten; it may be dout itself
void kern_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n);

// ---- bias of a linear layer ----
// out (N, D) += b (D) on every row
void kern_bias_add(float *out, const float *b, int N, int D);
// db (D) += column sums of dout (N, D); deterministic
void kern_bias_bwd(float *db, const float *dout, int N, int D);

// ---- embedding ----
// out (N, D) = wte[tokens[n]]
void kern_embedding_fwd(float *out, const int32_t *tokens, const float *wte, int N, int D);
// dwte (V, D) += scatter of dout (N, D); deterministic (no atomics)
void kern_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D);

// ---- learned position embeddings ----
// out (B, T, D) += wpe[pos0 + t] on row t of every sequence; wpe (>= pos0 + T, D)
void kern_positions_fwd(float *out, const float *wpe, int B, int T, int D, int pos0);
// dwpe (T, D) += sum over b of dout[b, t] (dout (B, T, D)), added in b order: deterministic
void kern_positions_bwd(float *dwpe, const float *dout, int B, int T, int D);

// ---- fused softmax + cross-entropy ----
// logits (N, V) are overwritten with dloss/dlogits * dscale, where loss_n = -log softmax(logits_n)[targets_n].
// Returns sum_n loss_n (in double). With dscale == 0 the logits are left untouched (evaluation).
double kern_crossentropy_fwd_bwd(float *logits, const int32_t *targets, int N, int V, float dscale);

// ---- elementwise and reductions ----
void kern_add(float *y, const float *x, size_t n);            // y += x
void kern_add3(float *out, const float *a, const float *b, size_t n);  // out = a + b
void kern_scale(float *x, float s, size_t n);                 // x *= s
void kern_zero(float *x, size_t n);
void kern_copy(float *dst, const float *src, size_t n);
double kern_sumsq(const float *x, size_t n);                  // sum x^2 in double

// ---- optimizer: torch.optim.AdamW semantics ----
// p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), with t = step (1-based)
void kern_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float wd, int step);
// the same on host buffers with the CPU threads, whatever the device (--cpu_offload)
void kern_adamw_host(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float wd, int step);

// ---- bf16 storage (round to nearest even) ----
void kern_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void kern_bf16_to_f32(float *dst, const uint16_t *src, size_t n);

#endif
