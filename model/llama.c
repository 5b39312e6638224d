// llama: unit plan, init, and forward/backward of each FSDP unit.
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../kernels/kernels.h"

static void add_tensor(UnitSpec *u, const char *name, int rows, int cols) {
    TensorSpec *t = &u->t[u->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->numel = (size_t)rows * (cols ? (size_t)cols : 1);
    t->offset = u->numel;
    t->decay = t->ndim == 2;
    u->numel += t->numel;
}

void model_plan_build(ModelPlan *plan, const ModelConfig *c) {
    int D = c->hidden_width, L = c->num_layers, hd = config_head_dim(c);
    int qd = c->num_heads * hd, kvd = c->num_key_value_heads * hd, F = c->intermediate_size, V = c->vocab_size;
    plan->cfg = *c;
    plan->nunits = L + 2;
    plan->units = callocCheck(plan->nunits, sizeof(UnitSpec));
    plan->units[0].kind = UNIT_EMBED;
    add_tensor(&plan->units[0], "model.embed_tokens.weight", V, D);
    char name[80];
    static const char *const block_names[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                              "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                                              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    const int rows[] = {D, qd, kvd, kvd, D, D, F, F, D}, cols[] = {0, D, D, D, qd, 0, D, D, F};
    for (int l = 0; l < L; l++) {
        UnitSpec *u = &plan->units[l + 1];
        u->kind = UNIT_BLOCK;
        u->layer = l;
        for (int i = 0; i < MAX_UNIT_TENSORS; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, block_names[i]);
            add_tensor(u, name, rows[i], cols[i]);
        }
    }
    UnitSpec *head = &plan->units[L + 1];
    head->kind = UNIT_HEAD;
    add_tensor(head, "model.norm.weight", D, 0);
    add_tensor(head, "lm_head.weight", V, D);
    plan->num_params = 0;
    for (int u = 0; u < plan->nunits; u++) plan->num_params += plan->units[u].numel;
}

void model_plan_free(ModelPlan *plan) {
    free(plan->units);
    plan->units = NULL;
}

int model_find_tensor(const ModelPlan *plan, const char *name, int *unit, int *tensor) {
    for (int u = 0; u < plan->nunits; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++)
            if (!strcmp(plan->units[u].t[t].name, name)) return *unit = u, *tensor = t, 1;
    return 0;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void model_init_range(const TensorSpec *t, uint64_t seed, float std, size_t begin, size_t count, float *dst) {
    if (t->ndim == 1) {  // norm weights start at 1, as in torch/HF
        for (size_t i = 0; i < count; i++) dst[i] = 1.0f;
        return;
    }
    uint64_t h = 1469598103934665603ULL;  // FNV-1a of the name keys the stream
    for (const char *s = t->name; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    uint64_t key = splitmix64(seed ^ splitmix64(h));
    for (size_t i = 0; i < count; i++) {
        uint64_t r = splitmix64(key ^ splitmix64(begin + i));
        double u1 = ((double)(r >> 32) + 0.5) / 4294967296.0, u2 = ((double)(r & 0xffffffffu) + 0.5) / 4294967296.0;
        dst[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));  // Box-Muller
    }
}

// ---- activations ----

// activations live on the compute device; model_acts_bytes runs the same layout with
// acts_count set, which only adds up the sizes
static size_t *acts_count;
static void *acts_buf(size_t bytes) {
    if (!acts_count) return kern_alloc(bytes);
    *acts_count += bytes;
    return NULL;
}
static float *fbuf(size_t n) { return acts_buf(n * sizeof(float)); }

void model_acts_alloc(Activations *a, const ModelConfig *c, int B, int T, int with_kv_cache, int ckpt_every) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->T = T;
    size_t N = (size_t)B * T, D = c->hidden_width, hd = config_head_dim(c);
    size_t qd = c->num_heads * hd, kvd = c->num_key_value_heads * hd, F = c->intermediate_size, V = c->vocab_size;
    int nl = c->num_layers, nslots = 0, shared = -1;
    a->slot = callocCheck(nl, sizeof(int));
    a->recompute = callocCheck(nl, sizeof(int));
    for (int l = 0; l < nl; l++) {
        a->recompute[l] = ckpt_every > 0 && l % ckpt_every == 0;
        if (!a->recompute[l]) a->slot[l] = nslots++;
        else a->slot[l] = shared >= 0 ? shared : (shared = nslots++);
    }
    size_t L = (size_t)nslots;
    a->res = fbuf((size_t)(nl + 1) * N * D);
    a->xn1 = fbuf(L * N * D);
    a->rstd1 = fbuf(L * N);
    a->q = fbuf(L * N * qd);
    a->k = fbuf(L * N * kvd);
    a->v = fbuf(L * N * kvd);
    a->saved_len = kern_attention_saved_floats(B, c->num_heads, T, T);
    a->attn_saved = fbuf(L * a->saved_len);
    a->att = fbuf(L * N * qd);
    a->xmid = fbuf(L * N * D);
    a->xn2 = fbuf(L * N * D);
    a->rstd2 = fbuf(L * N);
    a->gate = fbuf(L * N * F);
    a->up = fbuf(L * N * F);
    a->h = fbuf(L * N * F);
    a->xf = fbuf(N * D);
    a->rstdf = fbuf(N);
    a->logits = fbuf(N * V);
    a->tokens = acts_buf(N * sizeof(int32_t));
    a->targets = acts_buf(N * sizeof(int32_t));
    a->rope_cos = fbuf((size_t)T * hd / 2);
    a->rope_sin = fbuf((size_t)T * hd / 2);
    if (!acts_count) kern_rope_table(a->rope_cos, a->rope_sin, T, (int)hd, c->rope_theta);
    if (with_kv_cache) {
        a->kcache = fbuf((size_t)nl * T * kvd);
        a->vcache = fbuf((size_t)nl * T * kvd);
        return;  // generation runs no backward
    }
    a->dres = fbuf(N * D);
    a->dxn = fbuf(N * D);
    a->dq = fbuf(N * qd);
    a->dk = fbuf(N * kvd);
    a->dv = fbuf(N * kvd);
    a->datt = fbuf(N * qd);
    a->dgate = fbuf(N * F);
    a->dup = fbuf(N * F);
    a->dh = fbuf(N * F);
    a->attn_scratch = fbuf(kern_attention_scratch_floats(B, c->num_heads, T));
}

size_t model_acts_bytes(const ModelConfig *c, int B, int T, int with_kv_cache, int ckpt_every) {
    size_t bytes = 0;
    Activations a;
    acts_count = &bytes;
    model_acts_alloc(&a, c, B, T, with_kv_cache, ckpt_every);
    acts_count = NULL;
    free(a.slot);
    free(a.recompute);
    return bytes;
}

void model_acts_free(Activations *a) {
    void **bufs[] = {(void **)&a->res, (void **)&a->xn1, (void **)&a->rstd1, (void **)&a->q, (void **)&a->k,
                     (void **)&a->v, (void **)&a->attn_saved, (void **)&a->att, (void **)&a->xmid, (void **)&a->xn2,
                     (void **)&a->rstd2, (void **)&a->gate, (void **)&a->up, (void **)&a->h, (void **)&a->xf,
                     (void **)&a->rstdf, (void **)&a->logits, (void **)&a->dres, (void **)&a->dxn, (void **)&a->dq,
                     (void **)&a->dk, (void **)&a->dv, (void **)&a->datt, (void **)&a->dgate, (void **)&a->dup,
                     (void **)&a->dh, (void **)&a->attn_scratch, (void **)&a->rope_cos, (void **)&a->rope_sin,
                     (void **)&a->kcache, (void **)&a->vcache, (void **)&a->tokens, (void **)&a->targets};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) kern_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(a->slot);
    free(a->recompute);
}

