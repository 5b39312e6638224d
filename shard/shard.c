// shard: flat units, gather/free around compute, gradient reduction, sharded AdamW.
#include "shard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../base/half.h"
#include "../comm/trace.h"
#include "../kernels/kernels.h"

// shard state and gathered buffers live on the compute device, each counted under what it holds
static float *fzalloc(size_t n, KernMem cat) { return kern_alloc(n * sizeof(float), cat); }
static uint16_t *hzalloc(size_t n, KernMem cat) { return kern_alloc(n * sizeof(uint16_t), cat); }
static float *host_zalloc(size_t n, KernMem cat) { return kern_alloc_host(n * sizeof(float), cat, 1); }
// initial values made on the host before their upload
static float *init_zalloc(size_t n) { return kern_alloc_host(n * sizeof(float), KERN_MEM_PARAMS, 0); }

// Writes the initial values of this rank's shard of unit u into dst (shard_len floats).
static void init_shard(const ShardState *s, int u, uint64_t seed, float std, float *dst) {
    const UnitSpec *spec = &s->plan->units[u];
    for (int t = 0; t < spec->ntensors; t++) {
        size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
        if (n && s->plan->tp > 1) model_init_part(&spec->t[t], s->plan->tp, s->plan->tp_rank, seed, std, begin, n, dst + local);
        else if (n) model_init_range(&spec->t[t], seed, std, begin, n, dst + local);
    }
}

// The bf16 parameters of a shard-group-1 unit, after the master changed other than by AdamW.
static void refresh_bf16(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    if (f->master_bf16) kern_f32_to_bf16(f->master_bf16, f->device_master, f->shard_len);
}

// Sets unit u's master shard from host values (and its device copy when offloaded).
static void set_master(ShardState *s, int u, const float *host) {
    FlatUnit *f = &s->units[u];
    size_t bytes = f->shard_len * sizeof(float);
    if (s->offload) memcpy(f->master, host, bytes);
    kern_upload(f->device_master, host, bytes);
    refresh_bf16(s, u);
}

void shard_master_changed(ShardState *s) {
    for (int u = 0; u < s->nunits; u++) {
        if (!s->units[u].member) continue;
        if (s->offload)
            kern_upload(s->units[u].device_master, s->units[u].master, s->units[u].shard_len * sizeof(float));
        refresh_bf16(s, u);
    }
}

// Unit u's tensors that pick() selects, as ranges [lo, hi) of this rank's shard (shard_local) or of
// the whole unit, adjacent tensors merged (a block's projections when they sit side by side);
// returns how many.
typedef int (*TensorPick)(const ShardState *s, const TensorSpec *t);

static int tensor_ranges(ShardState *s, int u, TensorPick pick, int shard_local, size_t (*r)[2], int most, const char *what) {
    const UnitSpec *spec = &s->plan->units[u];
    int nr = 0;
    for (int t = 0; t < spec->ntensors; t++) {
        size_t begin, lo = spec->t[t].offset, n = spec->t[t].numel;
        if (shard_local) n = shard_tensor_slice(s, u, t, &begin, &lo);
        if (!n || !pick(s, &spec->t[t])) continue;
        if (nr && r[nr - 1][1] == lo) {
            r[nr - 1][1] += n;
            continue;
        }
        if (nr == most) err_fatal("unit %d has more than %d %s ranges", u, most, what);
        r[nr][0] = lo;
        r[nr][1] = lo + n;
        nr++;
    }
    return nr;
}

static int pick_decayed(const ShardState *s, const TensorSpec *t) { return (void)s, t->decay; }

// the gradient norm: a tensor every tp rank holds whole has the same gradient on each (summed
// first under sequence parallelism), so only the first tp rank counts it
static int pick_norm(const ShardState *s, const TensorSpec *t) { return s->plan->tp_rank == 0 || t->tp_split != TP_WHOLE; }

// the gradients summed over the tp group after the step's reductions: under sequence parallelism
// the tensors every tp rank holds whole (each rank's rows give a share), and at any tp degree an
// adapter's whole factor on a split weight (each rank's part of the product gives a share)
static int pick_whole(const ShardState *s, const TensorSpec *t) {
    return s->plan->tp > 1 && ((s->plan->sp && t->tp_split == TP_WHOLE) || t->tp_partial);
}

int shard_state_on_device(const ShardState *s) { return kern_on_gpu() && !s->offload; }

// the units a block gathers on one rank (model_block_gather)
static int block_units(const ModelPlan *plan) {
    int units[MAX_BLOCK_UNITS];
    return plan->cfg.num_layers > 0 ? model_block_gather(plan, 0, units) : 1;
}

// full-size gradient buffers: one per unit when they persist over micro-batches; else the current
// one and the one being reduced, plus one held from the head's backward to the embedding's when
// they share a unit (tied weights). None at shard group 1 (direct): the shard is the whole unit,
// so backward adds into it and no reduce-scatter copies it there; bf16 reductions then need only
// two bf16 slots for the replicas' all-reduce (the unit being reduced and the next).
static int grad_slots(const ModelPlan *plan, int persistent, int direct, int direct_stage) {
    if (direct) return direct_stage ? 2 : 0;
    // a block of two units (its experts') has both buffers open at once
    return persistent ? plan->nunits : (plan->embed_unit == plan->head_unit ? 3 : 2) + block_units(plan) - 1;
}

static int direct_grads(const ParallelDims *pd) { return pd->shard_size == 1; }

// Where micro-batches accumulate (grad_accum > 1). At shard group 1 the shard is the whole unit:
// backward adds into it and the replicas reduce once a step. Otherwise each micro-batch's gradient
// is reduce-scattered and added to the shard (FSDP's default), unless --accumulate_unsharded keeps
// full gradients for the whole step and reduces once (FSDP's no_sync): fewer reductions, a full
// model's gradients per rank.
static int persistent_grads(const ShardConfig *cfg, int grad_accum, const ParallelDims *pd) {
    return grad_accum > 1 && (direct_grads(pd) || cfg->accumulate_unsharded);
}
static int accum_sharded(const ShardConfig *cfg, int grad_accum, const ParallelDims *pd) {
    return grad_accum > 1 && !persistent_grads(cfg, grad_accum, pd);
}

// shard group 1 with bf16 reductions over replicas: the all-reduce runs on a bf16 copy
static int direct_stage(const ShardConfig *cfg, const ParallelDims *pd) {
    return direct_grads(pd) && cfg->reduce_dtype == PRECISION_BF16 && pd->replica_size > 1;
}

static int packed_slots(const ModelPlan *plan);

