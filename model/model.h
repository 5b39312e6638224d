// model: the model interface. A family (family.h: one file per family) describes a model as a
// list of FSDP units with named tensors, initialises any slice of them from (seed, name, index),
// and runs each unit's forward and backward over kernels/. shard/, ckpt/, the training loop and
// generation see only this interface and the descriptor: they never learn which family they run.
//
// Shape legend: B batch, T sequence length, N = B*T tokens, D hidden width, L layers, H heads,
// KV key/value heads, hd = D/H head dim, F MLP width, V vocabulary, S saved block slots (L, or
// fewer under activation checkpointing).
#ifndef FSDPC_MODEL_H
#define FSDPC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/kernels.h"
#include "config.h"

// a block of a mixture of experts: 2 norms, q, k, v, o, the router, and each expert's 3 tensors;
// its LoRA adapter unit: the two factors of each of those but the norms, the most
enum { MAX_UNIT_TENSORS = 2 * (5 + 3 * CONFIG_MAX_EXPERTS) };

// how a tensor starts: N(0, initializer_range * scale), all ones (norm weights) or zeros (biases)
// or U(-init_scale, init_scale) (LoRA's A: PEFT's Kaiming-uniform bound 1/sqrt(fan_in))
typedef enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS, INIT_UNIFORM } InitKind;

// How tensor parallelism splits a tensor over a tp group (shard/parallel.h): whole on every tp
// rank (norms, biases added after a row-parallel reduction), by rows (column-parallel weights and
// their biases: q/k/v, gate/up, the vocabulary of embeddings and heads) or by columns (row-
// parallel weights: o, down). A split dimension made of `parts` equal blocks (minGPT's fused
// q|k|v) splits each block, so every tp rank keeps its heads of each.
typedef enum { TP_WHOLE, TP_ROWS, TP_COLS } TpSplit;

typedef struct {
    char name[80];  // Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight
    int ndim;
    int shape[2];
    size_t offset;  // first element inside the unit's flat buffer
    size_t numel;
    int decay;      // AdamW weight decay applies
    InitKind init;
    float init_scale;  // INIT_NORMAL: std = initializer_range * init_scale
    TpSplit tp_split;  // families declare it (model_tensor_split); TP_WHOLE unless told
    int tp_parts;      // blocks of the split dimension (1 unless fused)
    int full[2];       // the whole tensor's shape; shape is one tp rank's part after model_plan_tp
    int lora;          // a frozen weight with an adapter: its lora_A's index in the block's adapter unit
                       // (lora_B follows it); else -1
    int tp_partial;    // each tp rank's gradient is a share of the whole one, summed over the tp group
                       // (the whole factor of an adapter on a split weight)
    int nf4;           // QLoRA: stored as the whole tensor's kern_nf4_quantize bytes (model_plan_quantize)
    int bf16;          // a frozen base under --precision bf16: stored as its bf16 values (model_plan_quantize)
    size_t pack_off;   // in a packed unit (UnitSpec.packed > 0): the first byte of its piece
    int stored_whole;  // its piece holds the whole tensor though tp splits it (UnitSpec.stored_whole)
} TensorSpec;

typedef struct {
    int layer;  // block index, or -1 for a unit outside the blocks
    int ep_index;  // expert parallelism (model_plan_ep): the experts of the ep ranks at this place of their
                   // ep group, which alone hold the unit; -1: every rank holds it
    int frozen;    // LoRA: the unit's weights do not train (no gradient, no optimizer state)
    int adapter;   // LoRA: the unit holds block `layer`'s adapters
    int ntensors;
    TensorSpec t[MAX_UNIT_TENSORS];
    size_t numel;
    // QLoRA, and a bf16 base: a unit holding nf4 or bf16 tensors is stored as bytes, its tensors'
    // pieces one after another (model_piece_bytes: an nf4 tensor's kern_nf4_bytes, a bf16 one's
    // numel bf16 values, any other's numel fp32 values), each from a multiple of 4 bytes: this many
    // in all (a multiple of 4); 0: a unit of fp32 elements
    size_t packed;
    // QLoRA under tensor parallelism: a packed unit holding nf4 tensors stores every tensor whole,
    // sharded over its shard group's ranks and their tp ranks together, so NF4's blocks and groups
    // are the whole tensor's at every tp degree; each tp rank dequantises its part from the gather
    // (model_plan_tp)
    int stored_whole;
} UnitSpec;

