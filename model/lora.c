// lora: the adapter units of a plan, and the adapted projections' forward and backward.
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../kernels/kernels.h"
#include "family.h"
#include "moe.h"

struct LoraActs {
    const UnitSpec *u;  // the bound block's adapter unit, its gathered parameters and gradient
    const void *p;
    float *g;
    const UnitSpec *ue;  // the unit of this rank's experts' adapters (u itself unless expert parallelism splits it)
    const void *pe;
    float *ge;
    int train;         // LoRA dropout applies (a training pass)
    float drop;        // cfg lora_dropout
    void *z, *dz;      // (rows, r) A drop(x), and its gradient; rows: N, or the experts' grouped rows when larger
    float *y;          // (rows, max OUT) B's product; in backward s * the output gradient's columns
    float *x32;        // (N, max IN) drop(x) in fp32 (dropout only); in backward the input gradient
    void *xd, *dx;     // (N, max IN) drop(x) and A's input gradient as activations (dropout only)
    float *sink;       // frozen units' norm and bias gradients, never read
};

// a mixture of experts' expert weight: a tensor of an experts' unit (expert parallelism), else one
// of the last 3E of a block unit (moe.h)
static int expert_tensor(const ModelPlan *plan, const UnitSpec *u, int t) {
    int E = plan->cfg.num_experts;
    if (!E || u->layer < 0 || u->adapter) return 0;
    return plan->block_stride > 1 ? u->ep_index >= 0 : t >= u->ntensors - 3 * E;
}

int lora_linear_module(const TensorSpec *t, char *module, size_t len) {
    size_t n = strlen(t->name);
    if (t->ndim != 2 || n < 8 || strcmp(t->name + n - 7, ".weight")) return 0;
    snprintf(module, len, "%.*s", (int)(n - 7), t->name);
    return 1;
}

int lora_target_matches(const char *module, const char *target) {
    size_t m = strlen(module), t = strlen(target);
    if (!strcmp(module, target)) return 1;
    return m > t && module[m - t - 1] == '.' && !strcmp(module + m - t, target);
}

const char *lora_module_names(const ModelPlan *plan) {
    static char out[512];
    out[0] = 0;
    if (plan->cfg.num_layers < 1) return out;
    const UnitSpec *u = &plan->units[plan->block0];
    char module[80];
    size_t k = 0;
    for (int t = 0; t < u->ntensors; t++) {
        if (!lora_linear_module(&u->t[t], module, sizeof module)) continue;
        const char *last = strrchr(module, '.') ? strrchr(module, '.') + 1 : module;
        char probe[84];
        snprintf(probe, sizeof probe, ", %s,", last);
        char have[520];
        snprintf(have, sizeof have, ", %s,", out);
        if (strstr(have, probe)) continue;  // minGPT's two c_proj
        k += (size_t)snprintf(out + k, sizeof out - k, "%s%s", k ? ", " : "", last);
        if (k >= sizeof out) break;
    }
    return out;
}

enum { MAX_TARGETS = 32 };

// The comma-separated names of spec (in buf) into targets; *all for all-linear. Returns how many
// names, or -1 with the line in err.
static int parse_targets(const char *spec, char *buf, size_t len, char **targets, int *all, char *err, size_t errlen) {
    int n = 0;
    *all = 0;
    snprintf(buf, len, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        for (char *e = tok + strlen(tok); e > tok && e[-1] == ' ';) *--e = 0;
        if (!*tok) continue;
        if (!strcmp(tok, "all-linear")) *all = 1;
        else if (n == MAX_TARGETS) return err_set(err, errlen, "--lora_target_modules: more than %d names", MAX_TARGETS);
        else targets[n++] = tok;
    }
    return n;
}

