// kernels: the one compute API that model/ and shard/ are written against.
// The CPU implementation (kernels/cpu) uses OpenBLAS sgemm and OpenMP; callers never
// see BLAS, OpenMP or a device. All tensors are row-major fp32 unless stated: `const void *`
// weights are parameters (kern_params_bf16) and `void *` activations are in the activation dtype
// (kern_acts_bf16).
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
// fsdpc --version: "name: version" lines: whether the CUDA backend is built in and, if so, the
// GPU libraries this process loaded (the CUDA driver and runtime, cuBLASLt, cuDNN) and the GPUs visible
const char *kern_library_versions(void);
// --precision bf16 on a GPU: matmuls and attention run on the tensor cores with bf16 operands,
// accumulating in fp32, parameters are bf16 and activations are stored in bf16 (below). The CPU
// always computes in fp32.
void kern_set_compute_bf16(int on);
// --attention: how causal attention runs on a GPU. auto: cuDNN's fused flash attention when it
// loads, supports the run (bf16, head dim 64 or 128) and agrees with the native kernel on a
// start-up check, else the native kernel; cudnn: the same, and any reason against it is an error;
// native: the native kernel. The CPU device always runs the CPU kernel (cudnn is an error there).
typedef enum { KERN_ATTENTION_AUTO, KERN_ATTENTION_CUDNN, KERN_ATTENTION_NATIVE } KernAttention;
// After kern_select_device and kern_set_compute_bf16. Returns the line to log (NULL: nothing to
// say); *failed when it is instead the error that ends the run.
const char *kern_select_attention(KernAttention want, int bf16, int head_dim, int *failed);
// The attention kernel kern_select_attention chose, for the run's summary line: "cpu", "native",
// "cudnn", or cudnn with the native kernel where cuDNN does not take a call (auto).
const char *kern_attention_kernel(void);
// fsdpc plan on a GPU (after kern_size_as_gpu): the choice kern_select_attention would make if
// cuDNN loads and passes its start-up check, which a plan cannot run, for the size queries below.
void kern_plan_attention(KernAttention want, int bf16, int head_dim);
// The scratch cuDNN's SDPA holds for context parallelism's ring blocks (kern_attention_part_*
// given a KernBlock), which the memory tracker counts among the activations: B rows of a rank's T
// tokens, H and KV heads of hd. 0 unless the attention chosen (or planned) is cuDNN's, activations
// are bf16, and the batches carry no documents (docs) and attention no window: the one rule the
// GPU's blocks follow. fwd_only: only forward's blocks take cuDNN (attention dropout in training,
// whose blocks stay native; evaluation's do not drop). A shape cuDNN refuses at run time runs
// native and holds less.
size_t kern_ring_scratch_bytes(int B, int T, int H, int KV, int hd, int docs, int window, int fwd_only);
// Parameters (the `const void *` weights, biases and tables below: gathered units) are bf16 under
// --precision bf16 on a GPU, where matmuls take them as tensor-core operands as they are and the
// other kernels widen them as they read; fp32 otherwise. Gradients are fp32 either way.
int kern_params_bf16(void);
// element i of parameters p in that dtype
const void *kern_param_at(const void *p, size_t i);
// Activations (the `void *` tensors below, and KERN_ACT operands) are bf16 under --precision bf16
// on a GPU, fp32 otherwise; kernels compute in fp32 and round as they store. What stays fp32
// whatever the precision: the residual stream and its gradient (`float *`), norm and softmax
// statistics, the loss, gradients and master weights.
int kern_acts_bf16(void);
size_t kern_act_bytes(void);                    // bytes per activation element
void *kern_act_at(const void *p, size_t i);     // element i of activations p
// operands a kernel takes in either dtype say which
typedef enum { KERN_F32, KERN_ACT } KernDtype;
// dst = src, n activations on the device
void kern_act_copy(void *dst, const void *src, size_t n);
// host fp32 dst (n) = activations src (n) on the device, widened
void kern_act_download(float *host_dst, const void *src, size_t n);
// Threads used by the CPU kernels (0 = library default), started now: NULL, or why they cannot
// start (an address-space or process limit; OpenBLAS's buffers and OpenMP's stacks are checked
// first, so the libraries never fail or spin on it).
const char *kern_init(int num_threads);
int kern_num_threads(void);
// The scratch the products keep, counted with the activations: on a CPU with bf16 products under
// --precision bf16, the operands' bf16 copies and attention's per-thread packings, for products
// of up to `rows` rows, `widest` the widest input or output row, `widest_in` the widest input
// row, and attention over T keys of head dim hd; 0 elsewhere.
size_t kern_matmul_scratch_bytes(size_t rows, size_t widest, size_t widest_in, int T, int hd);
// The instruction set the CPU kernels run on, chosen once from the CPU's features, for the start-up
// summary: "avx512 (why)" (AVX-512 F, BW, DQ and VL; ", AVX512_BF16" added where the CPU multiplies
// bf16) or "avx2 (why)". FSDPC_CPU_ISA=avx2 forces the AVX2 kernels (and --precision bf16's fp32
// emulation); avx512 insists on AVX-512, auto (or unset) decides; kern_init refuses other values.
const char *kern_cpu_isa(void);
// What a buffer is held for: every allocation names one, and the memory tracker counts bytes
// per category (docs/sharding.md, "Memory tracker", defines each; fsdpc plan estimates the same ones).
typedef enum {
    KERN_MEM_PARAMS,       // fp32 master shards (and an unsharded start's whole model)
    KERN_MEM_GATHERED,     // full parameters of gathered units
    KERN_MEM_GRADS,        // gradient shards and full-size gradient buffers
    KERN_MEM_OPTIMIZER,    // AdamW moments
    KERN_MEM_ACTIVATIONS,  // the model's activations and backward scratch
    KERN_MEM_BUFFERS,      // communication buffers: bf16 staging of gathers and reductions
    KERN_MEM_STAGING,      // a checkpoint's copy for its background write (--async_checkpoint)
    KERN_MEM_NCAT
} KernMem;
const char *kern_mem_name(KernMem cat);  // "params", "gathered", ... (logs and metrics)
// Zeroed buffers on the device (host memory on CPU), and copies between them and the host.
void *kern_alloc(size_t bytes, KernMem cat);
void kern_free(void *p);
// Zeroed host memory; pinned: the device copies to and from it fast (cudaHostAlloc on CUDA).
void *kern_alloc_host(size_t bytes, KernMem cat, int pinned);
void kern_free_host(void *p);
// The memory tracker: bytes held now and at most (since the start), per category, by what
// kern_alloc and kern_alloc_host hold, and the allocator's own view.
typedef struct {
    double now[KERN_MEM_NCAT], peak[KERN_MEM_NCAT];  // on the compute device (the CPU: all host buffers)
    double total, total_peak;  // the categories' sum now, and its peak
    double host, host_peak;    // a GPU run's host buffers (pinned offloaded state, an unsharded start)
    // the allocator's view: on a GPU what the caching allocator holds (in use + cached) and the
    // freed blocks it keeps; on the CPU the process's resident memory (VmRSS, VmHWM), cached 0
    double held, held_peak, cached;
} KernMemStats;
void kern_mem_stats(KernMemStats *s);
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
// Finer orderings (activation offloading): kern_async_fence_to(ticket) makes kernels queued after
// it wait for that copy and the copies queued before it only, not for later ones; after
// kern_async_after_kernels(), copies queued start once the kernels queued before it are done (an
// upload into a buffer those kernels still read or write).
void kern_async_fence_to(int ticket);
void kern_async_after_kernels(void);
double kern_peak_mem_mib(void);      // device memory high-water mark (0 on CPU)
// The device's free and total memory now (cudaMemGetInfo), for the memory check before
// allocating; 0 and 0 on the CPU, which is not a device (host memory is checked apart).
void kern_mem_info(size_t *free_bytes, size_t *total_bytes);
double kern_peak_flops(void);        // dense bf16 peak of the GPU for MFU (0: CPU or unknown GPU)
// Opt-in GPU time per category (FSDPC_GPU_TIMERS=1; nothing on the CPU): every op on the compute
// stream between CUDA events, by its kind; "waiting" is the rest of the stream's time between
// step boundaries (the end of each "optimizer" range): event waits on collectives and copies,
// and gaps where the host fell behind. kern_timers_report prints the split per step (rank 0).
enum { KERN_TIMER_GEMM, KERN_TIMER_ATTENTION, KERN_TIMER_ELEMENTWISE, KERN_TIMER_OPTIMIZER, KERN_TIMER_WAIT,
       KERN_TIMER_N };