typedef struct ModelFamily ModelFamily;  // family.h
typedef struct CommGroup CommGroup;      // comm.h

typedef struct {
    ModelConfig cfg;
    const ModelFamily *family;
    int nunits;
    UnitSpec *units;
    size_t num_params;
    // the units the stages use: blocks are units block0 .. block0+L-1; the embedding and the head
    // may share one unit (tied weights), whose gradient then collects both stages' parts
    int embed_unit, block0, head_unit;
    // tensor parallelism (model_plan_tp): this rank's place in its tp group, whose collectives
    // the families call between their kernels; tp 1: the whole model, no group
    int tp, tp_rank;
    CommGroup *tp_group;
    int sp;  // --sequence_parallel at tp > 1: the residual stream's rows split over the tp group
    // expert parallelism (model_plan_ep): each block of a mixture of experts is its dense unit, then
    // ep units of E/ep experts each, one per place in an ep group; this rank's place and its group,
    // whose all-to-all moves the tokens. ep 1: a block is one unit (block_stride 1).
    int ep, ep_rank, block_stride;
    CommGroup *ep_group;
    // LoRA (model/lora.h): block l's adapters are unit lora0 + l, after every other unit (under
    // expert parallelism with adapted experts lora0 + l * (1 + ep), then its experts' places, as a
    // block's units; lora_block_units); -1: none
    int lora0;
    float lora_scale;  // alpha / r, or alpha / sqrt(r) (rsLoRA)
    // context parallelism (model/context.c): this rank's place in its cp group, which splits every
    // sequence and passes keys and values around a ring in attention; cp 1: whole sequences
    int cp, cp_rank;
    CommGroup *cp_group;
    int cp_docs;  // the batches carry document boundaries (--document_masking): the ring's blocks stay native
} ModelPlan;

// The most units a block has on one rank: its own, under expert parallelism its experts', and
// with LoRA its adapters' (and its experts' adapters').
enum { MAX_BLOCK_UNITS = 4 };