// w's adapters, A (r, in) and B (out, r), into the adapter unit ad; tensor parallelism splits them
// as Megatron's LoRA does: on a column-parallel W B's rows as W's and A whole, on a row-parallel W
// A's columns as W's and B whole, the whole one's gradient a share on each tp rank
static void add_adapter(UnitSpec *ad, TensorSpec *w, const char *module, int r) {
    char name[sizeof w->name];
    int rows = w->full[0], cols = w->full[1];
    w->lora = ad->ntensors;
    snprintf(name, sizeof name, "%s.lora_A.weight", module);
    TensorSpec *A = model_add_tensor(ad, name, r, cols, INIT_UNIFORM, (float)(1.0 / sqrt((double)cols)), 1);
    snprintf(name, sizeof name, "%s.lora_B.weight", module);
    TensorSpec *B = model_add_tensor(ad, name, rows, r, INIT_ZEROS, 1.0f, 1);
    if (w->tp_split == TP_ROWS) {
        model_tensor_split(B, TP_ROWS, w->tp_parts);
        A->tp_partial = 1;
    } else if (w->tp_split == TP_COLS) {
        model_tensor_split(A, TP_COLS, w->tp_parts);
        B->tp_partial = 1;
    }
}

// The adapters of block unit u into ad for the targets (all: every linear layer), marking the
// targets used; 0, or -1 with the line in err (a rank too large, experts adapted unlike each other,
// adapter dropout on experts).
static int adapt_block(const ModelPlan *plan, UnitSpec *u, UnitSpec *ad, char *const *targets, int ntargets, int all, int *used,
                       char *err, size_t errlen) {
    const ModelConfig *c = &plan->cfg;
    char module[sizeof u->t[0].name];
    for (int t = 0; t < u->ntensors; t++) {
        TensorSpec *w = &u->t[t];
        if (!lora_linear_module(w, module, sizeof module)) continue;
        int named = 0;
        for (int i = 0; i < ntargets; i++)
            if (lora_target_matches(module, targets[i])) named = 1, used[i] = 1;
        if (!named && !all) continue;
        if (c->lora_rank > w->full[0] || c->lora_rank > w->full[1])
            return err_set(err, errlen, "--lora_rank %d is larger than %s (%d x %d): the rank is at most the layer's smaller "
                           "dimension", c->lora_rank, module, w->full[0], w->full[1]);
        if (strlen(module) + strlen(".lora_A.weight") >= sizeof w->name)
            return err_set(err, errlen, "internal error: the adapter name of %s is too long", module);
        add_adapter(ad, w, module, c->lora_rank);
    }
    // the experts' grouped GEMMs take every expert's adapter of a tensor at once, and expert
    // parallelism gives each place the same share of them
    int e0 = u->ntensors - 3 * c->num_experts;
    for (int t = e0 + 3; c->num_experts && t < u->ntensors; t++) {
        int first = e0 + (t - e0) % 3, on = u->t[t].lora >= 0;  // expert 0's same tensor
        if (on != (u->t[first].lora >= 0))
            return err_set(err, errlen, "--lora_target_modules adapts %s but not %s: fsdpc adapts all of a block's experts "
                           "alike (name w1, w2 or w3 for every expert)", u->t[on ? t : first].name, u->t[on ? first : t].name);
    }
    for (int t = e0; c->num_experts && c->lora_dropout > 0.0f && t < u->ntensors; t++)
        if (u->t[t].lora >= 0)
            return err_set(err, errlen, "--lora_dropout with adapters on the experts (%s): their rows are regrouped by expert "
                           "and moved between ranks, so no dropout mask can follow a token's place as every layout's must; drop "
                           "--lora_dropout or the experts (w1, w2, w3) from --lora_target_modules", u->t[t].name);
    return 0;
}

