// llama: the Llama family (LlamaForCausalLM: Llama-2, Llama-3/3.1/3.2): RMSNorm, RoPE (with
// Llama-3's frequency scaling), grouped-query attention, SwiGLU.
// Units: 0 the embedding, 1..L the blocks, L+1 the final norm and lm_head; with tied embeddings
// (Llama-3.2 1B/3B) unit 0 holds the embedding, which is lm_head, and the final norm. Its descriptor (end of
// the file) holds the presets, the checkpoint and Hugging Face spellings of its config, and the
// unit plan, activations and forward/backward of each FSDP unit that come before it.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "family.h"
#include "lora.h"
#include "moe.h"

#ifndef FAMILY_DESCRIPTION_ONLY
static void llama_plan_build(ModelPlan *plan) {
    const ModelConfig *c = &plan->cfg;
    int D = c->hidden_width, L = c->num_layers, hd = config_head_dim(c);
    int qd = c->num_heads * hd, kvd = c->num_key_value_heads * hd, F = c->intermediate_size, V = c->vocab_size;
    int tied = c->tie_word_embeddings;
    plan->nunits = tied ? L + 1 : L + 2;
    plan->embed_unit = 0;
    plan->block0 = 1;
    plan->head_unit = tied ? 0 : L + 1;
    plan->units = callocCheck(plan->nunits, sizeof(UnitSpec));
    plan->units[0].layer = -1;
    // tensor parallelism: the vocabulary, q/k/v by heads and gate/up by rows; o and down by columns
    model_tensor_split(model_add_tensor(&plan->units[0], "model.embed_tokens.weight", V, D, INIT_NORMAL, 1.0f, 1), TP_ROWS, 1);
    // tied, as minGPT's root unit: the embedding (lm_head too), then the final norm
    if (tied) model_add_tensor(&plan->units[0], "model.norm.weight", D, 0, INIT_ONES, 1.0f, 0);
    char name[80];
    static const char *const block_names[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                              "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                                              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    const int rows[] = {D, qd, kvd, kvd, D, D, F, F, D}, cols[] = {0, D, D, D, qd, 0, D, D, F};
    const TpSplit split[] = {TP_WHOLE, TP_ROWS, TP_ROWS, TP_ROWS, TP_COLS, TP_WHOLE, TP_ROWS, TP_ROWS, TP_COLS};
    int experts = c->num_experts > 0;  // Mixtral: the router and the experts instead of the dense MLP
    for (int l = 0; l < L; l++) {
        UnitSpec *u = &plan->units[l + 1];
        u->layer = l;
        for (int i = 0; i < (experts ? 6 : 9); i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, block_names[i]);
            // 2-D weights start N(0, initializer_range) and decay; norm weights start at 1
            model_tensor_split(model_add_tensor(u, name, rows[i], cols[i], cols[i] ? INIT_NORMAL : INIT_ONES, 1.0f, cols[i] != 0),
                               split[i], 1);
        }
        if (experts) moe_add_tensors(u, l, c);  // P_ROUTER on
    }
    if (tied) return;
    UnitSpec *head = &plan->units[L + 1];
    head->layer = -1;
    model_add_tensor(head, "model.norm.weight", D, 0, INIT_ONES, 1.0f, 0);
    model_tensor_split(model_add_tensor(head, "lm_head.weight", V, D, INIT_NORMAL, 1.0f, 1), TP_ROWS, 1);
}

// tensor order inside a block unit and the head unit (tied: the embedding unit, lm_head the
// embedding). q, k, v are adjacent in the flat unit, so from P_Q on they are one (H*hd + 2*KV*hd, D)
// weight and one GEMM; so are gate and up, (2F, D).
enum { P_LN1, P_Q, P_K, P_V, P_O, P_LN2, P_GATE, P_UP, P_DOWN };
enum { P_ROUTER = P_LN2 + 1 };  // Mixtral: the router and the experts follow the attention
enum { P_NORM, P_LM_HEAD };
enum { P_TIED_EMBED, P_TIED_NORM };

