// model: what every family shares (plans, init, activation buffers,
// dispatch to the family's forward and backward).
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/checked.h"
#include "../base/err.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "../base/rng.h"
#include "family.h"
#include "lora.h"
#include "moe.h"
#include "offload.h"

int model_plan_build(ModelPlan *plan, const ModelConfig *cfg, char *err, size_t errlen) {
    memset(plan, 0, sizeof *plan);
    plan->cfg = *cfg;
    plan->family = family_find(cfg->model_type);
    if (!plan->family) err_fatal("unknown model type '%s' (known: %s)", cfg->model_type, family_names("|", 0));
    // before the units are made: each block holds at least one (D, D) projection
    uint64_t n = 0, bytes, D = (uint64_t)cfg->hidden_width;
    CheckedFactor least[] = {{"--num_layers", (uint64_t)cfg->num_layers}, {"--hidden_width^2 (one attention projection)", D * D},
                             {NULL, 16}};
    char why[400];
    if (!checked_product(&bytes, CHECKED_MAX_BYTES, "bytes of fp32 weights, gradients and AdamW moments at least", least, 3, why, sizeof why))
        return err_set(err, errlen, "the model (D=%d L=%d) is too large to count: %s; lower --num_layers or --hidden_width",
                       cfg->hidden_width, cfg->num_layers, why);
    plan->family->plan_build(plan);
    model_plan_ep(plan, 1, 0, NULL);
    if (lora_plan(plan, err, errlen)) return -1;
    if (cfg->quantize_base == MODEL_QUANT_NF4 || cfg->base_bf16) model_plan_quantize(plan);
    for (int u = 0; u < plan->nunits; u++)
        if (!checked_add(n, plan->units[u].numel, &n)) n = UINT64_MAX;  // reported below as more than 2^64
    // every later size of the model's state is at most its weights, gradients and AdamW moments
    CheckedFactor f[] = {{"parameters", n}, {NULL, 16}};
    if (n == UINT64_MAX || !checked_product(&bytes, CHECKED_MAX_BYTES, "bytes of fp32 weights, gradients and AdamW moments", f, 2, why, sizeof why))
        return err_set(err, errlen, "the model (D=%d L=%d H=%d F=%d V=%d T=%d) is too large to count: %s; lower --num_layers, "
                       "--hidden_width, --intermediate_size or --vocab_size", cfg->hidden_width, cfg->num_layers, cfg->num_heads,
                       cfg->intermediate_size, cfg->vocab_size, cfg->max_context_width,
                       n == UINT64_MAX ? "more than 2^64 parameters" : why);
    plan->num_params = n;
    return 0;
}

void model_plan_free(ModelPlan *plan) {
    free(plan->units);
    plan->units = NULL;
}