int lora_plan(ModelPlan *plan, char *err, size_t errlen) {
    const ModelConfig *c = &plan->cfg;
    plan->lora0 = -1;
    if (c->lora_rank <= 0) return 0;
    int L = c->num_layers, nunits = plan->nunits, all, used[MAX_TARGETS] = {0};
    const char *spec = c->lora_target_modules[0] ? c->lora_target_modules : plan->family->lora_targets;
    char buf[sizeof c->lora_target_modules], *targets[MAX_TARGETS];
    int ntargets = parse_targets(spec, buf, sizeof buf, targets, &all, err, errlen);
    if (ntargets < 0) return -1;
    if (!all && !ntargets)
        return err_set(err, errlen, "--lora_target_modules names no module: give this %s model's (%s) or all-linear",
                       plan->family->display, lora_module_names(plan));
    UnitSpec *units = callocCheck((size_t)(nunits + L), sizeof(UnitSpec));
    memcpy(units, plan->units, (size_t)nunits * sizeof(UnitSpec));
    for (int l = 0; l < L; l++) {
        UnitSpec *ad = &units[nunits + l];
        *ad = (UnitSpec){.layer = l, .adapter = 1, .ep_index = -1};
        if (adapt_block(plan, &units[plan->block0 + l], ad, targets, ntargets, all, used, err, errlen)) {
            free(units);
            return -1;
        }
    }
    for (int i = 0; i < ntargets; i++)
        if (!used[i]) {
            free(units);
            return err_set(err, errlen, "--lora_target_modules: this %s model has no linear layer '%s' (its layers: %s, or "
                           "all-linear)", plan->family->display, targets[i], lora_module_names(plan));
        }
    if (L > 0 && units[nunits].ntensors == 0) {
        free(units);
        return err_set(err, errlen, "--lora_target_modules %s adapts no layer of this %s model (its layers: %s)", spec,
                       plan->family->display, lora_module_names(plan));
    }
    for (int u = 0; u < nunits; u++) units[u].frozen = 1;
    if (!plan->cfg.lora_target_modules[0])  // the family's default, resolved for checkpoints and exports
        snprintf(plan->cfg.lora_target_modules, sizeof plan->cfg.lora_target_modules, "%s", plan->family->lora_targets);
    free(plan->units);
    plan->units = units;
    plan->nunits = nunits + L;
    plan->lora0 = nunits;
    plan->lora_scale = c->use_rslora ? c->lora_alpha / sqrtf((float)c->lora_rank) : c->lora_alpha / (float)c->lora_rank;
    return 0;
}

const char *lora_check_layout(const ModelPlan *plan, int tp) {
    static char msg[400];
    if (plan->lora0 < 0 || tp < 2 || !(plan->cfg.lora_dropout > 0.0f)) return NULL;
    for (int u = 0; u < plan->lora0; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++) {
            const TensorSpec *w = &plan->units[u].t[t];
            char module[80];
            if (w->lora < 0 || w->tp_split != TP_COLS || !lora_linear_module(w, module, sizeof module)) continue;
            const char *last = strrchr(module, '.') ? strrchr(module, '.') + 1 : module;
            return err_text(msg, sizeof msg, "--lora_dropout with --tensor_parallel_degree %d on %s: its input is split by "
                            "columns over the tp group, whose dropout masks would differ from a tp-1 run's; drop --lora_dropout "
                            "or %s from --lora_target_modules", tp, last, last);
        }
    return NULL;
}

int lora_block_units(const ModelPlan *plan, int l, int *units) {
    int L = plan->cfg.num_layers;
    if (plan->lora0 < 0 || L < 1) return 0;
    int stride = (plan->nunits - plan->lora0) / L, u = plan->lora0 + l * stride;  // 1, or 1 + ep (model_plan_ep)
    units[0] = u;
    if (stride == 1) return 1;
    units[1] = u + 1 + plan->ep_rank;
    return 2;
}

size_t lora_trained_params(const ModelPlan *plan) {
    size_t n = 0;
    for (int u = 0; u < plan->nunits; u++)
        if (!plan->units[u].frozen)
            for (int t = 0; t < plan->units[u].ntensors; t++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                n += (size_t)ts->full[0] * (ts->ndim == 2 ? (size_t)ts->full[1] : 1);
            }
    return n;
}

// ---- activations ----