// Activations and scratch for batches of up to B sequences of up to T tokens. All buffers live
// on the compute device (kern_alloc); NULL when the family or the mode does not use them. The
// `void *` ones hold activations in the kernels' activation dtype (kern_acts_bf16: bf16 under
// --precision bf16 on a GPU), so they are indexed with kern_act_at; the `float *` ones stay fp32.
typedef struct {
    int B, T, V;  // V: this tp rank's share of the vocabulary (its logits' width)
    int tp;       // the plan's tp degree, for the families' buffer sizes
    int ep;       // the plan's ep degree when its blocks are split (model_plan_ep), else 1
    // Sequence parallelism (plan->sp, training and evaluation): the residual stream, the norms, the
    // dropouts and the row-parallel biases run on this tp rank's share of the batch's rows, the
    // sp_rank-th of sp contiguous shares of the B*T rows (model_rows); 1 and 0 without it. Buffers
    // marked (N/sp, D) below hold that share.
    int sp, sp_rank;
    // Context parallelism (plan->cp, training and evaluation): T is this rank's tokens of each
    // sequence of cp * T, its chunks cp_rank and 2 cp - 1 - cp_rank of 2 cp; 1 and 0 without it
    int cp, cp_rank;
    int docs;  // the loaded batch has document boundaries: kstart and pos below hold them
    int32_t *cp_pos;  // cp > 1: (cp, T) host, the positions in their sequence of each cp rank's tokens
    int32_t *cp_dpos; // cp > 1: cp_pos in device memory, what the attention kernels read
    float *cp_ring;   // cp > 1: the ring's two halves of keys and values and their gradients (model/context.c)
    int32_t *tokens, *targets;  // (N) the batch, set by model_load_batch (a negative target bears no loss)
    int32_t *kstart, *pos;      // (N) with docs: the first key each token sees (its document's start, a position
                                // in the sequence); with docs, sequence or context parallelism: each token's position
    // (L+1, N/sp, D) residual stream: res[0] embedding out, res[l+1] block l out. The block inputs are
    // the activation checkpoints, so they are stored in the activation dtype (bf16 under --precision
    // bf16 on a GPU, values the training run rounds to anyway); blocks compute in fp32, through
    // res_in / res_out when the stream is bf16 (model_res_*)
    void *res;
    float *res_in, *res_out;  // (N/sp, D) fp32 working copies of one block's input and output; NULL when res is fp32
    // Block internals, one set per slot: each stored block has its own slot; checkpointed blocks
    // share one and are recomputed from their input in backward.
    int *slot, *recompute;  // (L) host arrays
    void *xn1;           // (S, N/sp, D) first norm out
    float *mean1, *rstd1;  // (S, N/sp) its statistics (mean: LayerNorm only)
    void *qkv;           // (N, H*hd + 2*KV*hd) the fused q|k|v projection, split into q, k, v; in
                         // backward their gradient, merged for one GEMM (scratch, not per slot)
    void *q;             // (S, N, H*hd)
    void *k, *v;         // (S, N, KV*hd)
    float *attn_saved;   // (S, saved_len) what attention backward needs
    size_t saved_len;    // model_attention_saved (kern_attention_saved_floats(B, H, T, T) without cp)
    void *att;           // (S, N, H*hd) attention out, before the output projection
    float *xmid;         // (S, N/sp, D) residual after attention
    void *xn2;           // (S, N/sp, D) second norm out
    float *mean2, *rstd2;  // (S, N/sp)
    void *up;            // Llama: (S, N, 2F) the fused gate|up projection; minGPT: (S, N, F) c_fc out, before GELU
    void *h;             // (S, N, F) MLP hidden: SwiGLU / GELU out
    void *xf;            // (N/sp, D) final norm out
    float *meanf, *rstdf;  // (N/sp)
    void *logits;        // (N, V) logits, then dloss/dlogits
    float *xent_max, *xent_sums;  // (N), (N, 2) vocabulary-parallel cross-entropy's statistics (tp > 1)
    double *loss;        // (1) the summed loss the classifier adds to, on the device
    // backward scratch, shared by all blocks
    float *dres;         // (N/sp, D) dloss/d residual stream at the current unit
    void *dxn;           // (N, D) dloss/d a norm's output: a column-parallel matmul's input gradient
    float *dbranch;      // (N/sp, D) a residual branch's gradient through its dropout (dropout > 0)
    void *dq;            // (N, H*hd)
    void *dk, *dv;       // (N, KV*hd)
    void *datt;          // (N, H*hd)
    void *dup;           // (N, 2F) Llama: d(gate|up)
    void *dh;            // (N, F)
    float *attn_scratch;      // kern_attention_scratch_floats(B, H, T)
    float *rope_cos, *rope_sin;  // (T, hd/2) Llama
    void *kcache, *vcache;       // (L, T, KV*hd) generation KV cache (B == 1); NULL in training
    // dropout of this batch (model_set_dropout): 0 in evaluation and generation
    float dropout;
    uint64_t drop_seed;  // run seed the masks are keyed by
    uint64_t sample0;    // global index of the batch's first sample
    struct ActOffload *offload;  // --offload_activations (model/offload.c); NULL without it
    // sequence parallelism (sp > 1): the whole batch's rows around the tp collectives
    float *sp_full;      // (N, D) a row-parallel matmul's partial output; a gathered gradient
    void *sp_xg;         // (N, D) a gathered norm output, a column-parallel matmul's input
    void *sp_dxn;        // (N/sp, D) dxn summed over the tp group, this rank's rows
    // mixture of experts (num_experts E > 0; model/moe.h): per slot, the router's outputs and the
    // experts' rows, M = N*K of them grouped by expert (the tokens of expert 0, then 1, ...).
    // Under expert parallelism (ep > 1) the experts' rows are those the ep group sent this rank's
    // experts, at most Rc of them (moe.h), grouped by expert: xe, gue, he and their gradients
    // hold Rc rows, ye stays the local M
    float *rlogits, *rprobs;  // (S, N, E) router logits and their softmax
    int32_t *ridx;            // (S, N, K) each token's experts, most probable first
    float *rwts;              // (S, N, K) their weights
    int32_t *rsrc, *rslot;    // (S, M) each grouped row's token; each assignment's grouped row
    void *rjit;               // (S, N, D) the MLP's input times the router jitter (training with jitter only)
    void *xe;                 // (S, M, D) the experts' inputs
    void *gue;                // (S, M, 2F) their w1|w3 projections
    void *he;                 // (S, M, F) SwiGLU out
    float *ye;                // (S, M, D) the experts' outputs, unweighted
    float *dye, *drwts, *drlogits, *rgaux;  // backward: (M, D), (N, K), (N, E), the balance loss's (E)
    void *dhe, *dgue, *dxe;   // (M, F), (M, 2F), (M, D)
    void *ep_act;             // ep > 1: (Rc, D) the rows being sent, and received gradients
    float *ep_f32, *ep_f32b;  // ep > 1: (Rc, D) received rows, and the experts' outputs in either order
    float *ep_ones;           // ep > 1: (Rc) ones, the weights of a row permutation through kern_moe_combine
    int32_t *ep_perm, *ep_inv;  // ep > 1: (Rc) received rows by expert and their inverse
    struct MoeState *moe;     // host side: each layer's grouping and router statistics (moe.c)
    struct LoraActs *lora;    // LoRA: the current block's adapters and their scratch (lora.c); else NULL
} Activations;