// RoPE's inverse frequency of each pair of dimensions (hd/2): theta^(-2i/hd), then Llama-3's
// scaling when rope_scaling_factor is not 1 (Hugging Face's rope_type "llama3"): wavelengths past
// original_context / low_freq_factor are stretched by the factor, those under original_context /
// high_freq_factor kept, and the band between blended linearly in original_context / wavelength.
static void llama_inv_freq(double *f, const ModelConfig *c, int hd) {
    const double pi = 3.14159265358979323846, factor = c->rope_scaling_factor, orig = c->rope_original_context;
    const double lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    model_rope_inv_freq(f, hd, c->rope_theta);
    for (int i = 0; i < hd / 2; i++) {
        if (factor == 1.0) continue;
        double wavelen = 2 * pi / f[i];
        if (wavelen > orig / lo) {
            f[i] /= factor;
        } else if (wavelen >= orig / hi) {
            double s = (orig / wavelen - lo) / (hi - lo);
            f[i] = (1 - s) * f[i] / factor + s * f[i];
        }
    }
}

// A tp rank's heads, key/value heads and MLP width (tp 1: the model's)
typedef struct {
    int H, KV, F;
} LlamaPart;

static LlamaPart llama_part(const ModelConfig *c, int tp) {
    return (LlamaPart){c->num_heads / tp, c->num_key_value_heads / tp, c->intermediate_size / tp};
}

static void llama_acts_alloc(Activations *a, const ModelConfig *c, size_t S, int with_kv_cache) {
    LlamaPart pt = llama_part(c, a->tp);
    size_t N = (size_t)a->B * a->T, R = N / a->sp, D = c->hidden_width, hd = config_head_dim(c);
    size_t qd = pt.H * hd, kvd = pt.KV * hd, F = pt.F, V = a->V;
    int nl = c->num_layers;
    model_res_alloc(a, nl, N, D);
    a->xn1 = model_acts_act(S * R * D);
    a->rstd1 = model_acts_buf(S * R);
    a->qkv = model_acts_act(N * (qd + 2 * kvd));
    a->q = model_acts_act(S * N * qd);
    a->k = model_acts_act(S * N * kvd);
    a->v = model_acts_act(S * N * kvd);
    a->saved_len = model_attention_saved(a, pt.H);
    a->attn_saved = model_acts_buf(S * a->saved_len);
    a->att = model_acts_act(S * N * qd);
    a->xmid = model_acts_buf(S * R * D);
    a->xn2 = model_acts_act(S * R * D);
    a->rstd2 = model_acts_buf(S * R);
    if (c->num_experts) {
        moe_acts_alloc(a, c, S, N, with_kv_cache);
    } else {
        a->up = model_acts_act(S * N * 2 * F);
        a->h = model_acts_act(S * N * F);
    }
    a->xf = model_acts_act(R * D);
    a->rstdf = model_acts_buf(R);
    a->logits = model_acts_act(N * V);
    a->rope_cos = model_acts_buf((size_t)a->T * a->cp * hd / 2);  // every position of the whole sequence
    a->rope_sin = model_acts_buf((size_t)a->T * a->cp * hd / 2);
    if (a->rope_cos) {
        double *inv_freq = mallocCheck(sizeof(double) * (hd / 2));
        llama_inv_freq(inv_freq, c, (int)hd);
        kern_rope_table(a->rope_cos, a->rope_sin, a->T * a->cp, (int)hd, inv_freq);
        free(inv_freq);
    }
    if (!model_acts_attention(a, c, with_kv_cache, N, qd, kvd)) return;  // generation runs no backward
    if (!c->num_experts) {
        a->dup = model_acts_act(N * 2 * F);
        a->dh = model_acts_act(N * F);
    }
    a->attn_scratch = model_attention_scratch(a, pt.H);
}

// ---- forward / backward ----

// Per-layer views into the saved activations; sizes follow the allocation above.
typedef struct {
    float *x, *rstd1, *saved, *xmid, *rstd2, *out;  // fp32
    void *xn1, *q, *k, *v, *att, *xn2, *gu, *h;      // activations
} LayerActs;

static LayerActs layer_acts(const ModelConfig *c, const Activations *a, int l) {
    LlamaPart pt = llama_part(c, a->tp);
    size_t N = (size_t)a->B * a->T, R = N / a->sp, D = c->hidden_width, hd = config_head_dim(c);
    size_t qd = pt.H * hd, kvd = pt.KV * hd, F = pt.F;
    size_t i = a->slot[l];
    LayerActs la = {
        .xn1 = kern_act_at(a->xn1, i * R * D), .rstd1 = a->rstd1 + i * R,
        .q = kern_act_at(a->q, i * N * qd), .k = kern_act_at(a->k, i * N * kvd), .v = kern_act_at(a->v, i * N * kvd),
        .saved = a->attn_saved + i * a->saved_len, .att = kern_act_at(a->att, i * N * qd),
        .xmid = a->xmid + i * R * D, .xn2 = kern_act_at(a->xn2, i * R * D), .rstd2 = a->rstd2 + i * R,
        .gu = a->up ? kern_act_at(a->up, i * N * 2 * F) : NULL, .h = a->h ? kern_act_at(a->h, i * N * F) : NULL};
    return la;
}