void shard_estimate(const ModelPlan *plan, const ShardConfig *cfg, int grad_accum, const ParallelDims *pd, ShardMemEstimate *e) {
    // LoRA: frozen units have no gradient or optimizer state (the *_t sums: the units that train)
    size_t sum_padded = 0, max_padded = 0, sum_shard = 0, max_shard = 0, sum_padded_t = 0, max_padded_t = 0, sum_shard_t = 0;
    size_t max_shard_t = 0;
    // QLoRA: packed units shard 4-byte words (the master sums count them as floats) and are
    // gathered only through the packed slots: their bytes, and the unit dequantised
    size_t max_packed = 0, max_unpacked = 0, sum_shard_packed = 0, max_send = 0;  // max_send: of the unpacked units
    e->shard_params = 0;
    for (int u = 0; u < plan->nunits; u++) {
        int ei = plan->units[u].ep_index;
        if (ei >= 0 && ei != plan->ep_rank) continue;  // another ep rank's experts
        size_t g = (size_t)(ei < 0 ? pd->shard_size : pd->expert_shard_size) * (plan->units[u].stored_whole ? (size_t)pd->tp : 1);
        size_t packed = plan->units[u].packed, padded = ((packed ? packed / 4 : plan->units[u].numel) + g - 1) / g * g;
        sum_shard += padded / g;
        e->shard_params += (double)((plan->units[u].numel + g - 1) / g);
        if (padded / g > max_shard) max_shard = padded / g;
        if (packed) {
            sum_shard_packed += padded / g;
            if (padded > max_packed) max_packed = padded;
            if (plan->units[u].numel > max_unpacked) max_unpacked = plan->units[u].numel;
            continue;
        }
        // a unit the CPU gathers over one rank is rounded straight into its gather slot: no send slot
        if ((g > 1 || (cfg->precision == PRECISION_BF16 && kern_on_gpu())) && padded / g > max_send) max_send = padded / g;
        sum_padded += padded;
        if (padded > max_padded) max_padded = padded;
        if (plan->units[u].frozen) continue;
        sum_padded_t += padded;
        sum_shard_t += padded / g;
        if (padded > max_padded_t) max_padded_t = padded;
        if (padded / g > max_shard_t) max_shard_t = padded / g;
    }
    int bf16p = cfg->precision == PRECISION_BF16, bf16r = cfg->reduce_dtype == PRECISION_BF16, one = pd->shard_size == 1;
    int reshard = pd->reshard_after_forward, persistent = persistent_grads(cfg, grad_accum, pd);
    int slots = grad_slots(plan, 0, 0, 0);
    const double f = sizeof(float), h = sizeof(uint16_t);
    e->master = f * sum_shard;
    e->params = e->master + f * max_shard;  // the shards, and one unit's being initialised
    e->optimizer = 2 * f * sum_shard_t;
    size_t grad_full = direct_grads(pd) ? 0 : persistent ? sum_padded_t : (size_t)slots * max_padded_t;
    e->grads = f * sum_shard_t + f * grad_full;
    // a GPU holds bf16 gathers as they arrive; the CPU expands them to fp32 from a staging buffer
    int bf16g = bf16p && kern_on_gpu();
    size_t param_full = one && (!bf16p || bf16g) ? 0 : reshard ? (size_t)(1 + block_units(plan)) * max_padded : sum_padded;
    // at shard group 1 on a GPU the units are always gathered: AdamW keeps their bf16 copy
    int always = one && bf16g;
    int packed_slots_n = packed_slots(plan);
    e->gathered = (bf16g ? h : f) * (param_full + (double)packed_slots_n * max_unpacked) + (always ? h * (sum_shard - sum_shard_packed) : 0.0);
    // bf16 gathers: the CPU's full staging buffer, and two slots the shards are rounded into for
    // their gathers; bf16 reductions: the full buffer and this rank's shard of it, or at shard
    // group 1 the replicas' all-reduce slots
    double reduce_stage = direct_stage(cfg, pd) ? 2.0 * max_padded_t
                                                : grad_full + (persistent ? (double)sum_shard_t : (double)slots * max_shard_t);
    e->buffers = (bf16p && !always ? h * ((bf16g ? 0 : param_full) + 2.0 * max_send) : 0.0) + (bf16r ? h * reduce_stage : 0.0) +
                 f * (double)packed_slots_n * max_packed;
}

// Unit u's groups: the mesh's, or for an experts' unit the expert groups, of which only the ranks
// at the unit's place in their ep group are members.
// A unit stored whole under tp is split over those groups' tp ranks too.
static void unit_groups(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    int ei = s->plan->units[u].ep_index, whole = s->plan->units[u].stored_whole;
    f->member = ei < 0 || ei == s->plan->ep_rank;
    f->group = ei < 0 ? (whole ? s->whole_group : s->shard_group) : whole ? s->expert_whole_group : s->expert_shard_group;
    f->replicas = ei < 0 ? s->replica_group : s->expert_replica_group;
    f->group_size = (ei < 0 ? s->dims.shard_size : s->dims.expert_shard_size) * (whole ? s->dims.tp : 1);
    f->replica_size = ei < 0 ? s->dims.replica_size : s->dims.expert_replica_size;
    f->group_rank = ei < 0 && !whole ? s->shard_rank : comm_group_rank(f->group);
    f->replica_rank = ei < 0 ? s->replica_rank : comm_group_rank(f->replicas);
}

// Packed units held at once: a block's (its own, and its experts' under expert parallelism) and
// the next block's first, being prefetched; a packed embedding or head (a bf16 base) is one unit
// and the block it prefetches, or the other of the two when there are no blocks.
static int packed_slots(const ModelPlan *plan) {
    int units[MAX_BLOCK_UNITS], n = plan->cfg.num_layers > 0 ? model_block_gather(plan, 0, units) : 0, k = 0;
    for (int i = 0; i < n; i++) k += plan->units[units[i]].packed > 0;
    if (!k && (plan->units[plan->embed_unit].packed || plan->units[plan->head_unit].packed)) k = 1;
    return k ? k + 1 : 0;
}

typedef struct {
    const ModelPlan *plan;
    uint64_t seed;
} InitCtx;

// a whole tensor's initial values (a packed unit's nf4 tensors are quantised whole)
static const char *init_values_whole(void *ctx, int u, int t, float *dst) {
    const InitCtx *c = ctx;
    const TensorSpec *ts = &c->plan->units[u].t[t];
    model_init_range(ts, c->seed, c->plan->cfg.initializer_range, 0, model_whole_numel(ts), dst);
    return NULL;
}

