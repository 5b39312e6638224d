// neox: the GPT-NeoX family (GPTNeoXForCausalLM: Pythia, GPT-NeoX-20B; 10.FSDP's default model).
// A block is the parallel residual out = x + attn(ln1(x)) + mlp(ln2(x)); LayerNorms and linears
// have biases; the fused query_key_value holds each head's q, k, v together (KERN_QKV_PER_HEAD);
// RoPE rotates the first rotary_pct of each head's dimensions; the MLP's GELU is exact (erf) or
// its tanh approximation (hidden_act: Pythia's gelu, GPT-NeoX-20B's gelu_fast); the output
// embedding embed_out is untied. Units: 0 the embedding, 1..L the blocks, L+1 the final LayerNorm
// and embed_out. The descriptor at the end holds its presets and Hugging Face spellings.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "family.h"
#include "lora.h"

#ifndef FAMILY_DESCRIPTION_ONLY
// tensor order inside a block unit and inside the head unit
enum { P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B, P_LN2_W, P_LN2_B, P_UP_W, P_UP_B, P_DOWN_W, P_DOWN_B };
enum { P_LNF_W, P_LNF_B, P_EMBED_OUT };

static void neox_plan_build(ModelPlan *plan) {
    const ModelConfig *c = &plan->cfg;
    int D = c->hidden_width, L = c->num_layers, F = c->intermediate_size, V = c->vocab_size;
    plan->nunits = L + 2;
    plan->embed_unit = 0;
    plan->block0 = 1;
    plan->head_unit = L + 1;
    plan->units = callocCheck(plan->nunits, sizeof(UnitSpec));
    plan->units[0].layer = -1;
    // Hugging Face's init: N(0, initializer_range) for embeddings and linear weights, zero biases,
    // LayerNorm (1, 0); the 2-D weights decay
    model_tensor_split(model_add_tensor(&plan->units[0], "gpt_neox.embed_in.weight", V, D, INIT_NORMAL, 1.0f, 1), TP_ROWS, 1);
    static const char *const names[] = {
        "input_layernorm.weight", "input_layernorm.bias", "attention.query_key_value.weight",
        "attention.query_key_value.bias", "attention.dense.weight", "attention.dense.bias",
        "post_attention_layernorm.weight", "post_attention_layernorm.bias", "mlp.dense_h_to_4h.weight",
        "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias"};
    const int rows[] = {D, D, 3 * D, 3 * D, D, D, D, D, F, F, D, D}, cols[] = {0, 0, D, 0, D, 0, 0, 0, D, 0, F, 0};
    // tensor parallelism: query_key_value by heads (each head's q, k, v are adjacent rows), the
    // 4h projection by rows; dense and 4h_to_h by columns, their biases whole
    const TpSplit split[] = {TP_WHOLE, TP_WHOLE, TP_ROWS, TP_ROWS, TP_COLS, TP_WHOLE,
                             TP_WHOLE, TP_WHOLE, TP_ROWS, TP_ROWS, TP_COLS, TP_WHOLE};
    char name[80];
    for (int l = 0; l < L; l++) {
        UnitSpec *u = &plan->units[l + 1];
        u->layer = l;
        for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
            snprintf(name, sizeof name, "gpt_neox.layers.%d.%s", l, names[i]);
            InitKind init = cols[i] ? INIT_NORMAL : (i == P_LN1_W || i == P_LN2_W) ? INIT_ONES : INIT_ZEROS;
            model_tensor_split(model_add_tensor(u, name, rows[i], cols[i], init, 1.0f, cols[i] != 0), split[i], 1);
        }
    }
    UnitSpec *head = &plan->units[L + 1];
    head->layer = -1;
    model_add_tensor(head, "gpt_neox.final_layer_norm.weight", D, 0, INIT_ONES, 1.0f, 0);
    model_add_tensor(head, "gpt_neox.final_layer_norm.bias", D, 0, INIT_ZEROS, 1.0f, 0);
    model_tensor_split(model_add_tensor(head, "embed_out.weight", V, D, INIT_NORMAL, 1.0f, 1), TP_ROWS, 1);
}