// The model's units and tensors from its configuration: 0, or -1 with the line in err when the
// model is too large to count in bytes.
int model_plan_build(ModelPlan *plan, const ModelConfig *cfg, char *err, size_t errlen);
void model_plan_free(ModelPlan *plan);
// The frozen units' storage (after lora_plan): with cfg quantize_base nf4 (QLoRA) marks nf4 every
// 2-D tensor of the frozen block units (bitsandbytes' Linear4bit takes every linear layer of the
// blocks); with cfg base_bf16 marks bf16 every other tensor of every frozen unit (norms, biases,
// the embedding and the head too), else those stay fp32. Then lays out the packed units
// (model_plan_pack).
void model_plan_quantize(ModelPlan *plan);
// Each unit's packed layout from its tensors' nf4 and bf16 marks (UnitSpec.packed,
// TensorSpec.pack_off); model_plan_ep calls it again after splitting the blocks.
void model_plan_pack(ModelPlan *plan);
// the bytes tensor t's piece holds in a packed unit (before the padding to 4 bytes)
size_t model_piece_bytes(const TensorSpec *t);
// the whole tensor's elements, at any tp degree
static inline size_t model_whole_numel(const TensorSpec *t) { return (size_t)t->full[0] * (t->ndim == 2 ? (size_t)t->full[1] : 1); }
// Splits each block of a mixture of experts into its dense unit and ep units of E/ep experts (the
// last 3E tensors of the block, model/moe.h), for the ep rank `rank` of the ep group `group`
// (NULL where nothing runs); with adapted experts (LoRA) each block's adapter unit alike, into the
// dense layers' adapters and ep units of the adapters of the experts at each place. Names and
// initial values stay the whole model's; ep 1 changes nothing.
void model_plan_ep(ModelPlan *plan, int ep, int rank, CommGroup *group);
// The units of block l this rank computes with, into units (MAX_BLOCK_UNITS): the block's own,
// then its experts' under expert parallelism. Returns how many.
int model_block_units(const ModelPlan *plan, int l, int *units);
// Those units, then block l's adapter units with LoRA (lora_block_units): the units a block's
// compute gathers, whose parameters (and gradients) model_block_fwd and model_block_bwd take in
// this order.
int model_block_gather(const ModelPlan *plan, int l, int *units);
// Tensor i of unit u's gradient in g. A frozen unit's g is NULL (LoRA): its weights' GEMMs then
// skip the gradient (NULL), and the small vectors (norms, biases) go to a scratch nobody reads.
float *model_grad(const Activations *a, float *g, const UnitSpec *u, int i);
// appends a tensor to u (families building their plans); cols == 0 makes it 1-D
TensorSpec *model_add_tensor(UnitSpec *u, const char *name, int rows, int cols, InitKind init, float init_scale,
                             int decay);