void shard_init(ShardState *s, const ModelPlan *plan, const ShardConfig *cfg, const ParallelDims *pd, int grad_accum, int seed,
                int init_values) {
    memset(s, 0, sizeof *s);
    s->plan = plan;
    s->nunits = plan->nunits;
    s->dims = *pd;
    comm_make_mesh(pd->tp, pd->shard_size, &s->tp_group, &s->shard_group, &s->replica_group);
    s->shard_rank = comm_group_rank(s->shard_group);
    s->replica_rank = comm_group_rank(s->replica_group);
    if (pd->ep > 1)
        comm_make_expert_groups(pd->tp, pd->shard_size, pd->ep, pd->expert_shard_size, &s->ep_group, &s->expert_shard_group,
                                &s->expert_replica_group);
    int stored_whole = 0;
    for (int u = 0; u < plan->nunits; u++) stored_whole |= plan->units[u].stored_whole;
    if (stored_whole)
        comm_make_whole_groups(pd->tp, pd->shard_size, pd->ep, pd->expert_shard_size, &s->whole_group, &s->expert_whole_group);
    s->bf16_params = cfg->precision == PRECISION_BF16;
    s->bf16_gathered = s->bf16_params && kern_on_gpu();  // as shard_estimate counts them
    s->bf16_reduce = cfg->reduce_dtype == PRECISION_BF16;
    s->offload = cfg->cpu_offload && kern_on_gpu();
    s->persistent_grads = persistent_grads(cfg, grad_accum, pd);
    s->accum_sharded = accum_sharded(cfg, grad_accum, pd);
    s->direct_grads = direct_grads(pd);
    s->units = callocCheck(s->nunits, sizeof(FlatUnit));
    s->nranges = KERN_ADAMW_MAX_RANGES;  // each range holds a tensor: the same bound on every rank
    for (int u = 0; u < s->nunits; u++)
        if (plan->units[u].ntensors > s->nranges) s->nranges = plan->units[u].ntensors;
    if (s->nranges > SHARD_MAX_RANGES) s->nranges = SHARD_MAX_RANGES;
    size_t max_padded = 0, max_padded_t = 0, max_shard_t = 0;  // _t: over the units that train
    size_t max_packed = 0, max_unpacked = 0;  // packed units: words gathered, elements dequantised
    size_t max_send = 0;  // the shards of the unpacked units, each rounded into a send slot under bf16
    for (int u = 0; u < s->nunits; u++) {
        FlatUnit *f = &s->units[u];
        f->numel = plan->units[u].numel;
        f->frozen = plan->units[u].frozen;
        f->packed = plan->units[u].packed;
        unit_groups(s, u);
        f->param_slot = f->grad_slot = f->send_slot = -1;
        if (!f->member) continue;
        size_t words = f->packed ? f->packed / 4 : f->numel;  // a packed unit shards its bytes as 4-byte words
        f->padded = (words + f->group_size - 1) / f->group_size * f->group_size;
        f->shard_len = f->padded / f->group_size;
        f->shard_off = (size_t)f->group_rank * f->shard_len;
        float *(*state_alloc)(size_t, KernMem) = s->offload ? host_zalloc : fzalloc;
        f->master = state_alloc(f->shard_len, KERN_MEM_PARAMS);
        if (!f->frozen) {
            f->exp_avg = state_alloc(f->shard_len, KERN_MEM_OPTIMIZER);
            f->exp_avg_sq = state_alloc(f->shard_len, KERN_MEM_OPTIMIZER);
            f->grad_shard = fzalloc(f->shard_len, KERN_MEM_GRADS);
            if (s->offload) f->host_grad = host_zalloc(f->shard_len, KERN_MEM_GRADS);
            if (f->padded > max_padded_t) max_padded_t = f->padded;
            if (f->shard_len > max_shard_t) max_shard_t = f->shard_len;
        }
        f->device_master = s->offload ? fzalloc(f->shard_len, KERN_MEM_PARAMS) : f->master;
        // shard group 1 on a GPU computes from a bf16 copy of the whole unit that AdamW keeps: the unit always gathered
        if (f->packed) {  // frozen bytes: gathered and dequantised through the packed slots only
            if (f->numel > max_unpacked) max_unpacked = f->numel;
            if (f->padded > max_packed) max_packed = f->padded;
            continue;
        }
        if ((f->group_size > 1 || s->bf16_gathered) && f->shard_len > max_send) max_send = f->shard_len;  // as the estimate
        if (s->dims.shard_size == 1 && s->bf16_gathered) f->master_bf16 = hzalloc(f->shard_len, KERN_MEM_GATHERED);
        f->grad_fresh = 1;
        if (s->direct_grads) f->grads = f->grad_shard;
        if (s->dims.shard_size == 1 && !s->bf16_params) f->params = f->device_master;  // unsharded: always gathered
        if (s->dims.shard_size == 1 && s->bf16_gathered) f->params = f->master_bf16;
        if (f->padded > max_padded) max_padded = f->padded;
        if (f->frozen) continue;
        f->ndecay = tensor_ranges(s, u, pick_decayed, 1, f->decay, KERN_ADAMW_MAX_RANGES, "weight-decay");
        f->nnorm = tensor_ranges(s, u, pick_norm, 1, f->norm, s->nranges, "gradient-norm");
        f->nwhole = tensor_ranges(s, u, pick_whole, 1, f->whole, SHARD_MAX_RANGES, "tp-whole");
        if (f->nwhole) s->tp_sums = 1;
    }
    // doubles: the grad norm's partial sums
    s->unit_sumsq = (double *)fzalloc(2 * (size_t)s->nunits * s->nranges, KERN_MEM_GRADS);
    s->step_red = callocCheck((size_t)s->nunits * s->nranges + 3, sizeof(double));
    if (s->tp_sums) s->whole_reqs = callocCheck((size_t)s->nunits * SHARD_MAX_RANGES, sizeof(CommRequest *));
    // values are made on the host, then copied to the device
    // weights that come from a file skip this: random values would only be overwritten
    // a sharded start: each rank makes its own shards, one unit at a time, on the host and then
    // uploads them; init is a pure function of (seed, name, index), so every layout gets the same
    // values and no rank ever holds more than its shards plus one unit's staging
    // (adapters always: a base loaded from a file leaves them to their start, B zero)
    for (int u = 0; u < s->nunits; u++) {
        FlatUnit *f = &s->units[u];
        if (!f->member || !(init_values || plan->units[u].adapter)) continue;
        if (f->packed) {
            InitCtx ctx = {plan, (uint64_t)seed};
            shard_fill_packed(s, u, init_values_whole, &ctx);  // cannot fail
            continue;
        }
        float *host = init_zalloc(f->shard_len);
        init_shard(s, u, (uint64_t)seed, plan->cfg.initializer_range, host);
        set_master(s, u, host);
        kern_free_host(host);
    }
    // resharding holds a unit being computed and the next being gathered; a block of two units
    // (its experts') holds both while the next is gathered
    // (none when the unpacked units are always gathered: fp32, or bf16 on a GPU, at shard group 1)
    int always = s->dims.shard_size == 1 && (!s->bf16_params || s->bf16_gathered);
    s->nparam_slots = always ? 0 : s->dims.reshard_after_forward ? 1 + block_units(plan) : s->nunits;
    s->npacked_slots = packed_slots(plan);
    for (int i = 0; i < s->npacked_slots; i++) {
        s->packed_owner[i] = -1;
        s->packed_stage[i] = kern_alloc(max_packed * sizeof(float), KERN_MEM_BUFFERS);
        s->packed_params[i] = s->bf16_gathered ? (void *)hzalloc(max_unpacked, KERN_MEM_GATHERED) : fzalloc(max_unpacked, KERN_MEM_GATHERED);
    }
    for (int i = 0; i < 2; i++) {
        s->send_owner[i] = -1;
        if (s->bf16_params && !always && max_send) s->send_stage[i] = hzalloc(max_send, KERN_MEM_BUFFERS);
    }
    s->ngrad_slots = grad_slots(plan, s->persistent_grads, s->direct_grads, direct_stage(cfg, pd));
    s->param_pool = callocCheck(s->nparam_slots + 1, sizeof(void *));
    s->grad_pool = callocCheck(s->ngrad_slots, sizeof(float *));
    s->param_owner = callocCheck(s->nparam_slots + 1, sizeof(int));
    s->grad_owner = callocCheck(s->ngrad_slots, sizeof(int));
    s->param_stage = callocCheck(s->nparam_slots + 1, sizeof(uint16_t *));
    s->grad_stage = callocCheck(s->ngrad_slots, sizeof(uint16_t *));
    s->grad_recv = callocCheck(s->ngrad_slots, sizeof(uint16_t *));
    for (int i = 0; i < s->nparam_slots; i++) {
        size_t n = s->dims.reshard_after_forward ? max_padded : s->units[i].packed ? 0 : s->units[i].padded;
        s->param_owner[i] = -1;
        if (!n) continue;  // a unit this rank does not hold
        s->param_pool[i] = s->bf16_gathered ? (void *)hzalloc(n, KERN_MEM_GATHERED) : fzalloc(n, KERN_MEM_GATHERED);
        if (s->bf16_params && !s->bf16_gathered) s->param_stage[i] = hzalloc(n, KERN_MEM_BUFFERS);
    }
    for (int i = 0; i < s->ngrad_slots; i++) {
        size_t n = s->persistent_grads && !s->direct_grads ? (s->units[i].frozen ? 0 : s->units[i].padded) : max_padded_t;
        s->grad_owner[i] = -1;
        if (!n) continue;  // a unit this rank does not hold
        if (s->direct_grads) {  // the replicas' bf16 all-reduce slots only
            s->grad_stage[i] = hzalloc(n, KERN_MEM_BUFFERS);
            continue;
        }
        s->grad_pool[i] = fzalloc(n, KERN_MEM_GRADS);
        if (s->bf16_reduce) {
            s->grad_stage[i] = hzalloc(n, KERN_MEM_BUFFERS);
            s->grad_recv[i] = hzalloc(s->persistent_grads ? s->units[i].shard_len : max_shard_t, KERN_MEM_BUFFERS);
        }
    }
    if (s->persistent_grads && !s->direct_grads)  // one buffer per unit, held for the whole run
        for (int u = 0; u < s->nunits; u++)
            if (!s->units[u].frozen) s->units[u].grads = s->grad_pool[s->units[u].grad_slot = s->grad_owner[u] = u];
}