void kern_timers_report(void);
// profiler ranges (NVTX on CUDA, nothing on CPU) so nsys shows units, phases and collectives
void kern_range_push(const char *name);
void kern_range_pop(void);

// ---- linear layers (weights are [out, in], like torch nn.Linear.weight) ----
// out (N, OUT, dtype out_dt) = inp (N, IN) @ w^T
void kern_matmul_fwd(void *out, KernDtype out_dt, const void *inp, const void *w, int N, int IN, int OUT);
// dinp (N, IN) = dout @ w   (or += when accumulate_dinp; dinp may be NULL to skip)
// dw (OUT, IN) += dout^T @ inp (dw NULL: skipped, a frozen weight); dout (N, OUT) has dtype dout_dt (an fp32 one is rounded to bf16
// for the tensor cores when activations are bf16)
void kern_matmul_bwd(void *dinp, float *dw, const void *dout, KernDtype dout_dt, const void *inp, const void *w,
                     int N, int IN, int OUT, int accumulate_dinp);
// G such products over consecutive row blocks (a mixture-of-experts layer's experts): group g
// takes rows [o_g, o_g + rows[g]) of inp, out, dout and dinp (o_g: the sum of rows[< g]) with
// weights w[g] and gradient dw[g] (host arrays of device pointers; G <= 64); groups of 0 rows are
// skipped. Equal to the loop of kern_matmul_fwd / kern_matmul_bwd(..., accumulate_dinp) over
// the groups: dinp is overwritten (added to with accumulate_dinp), each dw[g] accumulated.
void kern_matmul_grouped_fwd(void *out, KernDtype out_dt, const void *inp, const void *const *w, const int *rows,
                             int G, int IN, int OUT);