// tensor i of unit u: in the gathered parameters p (kernels' parameter dtype), or in the fp32 gradient g
#define WP(p, u, i) kern_param_at((p), (u)->t[i].offset)
#define W(g, u, i) model_grad(a, (g), (u), (i))

static void llama_embed_fwd(const ModelPlan *plan, const void *p, Activations *a, int T, int pos0) {
    int D = plan->cfg.hidden_width;
    model_embed_tokens_fwd(plan, a, p, model_res_out(a, 0, D), T);  // (rows, D)
    model_res_store(a, 0, D, T);
}

// Under tensor parallelism (plan->tp > 1) a block holds its tp rank's heads of q, k, v and o and
// its share of gate, up and down (Megatron's split): the partial sums of o and down (row-parallel)
// are summed over the tp group before their dropout and residual; in backward the input gradients
// of q|k|v and gate|up are. The residual stream and the norms run on the rank's rows (all of them
// without sequence parallelism): R rows, gathered to N before q|k|v and gate|up (model.h).
// The attention half of block l, through the second norm: la->xmid and la->xn2.
static void llama_attn_fwd(const ModelPlan *plan, int l, const UnitSpec *u, const void *p, Activations *a, int T, int pos0,
                           const LayerActs *lp) {
    const ModelConfig *c = &plan->cfg;
    LlamaPart pt = llama_part(c, a->tp);
    int B = a->B, N = B * T, R = model_rows(a, T), D = c->hidden_width, H = pt.H, KV = pt.KV;
    int hd = config_head_dim(c);
    LayerActs la = *lp;
    kern_rmsnorm_fwd(la.xn1, la.rstd1, la.x, WP(p, u, P_LN1), R, D, c->norm_eps);
    const void *xn1 = model_sp_gather(plan, a, la.xn1, T);  // (B, T, D)
    model_proj_fwd(plan, a, l, u, P_Q, 3, p, a->qkv, KERN_ACT, xn1, N, D, (H + 2 * KV) * hd);  // (B, T, H*hd + 2*KV*hd)
    kern_qkv_split(la.q, la.k, la.v, a->qkv, a->rope_cos, a->rope_sin, B, T, H, KV, hd, hd, KERN_QKV_BLOCKED, pos0, model_positions(a));
    if (a->kcache) {  // generation: append to the cache (B == 1) and attend over all of it
        size_t kvd = (size_t)KV * hd, base = (size_t)l * a->T * kvd + (size_t)pos0 * kvd;
        kern_act_copy(kern_act_at(a->kcache, base), la.k, (size_t)T * kvd);
        kern_act_copy(kern_act_at(a->vcache, base), la.v, (size_t)T * kvd);
        kern_attention_fwd(la.att, la.saved, la.q, kern_act_at(a->kcache, (size_t)l * a->T * kvd),
                           kern_act_at(a->vcache, (size_t)l * a->T * kvd), 1, T, pos0 + T, H, KV, hd, (size_t)a->T * kvd,
                           NULL, c->sliding_window, NULL);
    } else {
        model_attention_fwd(plan, a, la.att, la.saved, la.q, la.k, la.v, H, KV, hd, c->sliding_window, NULL);
    }
    model_proj_fwd(plan, a, l, u, P_O, 1, p, model_rowpar_out(a, la.xmid), KERN_F32, la.att, N, H * hd, D);
    model_rowpar_sum(plan, a, la.xmid, T);
    model_dropout_fwd(a, la.xmid, T, D, l, DROP_ATTN_OUT);
    kern_add_rmsnorm_fwd(la.xmid, la.xn2, la.rstd2, la.x, WP(p, u, P_LN2), R, D, c->norm_eps);  // residual, norm
}