static void wait_gather(ShardState *s, int u);
static void unpack(const ShardState *s, int u, const uint8_t *stage, void *dst, int f32);

static void dfree(void *p) {
    if (p) kern_free(p);
}

void shard_free(ShardState *s) {
    shard_grads_finish(s);
    for (int u = 0; u < s->nunits; u++) {
        FlatUnit *f = &s->units[u];
        wait_gather(s, u);
        void (*state_free)(void *) = s->offload ? kern_free_host : dfree;
        state_free(f->master);
        state_free(f->exp_avg);
        state_free(f->exp_avg_sq);
        dfree(f->grad_shard);
        if (s->offload) {
            dfree(f->device_master);
            kern_free_host(f->host_grad);
        }
        dfree(f->master_bf16);
    }
    for (int i = 0; i < 2; i++) dfree(s->send_stage[i]);
    for (int i = 0; i < s->npacked_slots; i++) {
        dfree(s->packed_stage[i]);
        dfree(s->packed_params[i]);
    }
    dfree(s->unit_sumsq);
    free(s->step_red);
    free(s->whole_reqs);
    for (int i = 0; i < s->nparam_slots; i++) {
        if (s->param_stage[i]) kern_params_bf16_copy(s->param_pool[i], NULL, 0);  // a unit still gathered
        dfree(s->param_pool[i]);
        dfree(s->param_stage[i]);
    }
    for (int i = 0; i < s->ngrad_slots; i++) {
        dfree(s->grad_pool[i]);
        dfree(s->grad_stage[i]);
        dfree(s->grad_recv[i]);
    }
    free(s->param_pool);
    free(s->grad_pool);
    free(s->param_stage);
    free(s->grad_stage);
    free(s->grad_recv);
    free(s->param_owner);
    free(s->grad_owner);
    free(s->units);
    s->units = NULL;
}

// ---- parameters ----

// Completes unit u's gather in flight, if any, and frees the bf16 send slot it read.
static void wait_gather(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    comm_wait(f->gather_req);
    f->gather_req = NULL;
    if (f->send_slot >= 0) s->send_owner[f->send_slot] = -1;
    f->send_slot = -1;
}

// The bf16 rounding of u's shard that its gather sends, in a free send slot (a gather still
// reading the other slot is completed first when both are taken).
static const uint16_t *send_bf16(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    int k = s->send_owner[0] < 0 ? 0 : s->send_owner[1] < 0 ? 1 : 0;
    if (s->send_owner[k] >= 0) wait_gather(s, s->send_owner[k]);
    s->send_owner[k] = u;
    f->send_slot = k;
    kern_f32_to_bf16(s->send_stage[k], f->device_master, f->shard_len);
    return s->send_stage[k];
}

