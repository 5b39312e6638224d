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

// NULL when cuDNN builds the fused attention graph of this shape (bwd: the backward; docs: the
// document-masked ragged form, B its entries), else why not (test_gpu --cudnn_shapes)
const char *cuda_cudnn_graph_check(int bwd, int docs, int B, int T, int H, int KV, int hd);

#ifdef __cplusplus
}
#endif

#endif