static void llama_block_fwd(const ModelPlan *plan, int l, const void *const *pp, Activations *a, int T, int pos0) {
    const ModelConfig *c = &plan->cfg;
    int units[MAX_BLOCK_UNITS], nu = model_block_units(plan, l, units);
    const UnitSpec *u = &plan->units[units[0]];
    const void *p = pp[0];
    int N = a->B * T, R = model_rows(a, T), D = c->hidden_width, F = llama_part(c, a->tp).F;
    LayerActs la = layer_acts(c, a, l);
    la.x = model_res_in(a, l, D, T);      // (R, D)
    la.out = model_res_out(a, l + 1, D);  // (R, D)
    llama_attn_fwd(plan, l, u, p, a, T, pos0, &la);
    if (c->num_experts) {  // Mixtral's sparse MLP, its experts split as the dense MLP is (sequence parallelism is refused)
        MoeParams mp = {u, P_ROUTER, p, NULL, &plan->units[units[nu - 1]], pp[nu - 1], NULL};
        moe_fwd(plan, a, l, &mp, la.xn2, model_rowpar_out(a, la.out), T);
        model_rowpar_sum(plan, a, la.out, T);
        model_dropout_fwd(a, la.out, T, D, l, DROP_MLP_OUT);
        kern_add(la.out, la.xmid, (size_t)R * D);  // residual
        model_res_store(a, l + 1, D, T);
        return;
    }
    const void *xn2 = model_sp_gather(plan, a, la.xn2, T);  // (B, T, D)
    model_proj_fwd(plan, a, l, u, P_GATE, 2, p, la.gu, KERN_ACT, xn2, N, D, 2 * F);  // (B, T, 2F): gate | up
    kern_swiglu_fwd(la.h, la.gu, N, F);                            // (B, T, F)
    model_proj_fwd(plan, a, l, u, P_DOWN, 1, p, model_rowpar_out(a, la.out), KERN_F32, la.h, N, F, D);
    model_rowpar_sum(plan, a, la.out, T);
    model_dropout_fwd(a, la.out, T, D, l, DROP_MLP_OUT);
    kern_add(la.out, la.xmid, (size_t)R * D);  // residual
    model_res_store(a, l + 1, D, T);
}

static void llama_head_fwd_bwd(const ModelPlan *plan, const void *p, float *g, Activations *a, int with_targets,
                               int T, float dscale) {
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[plan->head_unit];
    int N = a->B * T, R = model_rows(a, T), D = c->hidden_width, V = a->V;  // V: this tp rank's share of the vocabulary
    int nw = c->tie_word_embeddings ? P_TIED_NORM : P_NORM, hw = c->tie_word_embeddings ? P_TIED_EMBED : P_LM_HEAD;
    const float *x = model_res_in(a, c->num_layers, D, T);  // (R, D) last block out
    kern_rmsnorm_fwd(a->xf, a->rstdf, x, WP(p, u, nw), R, D, c->norm_eps);
    const void *xf = model_sp_gather(plan, a, a->xf, T);  // (B, T, D)
    kern_matmul_fwd(a->logits, KERN_ACT, xf, WP(p, u, hw), N, D, V);  // (B, T, V)
    if (!with_targets) return;
    model_tp_crossentropy(plan, a, N, dscale);  // logits become dlogits
    if (dscale == 0.0f) return;
    kern_matmul_bwd(a->dxn, W(g, u, hw), a->logits, KERN_ACT, xf, WP(p, u, hw), N, D, V, 0);
    const void *dxf = model_colpar_dx(plan, a, T);  // each vocabulary share's part of dloss/dxf, summed: (R, D)
    kern_zero(a->dres, (size_t)R * D);
    kern_rmsnorm_bwd(a->dres, W(g, u, nw), dxf, x, WP(p, u, nw), a->rstdf, R, D);
}

// The attention half's backward: a->dres holds dloss/d xmid; on return dloss/d x.
static void llama_attn_bwd(const ModelPlan *plan, int l, const UnitSpec *u, const void *p, float *g, Activations *a,
                           const LayerActs *lp) {
    const ModelConfig *c = &plan->cfg;
    LlamaPart pt = llama_part(c, a->tp);
    int B = a->B, T = a->T, N = B * T, R = model_rows(a, T), D = c->hidden_width, H = pt.H, KV = pt.KV;
    int hd = config_head_dim(c);
    LayerActs la = *lp;
    float *dx = a->dres;
    const float *dbr = model_sp_gather_f32(plan, a, model_dropout_bwd(a, dx, D, l, DROP_ATTN_OUT), T);
    model_proj_bwd(plan, a, l, u, P_O, 1, p, g, a->datt, 0, dbr, KERN_F32, la.att, N, H * hd, D);
    model_attention_bwd(plan, a, la.att, la.saved, la.q, la.k, la.v, H, KV, hd, c->sliding_window, NULL);
    kern_qkv_merge(a->qkv, a->dq, a->dk, a->dv, a->rope_cos, a->rope_sin, B, T, H, KV, hd, hd, KERN_QKV_BLOCKED, model_positions(a));
    model_proj_bwd(plan, a, l, u, P_Q, 3, p, g, a->dxn, 0, a->qkv, KERN_ACT, model_sp_gather(plan, a, la.xn1, T), N, D,
                   (H + 2 * KV) * hd);
    kern_rmsnorm_bwd(dx, W(g, u, P_LN1), model_colpar_dx(plan, a, T), la.x, WP(p, u, P_LN1), la.rstd1, R, D);
}