static void start_gather(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    if (f->params) return;  // gathered, or on its way
    if (f->packed) {  // the bytes move as 16-bit words, bit for bit
        int slot = -1;
        for (int i = 0; slot < 0 && i < s->npacked_slots; i++)
            if (s->packed_owner[i] < 0) slot = i;
        if (slot < 0) err_fatal("no free packed buffer for unit %d (more than %d packed units gathered at once)", u, s->npacked_slots);
        s->packed_owner[slot] = u;
        f->param_slot = slot;
        f->params = s->packed_params[slot];
        f->gather_req = comm_all_gather_bf16_start(f->group, (const uint16_t *)f->device_master, (uint16_t *)s->packed_stage[slot],
                                                   2 * f->shard_len);
        f->expand_pending = 1;
        return;
    }
    int slot = s->dims.reshard_after_forward ? -1 : u;
    for (int i = 0; slot < 0 && i < s->nparam_slots; i++)
        if (s->param_owner[i] < 0) slot = i;
    if (slot < 0) err_fatal("no free parameter buffer for unit %d (more than two units gathered at once)", u);
    s->param_owner[slot] = u;
    f->param_slot = slot;
    f->params = s->param_pool[slot];
    if (s->bf16_gathered) {  // half the bytes on the wire, and the kernels read them as they land
        f->gather_req = comm_all_gather_bf16_start(f->group, send_bf16(s, u), f->params, f->shard_len);
    } else if (s->bf16_params && f->group_size == 1) {  // the CPU's gather over one rank: its own rounding, no copy
        kern_f32_to_bf16(s->param_stage[slot], f->device_master, f->shard_len);
        f->expand_pending = 1;
    } else if (s->bf16_params) {  // the CPU computes from the fp32 expansion
        f->gather_req = comm_all_gather_bf16_start(f->group, send_bf16(s, u), s->param_stage[slot], f->shard_len);
        f->expand_pending = 1;
    } else {
        f->gather_req = comm_all_gather_start(f->group, f->device_master, f->params, f->shard_len);
    }
}

const void *shard_gather(ShardState *s, int u, int next) {
    FlatUnit *f = &s->units[u];
    start_gather(s, u);
    wait_gather(s, u);
    if (f->expand_pending && f->packed) {
        unpack(s, u, s->packed_stage[f->param_slot], f->params, 0);
        f->expand_pending = 0;
    } else if (f->expand_pending) {
        kern_bf16_to_f32(f->params, s->param_stage[f->param_slot], f->padded);
        kern_params_bf16_copy(f->params, s->param_stage[f->param_slot], f->padded);
        f->expand_pending = 0;
    }
    if (next >= 0 && next < s->nunits) start_gather(s, next);  // overlaps with u's compute
    return f->params;
}

void shard_release(ShardState *s, int u, ShardPhase phase) {
    FlatUnit *f = &s->units[u];
    if (f->param_slot < 0) return;  // not gathered, or always (unsharded)
    // ZeRO-2 keeps it for backward; a packed unit is dequantised again instead (QLoRA's memory)
    if (phase == PHASE_FWD && !s->dims.reshard_after_forward && !f->packed) return;
    wait_gather(s, u);
    f->expand_pending = 0;
    if (f->packed) s->packed_owner[f->param_slot] = -1;
    else s->param_owner[f->param_slot] = -1;
    if (s->bf16_params && !s->bf16_gathered && !f->packed) kern_params_bf16_copy(f->params, NULL, 0);
    f->param_slot = -1;
    f->params = NULL;
}

// ---- gradients ----

static void finish_reduce(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    if (!f->reduce_req) return;
    comm_wait(f->reduce_req);
    f->reduce_req = NULL;
    if (s->direct_grads) {  // the replicas' all-reduce of the shard itself, or of its bf16 copy
        if (f->grad_slot >= 0) {
            kern_bf16_to_f32(f->grad_shard, s->grad_stage[f->grad_slot], f->shard_len);
            s->grad_owner[f->grad_slot] = -1;
            f->grad_slot = -1;
        }
        return;
    }
    // the replicas reduce once a step, on the sum of its micro-batches (the sums are linear)
    int replicas = f->replica_size > 1 && f->reduce_last;
    if (s->bf16_reduce && f->reduce_adds) {
        // the micro-batch's bf16 shard goes through the slot's (now free) fp32 buffer into the
        // fp32 sum; replicas then reduce that sum in bf16, as they would one micro-batch's
        uint16_t *recv = s->grad_recv[f->grad_slot];
        float *tmp = s->grad_pool[f->grad_slot];
        kern_bf16_to_f32(tmp, recv, f->shard_len);
        kern_add(f->grad_shard, tmp, f->shard_len);
        if (replicas) {
            kern_f32_to_bf16(recv, f->grad_shard, f->shard_len);
            comm_wait(comm_allreduce_bf16_start(f->replicas, recv, f->shard_len));
            kern_bf16_to_f32(f->grad_shard, recv, f->shard_len);
        }
    } else if (s->bf16_reduce) {
        uint16_t *recv = s->grad_recv[f->grad_slot];
        if (replicas) comm_wait(comm_allreduce_bf16_start(f->replicas, recv, f->shard_len));
        kern_bf16_to_f32(f->grad_shard, recv, f->shard_len);
    } else if (replicas) {
        comm_wait(comm_allreduce_start(f->replicas, f->grad_shard, f->shard_len));
    }
    if (!s->persistent_grads) {
        s->grad_owner[f->grad_slot] = -1;
        f->grad_slot = -1;
        f->grads = NULL;
    }
}

float *shard_grad_buffer(ShardState *s, int u) {
    FlatUnit *f = &s->units[u];
    if (f->frozen) return NULL;  // LoRA's frozen base: no gradient
    if (s->persistent_grads) return f->grads;
    if (f->grad_open) return f->grads;  // a second stage of the same unit adds to its gradient
    if (f->reduce_req && !s->direct_grads) finish_reduce(s, u);  // the previous micro-batch's shard lands first
    if (s->direct_grads) {
        f->grad_open = 1;
        kern_zero(f->grads, f->padded);
        return f->grads;
    }
    int slot = -1, oldest = -1;
    for (int i = 0; i < s->ngrad_slots && slot < 0; i++) {
        int owner = s->grad_owner[i];
        if (owner < 0) slot = i;
        else if (!s->units[owner].grad_open && (oldest < 0 || owner > s->grad_owner[oldest]))
            oldest = i;  // backward runs high to low
    }
    if (slot < 0 && oldest < 0) err_fatal("no free gradient buffer for unit %d", u);
    if (slot < 0) {  // every buffer still being reduced: finish the older one
        finish_reduce(s, s->grad_owner[oldest]);
        slot = oldest;
    }
    s->grad_owner[slot] = u;
    f->grad_slot = slot;
    f->grads = s->grad_pool[slot];
    f->grad_open = 1;
    kern_zero(f->grads, f->padded);
    return f->grads;
}