// ---- forward / backward ----

// Per-layer views into the saved activations; sizes follow the allocation above.
typedef struct {
    float *x, *xn1, *rstd1, *q, *k, *v, *saved, *att, *xmid, *xn2, *rstd2, *gate, *up, *h, *out;
} LayerActs;

static LayerActs layer_acts(const ModelConfig *c, const Activations *a, int l) {
    size_t N = (size_t)a->B * a->T, D = c->hidden_width, hd = config_head_dim(c);
    size_t qd = c->num_heads * hd, kvd = c->num_key_value_heads * hd, F = c->intermediate_size;
    size_t i = a->slot[l];
    LayerActs la = {
        .x = a->res + l * N * D, .xn1 = a->xn1 + i * N * D, .rstd1 = a->rstd1 + i * N, .q = a->q + i * N * qd,
        .k = a->k + i * N * kvd, .v = a->v + i * N * kvd,
        .saved = a->attn_saved + i * a->saved_len, .att = a->att + i * N * qd,
        .xmid = a->xmid + i * N * D, .xn2 = a->xn2 + i * N * D, .rstd2 = a->rstd2 + i * N, .gate = a->gate + i * N * F,
        .up = a->up + i * N * F, .h = a->h + i * N * F, .out = a->res + (l + 1) * N * D};
    return la;
}