// finds a tensor by name; returns 0 if absent
int model_find_tensor(const ModelPlan *plan, const char *name, int *unit, int *tensor);
// ---- for families: the tp collectives around their kernels ----
// Megatron's pattern: a column-parallel matmul (q/k/v, gate/up, the head) reads the whole batch's
// norm output and its input gradient is a partial sum; a row-parallel one (o, down) writes a
// partial sum of the residual branch. Without sequence parallelism the sums are all-reduces and
// every tp rank holds every row; with it (a->sp > 1) they are reduce-scatters onto this rank's
// rows, and the norm outputs and branch gradients are all-gathered from them. At tp 1 the
// gathers and sums are no-ops that return their input.
// This rank's rows of a batch of a->B rows of T tokens (B*T/sp), and the first one's global index.
int model_rows(const Activations *a, int T);
size_t model_row0(const Activations *a, int T);
// elements of one residual-stream entry: model_rows x D
size_t model_res_numel(const Activations *a, int D, int T);
// A norm output x (rows, D) as the column-parallel matmul's input (B*T, D): a->sp_xg under sp.
const void *model_sp_gather(const ModelPlan *plan, Activations *a, const void *x, int T);
// A branch gradient dx (rows, D, fp32) as the row-parallel matmul's output gradient (B*T, D).
const float *model_sp_gather_f32(const ModelPlan *plan, Activations *a, const float *dx, int T);
// Where a row-parallel matmul writes its partial (B*T, D) output (a->sp_full under sp, else dst),
// then the sum over the tp group into dst (rows, D).
float *model_rowpar_out(Activations *a, float *dst);
void model_rowpar_sum(const ModelPlan *plan, Activations *a, float *dst, int T);
// a->dxn (B*T, D), a column-parallel matmul's input gradient, summed over the tp group: (rows, D)
const void *model_colpar_dx(const ModelPlan *plan, Activations *a, int T);
// The token embedding of the batch into out (rows, D), vocabulary-parallel under tp, and its
// backward from dx (rows, D): gwte += (the rank's vocabulary rows).
void model_embed_tokens_fwd(const ModelPlan *plan, Activations *a, const void *wte, float *out, int T);
void model_embed_tokens_bwd(const ModelPlan *plan, Activations *a, float *gwte, const float *dx);
// The fused softmax cross-entropy of model_head_fwd_bwd over this tp rank's (N, V/tp) logits:
// the row maxima and sums are reduced over the tp group, one rank adds the loss, and with dscale
// the local logits become their dlogits. At tp 1 it is kern_crossentropy_fwd_bwd.
void model_tp_crossentropy(const ModelPlan *plan, Activations *a, int N, float dscale);
// declares how tensor parallelism splits t (before model_plan_tp)
void model_tensor_split(TensorSpec *t, TpSplit split, int parts);
// Turns a plan into tp rank `rank`'s part of the tp group `group` of `tp` ranks: each split
// tensor's shape becomes its part, offsets and unit sizes follow (num_params stays the whole
// model's). Every split dimension must divide by parts x tp (parallel_dims_build checks the
// sizes that make them). group may be NULL where nothing runs (a layout check). sequence_parallel
// (at tp > 1) splits the residual stream's rows over the group too (plan->sp). At tp > 1 the
// packed units holding nf4 tensors become stored whole (UnitSpec.stored_whole) and the packed
// layouts follow the parts (model_plan_pack).
void model_plan_tp(ModelPlan *plan, int tp, int rank, CommGroup *group, int sequence_parallel);
// tp rank `rank`'s part of t as runs of the whole tensor (row-major), in the part's order
KernSegs model_tp_segments(const TensorSpec *t, int tp, int rank);
// Where tp rank `rank`'s element `local` of t sits in the whole tensor (row-major): *full, and the
// number of local elements from there whose whole-tensor places follow one another (a run).
size_t model_tp_run(const TensorSpec *t, int tp, int rank, size_t local, size_t *full);
// model_init_range for elements [begin, begin+count) of tp rank `rank`'s part: the values the
// whole tensor has at those places, so a run initialises alike at every tp degree.
void model_init_part(const TensorSpec *t, int tp, int rank, uint64_t seed, float std, size_t begin, size_t count, float *dst);