void kern_matmul_grouped_bwd(void *dinp, float *const *dw, const void *dout, KernDtype dout_dt, const void *inp,
                             const void *const *w, const int *rows, int G, int IN, int OUT, int accumulate_dinp);

// ---- RMSNorm: out = inp * rstd * w, rstd = 1/sqrt(mean(inp^2) + eps) ----
// rstd (N) is saved for backward.
// inp (N, D) is the fp32 residual stream; out (N, D) activations.
void kern_rmsnorm_fwd(void *out, float *rstd, const float *inp, const void *w, int N, int D, float eps);
// dinp (N, D) += ..., dw (D) += ...; dout (N, D) activations
void kern_rmsnorm_bwd(float *dinp, float *dw, const void *dout, const float *inp, const void *w,
                      const float *rstd, int N, int D);
// A residual add fused into the norm that follows it: y (N, D) += r, then out, rstd as
// kern_rmsnorm_fwd of the new y (one read of y and r instead of two passes). Its backward is
// kern_rmsnorm_bwd accumulating into the residual gradient.
void kern_add_rmsnorm_fwd(float *y, void *out, float *rstd, const float *r, const void *w, int N, int D, float eps);

// ---- LayerNorm (torch.nn.LayerNorm): out = (inp - mean) * rstd * w + b ----
// inp (N, D) fp32 (the residual stream), out (N, D) activations; w, b (D); biased variance,
// rstd = 1/sqrt(var + eps); mean, rstd (N) are saved for backward
void kern_layernorm_fwd(void *out, float *mean, float *rstd, const float *inp, const void *w, const void *b,
                        int N, int D, float eps);
// The residual add fused into it, as for RMSNorm: y (N, D) += r, then out, mean, rstd as
// kern_layernorm_fwd of the new y.
void kern_add_layernorm_fwd(float *y, void *out, float *mean, float *rstd, const float *r, const void *w,
                            const void *b, int N, int D, float eps);
// dinp (N, D) +=, dw (D) +=, db (D) +=; dout activations; the sums over rows are deterministic
void kern_layernorm_bwd(float *dinp, float *dw, float *db, const void *dout, const float *inp, const void *w,
                        const float *mean, const float *rstd, int N, int D);

// ---- RoPE, Hugging Face rotate_half convention ----
// cos/sin tables are (T, rot/2): angle(t, i) = t * inv_freq[i], rot the rotated dimensions of a
// head (hd for full rotation; fewer for partial rotary, GPT-NeoX's rotary_pct), from the model's
// per-dimension inverse frequencies (rot/2, host memory; plain RoPE: theta^(-2i/rot)).
void kern_rope_table(float *cos_t, float *sin_t, int T, int rot, const double *inv_freq);