TensorSpec *model_add_tensor(UnitSpec *u, const char *name, int rows, int cols, InitKind init, float init_scale,
                             int decay) {
    if (u->ntensors == MAX_UNIT_TENSORS) err_fatal("unit holds more than %d tensors", MAX_UNIT_TENSORS);
    TensorSpec *t = &u->t[u->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->numel = (size_t)rows * (cols ? (size_t)cols : 1);  // two ints: below 2^62
    t->offset = u->numel;
    t->decay = decay;
    t->init = init;
    t->init_scale = init_scale;
    t->tp_split = TP_WHOLE;
    t->tp_parts = 1;
    t->full[0] = rows;
    t->full[1] = cols;
    t->lora = -1;
    t->tp_partial = 0;
    uint64_t total;
    // a unit too large to count ends here; model_plan_build names the model when the sum is too large
    u->numel = checked_add(u->numel, t->numel, &total) ? total : UINT64_MAX;
    return t;
}

void model_tensor_split(TensorSpec *t, TpSplit split, int parts) {
    if (split == TP_COLS && t->ndim != 2) err_fatal("%s: a 1-D tensor splits by rows only", t->name);
    t->tp_split = split;
    t->tp_parts = parts;
}

void model_plan_tp(ModelPlan *plan, int tp, int rank, CommGroup *group, int sequence_parallel) {
    plan->tp = tp;
    plan->tp_rank = rank;
    plan->tp_group = group;
    plan->sp = tp > 1 && sequence_parallel;
    for (int u = 0; u < plan->nunits; u++) {
        UnitSpec *us = &plan->units[u];
        us->numel = 0;
        for (int i = 0; i < us->ntensors; i++) {
            TensorSpec *t = &us->t[i];
            int d = t->tp_split == TP_COLS ? 1 : 0;
            t->shape[0] = t->full[0];
            t->shape[1] = t->full[1];
            if (t->tp_split != TP_WHOLE) {
                if (t->full[d] % (t->tp_parts * tp)) err_fatal("%s: dimension %d (%d) does not split in %d parts over %d tp ranks", t->name, d, t->full[d], t->tp_parts, tp);
                t->shape[d] = t->full[d] / tp;
            }
            t->numel = (size_t)t->shape[0] * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
            t->offset = us->numel;
            us->numel += t->numel;
        }
        int nf4 = 0;
        for (int i = 0; i < us->ntensors; i++) nf4 |= us->t[i].nf4;
        us->stored_whole = tp > 1 && nf4;
        for (int i = 0; i < us->ntensors; i++) us->t[i].stored_whole = us->stored_whole;
    }
    model_plan_pack(plan);
}

void model_plan_quantize(ModelPlan *plan) {
    int nf4 = plan->cfg.quantize_base == MODEL_QUANT_NF4;
    for (int u = 0; u < plan->nunits; u++) {
        UnitSpec *us = &plan->units[u];
        if (!us->frozen) continue;
        for (int i = 0; i < us->ntensors; i++) {
            TensorSpec *t = &us->t[i];
            t->nf4 = nf4 && us->layer >= 0 && t->ndim == 2;
            t->bf16 = plan->cfg.base_bf16 && !t->nf4;
        }
    }
    model_plan_pack(plan);
}

size_t model_piece_bytes(const TensorSpec *t) {
    size_t n = t->stored_whole ? model_whole_numel(t) : t->numel;
    return t->nf4 ? kern_nf4_bytes(n) : n * (t->bf16 ? sizeof(uint16_t) : sizeof(float));
}

void model_plan_pack(ModelPlan *plan) {
    for (int u = 0; u < plan->nunits; u++) {
        UnitSpec *us = &plan->units[u];
        int any = 0;
        for (int i = 0; i < us->ntensors; i++) any |= us->t[i].nf4 | us->t[i].bf16;
        us->packed = 0;
        for (int i = 0; any && i < us->ntensors; i++) {
            TensorSpec *t = &us->t[i];
            t->pack_off = us->packed;
            us->packed += (model_piece_bytes(t) + 3) / 4 * 4;
        }
    }
}

// Block l's adapters of experts (LoRA, ep 1): the first one's index in its adapter unit, after the
// dense layers' (lora_plan adds them in the block's order, the experts last); its tensor count
// when the experts have none
static int expert_adapters0(const ModelPlan *plan, int l) {
    const UnitSpec *b = &plan->units[plan->block0 + l];
    for (int i = b->ntensors - 3 * plan->cfg.num_experts; i < b->ntensors; i++)
        if (b->t[i].lora >= 0) return b->t[i].lora;
    return plan->units[plan->lora0 + l].ntensors;
}

// dst: `count` tensors of src from `first`, laid out anew; a tensor's adapter index (lora) less `shift`
static void unit_slice(UnitSpec *dst, const UnitSpec *src, int first, int count, int shift) {
    dst->ntensors = count;
    dst->numel = 0;
    for (int i = 0; i < count; i++) {
        dst->t[i] = src->t[first + i];
        dst->t[i].offset = dst->numel;
        if (dst->t[i].lora >= 0) dst->t[i].lora -= shift;
        dst->numel += dst->t[i].numel;
    }
}

void model_plan_ep(ModelPlan *plan, int ep, int rank, CommGroup *group) {
    plan->ep = ep, plan->ep_rank = rank, plan->ep_group = group, plan->block_stride = 1;
    for (int u = 0; u < plan->nunits; u++) plan->units[u].ep_index = -1;
    int E = plan->cfg.num_experts, L = plan->cfg.num_layers, b0 = plan->block0, lora0 = plan->lora0;
    if (ep <= 1 || !E) return;
    // adapted experts: each block's adapter unit splits as the block does, its experts' adapters
    // (the same count for every expert, lora_plan) by place
    int split = 0;
    for (int l = 0; lora0 >= 0 && l < L; l++) split |= expert_adapters0(plan, l) < plan->units[lora0 + l].ntensors;
    int stride = 1 + ep, n = plan->nunits + L * ep * (1 + split), nt = 3 * E / ep;  // an expert unit's tensors
    UnitSpec *units = callocCheck((size_t)n, sizeof(UnitSpec));
    for (int u = 0, v = 0; u < plan->nunits; u++) {
        const UnitSpec *old = &plan->units[u];
        int block = u >= b0 && u < b0 + L, adapters = split && lora0 >= 0 && u >= lora0;
        if (!block && !adapters) {  // the embedding and the head, and unsplit adapter units
            units[v++] = *old;
            continue;
        }
        // the block's experts' first adapter, and a place's count of them
        int a0 = lora0 >= 0 ? expert_adapters0(plan, old->layer) : 0;
        int pa = lora0 >= 0 ? (plan->units[lora0 + old->layer].ntensors - a0) / ep : 0;
        int nd = block ? old->ntensors - 3 * E : a0, per = block ? nt : pa;
        UnitSpec *dense = &units[v++];
        *dense = *old;
        unit_slice(dense, old, 0, nd, 0);
        for (int j = 0; j < ep; j++, v++) {
            UnitSpec *x = &units[v];
            *x = (UnitSpec){.layer = old->layer, .ep_index = j, .frozen = old->frozen, .adapter = old->adapter,
                            .stored_whole = old->stored_whole};
            // an expert's adapter index: in its place's adapter unit
            unit_slice(x, old, nd + j * per, per, block ? a0 + j * pa : 0);
        }
    }
    if (plan->head_unit >= b0 + L) plan->head_unit += L * ep;
    if (plan->lora0 >= b0 + L) plan->lora0 += L * ep;
    free(plan->units);
    plan->units = units;
    plan->nunits = n;
    plan->block_stride = stride;
    model_plan_pack(plan);  // the dense and expert units' own layouts
}

int model_block_units(const ModelPlan *plan, int l, int *units) {
    int stride = plan->block_stride > 0 ? plan->block_stride : 1, u = plan->block0 + l * stride;
    units[0] = u;
    if (stride == 1) return 1;
    units[1] = u + 1 + plan->ep_rank;
    return 2;
}

int model_block_gather(const ModelPlan *plan, int l, int *units) {
    int n = model_block_units(plan, l, units);
    return n + lora_block_units(plan, l, units + n);
}

static void tp_allreduce_act(const ModelPlan *plan, void *x, size_t n) {
    if (kern_acts_bf16()) comm_wait(comm_allreduce_bf16_start(plan->tp_group, x, n));
    else comm_wait(comm_allreduce_start(plan->tp_group, x, n));
}

// ---- the residual stream's rows under sequence parallelism ----

int model_rows(const Activations *a, int T) { return a->B * T / a->sp; }

size_t model_row0(const Activations *a, int T) { return (size_t)a->sp_rank * (size_t)model_rows(a, T); }

const void *model_sp_gather(const ModelPlan *plan, Activations *a, const void *x, int T) {
    if (a->sp < 2) return x;
    size_t n = (size_t)model_rows(a, T) * plan->cfg.hidden_width;
    if (kern_acts_bf16()) comm_wait(comm_all_gather_bf16_start(plan->tp_group, x, a->sp_xg, n));
    else comm_wait(comm_all_gather_start(plan->tp_group, x, a->sp_xg, n));
    return a->sp_xg;
}

const float *model_sp_gather_f32(const ModelPlan *plan, Activations *a, const float *dx, int T) {
    if (a->sp < 2) return dx;
    comm_wait(comm_all_gather_start(plan->tp_group, dx, a->sp_full, (size_t)model_rows(a, T) * plan->cfg.hidden_width));
    return a->sp_full;
}

float *model_rowpar_out(Activations *a, float *dst) { return a->sp > 1 ? a->sp_full : dst; }

void model_rowpar_sum(const ModelPlan *plan, Activations *a, float *dst, int T) {
    size_t D = plan->cfg.hidden_width;
    if (a->sp > 1) comm_wait(comm_reduce_scatter_start(plan->tp_group, a->sp_full, dst, (size_t)model_rows(a, T) * D));
    else if (plan->tp > 1) comm_wait(comm_allreduce_start(plan->tp_group, dst, (size_t)a->B * T * D));
}

const void *model_colpar_dx(const ModelPlan *plan, Activations *a, int T) {
    size_t D = plan->cfg.hidden_width, n = (size_t)model_rows(a, T) * D;
    if (a->sp > 1) {
        if (kern_acts_bf16()) comm_wait(comm_reduce_scatter_bf16_start(plan->tp_group, a->dxn, a->sp_dxn, n));
        else comm_wait(comm_reduce_scatter_start(plan->tp_group, a->dxn, a->sp_dxn, n));
        return a->sp_dxn;
    }
    if (plan->tp > 1) tp_allreduce_act(plan, a->dxn, (size_t)a->B * T * D);
    return a->dxn;
}

void model_embed_tokens_fwd(const ModelPlan *plan, Activations *a, const void *wte, float *out, int T) {
    int N = a->B * T, D = plan->cfg.hidden_width;
    if (plan->tp < 2) {
        kern_embedding_fwd(out, a->tokens, wte, N, D);
        return;
    }
    // this rank's rows of the vocabulary, the others' zero: summed over the group
    float *part = model_rowpar_out(a, out);
    kern_embedding_part_fwd(part, a->tokens, wte, N, D, plan->tp_rank * a->V, a->V);
    model_rowpar_sum(plan, a, out, T);
}

void model_embed_tokens_bwd(const ModelPlan *plan, Activations *a, float *gwte, const float *dx) {
    int N = a->B * a->T, D = plan->cfg.hidden_width;
    dx = model_sp_gather_f32(plan, a, dx, a->T);
    if (plan->tp > 1) kern_embedding_part_bwd(gwte, dx, a->tokens, N, D, plan->tp_rank * a->V, a->V);
    else kern_embedding_bwd(gwte, dx, a->tokens, N, D);
}

void model_tp_crossentropy(const ModelPlan *plan, Activations *a, int N, float dscale) {
    if (plan->tp < 2) {
        kern_crossentropy_fwd_bwd(a->logits, a->targets, N, a->V, dscale, a->loss);
        return;
    }
    int v0 = plan->tp_rank * a->V;
    kern_xent_part_max(a->logits, N, a->V, a->xent_max);
    comm_wait(comm_allreduce_max_start(plan->tp_group, a->xent_max, (size_t)N));
    kern_xent_part_sums(a->logits, a->targets, N, a->V, v0, a->xent_max, a->xent_sums);
    comm_wait(comm_allreduce_start(plan->tp_group, a->xent_sums, 2 * (size_t)N));
    kern_xent_part_finish(a->logits, a->targets, N, a->V, v0, a->xent_max, a->xent_sums, dscale, plan->tp_rank == 0, a->loss);
}

KernSegs model_tp_segments(const TensorSpec *t, int tp, int rank) {
    size_t C = t->ndim == 2 ? (size_t)t->full[1] : 1, P = (size_t)t->tp_parts, r = (size_t)rank;
    if (tp < 2 || t->tp_split == TP_WHOLE) return (KernSegs){1, t->numel, t->numel, 0};
    if (t->tp_split == TP_ROWS) {  // each block of rows: the rank's rows of it
        size_t lp = (size_t)t->shape[0] / P;
        return (KernSegs){P, lp * C, (size_t)t->full[0] / P * C, r * lp * C};
    }
    size_t lb = (size_t)t->shape[1] / P;  // TP_COLS: in every row, each block's columns of the rank
    return (KernSegs){(size_t)t->full[0] * P, lb, C / P, r * lb};
}

size_t model_tp_run(const TensorSpec *t, int tp, int rank, size_t local, size_t *full) {
    KernSegs g = model_tp_segments(t, tp, rank);
    size_t k = local % g.len, run = g.len - k, left = t->numel - local;
    *full = local / g.len * g.stride + g.off + k;
    return run < left ? run : left;
}

void model_init_part(const TensorSpec *t, int tp, int rank, uint64_t seed, float std, size_t begin, size_t count, float *dst) {
    for (size_t done = 0; done < count;) {
        size_t full, n = model_tp_run(t, tp, rank, begin + done, &full);
        if (n > count - done) n = count - done;
        model_init_range(t, seed, std, full, n, dst + done);
        done += n;
    }
}

int model_find_tensor(const ModelPlan *plan, const char *name, int *unit, int *tensor) {
    for (int u = 0; u < plan->nunits; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++)
            if (!strcmp(plan->units[u].t[t].name, name)) return *unit = u, *tensor = t, 1;
    return 0;
}

// Each value is a function of the element's index alone, so the host threads split the range
// freely and the values do not depend on their number (a 1B model's start-up took ~50 s on one).
void model_init_range(const TensorSpec *t, uint64_t seed, float std, size_t begin, size_t count, float *dst) {
    enum { PAR_MIN = 1 << 15 };
    if (t->init == INIT_UNIFORM) {  // keyed as below
        uint64_t h = 1469598103934665603ULL;
        for (const char *s = t->name; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
        uint64_t key = rng_splitmix64(seed ^ rng_splitmix64(h));
        double b = t->init_scale;
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
        for (size_t i = 0; i < count; i++) {
            uint64_t r = rng_splitmix64(key ^ rng_splitmix64(begin + i));
            dst[i] = (float)(b * (2.0 * (((double)(r >> 11) + 0.5) / 9007199254740992.0) - 1.0));
        }
        return;
    }
    if (t->init != INIT_NORMAL) {
        float v = t->init == INIT_ONES ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
        for (size_t i = 0; i < count; i++) dst[i] = v;
        return;
    }
    double sd = (double)std * t->init_scale;
    uint64_t h = 1469598103934665603ULL;  // FNV-1a of the name keys the stream
    for (const char *s = t->name; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    uint64_t key = rng_splitmix64(seed ^ rng_splitmix64(h));
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rng_splitmix64(key ^ rng_splitmix64(begin + i));
        double u1 = ((double)(r >> 32) + 0.5) / 4294967296.0, u2 = ((double)(r & 0xffffffffu) + 0.5) / 4294967296.0;
        dst[i] = (float)(sd * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));  // Box-Muller
    }
}

// ---- activations ----

// model_acts_bytes runs the family's layout with acts_count set, which only adds up the sizes
// (acts_host_count: the pinned host memory of offloaded entries)
static size_t *acts_count, acts_host_count;

static void *acts_bytes(size_t bytes) {
    if (!acts_count) return kern_alloc(bytes, KERN_MEM_ACTIVATIONS);
    *acts_count += bytes;
    return NULL;
}

float *model_acts_buf(size_t n) { return acts_bytes(n * sizeof(float)); }

void *model_acts_act(size_t n) { return acts_bytes(n * kern_act_bytes()); }

void model_acts_alloc(Activations *a, const ModelPlan *plan, int B, int T, int with_kv_cache, int ckpt_every, int horizon) {
    memset(a, 0, sizeof *a);
    // generation (the KV cache) keeps whole sequences; training and evaluation split them over a cp group
    a->cp = plan->cp > 1 && !with_kv_cache ? plan->cp : 1;
    a->cp_rank = a->cp > 1 ? plan->cp_rank : 0;
    a->B = B;
    a->T = T / a->cp;
    a->V = plan->cfg.vocab_size / (plan->tp > 1 ? plan->tp : 1);
    int nl = plan->cfg.num_layers, nslots = 0, shared = -1;
    a->slot = callocCheck(nl, sizeof(int));
    a->recompute = callocCheck(nl, sizeof(int));
    for (int l = 0; l < nl; l++) {
        a->recompute[l] = ckpt_every > 0 && l % ckpt_every == 0;
        if (!a->recompute[l]) a->slot[l] = nslots++;
        else a->slot[l] = shared >= 0 ? shared : (shared = nslots++);
    }
    if (!with_kv_cache) a->offload = offload_new(a->recompute, nl, horizon);
    size_t N = (size_t)B * T;
    // token ids are int32: a float buffer of the same element count holds them
    a->tokens = (int32_t *)model_acts_buf(N);
    a->targets = (int32_t *)model_acts_buf(N);
    a->kstart = (int32_t *)model_acts_buf(N);
    a->pos = (int32_t *)model_acts_buf(N);
    a->loss = (double *)model_acts_buf(2);  // one double
    a->tp = plan->tp > 1 ? plan->tp : 1;
    // generation (the KV cache: one row, a few tokens a step) keeps every row on every tp rank
    a->sp = plan->sp && !with_kv_cache ? a->tp : 1;
    a->sp_rank = a->sp > 1 ? plan->tp_rank : 0;
    a->ep = plan->ep > 1 && plan->block_stride > 1 ? plan->ep : 1;  // generation computes every expert itself
    plan->family->acts_alloc(a, &plan->cfg, (size_t)nslots, with_kv_cache);
    lora_acts_alloc(a, plan);
    model_cp_alloc(a, (size_t)(plan->cfg.num_key_value_heads / a->tp) * (size_t)config_head_dim(&plan->cfg));
    if (a->tp > 1) {  // the vocabulary-parallel cross-entropy's row statistics
        a->xent_max = model_acts_buf(N);
        a->xent_sums = model_acts_buf(2 * N);
    }
    if (a->sp > 1) {  // the whole batch's rows, around the tp collectives
        size_t D = plan->cfg.hidden_width;
        a->sp_full = model_acts_buf(N * D);
        a->sp_xg = model_acts_act(N * D);
        a->sp_dxn = model_acts_act(N / a->sp * D);
    }
}

void model_res_alloc(Activations *a, int L, size_t N, size_t D) {
    struct ActOffload *o = a->offload;
    N /= (size_t)a->sp;  // the rank's rows of the batch's N
    a->res = model_acts_act((size_t)(o ? offload_device_entries(o) : L + 1) * N * D);
    if (o) {
        o->D = D;
        o->host_bytes = (size_t)offload_host_entries(o) * N * D * kern_act_bytes();
        if (acts_count) acts_host_count += o->host_bytes;
        else o->host = kern_alloc_host(o->host_bytes, KERN_MEM_ACTIVATIONS, 1);
    }
    if (!kern_acts_bf16()) return;
    a->res_in = model_acts_buf(N * D);
    a->res_out = model_acts_buf(N * D);
}

// entry l's place: its own under offloading (offload.c's device_entry), else the l-th
static size_t res_offset(const Activations *a, int l, int D) {
    return (size_t)(a->offload ? a->offload->slot[l] : l) * model_res_numel(a, D, a->T);
}

float *model_res_in(Activations *a, int l, int D, int T) {
    if (!a->res_in) return (float *)a->res + res_offset(a, l, D);
    kern_bf16_to_f32(a->res_in, kern_act_at(a->res, res_offset(a, l, D)), model_res_numel(a, D, T));
    return a->res_in;
}

float *model_res_out(Activations *a, int l, int D) { return a->res_out ? a->res_out : (float *)a->res + res_offset(a, l, D); }

void model_res_store(Activations *a, int l, int D, int T) {
    if (a->res_out) kern_f32_to_bf16(kern_act_at(a->res, res_offset(a, l, D)), a->res_out, model_res_numel(a, D, T));
}

size_t model_res_numel(const Activations *a, int D, int T) { return (size_t)model_rows(a, T) * (size_t)D; }

float *model_res_f32(Activations *a, int l, int D) { return a->res_out ? NULL : (float *)a->res + res_offset(a, l, D); }

// the products' scratch the kernels keep (kern_matmul_scratch_bytes) for the layers of a: rows of
// the whole batch (sequence parallelism gathers them first), the widest row a product reads or
// writes and the widest it reads (this tp rank's share of the split ones)
static size_t acts_matmul_scratch(const ModelPlan *plan, const Activations *a) {
    const ModelConfig *c = &plan->cfg;
    const size_t tp = (size_t)a->tp, D = (size_t)c->hidden_width, hd = (size_t)config_head_dim(c);
    const size_t qkv = ((size_t)c->num_heads + 2 * (size_t)c->num_key_value_heads) * hd / tp;
    const size_t F = (size_t)c->intermediate_size / tp, attn = (size_t)c->num_heads * hd / tp;
    size_t in = D > attn ? D : attn, w = qkv > 2 * F ? qkv : 2 * F;
    in = in > F ? in : F;
    w = w > (size_t)a->V ? w : (size_t)a->V;
    return kern_matmul_scratch_bytes((size_t)a->B * (size_t)a->T, w > in ? w : in, in, a->T, (int)hd);
}

size_t model_acts_bytes(const ModelPlan *plan, int B, int T, int with_kv_cache, int ckpt_every, int horizon,
                        size_t *host_bytes) {
    size_t bytes = 0;
    Activations a;
    acts_count = &bytes;
    acts_host_count = 0;
    model_acts_alloc(&a, plan, B, T, with_kv_cache, ckpt_every, horizon);
    acts_count = NULL;
    bytes += acts_matmul_scratch(plan, &a) + (with_kv_cache ? 0 : model_cp_scratch(plan, B, T));
    if (host_bytes) *host_bytes = acts_host_count;
    free(a.slot);
    free(a.recompute);
    offload_free(a.offload);
    lora_acts_free(&a);
    return bytes;
}

const char *model_check_sizes(const ModelPlan *plan, int B, int T) {
    static char msg[700];
    const ModelConfig *c = &plan->cfg;
    uint64_t D = (uint64_t)c->hidden_width, L = (uint64_t)c->num_layers, H = (uint64_t)c->num_heads, t = (uint64_t)T, n;
    uint64_t qkv = (H + 2 * (uint64_t)c->num_key_value_heads) * (uint64_t)config_head_dim(c), w = D;
    // a mixture of experts' grouped rows: K per token
    uint64_t per_tok = c->num_experts ? (uint64_t)c->num_experts_per_tok : 1;
    const uint64_t widths[] = {qkv, 2 * per_tok * (uint64_t)c->intermediate_size, per_tok * D, (uint64_t)c->vocab_size};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) w = widths[i] > w ? widths[i] : w;
    // each activation buffer holds at most (layers + 1) x tokens x the widest row (D, the fused
    // q/k/v or gate/up, the vocabulary); a CPU run also keeps each layer's attention probabilities
    // and gives each thread a (T, 2T) scratch
    CheckedFactor acts[] = {{"(--num_layers + 1)", L + 1}, {"--batch_size", (uint64_t)B}, {"--max_context_width", t},
                            {"the widest activation row", w}, {NULL, 4}};
    CheckedFactor probs[] = {{"--num_layers", L}, {"--batch_size", (uint64_t)B}, {"--num_heads", H}, {"--max_context_width", t},
                             {"--max_context_width", t}, {NULL, 4}};
    CheckedFactor scratch[] = {{"threads", (uint64_t)kern_num_threads()}, {"--max_context_width", t},
                               {"2 x --max_context_width", 2 * t}, {NULL, 4}};
    char why[500];
    int cpu = !kern_on_gpu();
    if (checked_product(&n, CHECKED_MAX_BYTES, "bytes of activations", acts, 5, why, sizeof why) &&
        (!cpu || checked_product(&n, CHECKED_MAX_BYTES, "bytes of attention probabilities", probs, 6, why, sizeof why)) &&
        (!cpu || checked_product(&n, CHECKED_MAX_BYTES, "bytes of attention scratch", scratch, 4, why, sizeof why)))
        return NULL;
    return err_text(msg, sizeof msg, "%s, too large to count: lower --batch_size, --max_context_width or the model's sizes", why);
}