void lora_acts_alloc(Activations *a, const ModelPlan *plan) {
    if (plan->lora0 < 0) return;
    struct LoraActs *lo = callocCheck(1, sizeof *lo);
    a->lora = lo;
    lo->drop = plan->cfg.lora_dropout;
    const ModelConfig *c = &plan->cfg;
    size_t N = (size_t)a->B * a->T, r = (size_t)c->lora_rank, out = 0, in = 0, vec = 0, rows = N;
    for (int u = 0; u < plan->nunits; u++) {
        const UnitSpec *us = &plan->units[u];
        for (int t = 0; t < us->ntensors; t++) {
            const TensorSpec *ts = &us->t[t];
            if (us->frozen && ts->ndim == 1 && ts->numel > vec) vec = ts->numel;
            if (ts->lora < 0 || us->adapter) continue;
            if ((size_t)ts->shape[0] > out) out = (size_t)ts->shape[0];
            if ((size_t)ts->shape[1] > in && !expert_tensor(plan, us, t)) in = (size_t)ts->shape[1];  // dropout's: dense only
            // the experts' grouped rows (moe_acts_alloc's)
            size_t ex = a->ep > 1 ? moe_ep_rows(c, a->ep, N) : N * (size_t)c->num_experts_per_tok;
            if (expert_tensor(plan, us, t) && ex > rows) rows = ex;
        }
    }
    lo->z = model_acts_act(rows * r);
    lo->y = model_acts_buf(rows * out);
    if (a->kcache) return;  // generation: forward only, no dropout
    lo->dz = model_acts_act(rows * r);
    lo->sink = model_acts_buf(vec);
    if (!(lo->drop > 0.0f)) return;
    lo->x32 = model_acts_buf(N * in);
    lo->dx = model_acts_act(N * in);
    if (kern_acts_bf16()) lo->xd = model_acts_act(N * in);
}

void lora_acts_free(Activations *a) {
    struct LoraActs *lo = a->lora;
    if (!lo) return;
    void *bufs[] = {lo->z, lo->dz, lo->y, lo->x32, lo->xd, lo->dx, lo->sink};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) kern_free(bufs[i]);
    free(lo);
    a->lora = NULL;
}

void lora_bind(const ModelPlan *plan, Activations *a, int layer, const void *const *p, float *const *g) {
    struct LoraActs *lo = a->lora;
    if (!lo) return;
    int units[MAX_BLOCK_UNITS], n = model_block_units(plan, layer, units), ad[2] = {0}, na = lora_block_units(plan, layer, ad);
    lo->u = &plan->units[ad[0]];
    lo->p = p[n];
    lo->g = g ? g[n] : NULL;
    lo->ue = &plan->units[ad[na - 1]];
    lo->pe = p[n + na - 1];
    lo->ge = g ? g[n + na - 1] : NULL;
}

void lora_set_train(Activations *a, int train) {
    if (a->lora) a->lora->train = train;
}

float *model_grad(const Activations *a, float *g, const UnitSpec *u, int i) {
    if (g) return g + u->t[i].offset;
    return u->t[i].ndim == 2 || !a->lora ? NULL : a->lora->sink;
}

// ---- the adapted projections ----

// x with tensor t's adapter dropout (training with lora_dropout), else x itself: the mask is
// keyed by (layer, t) and each element's place in its sample, as every dropout (model.h)
static const void *adapter_input(Activations *a, int layer, int t, const void *x, int N, int IN) {
    struct LoraActs *lo = a->lora;
    if (!lo->train || !(lo->drop > 0.0f)) return x;
    size_t n = (size_t)N * IN;
    if (kern_acts_bf16()) kern_bf16_to_f32(lo->x32, x, n);
    else kern_copy(lo->x32, x, n);
    model_dropout_rows(a, lo->x32, 0, (size_t)N, IN, lo->drop, model_dropout_key(a, layer, DROP_LORA + t));
    if (!kern_acts_bf16()) return lo->x32;
    kern_f32_to_bf16(lo->xd, lo->x32, n);
    return lo->xd;
}