static void llama_block_bwd(const ModelPlan *plan, int l, const void *const *pp, float *const *gg, Activations *a) {
    const ModelConfig *c = &plan->cfg;
    int units[MAX_BLOCK_UNITS], nu = model_block_units(plan, l, units);
    const UnitSpec *u = &plan->units[units[0]];
    const void *p = pp[0];
    float *g = gg[0];
    int T = a->T, N = a->B * T, R = model_rows(a, T), D = c->hidden_width, F = llama_part(c, a->tp).F;
    LayerActs la = layer_acts(c, a, l);
    la.x = model_res_in(a, l, D, a->T);
    float *dx = a->dres;  // (R, D): dloss/d out, becomes dloss/d xmid, then dloss/d x
    // MLP
    const float *dbr = model_sp_gather_f32(plan, a, model_dropout_bwd(a, dx, D, l, DROP_MLP_OUT), T);  // (B, T, D)
    if (c->num_experts) {
        MoeParams mp = {u, P_ROUTER, p, g, &plan->units[units[nu - 1]], pp[nu - 1], gg[nu - 1]};
        moe_bwd(plan, a, l, &mp, la.xn2, dbr);  // a->dxn
    } else {
        model_proj_bwd(plan, a, l, u, P_DOWN, 1, p, g, a->dh, 0, dbr, KERN_F32, la.h, N, F, D);
        kern_swiglu_bwd(a->dup, a->dh, la.gu, N, F);  // (B, T, 2F): d gate | d up
        model_proj_bwd(plan, a, l, u, P_GATE, 2, p, g, a->dxn, 0, a->dup, KERN_ACT, model_sp_gather(plan, a, la.xn2, T), N, D,
                       2 * F);
    }
    kern_rmsnorm_bwd(dx, W(g, u, P_LN2), model_colpar_dx(plan, a, T), la.xmid, WP(p, u, P_LN2), la.rstd2, R, D);
    llama_attn_bwd(plan, l, u, p, g, a, &la);
}

static void llama_embed_bwd(const ModelPlan *plan, float *g, Activations *a) { model_embed_tokens_bwd(plan, a, g, a->dres); }

// PaLM's count with H*hd = D: 6 FLOPs per parameter and token, plus attention's 12*L*D*T
static double llama_flops_per_token(const ModelPlan *plan, int T) {
    const ModelConfig *c = &plan->cfg;
    // a mixture of experts: the parameters a token reaches (its K experts of E)
    double active = (double)plan->num_params - (c->num_experts ? moe_inactive_params(c) : 0.0);
    return 6.0 * active + 12.0 * c->num_layers * c->hidden_width * (double)T;
}

#endif

// llama2_* and llama3* are the published Llama-2 / Llama-3 (rope_theta 500000, 128256 tokens) and
// Llama-3.2 (RoPE scaled x32 from 8192 positions, tied embeddings) sizes; tiny is the default
// Shakespeare model (byte vocab), small enough that `make run` learns visibly in a couple of
// minutes on 2 cores. Mistral is this family with a sliding window: mistral_7b is v0.1's published
// sizes (its model length, 32768, is a --max_context_width away), mistral_tiny tiny's sizes with a
// window a quarter of its context.
static const FamilyPreset llama_presets[] = {
    {"tiny", 128, 4, 4, 2, 344, 128, 256, 0, 0, 0, 0, 0, 0, 0},
    {"llama2_7b", 4096, 32, 32, 32, 11008, 4096, 32000, 0, 0, 0, 0, 0, 0, 0},
    {"llama2_13b", 5120, 40, 40, 40, 13824, 4096, 32000, 0, 0, 0, 0, 0, 0, 0},
    {"llama2_70b", 8192, 80, 64, 8, 28672, 4096, 32000, 0, 0, 0, 0, 0, 0, 0},
    {"llama3_8b", 4096, 32, 32, 8, 14336, 8192, 128256, 500000.0f, 0, 0, 0, 0, 0, 0},
    {"llama3_70b", 8192, 80, 64, 8, 28672, 8192, 128256, 500000.0f, 0, 0, 0, 0, 0, 0},
    {"llama3.2_1b", 2048, 16, 32, 8, 8192, 131072, 128256, 500000.0f, 32.0f, 1, 0, 0, 0, 0},
    {"llama3.2_3b", 3072, 28, 24, 8, 8192, 131072, 128256, 500000.0f, 32.0f, 1, 0, 0, 0, 0},
    {"mistral_7b", 4096, 32, 32, 8, 14336, 4096, 32000, 0, 0, 0, 4096, 0, 0, 0},
    {"mistral_tiny", 128, 4, 4, 2, 344, 128, 256, 0, 0, 0, 32, 0, 0, 0},
    {NULL},
};