// every device buffer of Activations; the static assert below fails when a pointer field is
// added to the struct but not here
#define ACT_BUFFERS(X)                                                                                             \
    X(tokens) X(targets) X(kstart) X(pos) X(res) X(res_in) X(res_out) X(xn1) X(mean1) X(rstd1) X(qkv) X(q) X(k) X(v) X(attn_saved) X(att) X(xmid)      \
    X(xn2) X(mean2) X(rstd2) X(up) X(h) X(xf) X(meanf) X(rstdf) X(logits) X(loss) X(dres) X(dxn) X(dbranch) X(dq) \
    X(dk) X(dv) X(datt) X(dup) X(dh) X(attn_scratch) X(rope_cos) X(rope_sin) X(kcache) X(vcache) X(xent_max) X(xent_sums) \
    X(sp_full) X(sp_xg) X(sp_dxn) X(rjit) X(rlogits) X(rprobs) X(ridx) X(rwts) X(rsrc) X(rslot) X(xe) X(gue) X(he) X(ye) X(dye)  \
    X(drwts) X(drlogits) X(rgaux) X(dhe) X(dgue) X(dxe) X(ep_act) X(ep_f32) X(ep_f32b) X(ep_ones) X(ep_perm) X(ep_inv) X(cp_ring) X(cp_dpos)