// From tensor *t on, the next adapted one before `end`, *col its first column in the stacked
// output; 0 when none is left
static int next_adapted(const UnitSpec *u, int end, int *t, int *col) {
    for (; *t < end; *col += u->t[*t].shape[0], (*t)++)
        if (u->t[*t].lora >= 0) return 1;
    return 0;
}

void model_proj_fwd(const ModelPlan *plan, Activations *a, int layer, const UnitSpec *u, int t0, int nt, const void *p,
                    void *out, KernDtype out_dt, const void *x, int N, int IN, int OUT) {
    kern_matmul_fwd(out, out_dt, x, kern_param_at(p, u->t[t0].offset), N, IN, OUT);
    struct LoraActs *lo = a->lora;
    if (!lo || !lo->p) return;
    int r = plan->cfg.lora_rank;
    for (int t = t0, col = 0; next_adapted(u, t0 + nt, &t, &col); col += u->t[t].shape[0], t++) {
        int ia = u->t[t].lora, rows = u->t[t].shape[0];
        const void *xd = adapter_input(a, layer, t, x, N, IN);
        kern_matmul_fwd(lo->z, KERN_ACT, xd, kern_param_at(lo->p, lo->u->t[ia].offset), N, IN, r);
        kern_matmul_fwd(lo->y, KERN_F32, lo->z, kern_param_at(lo->p, lo->u->t[ia + 1].offset), N, r, rows);
        kern_add_cols(out, out_dt, OUT, col, lo->y, N, rows, plan->lora_scale);
    }
}

void model_proj_bwd(const ModelPlan *plan, Activations *a, int layer, const UnitSpec *u, int t0, int nt, const void *p,
                    float *g, void *dinp, int accumulate, const void *dout, KernDtype dout_dt, const void *x, int N, int IN,
                    int OUT) {
    kern_matmul_bwd(dinp, model_grad(a, g, u, t0), dout, dout_dt, x, kern_param_at(p, u->t[t0].offset), N, IN, OUT, accumulate);
    struct LoraActs *lo = a->lora;
    if (!lo || !lo->p) return;
    int r = plan->cfg.lora_rank;
    for (int t = t0, col = 0; next_adapted(u, t0 + nt, &t, &col); col += u->t[t].shape[0], t++) {
        int ia = u->t[t].lora, rows = u->t[t].shape[0];
        const TensorSpec *A = &lo->u->t[ia], *B = &lo->u->t[ia + 1];
        const void *xd = adapter_input(a, layer, t, x, N, IN);
        kern_matmul_fwd(lo->z, KERN_ACT, xd, kern_param_at(lo->p, A->offset), N, IN, r);  // recomputed
        kern_get_cols(lo->y, dout, dout_dt, OUT, col, N, rows, plan->lora_scale);       // s dy
        // dz = s dy B; dB += s dy^T z
        kern_matmul_bwd(lo->dz, lo->g ? lo->g + B->offset : NULL, lo->y, KERN_F32, lo->z, kern_param_at(lo->p, B->offset), N,
                        r, rows, 0);
        float *gA = lo->g ? lo->g + A->offset : NULL;
        if (xd == x || !dinp) {  // no dropout: dx += dz A straight into the input gradient; dA += dz^T drop(x)
            kern_matmul_bwd(dinp, gA, lo->dz, KERN_ACT, xd, kern_param_at(lo->p, A->offset), N, IN, r, 1);
            continue;
        }
        // dropout: dz A through the same mask, then added
        size_t n = (size_t)N * IN;
        kern_matmul_bwd(lo->dx, gA, lo->dz, KERN_ACT, xd, kern_param_at(lo->p, A->offset), N, IN, r, 0);
        if (kern_acts_bf16()) kern_bf16_to_f32(lo->x32, lo->dx, n);
        else kern_copy(lo->x32, lo->dx, n);
        model_dropout_rows(a, lo->x32, 0, (size_t)N, IN, lo->drop, model_dropout_key(a, layer, DROP_LORA + t));
        kern_add_cols(dinp, KERN_ACT, IN, 0, lo->x32, N, IN, 1.0f);
    }
}