#define INT_FIELD(n) {.name = #n, .type = FAMILY_INT, .off = offsetof(ModelConfig, n)}
#define FLOAT_FIELD(n, absent_) {.name = #n, .type = FAMILY_FLOAT, .off = offsetof(ModelConfig, n), .absent = absent_}
// Mixtral's are Llama's and the experts
#define LLAMA_CKPT_FIELDS                                                                                           \
    INT_FIELD(hidden_width), INT_FIELD(num_layers), INT_FIELD(num_heads), INT_FIELD(num_key_value_heads),           \
        INT_FIELD(intermediate_size), INT_FIELD(vocab_size), INT_FIELD(max_context_width),                          \
        FLOAT_FIELD(rope_theta, 10000.0f), FLOAT_FIELD(norm_eps, 1e-5f), FLOAT_FIELD(rope_scaling_factor, 1.0f),    \
        FLOAT_FIELD(rope_low_freq_factor, 1.0f), FLOAT_FIELD(rope_high_freq_factor, 4.0f),                          \
        FLOAT_FIELD(rope_original_context, 8192.0f),                                                                \
        {.name = "tie_word_embeddings", .type = FAMILY_BOOL, .off = offsetof(ModelConfig, tie_word_embeddings)},    \
        {.name = "sliding_window", .type = FAMILY_INT_OPTIONAL, .off = offsetof(ModelConfig, sliding_window)} /* 0: full attention */
static const FamilyField llama_ckpt_fields[] = {LLAMA_CKPT_FIELDS, {NULL}};
static const FamilyField mixtral_ckpt_fields[] = {LLAMA_CKPT_FIELDS, INT_FIELD(num_experts), INT_FIELD(num_experts_per_tok), {NULL}};

// LlamaConfig's keys; the optional ones default as transformers' LlamaConfig does
#define HF_INT(k, bit_, f, req) {.key = k, .bit = bit_, .type = FAMILY_INT, .off = offsetof(ModelConfig, f), .required = req}
#define HF_FLOAT(k, bit_, f, absent_) {.key = k, .bit = bit_, .type = FAMILY_FLOAT, .off = offsetof(ModelConfig, f), .absent = absent_}
#define LLAMA_HF_SIZES                                                                                              \
    HF_INT("hidden_size", MODEL_HIDDEN, hidden_width, 1), HF_INT("num_hidden_layers", MODEL_LAYERS, num_layers, 1), \
        HF_INT("num_attention_heads", MODEL_HEADS, num_heads, 1),                                                   \
        HF_INT("intermediate_size", MODEL_INTERMEDIATE, intermediate_size, 1), HF_INT("vocab_size", MODEL_VOCAB, vocab_size, 1), \
        HF_INT("num_key_value_heads", MODEL_KV_HEADS, num_key_value_heads, 0),                                      \
        HF_INT("sliding_window", MODEL_WINDOW, sliding_window, 0) /* Mistral's; absent or null: full attention */
static const FamilyHfKey llama_hf_keys[] = {
    LLAMA_HF_SIZES,
    HF_FLOAT("rope_theta", MODEL_ROPE_THETA, rope_theta, 10000.0f),
    HF_FLOAT("rms_norm_eps", MODEL_NORM_EPS, norm_eps, 1e-6f),
    {NULL},
};
// MixtralConfig's defaults: rope_theta 1e6, rms_norm_eps 1e-5
static const FamilyHfKey mixtral_hf_keys[] = {
    LLAMA_HF_SIZES,
    HF_FLOAT("rope_theta", MODEL_ROPE_THETA, rope_theta, 1e6f),
    HF_FLOAT("rms_norm_eps", MODEL_NORM_EPS, norm_eps, 1e-5f),
    HF_INT("num_local_experts", MODEL_EXPERTS, num_experts, 1),
    HF_INT("num_experts_per_tok", MODEL_EXPERTS_PER_TOK, num_experts_per_tok, 1),
    {NULL},
};
static const FamilyHfCheck llama_hf_checks[] = {
    {"attention_bias", NULL, "has no biases", 0}, {"mlp_bias", NULL, "has no biases", 0}, {"hidden_act", "silu", "MLP uses silu", 0}, {NULL},
};
static const char *const llama_hf_types[] = {"llama", "mistral", NULL};
static const char *const llama_hf_architectures[] = {"LlamaForCausalLM", "MistralForCausalLM", NULL};