void shard_grad_ready(ShardState *s, int u, int last_micro) {
    FlatUnit *f = &s->units[u];
    f->grad_open = 0;
    if (f->frozen) return;
    if (!last_micro && s->persistent_grads) return;  // accumulate locally; communicate once per step (no_sync)
    s->whole_pending = s->tp_sums;
    if (s->direct_grads) {
        if (s->bf16_reduce && f->replica_size == 1) {
            kern_round_bf16(f->grad_shard, f->shard_len);  // what a bf16 reduction over one rank gives
        } else if (s->bf16_reduce) {
            // a free slot, else the one held by the higher unit (backward runs high to low): finish it
            int slot = s->grad_owner[0] < 0 ? 0 : s->grad_owner[1] < 0 ? 1 : s->grad_owner[0] > s->grad_owner[1] ? 0 : 1;
            if (s->grad_owner[slot] >= 0) finish_reduce(s, s->grad_owner[slot]);
            s->grad_owner[slot] = u;
            f->grad_slot = slot;
            kern_f32_to_bf16(s->grad_stage[slot], f->grad_shard, f->shard_len);
            f->reduce_req = comm_allreduce_bf16_start(f->replicas, s->grad_stage[slot], f->shard_len);
        } else if (f->replica_size > 1) {
            f->reduce_req = comm_allreduce_start(f->replicas, f->grad_shard, f->shard_len);
        }
        return;
    }
    // The step's first reduction of u lands in its shard; later micro-batches' add to it. In fp32
    // the shard so far is added into this rank's own segment of the input first: the
    // reduce-scatter then leaves shard + the ranks' sum in place, with no buffer beside it.
    int adds = s->accum_sharded && !f->grad_fresh;
    f->grad_fresh = 0;
    f->reduce_last = last_micro;
    f->reduce_adds = adds && s->bf16_reduce;
    if (s->bf16_reduce) {
        uint16_t *stage = s->grad_stage[f->grad_slot];
        kern_f32_to_bf16(stage, f->grads, f->padded);
        f->reduce_req = comm_reduce_scatter_bf16_start(f->group, stage, s->grad_recv[f->grad_slot], f->shard_len);
    } else {
        if (adds) kern_add(f->grads + f->shard_off, f->grad_shard, f->shard_len);
        f->reduce_req = comm_reduce_scatter_start(f->group, f->grads, f->grad_shard, f->shard_len);
    }
}

// Sequence parallelism: a tensor every tp rank holds whole (norms, the biases after a row-parallel
// reduction, position embeddings) got each tp rank's rows' share of its gradient. The sums are
// linear, so the step's reduced shards are summed over the tp group once, after the FSDP
// reductions and off the backward's path; every tp rank then holds the same. All are started
// before any is waited on.
static void tp_sum_whole(ShardState *s) {
    int n = 0;
    s->whole_pending = 0;
    for (int u = 0; u < s->nunits; u++) {
        FlatUnit *f = &s->units[u];
        for (int i = 0; i < f->nwhole; i++)
            s->whole_reqs[n++] = comm_allreduce_start(s->tp_group, f->grad_shard + f->whole[i][0], f->whole[i][1] - f->whole[i][0]);
    }
    for (int i = 0; i < n; i++) comm_wait(s->whole_reqs[i]);
}

void shard_grads_finish(ShardState *s) {
    for (int u = s->nunits - 1; u >= 0; u--) finish_reduce(s, u);
    if (s->whole_pending) tp_sum_whole(s);
}

void shard_zero_grads(ShardState *s) {
    for (int u = 0; u < s->nunits; u++) {
        s->units[u].grad_fresh = 1;
        if (s->persistent_grads && s->units[u].member && !s->units[u].frozen) kern_zero(s->units[u].grads, s->units[u].padded);
    }
}

void shard_cast_activation(ShardState *s, float *x, size_t n) {
    if (!s->bf16_params) return;
    kern_round_bf16(x, n);
}

// ---- optimizer ----

size_t shard_tensor_slice(const ShardState *s, int u, int t, size_t *begin, size_t *local) {
    const FlatUnit *f = &s->units[u];
    const TensorSpec *ts = &s->plan->units[u].t[t];
    if (f->packed) return *begin = 0, *local = 0, 0;  // its shard is bytes: shard_packed_slice
    size_t lo = ts->offset > f->shard_off ? ts->offset : f->shard_off;
    size_t hi_t = ts->offset + ts->numel, hi_s = f->shard_off + f->shard_len;
    size_t hi = hi_t < hi_s ? hi_t : hi_s;
    if (hi <= lo) return *begin = 0, *local = 0, 0;
    *begin = lo - ts->offset;
    *local = lo - f->shard_off;
    return hi - lo;
}

int shard_is_writer(const ShardState *s, int u) { return s->units[u].member && s->units[u].replica_rank == 0; }

void shard_step_stats(ShardState *s, const double *loss_dev, double flag, double tokens, ShardStepStats *out) {
    int nu = s->nunits, nr = s->nranges;
    double *red = s->step_red;  // loss, flag, tokens, then the units' ranges' sums of squares (0 where unused)
    for (int u = 0; u < nu; u++) {
        const FlatUnit *f = &s->units[u];
        for (int i = 0; i < f->nnorm; i++)  // the unused slots stay as allocated: zero
            kern_sumsq_to(s->unit_sumsq + u * nr + i, f->grad_shard + f->norm[i][0], f->norm[i][1] - f->norm[i][0]);
    }
    kern_download(red, loss_dev, sizeof(double));  // the step's one wait for the device
    kern_download(red + 3, s->unit_sumsq, (size_t)nu * nr * sizeof(double));
    red[1] = flag;
    red[2] = tokens;
    for (int u = 0; u < nu; u++)  // replicas hold identical shards: the first group's count once (x + 0 is exact)
        if (s->units[u].replica_rank != 0)
            for (int i = 0; i < nr; i++) red[3 + u * nr + i] = 0.0;
    comm_allreduce_sum_f64(comm_world(), red, (size_t)nu * nr + 3);
    double sumsq = 0.0;
    for (int i = 0; i < nu * nr; i++) sumsq += red[3 + i];
    out->loss = red[0];
    out->flag = red[1];
    out->tokens = red[2];
    out->grad_norm = sqrt(sumsq);
}