// Initial values of tensor elements [begin, begin+count) into dst: a pure function of
// (seed, tensor name, element index), so any shard can be made alone (DESIGN invariant 1).
void model_init_range(const TensorSpec *t, uint64_t seed, float std, size_t begin, size_t count, float *dst);

// plain RoPE's inverse frequencies of the rot rotated dimensions of a head: f[i] = theta^(-2i/rot),
// i < rot/2 (a family may rescale them, as Llama-3 does, before kern_rope_table)
void model_rope_inv_freq(double *f, int rot, double theta);

// ckpt_every N > 0 checkpoints blocks 0, N, 2N, ... (1 = all); 0 stores every block.
// horizon > 0 (--offload_activations on a GPU) offloads the checkpointed blocks' inputs: they pass
// through a ring of horizon + 1 device entries, the others wait in pinned host memory (below).
void model_acts_alloc(Activations *a, const ModelPlan *plan, int B, int T, int with_kv_cache, int ckpt_every, int horizon);
void model_acts_free(Activations *a);
// device bytes model_acts_alloc would take with these arguments, and the products' scratch the
// kernels keep (kern_matmul_scratch_bytes, model_cp_scratch; the memory check before allocating); *host_bytes (unless NULL) the pinned host bytes of offloaded entries
size_t model_acts_bytes(const ModelPlan *plan, int B, int T, int with_kv_cache, int ckpt_every, int horizon,
                        size_t *host_bytes);
// Activation offloading, for the training loop (no-ops without it; a forward-only pass calls none,
// its entries never leave the device). Offloaded entries are numbered k = 0..n-1 from the bottom;
// the top horizon + 1 stay in the ring from forward to backward, the others make the round trip.
// Forward: entry l (0..L) is final (after any cast): starts its copy to the host, and makes the
// kernels queued next, which write entry l + 1, wait for the copy out of the ring slot it takes.
void model_offload_fwd(Activations *a, int l);
// Backward, before block l's recompute reads its input: waits for that entry's copy back.
void model_offload_fetch(Activations *a, int l);
// Backward, after block l's recompute: queues the copy back of the entry horizon checkpointed
// blocks lower, into the ring slot that block l's recompute wrote last (once those kernels ran).
void model_offload_prefetch(Activations *a, int l);
// "n checkpointed blocks' inputs, X MiB ..." for the start-up log, or NULL without offloading
const char *model_offload_describe(const Activations *a);
// NULL when every activation buffer of batch B x context T stays within base/checked.h's
// CHECKED_MAX_BYTES (so the sizes above cannot wrap), else a static message naming the product
// and its factors. Call after kern_init (a CPU run's scratch is per thread).
const char *model_check_sizes(const ModelPlan *plan, int B, int T);
// a zeroed device buffer of n floats, or of n activations; or only counted while model_acts_bytes runs
float *model_acts_buf(size_t n);
void *model_acts_act(size_t n);
// The buffers after a family's forward activations: with_kv_cache, the KV cache of the L layers
// (generation: returns 0, it runs no backward); else the backward's dres, dxn, dbranch (with
// dropout), dq, dk, dv and datt (returns 1). qd, kvd: a token's query and key/value widths.
int model_acts_attention(Activations *a, const ModelConfig *c, int with_kv_cache, size_t N, size_t qd, size_t kvd);
// The residual stream (Activations.res) for a family's acts_alloc: L+1 entries of the rank's
// rows of the batch's N (N/sp) x D.
void model_res_alloc(Activations *a, int L, size_t N, size_t D);
// For the families' forward and backward, over the first a->B * T tokens of entry l (0..L):
// res[l] as fp32 (itself, or expanded into res_in); where entry l is computed in fp32 (itself, or
// res_out); model_res_store then keeps res_out in res[l] (a no-op for an fp32 stream).
float *model_res_in(Activations *a, int l, int D, int T);
float *model_res_out(Activations *a, int l, int D);
void model_res_store(Activations *a, int l, int D, int T);
// Entry l itself when the stream is fp32 (the training loop rounds it under --precision bf16 on
// the CPU), else NULL: a bf16 stream was rounded when stored.
float *model_res_f32(Activations *a, int l, int D);