#define ACT_COUNT(f) +1
_Static_assert(sizeof(Activations) == 10 * sizeof(int) /* B, T, V, tp, ep, sp, sp_rank, cp, cp_rank, docs */ + (0 ACT_BUFFERS(ACT_COUNT)) * sizeof(void *) +
                                          3 * sizeof(int *) /* slot, recompute, cp_pos */ + sizeof(size_t) + 8 + 2 * sizeof(uint64_t) +
                                          sizeof(struct ActOffload *) + sizeof(struct MoeState *) + sizeof(struct LoraActs *),
               "Activations gained a field: add its buffer to ACT_BUFFERS (and this count)");

void model_acts_free(Activations *a) {
#define ACT_FREE(f)                      \
    if (a->f) kern_free((void *)a->f); \
    a->f = NULL;
    ACT_BUFFERS(ACT_FREE)
#undef ACT_FREE
    free(a->slot);
    free(a->recompute);
    free(a->cp_pos);
    a->slot = a->recompute = NULL;
    a->cp_pos = NULL;
    offload_free(a->offload);
    a->offload = NULL;
    moe_state_free(a->moe);
    a->moe = NULL;
    lora_acts_free(a);
}

// ---- dispatch ----

void model_load_batch(Activations *a, const int32_t *inp, const int32_t *tgt, const int32_t *kstart, int ntok, int batch) {
    int32_t *mine = NULL;
    if (a->cp > 1) {  // this rank's chunks of each sequence: inputs, targets and document starts (positions in it)
        const int T = a->T, rows = ntok / (T * a->cp);
        const size_t n = (size_t)rows * T;
        mine = mallocCheck(3 * sizeof(int32_t) * n);
        for (int b = 0; b < rows; b++)
            for (int t = 0; t < T; t++) {
                size_t from = (size_t)b * T * a->cp + (size_t)a->cp_pos[(size_t)a->cp_rank * T + t], to = (size_t)b * T + t;
                mine[to] = inp[from];
                mine[n + to] = tgt ? tgt[from] : 0;
                mine[2 * n + to] = kstart ? kstart[from] : 0;
            }
        ntok = (int)n;
        inp = mine;
        tgt = tgt ? mine + n : NULL;
        kstart = kstart ? mine + 2 * n : NULL;
    }
    kern_upload(a->tokens, inp, (size_t)ntok * sizeof(int32_t));
    a->docs = kstart != NULL;
    if (model_positions(a)) {  // positions restart per document; sequence- and context-parallel ranks' rows look theirs up
        int32_t *pos = mallocCheck((size_t)ntok * sizeof(int32_t));
        for (int n = 0; n < ntok; n++)
            pos[n] = (a->cp > 1 ? a->cp_pos[(size_t)a->cp_rank * a->T + n % a->T] : n % a->T) - (kstart ? kstart[n] : 0);
        if (kstart) kern_upload(a->kstart, kstart, (size_t)ntok * sizeof(int32_t));
        if (kstart) kern_documents_loaded(a->kstart, kstart, ntok, a->T);
        kern_upload(a->pos, pos, (size_t)ntok * sizeof(int32_t));
        free(pos);
    }
    if (tgt) kern_upload(a->targets, tgt, (size_t)ntok * sizeof(int32_t));
    if (a->moe) moe_batch_loaded(a, tgt, ntok);
    // before any kernel reads through an id; places are numbered across the step's batches
    kern_tokens_check(a->tokens, tgt ? a->targets : NULL, ntok, a->V * a->tp, (long long)batch * 2 * ntok);  // the whole vocabulary
    free(mine);
}