// ---- the fused q|k|v projection ----
// One GEMM against the adjacent q, k, v weights (H*hd + 2*KV*hd rows) gives qkv (B, T, H*hd + 2*KV*hd).
// Its row layout: KERN_QKV_BLOCKED holds the token's q (all heads), then k, then v; KERN_QKV_PER_HEAD
// (H == KV) holds head 0's q, k, v, then head 1's, ... (GPT-NeoX's query_key_value).
// kern_qkv_split copies it into q (B, T, H, hd) and k, v (B, T, KV, hd), rotating the first rot
// dimensions of each q and k head by RoPE (rotate_half over those rot dimensions; the rest pass
// through) when cos_t is not NULL (tables of kern_rope_table for rot; NULL: a plain split,
// minGPT's c_attn). rot is even, 2 <= rot <= hd. Token (b, t) sits at position pos[b*T + t] when
// pos (B*T, on the device) is not NULL: positions restart per packed document; else at pos0 + t.
typedef enum { KERN_QKV_BLOCKED, KERN_QKV_PER_HEAD } KernQkvLayout;
void kern_qkv_split(void *q, void *k, void *v, const void *qkv, const float *cos_t, const float *sin_t, int B,
                    int T, int H, int KV, int hd, int rot, KernQkvLayout layout, int pos0, const int32_t *pos);
// Its backward: dqkv (B, T, H*hd + 2*KV*hd) overwritten from dq, dk, dv, with dq and dk rotated
// back (the inverse rotation, positions pos[b*T + t], or t when pos is NULL) when cos_t is not NULL.
void kern_qkv_merge(void *dqkv, const void *dq, const void *dk, const void *dv, const float *cos_t,
                    const float *sin_t, int B, int T, int H, int KV, int hd, int rot, KernQkvLayout layout,
                    const int32_t *pos);

// ---- dropout ----
// The mask is a pure function of (key, sample, element) (base/rng.h: kept iff u(key, s, i) >= p),
// so losses do not depend on the world size, the micro-batching or the device, and a resumed run
// draws the masks it would have drawn. Callers give each dropout site and step its own key.
// 0 <= p < 1; p == 0 is no dropout.
typedef struct {
    float p;
    uint64_t key, sample0;  // row b of the batch is sample sample0 + b
    int head0;  // attention only: the global index of the call's head 0 (a tensor-parallel rank's
                // first head; 0 when the call has all heads), so the masks match the unsplit run's
} KernDropout;
// x holds elements [e0, e0 + n) of a batch of rows of M elements, in place (e0 = 0, n = B*M: the
// whole (B, M) batch; a sequence-parallel rank's rows start inside it): element i of row b is kept
// (times 1/(1-p)) iff u(key, sample0 + b, i) >= p, else multiplied by 0 (so 0, but NaN and Inf
// become NaN, as in torch). The same call on the gradient is the backward. p == 0 returns at once.
void kern_dropout(float *x, size_t e0, size_t n, size_t M, float p, uint64_t key, uint64_t sample0);

// ---- causal grouped-query attention ----
// q (B, Tq, H, hd); k, v (B, Tk, KV, hd) with batch stride kv_bstride elements (>= Tk*KV*hd);
// q, k, v, out and the gradients are activations;
// query t sits at position (Tk - Tq) + t and sees keys 0..that position.
// H % KV == 0; query head h uses kv head h / (H / KV). Scale 1/sqrt(hd).
// Document masking (block-diagonal causal attention): with kstart (B*Tq int32 on the device; NULL:
// plain causal) query t of row b sees only keys kstart[b*Tq + t] .. its own position. A row is a run
// of documents, so per row kstart is non-decreasing with kstart[t] <= (Tk - Tq) + t; the kernels skip
// blocks no query of theirs sees, and masked keys get probability exactly 0.
// Sliding window (window > 0; 0: none): a query at position p also sees only keys j > p - window,
// the last `window` positions, itself included. It combines with document masks.
// out (B, Tq, H, hd); saved: what backward needs, kern_attention_saved_floats(B, H, Tq, Tk)
// floats (the CPU keeps the softmax probabilities (B, H, Tq, Tk); a GPU only row statistics).
// drop (NULL or p == 0: none): dropout on the probabilities P (B, H, Tq, Tk) after the softmax,
// out = (mask * P) V / (1 - p); P[b, h, t, j] is kept iff
// u(key, sample0 + b, ((head0 + h)*Tq + t)*Tk + j) >= p.
// Backward must get the same drop as its forward.
size_t kern_attention_saved_floats(int B, int H, int Tq, int Tk);
void kern_attention_fwd(void *out, float *saved, const void *q, const void *k, const void *v,
                        int B, int Tq, int Tk, int H, int KV, int hd, size_t kv_bstride, const int32_t *kstart,
                        int window, const KernDropout *drop);