// Copies a batch of ntok host tokens (and targets, unless NULL) to the device: whole sequences, rows
// of a->cp * a->T tokens, of which a context-parallel rank keeps its two chunks (with their
// positions in the sequence). kstart (ntok, or
// NULL: one causal sequence per row) gives each token's document start in its row: attention stays
// inside documents and positions restart at each (kernels.h, document masking).
// batch: which batch of a step (micro-batch) or of a validation pass this is, for the place a bad
// token id is reported at (kern_tokens_check)
void model_load_batch(Activations *a, const int32_t *inp, const int32_t *tgt, const int32_t *kstart, int ntok, int batch);
// Attention for the families' training and evaluation (model/context.c): causal grouped-query
// attention of the loaded batch's a->B rows of a->T tokens over H query heads and KV key/value heads
// (this tp rank's), with the batch's document masks and the window; kern_attention_fwd and _bwd,
// or under context parallelism (a->cp > 1) ring attention over the cp group: keys and values pass
// round the ring, each block merged by log-sum-exp, and in backward their gradients travel with
// them back to their rank. saved: model_attention_saved floats (per slot). Backward overwrites
// a->dq, a->dk and a->dv from dout (a->datt).
size_t model_attention_saved(const Activations *a, int H);
// The whole-sequence backward's scratch (attn_scratch), allocated (or counted); none under cp, whose
// ring kernels do not use it.
float *model_attention_scratch(const Activations *a, int H);
// the scratch the kernels keep for the ring's blocks of B sequences of T tokens in training
// (kern_ring_scratch_bytes; 0 without cp), which the memory tracker counts among the activations
size_t model_cp_scratch(const ModelPlan *plan, int B, int T);
void model_attention_fwd(const ModelPlan *plan, Activations *a, void *out, float *saved, const void *q, const void *k,
                         const void *v, int H, int KV, int hd, int window, const KernDropout *drop);
void model_attention_bwd(const ModelPlan *plan, Activations *a, const void *out, const float *saved, const void *q,
                         const void *k, const void *v, int H, int KV, int hd, int window, const KernDropout *drop);
// The positions the families' rotary and learned position kernels look up for the loaded batch's
// tokens (a->pos), or NULL where each token's position is its place in its row of a->T
const int32_t *model_positions(const Activations *a);
// Context parallelism's buffers in model_acts_alloc: the positions and the ring (kvd: a key row's
// floats on this rank)
void model_cp_alloc(Activations *a, size_t kvd);
// Dropout p for the next forward/backward (0: off). Masks are a pure function of (seed, global
// sample index, layer, site, element), so every layout and a resumed run draw the same ones.
// train: the pass trains (LoRA's dropout on its adapters' inputs applies; evaluation: 0, p 0).
void model_set_dropout(Activations *a, float p, uint64_t seed, uint64_t sample0, int train);
// p is a unit's gathered parameters in the kernels' parameter dtype (kern_params_bf16: bf16 under
// --precision bf16 on a GPU, else fp32); g its fp32 gradient.
// Forward over the loaded batch of a->B sequences of T tokens. With a KV cache the tokens sit at
// positions pos0..pos0+T-1 and attend to the cached past; without, pos0 must be 0.
void model_embed_fwd(const ModelPlan *plan, const void *p, Activations *a, int T, int pos0);
// A block's p and g are arrays over its units (model_block_units).
void model_block_fwd(const ModelPlan *plan, int layer, const void *const *p, Activations *a, int T, int pos0);
// The head of the families with a final LayerNorm (weight lnw, bias lnb) and a bias-free linear
// head (V, D), all tensors of unit u: what model_head_fwd_bwd below does for them.
void model_layernorm_head(const ModelPlan *plan, const UnitSpec *u, int lnw, int lnb, int head, const void *p, float *g,
                          Activations *a, int with_targets, int T, float dscale);
