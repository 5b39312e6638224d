// moe: the sparse MLP of a mixture of experts (Mixtral's block_sparse_moe), for families. A router
// (E, D, no bias) sends each token to its K most probable experts, whose probabilities,
// renormalised over the K, weight their outputs' sum. Each expert is a gated MLP like Llama's: w1
// (gate) and w3 (up) adjacent in the unit, one (2F, D) GEMM, then w2 (down, (D, F)). Dropless:
// every token reaches its experts whatever the imbalance, one GEMM per expert over its tokens,
// grouped in token order. In training (model_router_train) the router's losses are over the
// global batch: each layer's forward sums its counts over the ranks, so they do not depend on the
// layout.
//
// Shape legend as model.h; E experts, K per token, M = N*K grouped rows.
#ifndef FSDPC_MOE_H
#define FSDPC_MOE_H

#include "model.h"

typedef struct MoeState MoeState;

// The router's and experts' buffers for S slots of N tokens of config c (a family's acts_alloc),
// the backward's scratch unless forward_only, and the host state
void moe_acts_alloc(Activations *a, const ModelConfig *c, size_t S, size_t N, int forward_only);  // a->ep set
void moe_state_free(MoeState *m);
// the host targets of the batch model_load_batch loaded (NULL: generation), whose loss-bearing
// tokens the router losses count
void moe_batch_loaded(Activations *a, const int32_t *targets, int ntok);
// A block's sparse MLP: the router (tensor `router` of unit u: gathered p, gradient g), and the
// experts this rank computes, each one's w1, w3 and w2 as the last tensors of unit ue (pe, ge):
// all E of them in u itself, or under expert parallelism its E/ep in its experts' unit.
typedef struct {
    const UnitSpec *u;
    int router;
    const void *p;
    float *g;
    const UnitSpec *ue;
    const void *pe;
    float *ge;
} MoeParams;
// Expert parallelism: the rows an ep rank's experts can receive from its ep group, Rc = ep x N x
// min(K, E/ep) (every token of every rank routed there): dropless whatever the imbalance.
size_t moe_ep_rows(const ModelConfig *c, int ep, size_t N);
// Layer l's sparse MLP over the N = a->B * T tokens' norm output xn (N, D): out (N, D, fp32) its
// branch output, overwritten; under tensor parallelism this tp rank's part of it (each expert's
// width split as a dense MLP's), which the caller sums over the tp group. Under expert parallelism the rows go to their experts' ranks and
// back by all-to-all over plan->ep_group, so every rank of the group runs it.
void moe_fwd(const ModelPlan *plan, Activations *a, int l, const MoeParams *mp, const void *xn, float *out, int T);
// Its backward from dout (N, D, fp32): grads g (+=); a->dxn (N, D) = dloss/dxn, overwritten (under
// tensor parallelism this tp rank's part, which the caller sums).
void moe_bwd(const ModelPlan *plan, Activations *a, int l, const MoeParams *mp, const void *xn, const float *dout);
// a block's tensors beyond the dense ones: the router and E experts of (D, F), for plan_build
void moe_add_tensors(UnitSpec *u, int layer, const ModelConfig *c);
// the parameters a token does not use, in a model of L blocks (for FLOPs per token)
double moe_inactive_params(const ModelConfig *c);

#endif