void model_set_dropout(Activations *a, float p, uint64_t seed, uint64_t sample0, int train) {
    lora_set_train(a, train);
    a->dropout = p;
    a->drop_seed = seed;
    a->sample0 = sample0;
}

uint64_t model_dropout_key(const Activations *a, int layer, int site) {
    return rng_splitmix64(a->drop_seed ^ rng_splitmix64(((uint64_t)(layer + 1) << 8) | (uint64_t)site));
}

void model_embed_fwd(const ModelPlan *plan, const void *p, Activations *a, int T, int pos0) {
    plan->family->embed_fwd(plan, p, a, T, pos0);
}
void model_block_fwd(const ModelPlan *plan, int layer, const void *const *p, Activations *a, int T, int pos0) {
    lora_bind(plan, a, layer, p, NULL);
    plan->family->block_fwd(plan, layer, p, a, T, pos0);
}
void model_head_fwd_bwd(const ModelPlan *plan, const void *p, float *g, Activations *a, int with_targets, int T,
                        float dscale) {
    plan->family->head_fwd_bwd(plan, p, g, a, with_targets, T, dscale);
}

void model_layernorm_head(const ModelPlan *plan, const UnitSpec *u, int lnw, int lnb, int head, const void *p, float *g,
                          Activations *a, int with_targets, int T, float dscale) {
    const ModelConfig *c = &plan->cfg;
    int N = a->B * T, R = model_rows(a, T), D = c->hidden_width, V = a->V;  // V: this tp rank's share of the vocabulary
    const void *w_ln = kern_param_at(p, u->t[lnw].offset), *b_ln = kern_param_at(p, u->t[lnb].offset);
    const void *w_head = kern_param_at(p, u->t[head].offset);
    const float *x = model_res_in(a, c->num_layers, D, T);  // (R, D) last block out
    kern_layernorm_fwd(a->xf, a->meanf, a->rstdf, x, w_ln, b_ln, R, D, c->norm_eps);
    const void *xf = model_sp_gather(plan, a, a->xf, T);  // (B, T, D)
    kern_matmul_fwd(a->logits, KERN_ACT, xf, w_head, N, D, V);  // (B, T, V)
    if (!with_targets) return;
    model_tp_crossentropy(plan, a, N, dscale);  // logits become dlogits
    if (dscale == 0.0f) return;
    kern_matmul_bwd(a->dxn, model_grad(a, g, u, head), a->logits, KERN_ACT, xf, w_head, N, D, V, 0);
    const void *dxf = model_colpar_dx(plan, a, T);  // each vocabulary share's part, summed: (R, D)
    kern_zero(a->dres, (size_t)R * D);
    kern_layernorm_bwd(a->dres, model_grad(a, g, u, lnw), model_grad(a, g, u, lnb), dxf, x, w_ln, a->meanf, a->rstdf, R, D);
}