// The A and B of the nt-stacked tensors' k-th, for each of G experts from t0[g] (parameters,
// gradients or NULL), and the tensor's rows
static int grouped_factors(const struct LoraActs *lo, const UnitSpec *ue, const int *t0, int k, int G, const void **A,
                           const void **B, float **gA, float **gB) {
    for (int g = 0; g < G; g++) {
        int ia = ue->t[t0[g] + k].lora;
        const TensorSpec *a = &lo->ue->t[ia], *b = &lo->ue->t[ia + 1];
        A[g] = kern_param_at(lo->pe, a->offset), B[g] = kern_param_at(lo->pe, b->offset);
        gA[g] = lo->ge ? lo->ge + a->offset : NULL, gB[g] = lo->ge ? lo->ge + b->offset : NULL;
    }
    return ue->t[t0[0] + k].shape[0];
}

// the rows of a grouped product (cnt[g] each), or -1 when no expert adapters are bound
static int grouped_rows(const struct LoraActs *lo, const int *cnt, int G) {
    if (!lo || !lo->pe) return -1;
    int rows = 0;
    for (int g = 0; g < G; g++) rows += cnt[g];
    return rows;
}

void lora_grouped_fwd(const ModelPlan *plan, Activations *a, const UnitSpec *ue, const int *t0, int nt, int G, const int *cnt,
                      void *out, KernDtype out_dt, const void *x, int IN, int OUT) {
    struct LoraActs *lo = a->lora;
    int rows = grouped_rows(lo, cnt, G), r = plan->cfg.lora_rank;
    if (rows < 0) return;
    const void *A[CONFIG_MAX_EXPERTS], *B[CONFIG_MAX_EXPERTS];
    float *gA[CONFIG_MAX_EXPERTS], *gB[CONFIG_MAX_EXPERTS];
    for (int t = t0[0], col = 0; next_adapted(ue, t0[0] + nt, &t, &col); col += ue->t[t].shape[0], t++) {
        int n = grouped_factors(lo, ue, t0, t - t0[0], G, A, B, gA, gB);
        kern_matmul_grouped_fwd(lo->z, KERN_ACT, x, A, cnt, G, IN, r);
        kern_matmul_grouped_fwd(lo->y, KERN_F32, lo->z, B, cnt, G, r, n);
        kern_add_cols(out, out_dt, OUT, col, lo->y, rows, n, plan->lora_scale);
    }
}

void lora_grouped_bwd(const ModelPlan *plan, Activations *a, const UnitSpec *ue, const int *t0, int nt, int G, const int *cnt,
                      void *dinp, const void *dout, KernDtype dout_dt, const void *x, int IN, int OUT) {
    struct LoraActs *lo = a->lora;
    int rows = grouped_rows(lo, cnt, G), r = plan->cfg.lora_rank;
    if (rows < 0) return;
    const void *A[CONFIG_MAX_EXPERTS], *B[CONFIG_MAX_EXPERTS];
    float *gA[CONFIG_MAX_EXPERTS], *gB[CONFIG_MAX_EXPERTS];
    for (int t = t0[0], col = 0; next_adapted(ue, t0[0] + nt, &t, &col); col += ue->t[t].shape[0], t++) {
        int n = grouped_factors(lo, ue, t0, t - t0[0], G, A, B, gA, gB);
        kern_matmul_grouped_fwd(lo->z, KERN_ACT, x, A, cnt, G, IN, r);  // recomputed
        kern_get_cols(lo->y, dout, dout_dt, OUT, col, rows, n, plan->lora_scale);  // s dy
        kern_matmul_grouped_bwd(lo->dz, gB, lo->y, KERN_F32, lo->z, B, cnt, G, r, n, 0);  // dz = s dy B; dB += s dy^T z
        kern_matmul_grouped_bwd(dinp, gA, lo->dz, KERN_ACT, x, A, cnt, G, IN, r, 1);     // dx += dz A; dA += dz^T x
    }
}