#define OUT_INT(k, f) {.key = k, .kind = FAMILY_OUT_INT, .off = offsetof(ModelConfig, f)}
#define OUT_FLOAT(k, f) {.key = k, .kind = FAMILY_OUT_FLOAT, .off = offsetof(ModelConfig, f)}
#define OUT_RAW(k, json) {.key = k, .kind = FAMILY_OUT_RAW, .raw = json}
#define OUT(k, kind_) {.key = k, .kind = kind_}
#define WINDOW offsetof(ModelConfig, sliding_window)
#define LLAMA_HF_OUT                                                                                                \
    OUT_INT("hidden_size", hidden_width), OUT_INT("intermediate_size", intermediate_size),                          \
        OUT_INT("num_hidden_layers", num_layers), OUT_INT("num_attention_heads", num_heads),                        \
        OUT_INT("num_key_value_heads", num_key_value_heads), OUT("max_position_embeddings", FAMILY_OUT_POSITIONS),  \
        OUT_FLOAT("rms_norm_eps", norm_eps), OUT_FLOAT("rope_theta", rope_theta), OUT_INT("vocab_size", vocab_size), \
        OUT_RAW("hidden_act", "\"silu\""), OUT("bos_token_id", FAMILY_OUT_BOS), OUT("eos_token_id", FAMILY_OUT_EOS), \
        OUT("pad_token_id", FAMILY_OUT_PAD), OUT("torch_dtype", FAMILY_OUT_DTYPE)
// with a sliding window the model is Mistral's (MistralForCausalLM), else Llama's
static const FamilyHfOut llama_hf_config[] = {
    {.key = "architectures", .kind = FAMILY_OUT_RAW_IF_SET, .raw = "[\"MistralForCausalLM\"]", .off = WINDOW},
    {.key = "architectures", .kind = FAMILY_OUT_RAW_UNLESS_SET, .raw = "[\"LlamaForCausalLM\"]", .off = WINDOW},
    {.key = "model_type", .kind = FAMILY_OUT_RAW_IF_SET, .raw = "\"mistral\"", .off = WINDOW},
    {.key = "model_type", .kind = FAMILY_OUT_RAW_UNLESS_SET, .raw = "\"llama\"", .off = WINDOW},
    {.key = "sliding_window", .kind = FAMILY_OUT_INT_IF_SET, .off = WINDOW},
    LLAMA_HF_OUT, OUT("rope_scaling", FAMILY_OUT_ROPE_SCALING),
    {.key = "tie_word_embeddings", .kind = FAMILY_OUT_BOOL, .off = offsetof(ModelConfig, tie_word_embeddings)},
    OUT_RAW("attention_bias", "false"), OUT_RAW("mlp_bias", "false"),
    {NULL},
};
// MixtralForCausalLM: a window or null (its default), the experts; no biases, rope scaling or tying to state
static const FamilyHfOut mixtral_hf_config[] = {
    OUT_RAW("architectures", "[\"MixtralForCausalLM\"]"), OUT_RAW("model_type", "\"mixtral\""),
    {.key = "sliding_window", .kind = FAMILY_OUT_INT_IF_SET, .off = WINDOW},
    {.key = "sliding_window", .kind = FAMILY_OUT_RAW_UNLESS_SET, .raw = "null", .off = WINDOW},
    LLAMA_HF_OUT, OUT_INT("num_local_experts", num_experts), OUT_INT("num_experts_per_tok", num_experts_per_tok),
    OUT_FLOAT("router_aux_loss_coef", router_aux_loss_coef), OUT_RAW("output_router_logits", "false"),
    OUT_RAW("tie_word_embeddings", "false"),
    {NULL},
};

