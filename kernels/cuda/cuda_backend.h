// cuda_backend: what the CUDA backend offers the C side beyond the cuda_<op> list in backend.h.
// Plain C: no CUDA types, so comm/ and the tests can include it without CUDA headers.
#ifndef FSDPC_CUDA_BACKEND_H
#define FSDPC_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

// The one stream every cuda_<op> is queued on (a cudaStream_t), so the comm layer can order its
// NCCL work against the kernels. NULL before cuda_bind.
void *cuda_compute_stream(void);

// kern_select_attention on the GPU (cudnn_attention.cu): want is a KernAttention
const char *cuda_attention_select(int want, int bf16, int head_dim, int *failed);
// the attention kernel selected, in a word or a few (kern_attention_kernel)
const char *cuda_attention_kernel(void);
// kern_plan_attention and kern_ring_scratch_bytes on the GPU (cudnn_attention.cu)
void cuda_attention_plan(int want, int bf16, int head_dim);
size_t cuda_ring_scratch_bytes(int B, int T, int H, int KV, int hd, int docs, int window, int fwd_only);

// For the tests: builds one SDPA graph of the given shape (bwd: the backward; docs: document
// masked, B entries) with at most one deliberate mistake, and returns NULL when cuDNN finalizes
// it into a plan, else cuDNN's refusal (its last error message where the library has one).
// Opens cuDNN if needed; caches nothing.
typedef enum {
    CUDNN_PROBE_NONE,            // the graph fsdpc builds
    CUDNN_PROBE_P_FLOAT,         // forward: P enters P.V as FLOAT, not the I/O type
    CUDNN_PROBE_PT_FLOAT,        // backward: P^T for dV as FLOAT
    CUDNN_PROBE_DS_FLOAT,        // backward: dS^T for dK as FLOAT
    CUDNN_PROBE_STATS_BF16,      // Stats in bf16
    CUDNN_PROBE_SUM_BF16,        // backward: softmax_sum in bf16
    CUDNN_PROBE_DQ_ACCUM_BF16,   // backward: the dQ accumulator in bf16
    CUDNN_PROBE_SCORES_HALF,     // a virtual score tensor in HALF, not the intermediate FLOAT
    CUDNN_PROBE_IO_FLOAT,        // Q, K, V, O (and gradients) in FLOAT
    CUDNN_PROBE_HEAD_STRIDE2,    // Q's head dim with stride 2
    CUDNN_PROBE_STATS_LAYOUT,    // Stats (B, H, T, 1) with strides not the frontend's
    CUDNN_PROBE_RAGGED_NO_PADDING,  // ragged offsets without the padding mask
    CUDNN_PROBE_NO_SEQ_LEN_KV,   // a padding mask without seq_len_kv
    CUDNN_PROBE_MASK_BEFORE_SCALE,  // the causal mask before the scale (fused pattern order)
    CUDNN_PROBE_UNIFIED,         // the unified SDPA operation (cuDNN 9.13.1+) for causal attention
    CUDNN_PROBE_N
} CudnnProbe;
const char *cuda_cudnn_probe(int bwd, int docs, int B, int T, int H, int KV, int hd, int mistake);

// NULL when cuDNN builds the fused attention graph of this shape (bwd: the backward; docs: the
// document-masked ragged form, B its entries), else why not (test_gpu --cudnn_shapes)
const char *cuda_cudnn_graph_check(int bwd, int docs, int B, int T, int H, int KV, int hd);
// The same for a ring block's graph: Tq queries against Tk keys, rows S apart per batch entry
// (a cp rank's tokens), causal (a rank's own block) or a full rectangle
const char *cuda_cudnn_block_check(int bwd, int B, int Tq, int Tk, int S, int causal, int H, int KV, int hd);

#ifdef __cplusplus
}
#endif

#endif
