// lora: low-rank adapters (LoRA, Hu et al. 2021; rsLoRA, Kalajdzievski 2023) on a family's block
// projections, as PEFT defines them: y = W x + s * B A drop(x), s = alpha / r (rsLoRA: alpha /
// sqrt(r)), A (r, in) Kaiming-uniform (PEFT's bound 1/sqrt(in)), B (out, r) zero, so the adapted
// model starts as the base. Every other weight is frozen.
//
// The plan: the base units stay as the family made them, marked frozen (shard/ keeps no gradient
// or optimizer state for them); block l's adapters form one more unit, lora0 + l, after every other
// unit, with tensors <module>.lora_A.weight and <module>.lora_B.weight (PEFT's names under the
// family's). A mixture of experts' router and experts are linear layers like the others (as in
// PEFT, whose all-linear takes them); expert parallelism splits a block's adapter unit as it
// splits the block (model_plan_ep): the dense layers' adapters, then ep units of the adapters of
// the experts at each place, held by the ranks holding those experts. Tensor parallelism splits them as Megatron's LoRA does, so no collective is added:
// on a column-parallel weight (rows split) A is whole and B split by rows; on a row-parallel one
// (columns split) A is split by columns and B whole. The whole factor's gradient is then each tp
// rank's share (TensorSpec.tp_partial), summed over the tp group with the step's reductions.
//
// The families run every adaptable projection through model_proj_fwd / model_proj_bwd, which add
// the adapters of the block the training loop bound (model_block_fwd / _bwd). Nothing of the
// adapters is saved between forward and backward: backward recomputes A drop(x), one small GEMM.
//
// Shape legend as model.h; r the rank, IN/OUT a projection's input and output widths (this tp
// rank's).
#ifndef FSDPC_LORA_H
#define FSDPC_LORA_H

#include <stddef.h>

#include "model.h"

// Adds the adapter units (cfg lora_rank > 0) after the plan's units and freezes those; at ep 1,
// before model_plan_ep and model_plan_tp. Returns 0, or -1 with the line in err: a target module
// the family does not have, a rank larger than a layer, some of a block's experts adapted and not
// all alike, or adapter dropout on experts (their rows are regrouped by expert and moved between
// ranks, so no mask could follow a token's place in its sample as every layout's must).
int lora_plan(ModelPlan *plan, char *err, size_t errlen);
// The units of block l's adapters, into units: the block's adapter unit, then under expert
// parallelism with adapted experts the unit of this rank's experts' adapters. Returns how many
// (0 without adapters).
int lora_block_units(const ModelPlan *plan, int l, int *units);
// a block tensor PEFT would wrap: a 2-D weight (nn.Linear's) named <module>.weight; its module
// path into module. Returns 0 for any other tensor.
int lora_linear_module(const TensorSpec *t, char *module, size_t len);
// PEFT's rule: a target names the module's whole path or its last components after a dot
int lora_target_matches(const char *module, const char *target);
// "q_proj, k_proj, ..." the names --lora_target_modules takes for plan's family (static text)
const char *lora_module_names(const ModelPlan *plan);
// NULL, or why the run's layout cannot take these adapters: LoRA dropout on a row-parallel weight
// (its input's columns split) at tp > 1, whose masks could not be the tp-1 run's
const char *lora_check_layout(const ModelPlan *plan, int tp);
// parameters that train: the adapters (all, when there are none)
size_t lora_trained_params(const ModelPlan *plan);

// The adapters' scratch for batches of a->B x a->T tokens (model_acts_alloc), and its release.
void lora_acts_alloc(Activations *a, const ModelPlan *plan);
void lora_acts_free(Activations *a);
// Block `layer`'s adapter parameters (and gradients, or NULL) for the next model_proj_* and
// lora_grouped_* calls: p and g are model_block_gather's arrays (the adapters last). No-op without
// adapters.
void lora_bind(const ModelPlan *plan, Activations *a, int layer, const void *const *p, float *const *g);
// LoRA's dropout applies to the passes that train (model_set_dropout)
void lora_set_train(Activations *a, int train);

// The projection of x (N, IN, activations) by tensors [t0, t0 + nt) of unit u stacked by rows (a
// fused q|k|v or gate|up: OUT their rows together), p the unit's gathered parameters: out (N,
// OUT, dtype out_dt) = x W^T, plus in each adapted tensor's columns s * drop(x) A^T B^T.
void model_proj_fwd(const ModelPlan *plan, Activations *a, int layer, const UnitSpec *u, int t0, int nt, const void *p,
                    void *out, KernDtype out_dt, const void *x, int N, int IN, int OUT);
// Its backward from dout (N, OUT): dinp (N, IN, activations) = dloss/dx, overwritten (+= with
// accumulate; NULL: not computed, the adapters' gradients still are); the weights' gradient in g
// (+=; skipped when the unit is frozen, g NULL); the adapters' gradients (+=) into the bound ones.
void model_proj_bwd(const ModelPlan *plan, Activations *a, int layer, const UnitSpec *u, int t0, int nt, const void *p,
                    float *g, void *dinp, int accumulate, const void *dout, KernDtype dout_dt, const void *x, int N, int IN,
                    int OUT);
// The adapters of a mixture of experts' grouped product (moe.c), after its GEMM: G local experts,
// expert g's rows cnt[g] of x (rows, IN) grouped in expert order and its weights the nt tensors of
// unit ue from t0[g] stacked by rows (OUT their rows together). Adds to out (rows, OUT, dtype
// out_dt), in each adapted tensor's columns, s * x A_g^T B_g^T. The experts of a block are adapted
// alike (lora_plan), so expert 0's tensors tell which are. No dropout (lora_plan refuses it).
void lora_grouped_fwd(const ModelPlan *plan, Activations *a, const UnitSpec *ue, const int *t0, int nt, int G, const int *cnt,
                      void *out, KernDtype out_dt, const void *x, int IN, int OUT);
// Its backward from dout (rows, OUT): dinp (rows, IN) += the adapters' part of dloss/dx; their
// gradients (+=) into the bound ones.
void lora_grouped_bwd(const ModelPlan *plan, Activations *a, const UnitSpec *ue, const int *t0, int nt, int G, const int *cnt,
                      void *dinp, const void *dout, KernDtype dout_dt, const void *x, int IN, int OUT);

#endif