// training form (Tq == Tk == T, kv contiguous). dq (B,T,H,hd), dk, dv (B,T,KV,hd) are overwritten.
// out is the forward's output; scratch: at least kern_attention_scratch_floats(B, H, T) floats,
// sized after kern_init (it may depend on the thread count).
size_t kern_attention_scratch_floats(int B, int H, int T);
// kstart (device, ntok positions in rows of T) was just loaded from host_kstart: the attention
// calls that follow with this kstart, until the next load, may share tables derived from it,
// built once without reading anything back from the device (the CPU needs none).
void kern_documents_loaded(const int32_t *kstart, const int32_t *host_kstart, int ntok, int T);
void kern_attention_bwd(void *dq, void *dk, void *dv, float *scratch, const void *dout, const void *out,
                        const float *saved, const void *q, const void *k, const void *v,
                        int B, int T, int H, int KV, int hd, const int32_t *kstart, int window, const KernDropout *drop);

// ---- ring attention's blocks (context parallelism) ----
// Causal grouped-query attention split by key blocks, each block's part merged by log-sum-exp (an
// online softmax), so a rank holding some queries can see the keys block after block as a ring
// passes them. Device pointers; q, k, v, out, dout, dq, dk, dv are activations (kern_act_bytes
// each), lse fp32. q, out (B, Tq, H, hd); k, v (B, Tk, KV, hd), contiguous.
// qpos (Tq), kpos (Tk): the positions of the rows' queries and keys in their sequence (the same for
// every row b; device memory), each increasing (a cp rank's two chunks in order). qfirst (B*Tq, or
// NULL: plain causal): the position of each query's document start, non-decreasing along a row
// (document masking). Query i of row b sees key j iff qfirst[b*Tq + i] <= kpos[j] <= qpos[i] and,
// with window > 0, kpos[j] > qpos[i] - window. lse (B, H, Tq): each query's log-sum-exp of its
// scaled scores over the keys seen so far. first: out and lse start here (the first block; every
// query must see some key of the blocks by the end). Scale 1/sqrt(hd). Row blocks' products cover
// only the keys their queries see, so a block no query sees costs nothing. drop (NULL or p == 0:
// none): P[b, h, i, j] multiplies V kept iff u(key, sample0 + b, ((head0 + h)*seq + qpos[i])*seq +
// kpos[j]) >= p, the mask the whole-sequence kernels draw for that query and key in a sequence of
// seq tokens (on either device); lse stays undropped.
// blk (NULL: none): the block's mask as the host knows it (kern_block_of), which lets a GPU run the
// block through cuDNN's SDPA; the positions still define the result.
typedef struct {
    int q0, nq;  // the queries that see keys: [q0, q0 + nq) of each row; the others see none
    int nk;      // they see keys [0, nk): all of them (causal 0), or query q0 + i keys 0..i (causal 1, nk == nq)
    int causal;
} KernBlock;
// The block of a plain causal mask (no documents, no window: query i sees key j iff kpos[j] <=
// qpos[i]) from host copies of the positions: 1 and *blk when it is such a rectangle or causal
// square, else 0. Under the ring's head-tail layout every block is one.
int kern_block_of(KernBlock *blk, const int32_t *qpos, const int32_t *kpos, int Tq, int Tk);
void kern_attention_part_fwd(void *out, float *lse, const void *q, const void *k, const void *v, int B, int Tq,
                             int Tk, int H, int KV, int hd, const int32_t *qpos, const int32_t *kpos,
                             const int32_t *qfirst, int window, int first, const KernDropout *drop, int seq,
                             const KernBlock *blk);
// Backward of one block, once the forward has seen every block (out, lse final): dq (B, Tq, H, hd)
// += this block's share, dk and dv (B, Tk, KV, hd) += the gradients of this block's keys and values
// from these queries. The callers zero them before the first block.
void kern_attention_part_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                             const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int KV, int hd,
                             const int32_t *qpos, const int32_t *kpos, const int32_t *qfirst, int window,
                             const KernDropout *drop, int seq, const KernBlock *blk);

// ---- SwiGLU on the fused gate|up projection ----
// One GEMM against the adjacent gate and up weights (2F rows) gives gu (N, 2F): each row holds
// gate (F), then up (F). h (N, F) = silu(gate) * up. All activations.
void kern_swiglu_fwd(void *h, const void *gu, int N, int F);
// dgu (N, 2F) overwritten: d gate, then d up, per row, the layout one GEMM backward takes
void kern_swiglu_bwd(void *dgu, const void *dh, const void *gu, int N, int F);