// Under tensor parallelism (a->tp ranks) a block holds its heads of query_key_value and its share
// of dense_h_to_4h (column-parallel, with their biases), and the matching columns of dense and
// dense_4h_to_h (row-parallel): each branch's partial output is summed over the tp group before
// its bias and dropout; in backward the input gradients of both branches' first projections are.
// Qd: a rank's q (or k, v) width, D / tp. The residual stream, the norms, those biases and the
// dropouts run on the rank's R rows (all of them without sequence parallelism; model.h).
static void neox_acts_alloc(Activations *a, const ModelConfig *c, size_t S, int with_kv_cache) {
    size_t N = (size_t)a->B * a->T, R = N / a->sp, D = c->hidden_width, F = c->intermediate_size / a->tp, V = a->V, Qd = D / a->tp;
    size_t rot = (size_t)config_rotary_dims(c);
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
    a->xmid = model_acts_buf(R * D);  // the attention branch's output: backward does not read it
    a->xn2 = model_acts_act(S * R * D);
    a->mean2 = model_acts_buf(S * R);
    a->rstd2 = model_acts_buf(S * R);
    a->up = model_acts_act(S * N * F);
    a->h = model_acts_act(S * N * F);
    a->xf = model_acts_act(R * D);
    a->meanf = model_acts_buf(R);
    a->rstdf = model_acts_buf(R);
    a->logits = model_acts_act(N * V);
    a->rope_cos = model_acts_buf((size_t)a->T * a->cp * rot / 2);  // every position of the whole sequence
    a->rope_sin = model_acts_buf((size_t)a->T * a->cp * rot / 2);
    if (a->rope_cos) {
        double *inv_freq = mallocCheck(sizeof(double) * (rot / 2));
        model_rope_inv_freq(inv_freq, (int)rot, c->rope_theta);
        kern_rope_table(a->rope_cos, a->rope_sin, a->T * a->cp, (int)rot, inv_freq);
        free(inv_freq);
    }
    if (!model_acts_attention(a, c, with_kv_cache, N, Qd, Qd)) return;  // generation runs no backward
    a->dh = model_acts_act(N * F);
    a->attn_scratch = model_attention_scratch(a, H);
}

// Per-layer views into the saved activations; sizes follow the allocation above.
typedef struct {
    float *x, *mean1, *rstd1, *saved, *mean2, *rstd2, *out;  // fp32
    void *xn1, *q, *k, *v, *att, *xn2, *up, *h;             // activations
} LayerActs;

static LayerActs layer_acts(const ModelConfig *c, const Activations *a, int l) {
    size_t N = (size_t)a->B * a->T, R = N / a->sp, D = c->hidden_width, F = c->intermediate_size / a->tp, Qd = D / a->tp;
    size_t i = a->slot[l];
    LayerActs la = {.xn1 = kern_act_at(a->xn1, i * R * D), .mean1 = a->mean1 + i * R, .rstd1 = a->rstd1 + i * R,
                    .q = kern_act_at(a->q, i * N * Qd), .k = kern_act_at(a->k, i * N * Qd),
                    .v = kern_act_at(a->v, i * N * Qd), .saved = a->attn_saved + i * a->saved_len,
                    .att = kern_act_at(a->att, i * N * Qd), .xn2 = kern_act_at(a->xn2, i * R * D),
                    .mean2 = a->mean2 + i * R, .rstd2 = a->rstd2 + i * R, .up = kern_act_at(a->up, i * N * F),
                    .h = kern_act_at(a->h, i * N * F)};
    return la;
}

// tensor i of unit u: in the gathered parameters p (kernels' parameter dtype), or in the fp32 gradient g
#define WP(p, u, i) kern_param_at((p), (u)->t[i].offset)
#define W(g, u, i) model_grad(a, (g), (u), (i))

static void neox_embed_fwd(const ModelPlan *plan, const void *p, Activations *a, int T, int pos0) {
    int D = plan->cfg.hidden_width;
    model_embed_tokens_fwd(plan, a, p, model_res_out(a, 0, D), T);  // (rows, D)
    model_res_store(a, 0, D, T);
}

// hidden_act's GELU: every name but plain gelu is the tanh approximation
static KernGelu neox_gelu(const ModelConfig *c) { return c->hidden_act == MODEL_ACT_GELU ? KERN_GELU_ERF : KERN_GELU_TANH; }