#define W(p, u, i) ((p) + (u)->t[i].offset)

void model_load_batch(Activations *a, const int32_t *inp, const int32_t *tgt, int ntok) {
    kern_upload(a->tokens, inp, (size_t)ntok * sizeof(int32_t));
    if (tgt) kern_upload(a->targets, tgt, (size_t)ntok * sizeof(int32_t));
}

void model_embed_fwd(const ModelPlan *plan, const float *p, Activations *a, int T) {
    kern_embedding_fwd(a->res, a->tokens, p, a->B * T, plan->cfg.hidden_width);  // (B, T, D)
}

void model_block_fwd(const ModelPlan *plan, int l, const float *p, Activations *a, int T, int pos0) {
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[l + 1];
    int B = a->B, N = B * T, D = c->hidden_width, H = c->num_heads, KV = c->num_key_value_heads;
    int hd = config_head_dim(c), F = c->intermediate_size;
    LayerActs la = layer_acts(c, a, l);
    kern_rmsnorm_fwd(la.xn1, la.rstd1, la.x, W(p, u, P_LN1), N, D, c->norm_eps);
    kern_matmul_fwd(la.q, la.xn1, W(p, u, P_Q), N, D, H * hd);   // (B, T, H*hd)
    kern_matmul_fwd(la.k, la.xn1, W(p, u, P_K), N, D, KV * hd);  // (B, T, KV*hd)
    kern_matmul_fwd(la.v, la.xn1, W(p, u, P_V), N, D, KV * hd);
    kern_rope_fwd(la.q, a->rope_cos, a->rope_sin, B, T, H, hd, pos0);
    kern_rope_fwd(la.k, a->rope_cos, a->rope_sin, B, T, KV, hd, pos0);
    if (a->kcache) {  // generation: append to the cache (B == 1) and attend over all of it
        size_t kvd = (size_t)KV * hd, base = (size_t)l * a->T * kvd + (size_t)pos0 * kvd;
        kern_copy(a->kcache + base, la.k, (size_t)T * kvd);
        kern_copy(a->vcache + base, la.v, (size_t)T * kvd);
        kern_attention_fwd(la.att, la.saved, la.q, a->kcache + (size_t)l * a->T * kvd,
                           a->vcache + (size_t)l * a->T * kvd, 1, T, pos0 + T, H, KV, hd, (size_t)a->T * kvd);
    } else {
        kern_attention_fwd(la.att, la.saved, la.q, la.k, la.v, B, T, T, H, KV, hd, (size_t)T * KV * hd);
    }
    kern_matmul_fwd(la.xmid, la.att, W(p, u, P_O), N, H * hd, D);
    kern_add(la.xmid, la.x, (size_t)N * D);  // residual
    kern_rmsnorm_fwd(la.xn2, la.rstd2, la.xmid, W(p, u, P_LN2), N, D, c->norm_eps);
    kern_matmul_fwd(la.gate, la.xn2, W(p, u, P_GATE), N, D, F);  // (B, T, F)
    kern_matmul_fwd(la.up, la.xn2, W(p, u, P_UP), N, D, F);
    kern_swiglu_fwd(la.h, la.gate, la.up, (size_t)N * F);
    kern_matmul_fwd(la.out, la.h, W(p, u, P_DOWN), N, F, D);
    kern_add(la.out, la.xmid, (size_t)N * D);  // residual
}

