// gpt: the minGPT family (minimal_fsdp's model, GPT-2's architecture): learned token and position
// embeddings, pre-LayerNorm blocks with biases, fused c_attn, tanh-GELU MLP, lm_head tied to wte.
// Units: 0 the embeddings and the final LayerNorm (used by the embedding and by the head, as
// FSDP's root unit is), 1..L the blocks. Linear weights are (out, in), as nn.Linear keeps them;
// Hugging Face's GPT2LMHeadModel keeps the blocks' as Conv1D, (in, out), so export transposes them.
// Its descriptor (end of the file) holds the presets, the checkpoint and Hugging Face spellings of
// its config, and the unit plan, activations and forward/backward of each FSDP unit.
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "family.h"
#include "lora.h"

#ifndef FAMILY_DESCRIPTION_ONLY
// tensor order inside unit 0 and inside a block unit
enum { P_WTE, P_WPE, P_LNF_W, P_LNF_B };
enum { P_LN1_W, P_LN1_B, P_ATTN_W, P_ATTN_B, P_APROJ_W, P_APROJ_B, P_LN2_W, P_LN2_B, P_FC_W, P_FC_B, P_MPROJ_W, P_MPROJ_B };

static void gpt_plan_build(ModelPlan *plan) {
    const ModelConfig *c = &plan->cfg;
    int D = c->hidden_width, L = c->num_layers, F = c->intermediate_size, V = c->vocab_size, T = c->max_context_width;
    plan->nunits = L + 1;
    plan->embed_unit = plan->head_unit = 0;
    plan->block0 = 1;
    plan->units = callocCheck(plan->nunits, sizeof(UnitSpec));
    UnitSpec *root = &plan->units[0];
    root->layer = -1;
    // minGPT's init: N(0, 0.02) for embeddings and linear weights, the residual projections
    // scaled by 1/sqrt(2L); zero biases; LayerNorm (1, 0). Only linear weights decay.
    model_tensor_split(model_add_tensor(root, "transformer.wte.weight", V, D, INIT_NORMAL, 1.0f, 0), TP_ROWS, 1);
    model_add_tensor(root, "transformer.wpe.weight", T, D, INIT_NORMAL, 1.0f, 0);
    model_add_tensor(root, "transformer.ln_f.weight", D, 0, INIT_ONES, 1.0f, 0);
    model_add_tensor(root, "transformer.ln_f.bias", D, 0, INIT_ZEROS, 1.0f, 0);
    float proj_scale = 1.0f / sqrtf(2.0f * L);
    static const char *const names[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    const int rows[] = {D, D, 3 * D, 3 * D, D, D, D, D, F, F, D, D}, cols[] = {0, 0, D, 0, D, 0, 0, 0, D, 0, F, 0};
    // tensor parallelism: c_attn by heads within each of q, k, v (3 blocks), c_fc by rows; the
    // projections by columns, their biases (added after the reduction) whole
    const TpSplit split[] = {TP_WHOLE, TP_WHOLE, TP_ROWS, TP_ROWS, TP_COLS, TP_WHOLE,
                             TP_WHOLE, TP_WHOLE, TP_ROWS, TP_ROWS, TP_COLS, TP_WHOLE};
    char name[80];
    for (int l = 0; l < L; l++) {
        UnitSpec *u = &plan->units[l + 1];
        u->layer = l;
        for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, names[i]);
            InitKind init = cols[i] ? INIT_NORMAL : (i == P_LN1_W || i == P_LN2_W) ? INIT_ONES : INIT_ZEROS;
            float scale = (i == P_APROJ_W || i == P_MPROJ_W) ? proj_scale : 1.0f;
            model_tensor_split(model_add_tensor(u, name, rows[i], cols[i], init, scale, cols[i] != 0), split[i],
                               i == P_ATTN_W || i == P_ATTN_B ? 3 : 1);
        }
    }
}