// ---- mixture of experts: routing, and the experts' rows grouped by expert ----
// Each of N tokens goes to K of E experts (K <= E <= CONFIG_MAX_EXPERTS). Assignment j = t*K + k
// is token t's k-th expert; slot[j] is its row among the M = N*K grouped rows, src[r] the token
// of grouped row r (the caller groups them: host work on the downloaded idx).
// probs (N, E) = softmax(logits); idx (N, K) the K most probable experts, most probable first
// (ties: the lower index); wts (N, K) their probabilities over the K chosen ones' sum.
void kern_moe_route(float *probs, int32_t *idx, float *wts, const float *logits, int N, int E, int K);
// dlogits (N, E) overwritten: from dwts (N, K) through the renormalisation and the softmax, plus,
// for the tokens whose targets[t] >= 0 (the router losses' tokens), gaux[e] (E, device; NULL: none)
// added to every dloss/dprobs[t, e] (the load-balancing loss, whose token fractions are
// constants) and the z-loss's zscale * 2 * logsumexp(logits[t]) * probs[t, e]
void kern_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const float *logits, const int32_t *idx,
                        const float *wts, const int32_t *targets, const float *gaux, float zscale, int N, int E, int K);
// x = src times U(1 - j, 1 + j) elementwise (Mixtral's router jitter; x may be src): x and src hold
// elements [e0, e0 + n) of a batch of rows of M elements, row b sample sample0 + b (e0 = 0, n = B*M:
// the whole batch; a context-parallel rank's chunk of a row starts inside it), element i of row b
// times 1 - j + 2 j u(key, sample0 + b, i), drawn as the dropout masks are (a pure function of key,
// sample and element: layout-free, equal on the CPU and the GPU)
void kern_jitter(void *x, const void *src, size_t e0, size_t n, size_t M, float j, uint64_t key, uint64_t sample0);
// xe (M, D) row r = x row src[r]; activations
void kern_moe_gather(void *xe, const void *x, const int32_t *src, int M, int D);
// dx (N, D) overwritten: row t = the sum over k of dxe row slot[t*K + k], in k order; activations
void kern_moe_gather_bwd(void *dx, const void *dxe, const int32_t *slot, int N, int K, int D);
// out (N, D) overwritten: row t = sum over k of wts[t, k] * ye row slot[t*K + k], in k order (fp32)
void kern_moe_combine(float *out, const float *ye, const int32_t *slot, const float *wts, int N, int K, int D);
// dye (M, D) = wts[t, k] * dout row t at row slot[t*K + k]; dwts[t, k] = dout row t . ye row
// slot[t*K + k] (fp32, overwritten)
void kern_moe_combine_bwd(float *dye, float *dwts, const float *dout, const float *ye, const int32_t *slot,
                          const float *wts, int N, int K, int D);

// ---- GELU, all (n) elements; all activations ----
// KERN_GELU_TANH: the tanh approximation (torch gelu(approximate='tanh'), minGPT's NewGELU),
// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); KERN_GELU_ERF: the exact form
// (torch gelu(), Hugging Face's "gelu"), out = 0.5 x (1 + erf(x / sqrt(2))).
typedef enum { KERN_GELU_TANH, KERN_GELU_ERF } KernGelu;
void kern_gelu_fwd(void *out, const void *inp, size_t n, KernGelu form);
// dinp overwritten; it may be dout itself
void kern_gelu_bwd(void *dinp, const void *dout, const void *inp, size_t n, KernGelu form);

// ---- bias of a linear layer ----
// out (N, D, dtype dt) += b (D) on every row
void kern_bias_add(void *out, KernDtype dt, const void *b, int N, int D);
// db (D) += column sums of dout (N, D, dtype dt); deterministic
void kern_bias_bwd(float *db, const void *dout, KernDtype dt, int N, int D);
// A column block of a wider matrix (LoRA's share of a fused projection): out (N, ld), dtype dt,
// columns [c0, c0 + C) += s * src (N, C); and dst (N, C) = s * those columns of src (N, ld).
void kern_add_cols(void *out, KernDtype dt, int ld, int c0, const float *src, int N, int C, float s);
void kern_get_cols(float *dst, const void *src, KernDtype dt, int ld, int c0, int N, int C, float s);