void shard_adamw_step(ShardState *s, const OptimConfig *cfg, float lr, double grad_norm, double grad_scale) {
    s->step++;
    // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1
    double coef = cfg->grad_clip / (grad_norm + 1e-6);
    KernAdamW h = {.lr = lr, .beta1 = cfg->beta1, .beta2 = cfg->beta2, .eps = cfg->adam_eps,
                   .weight_decay = cfg->weight_decay,
                   .grad_scale = (float)(grad_scale * (cfg->grad_clip > 0 && coef < 1.0 ? coef : 1.0)), .step = s->step};
    // offload: every gradient shard heads to the host at once; the host steps unit u while later
    // units are still copying down and earlier masters are copying back up
    if (s->offload) trace_begin(TRACE_COPY, "offload: gradients down, AdamW on the host, masters up", -1);
    if (s->offload)
        for (int u = 0; u < s->nunits; u++) {
            FlatUnit *f = &s->units[u];
            if (!f->member || f->frozen) continue;
            f->copy_ticket = kern_download_async(f->host_grad, f->grad_shard, f->shard_len * sizeof(float));
        }
    for (int u = 0; u < s->nunits; u++) {
        FlatUnit *f = &s->units[u];
        if (!f->member || f->frozen) continue;
        h.ndecay = f->ndecay;
        memcpy(h.decay, f->decay, sizeof h.decay);
        if (s->offload) {
            trace_begin(TRACE_COPY, "gradient download wait", u);
            kern_async_wait(f->copy_ticket);
            trace_end(TRACE_COPY);
            kern_adamw_host(f->master, NULL, f->host_grad, f->exp_avg, f->exp_avg_sq, f->shard_len, &h);
            kern_upload_async(f->device_master, f->master, f->shard_len * sizeof(float));
        } else {
            kern_adamw(f->master, f->master_bf16, f->grad_shard, f->exp_avg, f->exp_avg_sq, f->shard_len, &h);
        }
    }
    if (!s->offload) return;
    kern_async_fence();  // the next gathers read the new masters
    for (int u = 0; u < s->nunits; u++)
        if (s->units[u].member && !s->units[u].frozen) refresh_bf16(s, u);
    trace_end(TRACE_COPY);
}

// ---- QLoRA's packed units ----

size_t shard_packed_slice(const ShardState *s, int u, int t, size_t *begin, size_t *local) {
    const FlatUnit *f = &s->units[u];
    const TensorSpec *ts = &s->plan->units[u].t[t];
    size_t lo_s = f->shard_off * 4, hi_s = lo_s + f->shard_len * 4, lo_t = ts->pack_off, hi_t = lo_t + model_piece_bytes(ts);
    size_t lo = lo_t > lo_s ? lo_t : lo_s, hi = hi_t < hi_s ? hi_t : hi_s;
    if (!f->member || hi <= lo) return *begin = 0, *local = 0, 0;
    *begin = lo - lo_t;
    *local = lo - lo_s;
    return hi - lo;
}

// NULL, or why the values of t cannot be quantised: a NaN or an infinity among them
static const char *finite_or_why(const TensorSpec *t, const float *x, size_t n) {
    static char msg[200];
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return err_text(msg, sizeof msg, "%s holds NaN or infinite values (element %zu): such a base cannot be quantised to NF4 "
                            "(fetch or export it again)", t->name, i);
    return NULL;
}

// The values of piece elements [begin, begin+n) of tensor t from the whole tensor's: the same
// places, or under tp a split tensor's part (model_tp_run) into tmp
static const float *piece_values(const ShardState *s, const TensorSpec *t, const float *whole, size_t begin, size_t n, float *tmp) {
    const ModelPlan *plan = s->plan;
    if (plan->tp < 2 || t->stored_whole || t->tp_split == TP_WHOLE) return whole + begin;
    for (size_t done = 0; done < n;) {
        size_t full, k = model_tp_run(t, plan->tp, plan->tp_rank, begin + done, &full);
        if (k > n - done) k = n - done;
        memcpy(tmp + done, whole + full, k * sizeof(float));
        done += k;
    }
    return tmp;
}

const char *shard_fill_packed(ShardState *s, int u, ShardTensorValues values, void *ctx) {
    FlatUnit *f = &s->units[u];
    const UnitSpec *spec = &s->plan->units[u];
    if (!f->member) return NULL;
    uint8_t *host = kern_alloc_host(f->shard_len * 4, KERN_MEM_PARAMS, 0);
    memset(host, 0, f->shard_len * 4);  // the gaps between pieces and the padding stay zero
    const char *e = NULL;
    for (int t = 0; t < spec->ntensors && !e; t++) {
        const TensorSpec *ts = &spec->t[t];
        size_t begin, local, n = shard_packed_slice(s, u, t, &begin, &local), whole = model_whole_numel(ts);
        if (!n) continue;
        float *vals = mallocCheck(whole * sizeof(float));  // the whole tensor: nf4 blocks start at its element 0
        uint8_t *q = ts->nf4 ? mallocCheck(kern_nf4_bytes(whole)) : NULL;
        e = values(ctx, u, t, vals);
        if (!e && q) e = finite_or_why(ts, vals, whole);  // NF4 would turn them into finite codes; nothing checks them later
        if (!e && q) kern_nf4_quantize(q, vals, whole);
        size_t es = ts->bf16 ? sizeof(uint16_t) : sizeof(float);
        float *tmp = !e && !q ? mallocCheck(n / es * sizeof(float)) : NULL;
        const float *x = tmp ? piece_values(s, ts, vals, begin / es, n / es, tmp) : NULL;
        if (!e && ts->bf16) {  // rounded as a bf16 gather would round them (a piece's range starts at an even element)
            uint16_t *dst = (uint16_t *)(host + local);
            for (size_t i = 0; i < n / 2; i++) dst[i] = half_f32_to_bf16(x[i]);
        } else if (!e) {
            memcpy(host + local, q ? q + begin : (const uint8_t *)x, n);
        }
        free(tmp);
        free(q);
        free(vals);
    }
    if (!e) set_master(s, u, (const float *)host);
    kern_free_host(host);
    return e;
}