static void neox_block_fwd(const ModelPlan *plan, int l, const void *const *pp, Activations *a, int T, int pos0) {
    const void *p = pp[0];
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[plan->block0 + l];
    int B = a->B, N = B * T, R = model_rows(a, T), D = c->hidden_width, H = c->num_heads / a->tp, hd = config_head_dim(c);
    int F = c->intermediate_size / a->tp, Qd = D / a->tp, rot = config_rotary_dims(c);
    LayerActs la = layer_acts(c, a, l);
    la.x = model_res_in(a, l, D, T);      // (R, D)
    la.out = model_res_out(a, l + 1, D);  // (R, D)
    // attention branch
    kern_layernorm_fwd(la.xn1, la.mean1, la.rstd1, la.x, WP(p, u, P_LN1_W), WP(p, u, P_LN1_B), R, D, c->norm_eps);
    model_proj_fwd(plan, a, l, u, P_QKV_W, 1, p, a->qkv, KERN_ACT, model_sp_gather(plan, a, la.xn1, T), N, D, 3 * Qd);  // (B, T, H, 3, hd)
    kern_bias_add(a->qkv, KERN_ACT, WP(p, u, P_QKV_B), N, 3 * Qd);
    kern_qkv_split(la.q, la.k, la.v, a->qkv, a->rope_cos, a->rope_sin, B, T, H, H, hd, rot, KERN_QKV_PER_HEAD, pos0,
                   model_positions(a));
    if (a->kcache) {  // generation: append to the cache (B == 1) and attend over all of it
        size_t base = (size_t)l * a->T * Qd;
        kern_act_copy(kern_act_at(a->kcache, base + (size_t)pos0 * Qd), la.k, (size_t)T * Qd);
        kern_act_copy(kern_act_at(a->vcache, base + (size_t)pos0 * Qd), la.v, (size_t)T * Qd);
        kern_attention_fwd(la.att, la.saved, la.q, kern_act_at(a->kcache, base), kern_act_at(a->vcache, base), 1, T,
                           pos0 + T, H, H, hd, (size_t)a->T * Qd, NULL, 0, NULL);
    } else {
        model_attention_fwd(plan, a, la.att, la.saved, la.q, la.k, la.v, H, H, hd, 0, NULL);
    }
    model_proj_fwd(plan, a, l, u, P_DENSE_W, 1, p, model_rowpar_out(a, a->xmid), KERN_F32, la.att, N, Qd, D);
    model_rowpar_sum(plan, a, a->xmid, T);
    kern_bias_add(a->xmid, KERN_F32, WP(p, u, P_DENSE_B), R, D);
    model_dropout_fwd(a, a->xmid, T, D, l, DROP_ATTN_OUT);
    // MLP branch, on the block's input too
    kern_layernorm_fwd(la.xn2, la.mean2, la.rstd2, la.x, WP(p, u, P_LN2_W), WP(p, u, P_LN2_B), R, D, c->norm_eps);
    model_proj_fwd(plan, a, l, u, P_UP_W, 1, p, la.up, KERN_ACT, model_sp_gather(plan, a, la.xn2, T), N, D, F);  // (B, T, F)
    kern_bias_add(la.up, KERN_ACT, WP(p, u, P_UP_B), N, F);
    kern_gelu_fwd(la.h, la.up, (size_t)N * F, neox_gelu(c));
    model_proj_fwd(plan, a, l, u, P_DOWN_W, 1, p, model_rowpar_out(a, la.out), KERN_F32, la.h, N, F, D);
    model_rowpar_sum(plan, a, la.out, T);
    kern_bias_add(la.out, KERN_F32, WP(p, u, P_DOWN_B), R, D);
    model_dropout_fwd(a, la.out, T, D, l, DROP_MLP_OUT);
    kern_add(la.out, a->xmid, (size_t)R * D);  // the parallel residual: mlp + attn + x
    kern_add(la.out, la.x, (size_t)R * D);
    model_res_store(a, l + 1, D, T);
}