// Under tensor parallelism (a->tp ranks) a block holds its heads of c_attn's q, k and v and its
// share of c_fc (column-parallel, with their biases), and the matching columns of both c_proj
// (row-parallel): their partial outputs are summed over the tp group before the bias, dropout and
// the residual; in backward the input gradients of c_attn and c_fc are. Qd: a rank's q (or k, v)
// width, D / tp. The residual stream, the norms, those biases and the dropouts run on the rank's R
// rows (all of them without sequence parallelism; model.h).
static void gpt_acts_alloc(Activations *a, const ModelConfig *c, size_t S, int with_kv_cache) {
    size_t N = (size_t)a->B * a->T, R = N / a->sp, D = c->hidden_width, F = c->intermediate_size / a->tp, V = a->V, Qd = D / a->tp;
    int nl = c->num_layers, H = c->num_heads / a->tp;
    model_res_alloc(a, nl, N, D);
    a->xn1 = model_acts_act(S * R * D);
    a->mean1 = model_acts_buf(S * R);
    a->rstd1 = model_acts_buf(S * R);
    a->qkv = model_acts_act(N * 3 * Qd);
    a->q = model_acts_act(S * N * Qd);
    a->k = model_acts_act(S * N * Qd);
    a->v = model_acts_act(S * N * Qd);
    a->saved_len = model_attention_saved(a, H);
    a->attn_saved = model_acts_buf(S * a->saved_len);
    a->att = model_acts_act(S * N * Qd);
    a->xmid = model_acts_buf(S * R * D);
    a->xn2 = model_acts_act(S * R * D);
    a->mean2 = model_acts_buf(S * R);
    a->rstd2 = model_acts_buf(S * R);
    a->up = model_acts_act(S * N * F);
    a->h = model_acts_act(S * N * F);
    a->xf = model_acts_act(R * D);
    a->meanf = model_acts_buf(R);
    a->rstdf = model_acts_buf(R);
    a->logits = model_acts_act(N * V);
    if (!model_acts_attention(a, c, with_kv_cache, N, Qd, Qd)) return;  // generation runs no backward
    a->dh = model_acts_act(N * F);
    a->attn_scratch = model_attention_scratch(a, H);
}

// Per-layer views into the saved activations; sizes follow the allocation above.
typedef struct {
    float *x, *mean1, *rstd1, *saved, *xmid, *mean2, *rstd2, *out;  // fp32
    void *xn1, *q, *k, *v, *att, *xn2, *up, *h;                    // activations
} LayerActs;

static LayerActs layer_acts(const ModelConfig *c, const Activations *a, int l) {
    size_t N = (size_t)a->B * a->T, R = N / a->sp, D = c->hidden_width, F = c->intermediate_size / a->tp, Qd = D / a->tp;
    size_t i = a->slot[l];
    LayerActs la = {.xn1 = kern_act_at(a->xn1, i * R * D), .mean1 = a->mean1 + i * R,
                    .rstd1 = a->rstd1 + i * R, .q = kern_act_at(a->q, i * N * Qd), .k = kern_act_at(a->k, i * N * Qd),
                    .v = kern_act_at(a->v, i * N * Qd), .saved = a->attn_saved + i * a->saved_len,
                    .att = kern_act_at(a->att, i * N * Qd), .xmid = a->xmid + i * R * D,
                    .xn2 = kern_act_at(a->xn2, i * R * D), .mean2 = a->mean2 + i * R, .rstd2 = a->rstd2 + i * R,
                    .up = kern_act_at(a->up, i * N * F), .h = kern_act_at(a->h, i * N * F)};
    return la;
}

// tensor i of unit u: in the gathered parameters p (kernels' parameter dtype), or in the fp32 gradient g
#define WP(p, u, i) kern_param_at((p), (u)->t[i].offset)
#define W(g, u, i) model_grad(a, (g), (u), (i))

static void gpt_embed_fwd(const ModelPlan *plan, const void *p, Activations *a, int T, int pos0) {
    const UnitSpec *u = &plan->units[plan->embed_unit];
    int D = plan->cfg.hidden_width, R = model_rows(a, T);
    float *x = model_res_out(a, 0, D);  // (R, D)
    model_embed_tokens_fwd(plan, a, WP(p, u, P_WTE), x, T);
    // positions restart per document, a sequence-parallel rank's rows start mid-batch and a context-
    // parallel rank's chunks mid-sequence: a lookup of wpe by position, added (dres is free before backward)
    if (model_positions(a)) {
        kern_embedding_fwd(a->dres, a->pos + model_row0(a, T), WP(p, u, P_WPE), R, D);
        kern_add(x, a->dres, (size_t)R * D);
    } else {
        kern_positions_fwd(x, WP(p, u, P_WPE), a->B, T, D, pos0);
    }
    model_dropout_fwd(a, x, T, D, -1, DROP_EMBED);
    model_res_store(a, 0, D, T);
}

