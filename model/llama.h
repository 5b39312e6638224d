// llama: the Llama-2 model as a list of FSDP units (embedding, one per block, final norm + head)
// with named tensors, counter-based init, and per-unit forward/backward over kernels/.
#ifndef FSDPC_LLAMA_H
#define FSDPC_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

enum { MAX_UNIT_TENSORS = 9 };
// tensor order inside a block unit
enum { P_LN1, P_Q, P_K, P_V, P_O, P_LN2, P_GATE, P_UP, P_DOWN };
// tensor order inside the head unit
enum { P_NORM, P_LM_HEAD };

typedef struct {
    char name[80];  // Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight
    int ndim;
    int shape[2];
    size_t offset;  // first element inside the unit's flat buffer
    size_t numel;
    int decay;      // AdamW weight decay applies (2-D weights; not norm weights)
} TensorSpec;

typedef enum { UNIT_EMBED, UNIT_BLOCK, UNIT_HEAD } UnitKind;

typedef struct {
    UnitKind kind;
    int layer;  // block index for UNIT_BLOCK
    int ntensors;
    TensorSpec t[MAX_UNIT_TENSORS];
    size_t numel;
} UnitSpec;

typedef struct {
    ModelConfig cfg;
    int nunits;  // L + 2: unit 0 embedding, 1..L blocks, L+1 head
    UnitSpec *units;
    size_t num_params;
} ModelPlan;

void model_plan_build(ModelPlan *plan, const ModelConfig *cfg);
void model_plan_free(ModelPlan *plan);
// finds a tensor by name; returns 0 if absent
int model_find_tensor(const ModelPlan *plan, const char *name, int *unit, int *tensor);

// Initial values of tensor elements [begin, begin+count) into dst: a pure function of
// (seed, tensor name, element index), so any shard can be made alone (DESIGN invariant 1).
void model_init_range(const TensorSpec *t, uint64_t seed, float std, size_t begin, size_t count, float *dst);

// Activations and scratch for batches of up to B sequences of up to T tokens.
typedef struct {
    int B, T;
    // all buffers live on the compute device (kern_alloc)
    int32_t *tokens, *targets;  // (B*T) the batch, set by model_load_batch
    float *res;  // (L+1, B*T, D) residual stream: res[0] embedding out, res[l+1] block l out
    // Block internals, one set per slot: each stored block has its own slot; checkpointed blocks
    // share one and are recomputed from their input in backward.
    int *slot, *recompute;  // (L)
    float *xn1, *rstd1, *q, *k, *v, *attn_saved, *att, *xmid, *xn2, *rstd2, *gate, *up, *h;
    size_t saved_len;  // attention state saved per block slot
    float *xf, *rstdf, *logits;  // head: (B*T, D), (B*T), (B*T, V)
    // backward scratch, shared by all blocks
    float *dres, *dxn, *dq, *dk, *dv, *datt, *dgate, *dup, *dh, *attn_scratch;
    float *rope_cos, *rope_sin;  // (T, hd/2)
    // KV cache for generation (B must be 1): (L, T, KV*hd); NULL in training
    float *kcache, *vcache;
} Activations;

// ckpt_every N > 0 checkpoints blocks 0, N, 2N, ... (1 = all); 0 stores every block.
void model_acts_alloc(Activations *a, const ModelConfig *cfg, int B, int T, int with_kv_cache, int ckpt_every);
void model_acts_free(Activations *a);
// bytes model_acts_alloc would take with these arguments (the memory check before allocating)
size_t model_acts_bytes(const ModelConfig *cfg, int B, int T, int with_kv_cache, int ckpt_every);

// Copies a batch of ntok host tokens (and targets, unless NULL) to the device.
void model_load_batch(Activations *a, const int32_t *inp, const int32_t *tgt, int ntok);
// Forward over the loaded batch of a->B sequences of T tokens. With a KV cache the tokens sit at
// positions pos0..pos0+T-1 and attend to the cached past; without, pos0 must be 0.
void model_embed_fwd(const ModelPlan *plan, const float *p, Activations *a, int T);
void model_block_fwd(const ModelPlan *plan, int layer, const float *p, Activations *a, int T, int pos0);
// Final norm + lm_head + fused cross-entropy against the loaded targets. Returns the summed loss
// over B*T targets. dscale != 0 also runs the head's backward: grads g (+=) with dloss scaled by
// dscale, and a->dres = dloss/d res[L]. with_targets == 0 only computes logits (generation).
double model_head_fwd_bwd(const ModelPlan *plan, const float *p, float *g, Activations *a, int with_targets, int T,
                          float dscale);
// a->dres holds dloss/d(block output); on return dloss/d(block input). Grads g (+=).
void model_block_bwd(const ModelPlan *plan, int layer, const float *p, float *g, Activations *a);
void model_embed_bwd(const ModelPlan *plan, float *g, Activations *a);

#endif