// final_layer_norm, then logits against embed_out
static void neox_head_fwd_bwd(const ModelPlan *plan, const void *p, float *g, Activations *a, int with_targets, int T,
                              float dscale) {
    model_layernorm_head(plan, &plan->units[plan->head_unit], P_LNF_W, P_LNF_B, P_EMBED_OUT, p, g, a, with_targets, T, dscale);
}

static void neox_block_bwd(const ModelPlan *plan, int l, const void *const *pp, float *const *gg, Activations *a) {
    const void *p = pp[0];
    float *g = gg[0];
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[plan->block0 + l];
    int B = a->B, T = a->T, N = B * T, R = model_rows(a, T), D = c->hidden_width, H = c->num_heads / a->tp;
    int hd = config_head_dim(c), F = c->intermediate_size / a->tp, Qd = D / a->tp, rot = config_rotary_dims(c);
    LayerActs la = layer_acts(c, a, l);
    la.x = model_res_in(a, l, D, a->T);
    float *dx = a->dres;  // (R, D): dloss/d out, which is also the residual's share of dloss/d x
    // Both branches read dloss/d out, and both norms add into dx: the attention output projection
    // takes its share first, before the MLP's norm changes dx. Biases on the rank's rows, the
    // matmuls on the whole batch's.
    const float *dbr = model_dropout_bwd(a, dx, D, l, DROP_ATTN_OUT);
    kern_bias_bwd(W(g, u, P_DENSE_B), dbr, KERN_F32, R, D);
    dbr = model_sp_gather_f32(plan, a, dbr, T);
    model_proj_bwd(plan, a, l, u, P_DENSE_W, 1, p, g, a->datt, 0, dbr, KERN_F32, la.att, N, Qd, D);
    // MLP
    dbr = model_dropout_bwd(a, dx, D, l, DROP_MLP_OUT);
    kern_bias_bwd(W(g, u, P_DOWN_B), dbr, KERN_F32, R, D);
    dbr = model_sp_gather_f32(plan, a, dbr, T);
    model_proj_bwd(plan, a, l, u, P_DOWN_W, 1, p, g, a->dh, 0, dbr, KERN_F32, la.h, N, F, D);
    kern_gelu_bwd(a->dh, a->dh, la.up, (size_t)N * F, neox_gelu(c));
    kern_bias_bwd(W(g, u, P_UP_B), a->dh, KERN_ACT, N, F);
    model_proj_bwd(plan, a, l, u, P_UP_W, 1, p, g, a->dxn, 0, a->dh, KERN_ACT, model_sp_gather(plan, a, la.xn2, T), N, D, F);
    kern_layernorm_bwd(dx, W(g, u, P_LN2_W), W(g, u, P_LN2_B), model_colpar_dx(plan, a, T), la.x, WP(p, u, P_LN2_W),
                       la.mean2, la.rstd2, R, D);
    // attention
    model_attention_bwd(plan, a, la.att, la.saved, la.q, la.k, la.v, H, H, hd, 0, NULL);
    kern_qkv_merge(a->qkv, a->dq, a->dk, a->dv, a->rope_cos, a->rope_sin, B, T, H, H, hd, rot, KERN_QKV_PER_HEAD,
                   model_positions(a));  // (B, T, 3D)
    kern_bias_bwd(W(g, u, P_QKV_B), a->qkv, KERN_ACT, N, 3 * Qd);
    model_proj_bwd(plan, a, l, u, P_QKV_W, 1, p, g, a->dxn, 0, a->qkv, KERN_ACT, model_sp_gather(plan, a, la.xn1, T), N, D,
                   3 * Qd);
    kern_layernorm_bwd(dx, W(g, u, P_LN1_W), W(g, u, P_LN1_B), model_colpar_dx(plan, a, T), la.x, WP(p, u, P_LN1_W),
                       la.mean1, la.rstd1, R, D);
}

static void neox_embed_bwd(const ModelPlan *plan, float *g, Activations *a) { model_embed_tokens_bwd(plan, a, g, a->dres); }

// 6 FLOPs per parameter and token (the input embedding is a lookup) plus attention's 12*L*D*T
static double neox_flops_per_token(const ModelPlan *plan, int T) {
    const ModelConfig *c = &plan->cfg;
    double n = (double)plan->num_params - (double)c->vocab_size * c->hidden_width;
    return 6.0 * n + 12.0 * c->num_layers * c->hidden_width * (double)T;
}