static void gpt_block_fwd(const ModelPlan *plan, int l, const void *const *pp, Activations *a, int T, int pos0) {
    const void *p = pp[0];
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[plan->block0 + l];
    int B = a->B, N = B * T, R = model_rows(a, T), D = c->hidden_width, H = c->num_heads / a->tp, hd = config_head_dim(c);
    int F = c->intermediate_size / a->tp, Qd = D / a->tp;
    LayerActs la = layer_acts(c, a, l);
    la.x = model_res_in(a, l, D, T);      // (R, D)
    la.out = model_res_out(a, l + 1, D);  // (R, D)
    kern_layernorm_fwd(la.xn1, la.mean1, la.rstd1, la.x, WP(p, u, P_LN1_W), WP(p, u, P_LN1_B), R, D, c->norm_eps);
    // c_attn is q, k, v stacked: one GEMM, then the split RoPE-less Llama uses too
    model_proj_fwd(plan, a, l, u, P_ATTN_W, 1, p, a->qkv, KERN_ACT, model_sp_gather(plan, a, la.xn1, T), N, D, 3 * Qd);  // (B, T, 3D)
    kern_bias_add(a->qkv, KERN_ACT, WP(p, u, P_ATTN_B), N, 3 * Qd);
    kern_qkv_split(la.q, la.k, la.v, a->qkv, NULL, NULL, B, T, H, H, hd, hd, KERN_QKV_BLOCKED, pos0, NULL);  // each (B, T, H, hd)
    if (a->kcache) {  // generation: append to the cache (B == 1) and attend over all of it
        size_t base = (size_t)l * a->T * Qd;
        kern_act_copy(kern_act_at(a->kcache, base + (size_t)pos0 * Qd), la.k, (size_t)T * Qd);
        kern_act_copy(kern_act_at(a->vcache, base + (size_t)pos0 * Qd), la.v, (size_t)T * Qd);
        kern_attention_fwd(la.att, la.saved, la.q, kern_act_at(a->kcache, base), kern_act_at(a->vcache, base), 1, T,
                           pos0 + T, H, H, hd, (size_t)a->T * Qd, NULL, 0, NULL);
    } else {
        KernDropout drop;
        model_attention_fwd(plan, a, la.att, la.saved, la.q, la.k, la.v, H, H, hd, 0,
                            model_attn_dropout(a, l, plan->tp_rank * H, &drop));
    }
    model_proj_fwd(plan, a, l, u, P_APROJ_W, 1, p, model_rowpar_out(a, la.xmid), KERN_F32, la.att, N, Qd, D);
    model_rowpar_sum(plan, a, la.xmid, T);
    kern_bias_add(la.xmid, KERN_F32, WP(p, u, P_APROJ_B), R, D);
    model_dropout_fwd(a, la.xmid, T, D, l, DROP_ATTN_OUT);
    kern_add_layernorm_fwd(la.xmid, la.xn2, la.mean2, la.rstd2, la.x, WP(p, u, P_LN2_W), WP(p, u, P_LN2_B), R, D,
                           c->norm_eps);  // residual, norm
    model_proj_fwd(plan, a, l, u, P_FC_W, 1, p, la.up, KERN_ACT, model_sp_gather(plan, a, la.xn2, T), N, D, F);  // (B, T, F)
    kern_bias_add(la.up, KERN_ACT, WP(p, u, P_FC_B), N, F);
    kern_gelu_fwd(la.h, la.up, (size_t)N * F, KERN_GELU_TANH);
    model_proj_fwd(plan, a, l, u, P_MPROJ_W, 1, p, model_rowpar_out(a, la.out), KERN_F32, la.h, N, F, D);
    model_rowpar_sum(plan, a, la.out, T);
    kern_bias_add(la.out, KERN_F32, WP(p, u, P_MPROJ_B), R, D);
    model_dropout_fwd(a, la.out, T, D, l, DROP_MLP_OUT);
    kern_add(la.out, la.xmid, (size_t)R * D);  // residual
    model_res_store(a, l + 1, D, T);
}

// ln_f, then logits against the tied wte
static void gpt_head_fwd_bwd(const ModelPlan *plan, const void *p, float *g, Activations *a, int with_targets, int T,
                             float dscale) {
    model_layernorm_head(plan, &plan->units[plan->head_unit], P_LNF_W, P_LNF_B, P_WTE, p, g, a, with_targets, T, dscale);
}