void model_loss_reset(Activations *a) { kern_zero((float *)a->loss, 2); }  // all-zero bits are 0.0

double model_loss_read(const Activations *a) {
    double loss;
    kern_download(&loss, a->loss, sizeof loss);
    return loss;
}
void model_block_bwd(const ModelPlan *plan, int layer, const void *const *p, float *const *g, Activations *a) {
    lora_bind(plan, a, layer, p, g);
    plan->family->block_bwd(plan, layer, p, g, a);
}
// a frozen embedding (LoRA) has no gradient, and nothing comes before it
void model_embed_bwd(const ModelPlan *plan, float *g, Activations *a) {
    if (g) plan->family->embed_bwd(plan, g, a);
}
// LoRA: the frozen weights' gradient GEMMs (2 of the 6 FLOPs per parameter) do not run
double model_flops_per_token(const ModelPlan *plan, int T) {
    double f = plan->family->flops_per_token(plan, T);
    return plan->lora0 < 0 ? f : f - 2.0 * (double)(plan->num_params - lora_trained_params(plan));
}

// ---- dropout (the families' shared pieces) ----

size_t model_token_run(const Activations *a, size_t n, size_t end, size_t *g) {
    const size_t T = (size_t)a->T;
    if (a->cp == 1) {  // the whole sequences: every row in order
        *g = n;
        return end;
    }
    // a cp rank's tokens: runs of consecutive positions, each chunk of each row one run
    const size_t b = n / T, t = n % T, chunk_end = b * T + (t < T / 2 ? T / 2 : T);
    *g = b * T * a->cp + (size_t)a->cp_pos[(size_t)a->cp_rank * T + t];
    return chunk_end < end ? chunk_end : end;
}