// Final norm + lm_head + fused cross-entropy against the loaded targets. Adds the summed loss over
// B*T targets to a->loss, on the device (model_loss_read). dscale != 0 also runs the head's
// backward: grads g (+=) with dloss scaled by dscale, and a->dres = dloss/d res[L].
// with_targets == 0 only computes logits (generation).
void model_head_fwd_bwd(const ModelPlan *plan, const void *p, float *g, Activations *a, int with_targets, int T,
                        float dscale);
// Mixture of experts, for the training loop (no-ops for a dense model; model/moe.h).
// model_router_train: the next forward is a training micro-batch with loss_tokens loss-bearing
// targets on this rank, whose router losses run over the global batch (each layer's forward then
// sums its statistics over all ranks: every rank must run it); negative: evaluation or generation.
// model_router_losses: that micro-batch's load-balancing and z losses, averaged over the layers
// (equal on every rank).
void model_router_train(Activations *a, double loss_tokens);
// --capacity_factor: a training step (or its routing pass) of step_tokens token slots in the
// global batch begins: each expert's capacity is capacity_factor x K x step_tokens / E of its
// assignments, counted afresh. model_router_dropped: the fraction of the step's assignments
// dropped, over the layers (equal on every rank); -1 without a capacity.
void model_router_step(Activations *a, double step_tokens);
double model_router_dropped(const Activations *a);
void model_router_losses(const Activations *a, double *aux, double *z);
// A step of several micro-batches whose router losses train (model_router_collects): before its
// first backward a routing pass runs every micro-batch's forward through the blocks after
// model_router_collect (each with its model_router_train), then model_router_fix sums their
// statistics over the ranks once; the step's training passes then use them (model_router_train
// leaves them be until a negative call ends the step).
int model_router_collects(const Activations *a);
void model_router_collect(Activations *a);
void model_router_fix(const ModelPlan *plan, Activations *a);
// a->loss = 0; and its value (waits for the device)
void model_loss_reset(Activations *a);
double model_loss_read(const Activations *a);
// a->dres holds dloss/d(block output); on return dloss/d(block input). Grads g (+=).
void model_block_bwd(const ModelPlan *plan, int layer, const void *const *p, float *const *g, Activations *a);
void model_embed_bwd(const ModelPlan *plan, float *g, Activations *a);
double model_flops_per_token(const ModelPlan *plan, int T);

// dropout mask keys: one stream per (layer, site); layer -1 for the embedding
// (DROP_LORA + i: the adapter of the block unit's tensor i)
enum { DROP_EMBED, DROP_ATTN_PROBS, DROP_ATTN_OUT, DROP_MLP_OUT, DROP_ROUTER_JITTER, DROP_LORA = 8 };
uint64_t model_dropout_key(const Activations *a, int layer, int site);
// For families: drops out x (this rank's rows of a->B rows of T*D elements) in place, the output of a residual branch
// (or the embedding) at (layer, site); no-op without dropout.
void model_dropout_fwd(const Activations *a, float *x, int T, int D, int layer, int site);
// The run of this rank's batch tokens (row n = b * T + t, T its tokens of each row) from n, before
// end, whose places in the whole sequences are consecutive: returns the run's end, and in *g its
// first token's global index b * cp * T + its position (a cp rank's chunk of a row is one run;
// without cp, all of [n, end) with *g = n). What draws by the global token (dropout, router jitter)
// walks the runs.
size_t model_token_run(const Activations *a, size_t n, size_t end, size_t *g);
// Dropout p with mask key `key` on x, the loaded batch's tokens row0 .. row0 + rows - 1 of W elements
// each, in place: each element masked as the same element of its token in the whole sequence is
// (a context-parallel rank's tokens by their positions), so every layout draws the same masks.
void model_dropout_rows(const Activations *a, float *x, size_t row0, size_t rows, int W, float p, uint64_t key);
// The gradient of that branch output given dx = dloss/d(its sum): dx itself without dropout, else
// a->dbranch holding the masked copy.
const float *model_dropout_bwd(const Activations *a, const float *dx, int D, int layer, int site);
// the attention-probability dropout of a layer, or NULL when off. head0: the global index of the
// call's first head (a tensor-parallel rank's), so every rank draws the masks of the unsplit run
const KernDropout *model_attn_dropout(const Activations *a, int layer, int head0, KernDropout *buf);

#endif