// Packed unit u's gathered bytes (stage, on the device) into dst: as fp32 when f32, else as its
// parameters (nf4 tensors dequantised, bf16 pieces copied as they are where the kernels take bf16
// (a GPU's parameters and activations share that dtype) or widened, the fp32 pieces copied,
// rounded to bf16 where the kernels take bf16; on the CPU under --precision bf16 the fp32 copy is
// rounded, as the bf16 gathers of other units are). A unit stored whole gives this tp rank's part.
static void unpack(const ShardState *s, int u, const uint8_t *stage, void *dst, int f32) {
    const UnitSpec *spec = &s->plan->units[u];
    for (int t = 0; t < spec->ntensors; t++) {
        const TensorSpec *ts = &spec->t[t];
        const uint8_t *src = stage + ts->pack_off;
        KernSegs g = ts->stored_whole ? model_tp_segments(ts, s->plan->tp, s->plan->tp_rank) : (KernSegs){1, ts->numel, ts->numel, 0};
        if (ts->nf4) {
            kern_nf4_dequantize(f32 ? (void *)((float *)dst + ts->offset) : (void *)kern_param_at(dst, ts->offset), f32, src,
                                ts->stored_whole ? model_whole_numel(ts) : ts->numel, g);
            // the CPU's fp32 parameters under --precision bf16: the values a GPU's bf16 dequantisation gives
            if (!f32 && s->bf16_params && !s->bf16_gathered) kern_round_bf16((float *)dst + ts->offset, ts->numel);
            continue;
        }
        for (size_t k = 0; k < g.n; k++) {  // a few runs: the whole tensors here besides nf4 are 1-D or split by rows
            size_t at = ts->offset + k * g.len, n = g.len;
            const uint8_t *from = src + (k * g.stride + g.off) * (ts->bf16 ? sizeof(uint16_t) : sizeof(float));
            if (f32) {
                if (ts->bf16) kern_bf16_to_f32((float *)dst + at, (const uint16_t *)from, n);
                else kern_copy((float *)dst + at, (const float *)from, n);
                continue;
            }
            void *p = (void *)kern_param_at(dst, at);
            if (ts->bf16 && s->bf16_gathered) kern_act_copy(p, from, n);
            else if (ts->bf16) kern_bf16_to_f32(p, (const uint16_t *)from, n);
            else if (s->bf16_gathered) kern_f32_to_bf16(p, (const float *)from, n);
            else kern_copy(p, (const float *)from, n);
            if (s->bf16_params && !s->bf16_gathered && !ts->bf16) kern_round_bf16(p, n);
        }
    }
}

void shard_unpack_unit(const ShardState *s, int u, float *full) {
    const FlatUnit *f = &s->units[u];
    uint8_t *stage = kern_alloc(f->padded * 4, KERN_MEM_BUFFERS);
    comm_wait(comm_all_gather_bf16_start(f->group, (const uint16_t *)f->device_master, (uint16_t *)stage, 2 * f->shard_len));
    unpack(s, u, stage, full, 1);
    kern_free(stage);
}

// ---- accessors ----

const ModelPlan *shard_plan(const ShardState *s) { return s->plan; }
CommGroup *shard_group(const ShardState *s) { return s->shard_group; }
CommGroup *shard_unit_group(const ShardState *s, int u) { return s->units[u].group; }
int shard_unit_member(const ShardState *s, int u) { return s->units[u].member; }
int shard_num_units(const ShardState *s) { return s->nunits; }
size_t shard_unit_len(const ShardState *s, int u) { return s->units[u].shard_len; }
size_t shard_unit_padded(const ShardState *s, int u) { return s->units[u].padded; }
size_t shard_unit_packed(const ShardState *s, int u) { return s->units[u].packed; }
float *shard_master(const ShardState *s, int u) { return s->units[u].master; }
const float *shard_device_master(const ShardState *s, int u) { return s->units[u].device_master; }
const float *shard_grad(const ShardState *s, int u) { return s->units[u].grad_shard; }
int shard_step(const ShardState *s) { return s->step; }
void shard_set_step(ShardState *s, int step) { s->step = step; }

// Whether n floats at x are all finite: the kernels' sum of squares in double on the compute
// device (NaN and infinities carry through it, squares of floats cannot overflow it), or a loop
// over host memory.
static int all_finite(const float *x, size_t n, int on_device) {
    if (on_device) return isfinite(kern_sumsq(x, n));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

// The same for n bf16 values on the compute device (a packed bf16 piece): none has the all-ones
// exponent.
static int all_finite_bf16(const uint16_t *x, size_t n) {
    uint16_t *h = mallocCheck(n * sizeof *h);
    kern_download(h, x, n * sizeof *h);
    size_t i = 0;
    while (i < n && (h[i] & 0x7f80u) != 0x7f80u) i++;
    free(h);
    return i == n;
}

int shard_nonfinite(const ShardState *s, int nstates, ShardTensorRef *found, int most) {
    const ModelPlan *plan = s->plan;
    size_t nt = 0;
    for (int u = 0; u < plan->nunits; u++) nt += (size_t)plan->units[u].ntensors;
    double *bad = callocCheck((size_t)nstates * nt, sizeof *bad);
    int moments_on_device = !kern_on_gpu() || shard_state_on_device(s);
    size_t k = 0;
    for (int st = 0; st < nstates; st++)
        for (int u = 0; u < plan->nunits; u++) {
            const FlatUnit *f = &s->units[u];
            const float *buf = st == 0 ? f->device_master : st == 1 ? f->exp_avg : f->exp_avg_sq;
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
                const TensorSpec *ts = &plan->units[u].t[t];
                if (f->packed && ts->bf16) {  // a packed unit's bf16 piece
                    n = shard_packed_slice(s, u, t, &begin, &local) / 2;
                    if (n && buf && !all_finite_bf16((const uint16_t *)((const char *)buf + local), n)) bad[k] = 1;
                    continue;
                }
                if (f->packed && !ts->nf4) {  // a packed unit's fp32 piece: its bytes are floats
                    n = shard_packed_slice(s, u, t, &begin, &local) / 4;
                    local /= 4;
                } else if (f->packed) {
                    n = 0;  // nf4 codes and scales: checked by their checksum
                }
                if (n && buf && !all_finite(buf + local, n, st == 0 || moments_on_device)) bad[k] = 1;
            }
        }
    comm_allreduce_max_f64(comm_world(), bad, k);
    int count = 0;
    k = 0;
    for (int st = 0; st < nstates; st++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++)
                if (bad[k] && count++ < most) found[count - 1] = (ShardTensorRef){st, u, t};
    free(bad);
    return count;
}

void shard_moments(const ShardState *s, int u, float **exp_avg, float **exp_avg_sq) {
    *exp_avg = s->units[u].exp_avg;
    *exp_avg_sq = s->units[u].exp_avg_sq;
}