// a rank's rows are elements [row0 * D, (row0 + rows) * D) of the batch: masks follow the global token
void model_dropout_rows(const Activations *a, float *x, size_t row0, size_t rows, int W, float p, uint64_t key) {
    const size_t Tw = (size_t)a->T * a->cp;  // a row's tokens in the whole sequence
    for (size_t n = row0, end, g; n < row0 + rows; n = end) {
        end = model_token_run(a, n, row0 + rows, &g);
        kern_dropout(x + (n - row0) * W, g * W, (end - n) * W, Tw * W, p, key, a->sample0);
    }
}

void model_dropout_fwd(const Activations *a, float *x, int T, int D, int layer, int site) {
    if (a->dropout > 0.0f)
        model_dropout_rows(a, x, model_row0(a, T), (size_t)model_rows(a, T), D, a->dropout, model_dropout_key(a, layer, site));
}

const float *model_dropout_bwd(const Activations *a, const float *dx, int D, int layer, int site) {
    if (!(a->dropout > 0.0f)) return dx;
    kern_copy(a->dbranch, dx, model_res_numel(a, D, a->T));
    model_dropout_fwd(a, a->dbranch, a->T, D, layer, site);
    return a->dbranch;
}

const KernDropout *model_attn_dropout(const Activations *a, int layer, int head0, KernDropout *buf) {
    if (!(a->dropout > 0.0f)) return NULL;
    buf->p = a->dropout;
    buf->key = model_dropout_key(a, layer, DROP_ATTN_PROBS);
    buf->sample0 = a->sample0;
    buf->head0 = head0;
    return buf;
}

void model_rope_inv_freq(double *f, int rot, double theta) {
    for (int i = 0; i < rot / 2; i++) f[i] = 1.0 / pow(theta, (double)(2 * i) / rot);
}

int model_acts_attention(Activations *a, const ModelConfig *c, int with_kv_cache, size_t N, size_t qd, size_t kvd) {
    size_t D = c->hidden_width, nl = c->num_layers;
    if (with_kv_cache) {
        a->kcache = model_acts_act(nl * a->T * kvd);
        a->vcache = model_acts_act(nl * a->T * kvd);
        return 0;
    }
    a->dres = model_acts_buf(N / a->sp * D);  // this rank's rows
    a->dxn = model_acts_act(N * D);
    if (c->dropout > 0.0f) a->dbranch = model_acts_buf(N / a->sp * D);
    a->dq = model_acts_act(N * qd);
    a->dk = model_acts_act(N * kvd);
    a->dv = model_acts_act(N * kvd);
    a->datt = model_acts_act(N * qd);
    return 1;
}