double model_head_fwd_bwd(const ModelPlan *plan, const float *p, float *g, Activations *a, int with_targets, int T,
                          float dscale) {
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[plan->nunits - 1];
    int N = a->B * T, D = c->hidden_width, V = c->vocab_size;
    const float *x = a->res + (size_t)c->num_layers * a->B * a->T * D;  // (B, T, D) last block out
    kern_rmsnorm_fwd(a->xf, a->rstdf, x, W(p, u, P_NORM), N, D, c->norm_eps);
    kern_matmul_fwd(a->logits, a->xf, W(p, u, P_LM_HEAD), N, D, V);  // (B, T, V)
    if (!with_targets) return 0.0;
    double loss = kern_crossentropy_fwd_bwd(a->logits, a->targets, N, V, dscale);  // logits become dlogits
    if (dscale == 0.0f) return loss;
    kern_matmul_bwd(a->dxn, W(g, u, P_LM_HEAD), a->logits, a->xf, W(p, u, P_LM_HEAD), N, D, V, 0);
    kern_zero(a->dres, (size_t)N * D);
    kern_rmsnorm_bwd(a->dres, W(g, u, P_NORM), a->dxn, x, W(p, u, P_NORM), a->rstdf, N, D);
    return loss;
}

void model_block_bwd(const ModelPlan *plan, int l, const float *p, float *g, Activations *a) {
    const ModelConfig *c = &plan->cfg;
    const UnitSpec *u = &plan->units[l + 1];
    int B = a->B, T = a->T, N = B * T, D = c->hidden_width, H = c->num_heads, KV = c->num_key_value_heads;
    int hd = config_head_dim(c), F = c->intermediate_size;
    LayerActs la = layer_acts(c, a, l);
    float *dx = a->dres;  // (B, T, D): dloss/d out, becomes dloss/d xmid, then dloss/d x
    // MLP
    kern_matmul_bwd(a->dh, W(g, u, P_DOWN), dx, la.h, W(p, u, P_DOWN), N, F, D, 0);
    kern_swiglu_bwd(a->dgate, a->dup, a->dh, la.gate, la.up, (size_t)N * F);
    kern_matmul_bwd(a->dxn, W(g, u, P_GATE), a->dgate, la.xn2, W(p, u, P_GATE), N, D, F, 0);
    kern_matmul_bwd(a->dxn, W(g, u, P_UP), a->dup, la.xn2, W(p, u, P_UP), N, D, F, 1);
    kern_rmsnorm_bwd(dx, W(g, u, P_LN2), a->dxn, la.xmid, W(p, u, P_LN2), la.rstd2, N, D);
    // attention
    kern_matmul_bwd(a->datt, W(g, u, P_O), dx, la.att, W(p, u, P_O), N, H * hd, D, 0);
    kern_attention_bwd(a->dq, a->dk, a->dv, a->attn_scratch, a->datt, la.att, la.saved, la.q, la.k, la.v, B, T, H, KV,
                       hd);
    kern_rope_bwd(a->dq, a->rope_cos, a->rope_sin, B, T, H, hd, 0);
    kern_rope_bwd(a->dk, a->rope_cos, a->rope_sin, B, T, KV, hd, 0);
    kern_matmul_bwd(a->dxn, W(g, u, P_Q), a->dq, la.xn1, W(p, u, P_Q), N, D, H * hd, 0);
    kern_matmul_bwd(a->dxn, W(g, u, P_K), a->dk, la.xn1, W(p, u, P_K), N, D, KV * hd, 1);
    kern_matmul_bwd(a->dxn, W(g, u, P_V), a->dv, la.xn1, W(p, u, P_V), N, D, KV * hd, 1);
    kern_rmsnorm_bwd(dx, W(g, u, P_LN1), a->dxn, la.x, W(p, u, P_LN1), la.rstd1, N, D);
}

void model_embed_bwd(const ModelPlan *plan, float *g, Activations *a) {
    kern_embedding_bwd(g, a->dres, a->tokens, a->B * a->T, plan->cfg.hidden_width);
}