#endif

// neox_tiny is for tests and quick runs (byte vocabulary); pythia_* are the Pythia suite's sizes
// (their vocabularies padded as published) and gpt_neox_20b EleutherAI's 20B model (whose MLP is
// the tanh GELU, "gelu_fast")
static const FamilyPreset neox_presets[] = {
    {"neox_tiny", 128, 4, 4, 4, 512, 128, 256, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_70m", 512, 6, 8, 8, 2048, 2048, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_160m", 768, 12, 12, 12, 3072, 2048, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_410m", 1024, 24, 16, 16, 4096, 2048, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_1b", 2048, 16, 8, 8, 8192, 2048, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_1.4b", 2048, 24, 16, 16, 8192, 2048, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_2.8b", 2560, 32, 32, 32, 10240, 2048, 50304, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_6.9b", 4096, 32, 32, 32, 16384, 2048, 50432, 0, 0, 0, 0, 0, 0, 0},
    {"pythia_12b", 5120, 36, 40, 40, 20480, 2048, 50688, 0, 0, 0, 0, 0, 0, 0},
    {"gpt_neox_20b", 6144, 44, 64, 64, 24576, 2048, 50432, 0, 0, 0, 0, MODEL_ACT_GELU_FAST, 0, 0},
    {NULL},
};

// one key/value head per head (not stored)
#define INT_FIELD(n) {.name = #n, .type = FAMILY_INT, .off = offsetof(ModelConfig, n)}
#define FLOAT_FIELD(n, absent_) {.name = #n, .type = FAMILY_FLOAT, .off = offsetof(ModelConfig, n), .absent = absent_}
static const FamilyField neox_ckpt_fields[] = {
    INT_FIELD(hidden_width), INT_FIELD(num_layers), INT_FIELD(num_heads), INT_FIELD(intermediate_size),
    INT_FIELD(vocab_size), INT_FIELD(max_context_width), FLOAT_FIELD(rope_theta, 10000.0f),
    FLOAT_FIELD(rotary_pct, 0.25f), FLOAT_FIELD(norm_eps, 1e-5f),
    {.name = "hidden_act", .type = FAMILY_CHOICE, .off = offsetof(ModelConfig, hidden_act), .choices = config_hidden_acts}, {NULL},
};

// GPTNeoXConfig's keys; the optional ones default as transformers' GPTNeoXConfig does
#define HF_INT(k, bit_, f, req) {.key = k, .bit = bit_, .type = FAMILY_INT, .off = offsetof(ModelConfig, f), .required = req}
#define HF_FLOAT(k, bit_, f, absent_) {.key = k, .bit = bit_, .type = FAMILY_FLOAT, .off = offsetof(ModelConfig, f), .absent = absent_}
static const FamilyHfKey neox_hf_keys[] = {
    HF_INT("hidden_size", MODEL_HIDDEN, hidden_width, 1),
    HF_INT("num_hidden_layers", MODEL_LAYERS, num_layers, 1),
    HF_INT("num_attention_heads", MODEL_HEADS, num_heads, 1),
    HF_INT("intermediate_size", MODEL_INTERMEDIATE, intermediate_size, 1),
    HF_INT("vocab_size", MODEL_VOCAB, vocab_size, 1),
    HF_FLOAT("rotary_emb_base", MODEL_ROPE_THETA, rope_theta, 10000.0f),
    HF_FLOAT("rotary_pct", MODEL_ROTARY_PCT, rotary_pct, 0.25f),
    HF_FLOAT("layer_norm_eps", MODEL_NORM_EPS, norm_eps, 1e-5f),
    {.key = "hidden_act", .bit = MODEL_ACT, .type = FAMILY_CHOICE, .off = offsetof(ModelConfig, hidden_act), .choices = config_hidden_acts},
    {NULL},
};
static const FamilyHfCheck neox_hf_checks[] = {
    {"use_parallel_residual", NULL, "block is the parallel residual x + attn(ln1(x)) + mlp(ln2(x))", 1},
    {"attention_bias", NULL, "attention has biases", 1},
    {NULL},
};
static const char *const neox_hf_types[] = {"gpt_neox", NULL};
static const char *const neox_hf_architectures[] = {"GPTNeoXForCausalLM", NULL};

#define OUT_INT(k, f) {.key = k, .kind = FAMILY_OUT_INT, .off = offsetof(ModelConfig, f)}
#define OUT_FLOAT(k, f) {.key = k, .kind = FAMILY_OUT_FLOAT, .off = offsetof(ModelConfig, f)}
#define OUT_RAW(k, json) {.key = k, .kind = FAMILY_OUT_RAW, .raw = json}
#define OUT(k, kind_) {.key = k, .kind = kind_}
static const FamilyHfOut neox_hf_config[] = {
    OUT_RAW("architectures", "[\"GPTNeoXForCausalLM\"]"), OUT_RAW("model_type", "\"gpt_neox\""),
    OUT_INT("hidden_size", hidden_width), OUT_INT("intermediate_size", intermediate_size),
    OUT_INT("num_hidden_layers", num_layers), OUT_INT("num_attention_heads", num_heads),
    OUT("max_position_embeddings", FAMILY_OUT_POSITIONS), OUT_FLOAT("rotary_pct", rotary_pct),
    OUT_FLOAT("rotary_emb_base", rope_theta), OUT_RAW("rope_scaling", "null"), OUT_FLOAT("layer_norm_eps", norm_eps),
    OUT_INT("vocab_size", vocab_size), {.key = "hidden_act", .kind = FAMILY_OUT_CHOICE, .off = offsetof(ModelConfig, hidden_act), config_hidden_acts}, OUT_RAW("use_parallel_residual", "true"),
    OUT_RAW("attention_bias", "true"), OUT_RAW("tie_word_embeddings", "false"), OUT_RAW("attention_dropout", "0.0"),
    OUT_RAW("hidden_dropout", "0.0"), OUT_RAW("use_cache", "true"), OUT("bos_token_id", FAMILY_OUT_BOS),
    OUT("eos_token_id", FAMILY_OUT_EOS), OUT("torch_dtype", FAMILY_OUT_DTYPE),
    {NULL},
};

const ModelFamily family_neox = {
    .model_type = "gpt_neox",
    .short_name = "gpt_neox",
    .display = "GPT-NeoX",
    .presets = neox_presets,
    .rope = 1,
    .mlp_ratio = 4,
    .lora_targets = "query_key_value",
    .rotary_pct = 0.25f,
    .hidden_act_option = 1,
    .hf_defaults = {"GPTNeoXConfig", 6144, 44, 64, 0, 0, 2048, 50432},
    .ckpt_fields = neox_ckpt_fields,
    .hf_import = {
        .model_types = neox_hf_types,
        .architectures = neox_hf_architectures,
        .what = "GPT-NeoX models (GPTNeoXForCausalLM, model_type gpt_neox: Pythia, GPT-NeoX-20B)",
        .keys = neox_hf_keys,
        .context = "max_position_embeddings",
        .rope = {.theta = "rotary_emb_base", .scaling = "rope_scaling", .parameters = "rope_parameters", .partial = "rotary_pct"},
        .checks = neox_hf_checks,
        .embed = "gpt_neox.embed_in.weight",
        .mlp = "gpt_neox.layers.0.mlp.dense_h_to_4h.weight",
        .layer_fmt = "gpt_neox.layers.%d.",
        .tied = "embed_out.weight",
        .tied_to = "gpt_neox.embed_in.weight",
    },
    .hf_export = {.architecture = "GPTNeoXForCausalLM", .config = neox_hf_config},
    .plan_build = FAMILY_CODE(neox_plan_build),
    .acts_alloc = FAMILY_CODE(neox_acts_alloc),
    .embed_fwd = FAMILY_CODE(neox_embed_fwd),
    .block_fwd = FAMILY_CODE(neox_block_fwd),
    .head_fwd_bwd = FAMILY_CODE(neox_head_fwd_bwd),
    .block_bwd = FAMILY_CODE(neox_block_bwd),
    .embed_bwd = FAMILY_CODE(neox_embed_bwd),
    .flops_per_token = FAMILY_CODE(neox_flops_per_token),
};