// ---- embedding ----
// out (N, D) = wte[tokens[n]]
void kern_embedding_fwd(float *out, const int32_t *tokens, const void *wte, int N, int D);
// out and dout are the fp32 residual stream
// dwte (V, D) += scatter of dout (N, D); deterministic (no atomics)
void kern_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D);
// Vocabulary-parallel forms (tensor parallelism): this rank holds rows [v0, v0 + Vl) of the table
// as wte_part (Vl, D). out (N, D) = wte_part[tokens[n] - v0] for a token in that range, else a zero
// row, so the sum of out over the tp ranks is kern_embedding_fwd's.
void kern_embedding_part_fwd(float *out, const int32_t *tokens, const void *wte_part, int N, int D, int v0, int Vl);
// dwte_part (Vl, D) += scatter of the rows of dout (N, D) whose token is in [v0, v0 + Vl); the same
// additions in the same order as kern_embedding_bwd (deterministic, no atomics)
void kern_embedding_part_bwd(float *dwte_part, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl);

// ---- token ids ----
// Checks a batch's ids (tokens, and targets unless NULL: N each) against the vocabulary V where
// the device holds them, before the embedding and cross-entropy index with them: a token outside
// [0, V), or a target of V or more, becomes 0, so no kernel reads or writes outside its table, and
// the first such place is noted (negative targets are legal: they bear no loss, and stay).
// kern_token_error returns 1 and clears the note when there is one: *index is the place,
// base + n in tokens or base + N + n in targets (a base per batch lets one note cover a step's
// micro-batches), and *id the id. On a GPU it fetches the note: call it where the stream has
// just been waited for (once per step, after the step's reduction), so it costs one small copy.
void kern_tokens_check(int32_t *tokens, int32_t *targets, int N, int V, long long base);
int kern_token_error(long long *index, int *id);

// ---- learned position embeddings ----
// out (B, T, D) += wpe[pos0 + t] on row t of every sequence; wpe (>= pos0 + T, D)
void kern_positions_fwd(float *out, const void *wpe, int B, int T, int D, int pos0);
// dwpe (T, D) += sum over b of dout[b, t] (dout (B, T, D)), added in b order: deterministic
void kern_positions_bwd(float *dwpe, const float *dout, int B, int T, int D);

// ---- the classifier: fused softmax + cross-entropy ----
// loss_n = -log softmax(logits_n)[targets_n]. A negative target (Hugging Face's -100 label: padding,
// a prompt, a document's last token in a packed row) bears no loss: loss_n = 0 and, with dscale,
// its dlogits row is 0. *loss (one double on the device) += sum_n loss_n,
// so the loss stays on the device until someone downloads it. The softmax statistics come from
// one pass over each row in chunks of the vocabulary (online max and sum); with dscale != 0 a
// second pass overwrites the logits (N, V) with dloss/dlogits * dscale, in place. With
// dscale == 0 the logits are left untouched (evaluation). Logits are activations; the
// statistics and the loss are fp32 (double).
void kern_crossentropy_fwd_bwd(void *logits, const int32_t *targets, int N, int V, float dscale, double *loss);

// ---- vocabulary-parallel cross-entropy (tensor parallelism) ----
// kern_crossentropy_fwd_bwd on logits split by columns: this rank holds logits (N, Vl), columns
// [v0, v0 + Vl) of the full (N, V) ones, and the full row is never gathered. Three calls, with the
// caller's all-reduces over the tp ranks between them:
//   kern_xent_part_max -> all-reduce row_max (MAX) -> kern_xent_part_sums -> all-reduce sums (SUM)
//   -> kern_xent_part_finish.
// Logits are activations; the statistics are fp32 and the loss double, as in the fused kernel.
// Targets are global vocabulary ids; a negative one bears no loss, as there.
// row_max (N) = the max of each local row (NaN logits are skipped here; they reach the loss through
// the sums)
void kern_xent_part_max(const void *logits, int N, int Vl, float *row_max);
// sums (N, 2): [n][0] = sum over the local columns j of exp(logits[n][j] - row_max[n]) (row_max
// already the max over all ranks), [n][1] = the target's logit when v0 <= targets[n] < v0 + Vl, else
// 0. A row with a negative target gets 0 and 0 (the sums are never read for it).
void kern_xent_part_sums(const void *logits, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                         float *sums);
// With the sums added over all ranks: loss_n = log(sums[n][0]) + row_max[n] - sums[n][1] for each
// row with targets[n] >= 0, and with add_loss *loss (one double on the device) += sum_n loss_n (one
// rank adds it). With dscale != 0 the local logits are overwritten with
// dscale * (exp(logits - row_max) / sums[n][0] - onehot(target)), onehot at the target's column if
// it is local, and a row with a negative target becomes 0; with dscale == 0 they are left
// untouched. With v0 = 0 and Vl = V the three calls give kern_crossentropy_fwd_bwd's loss and
// gradient (to float rounding: the statistics are summed in another order).
void kern_xent_part_finish(void *logits, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                           const float *sums, float dscale, int add_loss, double *loss);

