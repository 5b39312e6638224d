// cudnn_attention.cuh: causal grouped-query attention through cuDNN's fused flash SDPA
// (cudnn_attention.cu), which attention.cu tries first once --attention chose it. Shapes and the
// saved row log-sum-exp are those of kernels.h and attention.cuh, so either path's backward runs
// after either path's forward.
#ifndef FSDPC_CUDA_CUDNN_ATTENTION_CUH
#define FSDPC_CUDA_CUDNN_ATTENTION_CUH

#include "attention.cuh"

// Each returns false (and does nothing) when cuDNN does not take the call: not chosen, dropout
// (cuDNN's mask is not the layout-free hash of base/rng.h), a KV-cache shape (Tq != Tk or a
// strided kv), more documents than the largest entry bucket, or a shape whose graph cuDNN refused
// under --attention auto. kstart: NULL, or kernels.h's document masks (device), which run as a
// ragged batch of one document per entry (cudnn_attention.cu).
bool cudnn_att_fwd(Act out, float *lse, Act q, Act k, Act v, int B, int Tq, int Tk, int H, int KV, int hd,
                   size_t kv_bstride, const int32_t *kstart, const AttDrop *drop);
// sum: (B, H, T) floats of scratch, where cuDNN leaves rowsum(dout * out) (document-masked calls
// use scratch of their own)
bool cudnn_att_bwd(Act dq, Act dk, Act dv, float *sum, Act dout, Act out, const float *lse, Act q, Act k, Act v, int B,
                   int T, int H, int KV, int hd, const int32_t *kstart, const AttDrop *drop);
// A ring block (kernels.h kern_attention_part_*) whose mask the host gave (blk: a full rectangle or
// a rank's own causal block; NULL, documents, a window or dropout: false), bf16 activations. The forward
// merges the block into out and lse (first: the block's part alone); the backward, on the final
// out and lse, adds the block's share to dq, dk and dv.
bool cudnn_att_block_fwd(Act out, float *lse, Act q, Act k, Act v, int B, int Tq, int Tk, int H, int KV, int hd,
                         const KernBlock *blk, const int32_t *qfirst, int window, const AttDrop *drop, bool first);
bool cudnn_att_block_bwd(Act dq, Act dk, Act dv, Act dout, Act out, const float *lse, Act q, Act k, Act v, int B, int Tq,
                         int Tk, int H, int KV, int hd, const KernBlock *blk, const int32_t *qfirst, int window,
                         const AttDrop *drop);

#endif