static void gpt_block_bwd(const ModelPlan *plan, int l, const void *const *pp, float *const *gg, Activations *a) {
    const void *p = pp[0];
    float *g = gg[0];
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[plan->block0 + l];
    int B = a->B, T = a->T, N = B * T, R = model_rows(a, T), D = c->hidden_width, H = c->num_heads / a->tp;
    int hd = config_head_dim(c), F = c->intermediate_size / a->tp, Qd = D / a->tp;
    LayerActs la = layer_acts(c, a, l);
    la.x = model_res_in(a, l, D, a->T);
    float *dx = a->dres;  // (R, D): dloss/d out, becomes dloss/d xmid, then dloss/d x
    // MLP: the bias on the rank's rows, the matmul on the whole batch's
    const float *dbr = model_dropout_bwd(a, dx, D, l, DROP_MLP_OUT);
    kern_bias_bwd(W(g, u, P_MPROJ_B), dbr, KERN_F32, R, D);
    dbr = model_sp_gather_f32(plan, a, dbr, T);
    model_proj_bwd(plan, a, l, u, P_MPROJ_W, 1, p, g, a->dh, 0, dbr, KERN_F32, la.h, N, F, D);
    kern_gelu_bwd(a->dh, a->dh, la.up, (size_t)N * F, KERN_GELU_TANH);
    kern_bias_bwd(W(g, u, P_FC_B), a->dh, KERN_ACT, N, F);
    model_proj_bwd(plan, a, l, u, P_FC_W, 1, p, g, a->dxn, 0, a->dh, KERN_ACT, model_sp_gather(plan, a, la.xn2, T), N, D, F);
    kern_layernorm_bwd(dx, W(g, u, P_LN2_W), W(g, u, P_LN2_B), model_colpar_dx(plan, a, T), la.xmid, WP(p, u, P_LN2_W),
                       la.mean2, la.rstd2, R, D);
    // attention
    dbr = model_dropout_bwd(a, dx, D, l, DROP_ATTN_OUT);
    kern_bias_bwd(W(g, u, P_APROJ_B), dbr, KERN_F32, R, D);
    dbr = model_sp_gather_f32(plan, a, dbr, T);
    model_proj_bwd(plan, a, l, u, P_APROJ_W, 1, p, g, a->datt, 0, dbr, KERN_F32, la.att, N, Qd, D);
    KernDropout drop;
    model_attention_bwd(plan, a, la.att, la.saved, la.q, la.k, la.v, H, H, hd, 0, model_attn_dropout(a, l, plan->tp_rank * H, &drop));
    kern_qkv_merge(a->qkv, a->dq, a->dk, a->dv, NULL, NULL, B, T, H, H, hd, hd, KERN_QKV_BLOCKED, NULL);  // (B, T, 3D)
    kern_bias_bwd(W(g, u, P_ATTN_B), a->qkv, KERN_ACT, N, 3 * Qd);
    model_proj_bwd(plan, a, l, u, P_ATTN_W, 1, p, g, a->dxn, 0, a->qkv, KERN_ACT, model_sp_gather(plan, a, la.xn1, T), N, D,
                   3 * Qd);
    kern_layernorm_bwd(dx, W(g, u, P_LN1_W), W(g, u, P_LN1_B), model_colpar_dx(plan, a, T), la.x, WP(p, u, P_LN1_W),
                       la.mean1, la.rstd1, R, D);
}

static void gpt_embed_bwd(const ModelPlan *plan, float *g, Activations *a) {
    const UnitSpec *u = &plan->units[plan->embed_unit];
    int D = plan->cfg.hidden_width;
    const float *d = model_dropout_bwd(a, a->dres, D, -1, DROP_EMBED);  // (R, D)
    if (model_positions(a)) kern_embedding_bwd(W(g, u, P_WPE), d, a->pos + model_row0(a, a->T), model_rows(a, a->T), D);
    else kern_positions_bwd(W(g, u, P_WPE), d, a->B, a->T, D);
    model_embed_tokens_bwd(plan, a, W(g, u, P_WTE), d);
}

// 6 FLOPs per parameter and token (position embeddings are a lookup) plus attention's 12*L*D*T
static double gpt_flops_per_token(const ModelPlan *plan, int T) {
    const ModelConfig *c = &plan->cfg;
    double n = (double)plan->num_params - (double)c->max_context_width * c->hidden_width;
    return 6.0 * n + 12.0 * c->num_layers * c->hidden_width * (double)T;
}

#endif