// ---- elementwise and reductions ----
void kern_add(float *y, const float *x, size_t n);            // y += x
void kern_add3(float *out, const float *a, const float *b, size_t n);  // out = a + b
void kern_scale(float *x, float s, size_t n);                 // x *= s
void kern_zero(float *x, size_t n);
void kern_copy(float *dst, const float *src, size_t n);
double kern_sumsq(const float *x, size_t n);                  // sum x^2 in double
void kern_sumsq_to(double *out, const float *x, size_t n);    // the same into *out on the device, no wait

// ---- optimizer: torch.optim.AdamW semantics, one call per flat unit shard ----
// g' = g * grad_scale; p *= 1 - lr*wd (inside the decay ranges only); m = b1 m + (1-b1) g';
// v = b2 v + (1-b2) g'^2; p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), t = step.
enum { KERN_ADAMW_MAX_RANGES = 8 };
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale;  // the gradient clipping coefficient (1: none), applied in the same pass
    int step;          // 1-based
    int ndecay;        // weight decay applies to elements [decay[r][0], decay[r][1]) only
    size_t decay[KERN_ADAMW_MAX_RANGES][2];
} KernAdamW;
// p, g, m, v (n); p_bf16 (n, or NULL) receives the new p rounded to bf16 (the next gather's copy)
void kern_adamw(float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h);
// the same on host buffers with the CPU threads, whatever the device (--cpu_offload)
void kern_adamw_host(float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h);

// ---- bf16 storage (round to nearest even) ----
void kern_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void kern_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
// x (n) rounded to bf16 values in place (the same numbers as a round trip through bf16, one pass)
void kern_round_bf16(float *x, size_t n);
// Under --precision bf16 on the CPU a unit's gather arrives in bf16 and is expanded to fp32 for
// the kernels that read fp32 weights: the n floats at params now hold exactly the bf16 values at
// copy, until the unit is released (copy NULL forgets params). The bf16 matmuls then take their
// weights from the copy, without rounding them again. Nothing on a GPU (its kernels read the
// bf16 gather itself).
void kern_params_bf16_copy(const float *params, const uint16_t *copy, size_t n);

// ---- NF4 storage of a frozen base (QLoRA) ----
// n >= 1 fp32 values as 4-bit NormalFloat codes (Dettmers et al. 2023) in blocks of 64, each
// block's absmax quantised again ("double quantisation") in groups of 256 blocks, as bitsandbytes
// stores them. With nb = ceil(n/64) blocks (the last zero-padded) and ng = ceil(nb/256) groups the
// bytes are, in order: codes (nb*32; element 2i in the high nibble of byte i, 2i+1 in the low),
// qabsmax (nb indices into bitsandbytes' signed 8-bit dynamic map), zeros up to a multiple of 4,
// absmax2 (ng little-endian fp32, each group's scale), offset (one fp32, the mean absmax).
// Element i of block b, group g is NF4[code] * (dyn[qabsmax[b]] * absmax2[g] + offset), each
// operation rounded to fp32 (no fused multiply-add), on every device.
size_t kern_nf4_bytes(size_t n);  // the packed size
// dst (kern_nf4_bytes(n), host) = src (n, host) packed: codes by NF4's decision tree over x times
// the fp32 reciprocal of its block's absmax (a value on a midpoint takes the lower code), the
// scales' offset their mean (summed in double, in order), each group's scales less the offset,
// times the reciprocal of their largest magnitude, on the dynamic map's nearest value (ties: the
// lower). NaN or infinite values are the caller's to refuse. Deterministic; it runs where a frozen
// tensor is made or loaded.
void kern_nf4_quantize(uint8_t *dst, const float *src, size_t n);
// A tensor-parallel rank's part of a whole tensor, in its order (model_tp_segments): n runs of len
// elements, run i from the whole tensor's element i * stride + off. {1, n, n, 0}: all n elements.
typedef struct {
    size_t n, len, stride, off;
} KernSegs;
// dst (seg.n * seg.len values: fp32 when f32, else parameters, bf16 under kern_params_bf16, the
// fp32 values rounded) = the elements seg picks of the whole tensor of n elements packed in src,
// both on the device (src 4-byte aligned)
void kern_nf4_dequantize(void *dst, int f32, const uint8_t *src, size_t n, KernSegs seg);
// the same values as fp32 on host buffers, whatever the device (exports)
void kern_nf4_dequantize_host(float *dst, const uint8_t *src, size_t n);

#endif