// the model's code, Mixtral's too (its blocks' MLP is model/moe.h's when it has experts)
#define LLAMA_CODE                                                                                                  \
    .plan_build = FAMILY_CODE(llama_plan_build), .acts_alloc = FAMILY_CODE(llama_acts_alloc),                       \
    .embed_fwd = FAMILY_CODE(llama_embed_fwd), .block_fwd = FAMILY_CODE(llama_block_fwd),                           \
    .head_fwd_bwd = FAMILY_CODE(llama_head_fwd_bwd), .block_bwd = FAMILY_CODE(llama_block_bwd),                     \
    .embed_bwd = FAMILY_CODE(llama_embed_bwd), .flops_per_token = FAMILY_CODE(llama_flops_per_token)

const ModelFamily family_llama = {
    .model_type = "llama_v2",
    .short_name = "llama",
    .display = "Llama",
    .presets = llama_presets,
    .gqa = 1,
    .rope = 1,
    .gated_mlp = 1,
    .tie_option = 1,
    .sliding_window = 1,
    .lora_targets = "q_proj,v_proj",
    .hf_defaults = {"LlamaConfig", 4096, 32, 32, 0, 11008, 2048, 32000},
    .ckpt_fields = llama_ckpt_fields,
    .hf_import = {
        .model_types = llama_hf_types,
        .architectures = llama_hf_architectures,
        .what = "Llama models (LlamaForCausalLM, model_type llama: Llama-2, Llama-3) and Mistral's (MistralForCausalLM, model_type mistral)",
        .keys = llama_hf_keys,
        .context = "max_position_embeddings",
        .rope = {.theta = "rope_theta", .scaling = "rope_scaling", .parameters = "rope_parameters", .scaled = "llama3"},
        .checks = llama_hf_checks,
        .embed = "model.embed_tokens.weight",
        .mlp = "model.layers.0.mlp.gate_proj.weight",
        .layer_fmt = "model.layers.%d.",
        .tied = "lm_head.weight",
        .tied_to = "model.embed_tokens.weight",
    },
    .hf_export = {.architecture = "LlamaForCausalLM or MistralForCausalLM", .config = llama_hf_config},
    LLAMA_CODE,
};

// Mixtral (MixtralForCausalLM): Mistral's attention and, in each block, a sparse MLP of experts
// (model/moe.h). mixtral_8x7b and mixtral_8x22b are v0.1's published sizes (their model lengths,
// 32768 and 65536, are a --max_context_width away); mixtral_tiny is tiny's attention with 4
// experts of width 96, 2 per token.
static const FamilyPreset mixtral_presets[] = {
    {"mixtral_tiny", 128, 4, 4, 2, 96, 128, 256, 1e6f, 0, 0, 0, 0, 4, 2},
    {"mixtral_8x7b", 4096, 32, 32, 8, 14336, 4096, 32000, 1e6f, 0, 0, 0, 0, 8, 2},
    {"mixtral_8x22b", 6144, 56, 48, 8, 16384, 4096, 32000, 1e6f, 0, 0, 0, 0, 8, 2},
    {NULL},
};
static const char *const mixtral_hf_types[] = {"mixtral", NULL};
static const char *const mixtral_hf_architectures[] = {"MixtralForCausalLM", NULL};

const ModelFamily family_mixtral = {
    .model_type = "mixtral",
    .short_name = "mixtral",
    .display = "Mixtral",
    .presets = mixtral_presets,
    .gqa = 1,
    .rope = 1,
    .gated_mlp = 1,
    .sliding_window = 1,
    .experts_option = 1,
    .lora_targets = "q_proj,v_proj",
    .hf_defaults = {"MixtralConfig", 4096, 32, 32, 8, 14336, 131072, 32000, 1e6f, .num_experts = 8, .num_experts_per_tok = 2},
    .ckpt_fields = mixtral_ckpt_fields,
    .hf_import = {
        .model_types = mixtral_hf_types,
        .architectures = mixtral_hf_architectures,
        .what = "Mixtral models (MixtralForCausalLM, model_type mixtral)",
        .keys = mixtral_hf_keys,
        .context = "max_position_embeddings",
        .rope = {.theta = "rope_theta", .scaling = "rope_scaling", .parameters = "rope_parameters"},
        .checks = llama_hf_checks,
        .embed = "model.embed_tokens.weight",
        .mlp = "model.layers.0.block_sparse_moe.experts.0.w1.weight",
        .layer_fmt = "model.layers.%d.",
    },
    .hf_export = {.architecture = "MixtralForCausalLM", .config = mixtral_hf_config},
    LLAMA_CODE,
};