// GPT-2's sizes as minGPT builds them, the vocabulary 50257 padded to 50304 (a multiple of 64)
static const FamilyPreset gpt_presets[] = {
    {"gpt2", 768, 12, 12, 12, 3072, 1024, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"gpt2-medium", 1024, 24, 16, 16, 4096, 1024, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"gpt2-large", 1280, 36, 20, 20, 5120, 1024, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"gpt2-xl", 1600, 48, 25, 25, 6400, 1024, 50304, 0, 0, 0, 0, 0, 0, 0},
    {NULL},
};

// no num_key_value_heads (one per head) and no rope_theta (learned positions)
#define INT_FIELD(n) {.name = #n, .type = FAMILY_INT, .off = offsetof(ModelConfig, n)}
static const FamilyField gpt_ckpt_fields[] = {
    INT_FIELD(hidden_width), INT_FIELD(num_layers), INT_FIELD(num_heads), INT_FIELD(intermediate_size),
    INT_FIELD(vocab_size), INT_FIELD(max_context_width), {.name = "norm_eps", .type = FAMILY_FLOAT, .off = offsetof(ModelConfig, norm_eps), .absent = 1e-5f},
    {NULL},
};

// GPT2LMHeadModel: the same architecture (pre-LN, tanh GELU = "gelu_new", lm_head tied to wte).
// Dropout is not recorded in checkpoints; it only matters for training, so 0.0.
#define OUT_INT(k, f) {.key = k, .kind = FAMILY_OUT_INT, .off = offsetof(ModelConfig, f)}
#define OUT_RAW(k, json) {.key = k, .kind = FAMILY_OUT_RAW, .raw = json}
#define OUT(k, kind_) {.key = k, .kind = kind_}
static const FamilyHfOut gpt_hf_config[] = {
    OUT_RAW("architectures", "[\"GPT2LMHeadModel\"]"), OUT_RAW("model_type", "\"gpt2\""), OUT_INT("n_embd", hidden_width),
    OUT_INT("n_layer", num_layers), OUT_INT("n_head", num_heads), OUT("n_inner", FAMILY_OUT_MLP_WIDTH),
    OUT_INT("n_positions", max_context_width), OUT_INT("n_ctx", max_context_width), OUT_INT("vocab_size", vocab_size),
    {.key = "layer_norm_epsilon", .kind = FAMILY_OUT_FLOAT, .off = offsetof(ModelConfig, norm_eps)},
    OUT_RAW("activation_function", "\"gelu_new\""), OUT_RAW("resid_pdrop", "0.0"), OUT_RAW("embd_pdrop", "0.0"),
    OUT_RAW("attn_pdrop", "0.0"), OUT_RAW("scale_attn_weights", "true"), OUT_RAW("scale_attn_by_inverse_layer_idx", "false"),
    OUT_RAW("reorder_and_upcast_attn", "false"), OUT_RAW("use_cache", "true"), OUT_RAW("tie_word_embeddings", "true"),
    OUT("bos_token_id", FAMILY_OUT_BOS), OUT("eos_token_id", FAMILY_OUT_EOS), OUT("torch_dtype", FAMILY_OUT_DTYPE),
    {NULL},
};

const ModelFamily family_mingpt = {
    .model_type = "mingpt",
    .short_name = "mingpt",
    .display = "minGPT",
    .presets = gpt_presets,
    .mlp_ratio = 4,
    .attn_dropout = 1,
    .lora_targets = "c_attn",
    .hf_defaults = {"GPT2Config", 768, 12, 12, 0, 0, 1024, 50257},
    .ckpt_fields = gpt_ckpt_fields,
    // no import: Hugging Face's Conv1D weights would be transposed slice by slice
    .hf_export = {.architecture = "GPT2LMHeadModel", .config = gpt_hf_config, .transposed = "transformer.h."},
    .plan_build = FAMILY_CODE(gpt_plan_build),
    .acts_alloc = FAMILY_CODE(gpt_acts_alloc),
    .embed_fwd = FAMILY_CODE(gpt_embed_fwd),
    .block_fwd = FAMILY_CODE(gpt_block_fwd),
    .head_fwd_bwd = FAMILY_CODE(gpt_head_fwd_bwd),
    .block_bwd = FAMILY_CODE(gpt_block_bwd),
    .embed_bwd = FAMILY_CODE(gpt_embed_bwd),
    .flops_per_token = FAMILY_CODE(gpt_flops_per_token),
};
