// shard: flat units and the optimizer over the rank's shards.
#include "shard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../kernels/kernels.h"

void shard_init(ShardState *s, const ModelPlan *plan, const Config *cfg) {
    s->plan = plan;
    s->step = 0;
    s->units = callocCheck(plan->nunits, sizeof(FlatUnit));
    for (int u = 0; u < plan->nunits; u++) {
        FlatUnit *f = &s->units[u];
        const UnitSpec *spec = &plan->units[u];
        f->numel = spec->numel;
        // one rank owns the whole unit, so the master shard is the compute buffer itself
        f->shard_off = 0;
        f->shard_len = f->numel;
        f->params = callocCheck(f->numel, sizeof(float));
        f->grads = callocCheck(f->numel, sizeof(float));
        f->master = f->params;
        f->exp_avg = callocCheck(f->shard_len, sizeof(float));
        f->exp_avg_sq = callocCheck(f->shard_len, sizeof(float));
        for (int t = 0; t < spec->ntensors; t++) {
            size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
            model_init_range(&spec->t[t], (uint64_t)cfg->seed, cfg->model.initializer_range, begin, n, f->master + local);
        }
    }
}

void shard_free(ShardState *s) {
    for (int u = 0; u < s->plan->nunits; u++) {
        FlatUnit *f = &s->units[u];
        free(f->params);
        free(f->grads);
        free(f->exp_avg);
        free(f->exp_avg_sq);
    }
    free(s->units);
    s->units = NULL;
}

const float *shard_params(ShardState *s, int u) { return s->units[u].params; }
float *shard_grads(ShardState *s, int u) { return s->units[u].grads; }

void shard_zero_grads(ShardState *s) {
    for (int u = 0; u < s->plan->nunits; u++) kern_zero(s->units[u].grads, s->units[u].numel);
}

size_t shard_tensor_slice(const ShardState *s, int u, int t, size_t *begin, size_t *local) {
    const FlatUnit *f = &s->units[u];
    const TensorSpec *ts = &s->plan->units[u].t[t];
    size_t lo = ts->offset > f->shard_off ? ts->offset : f->shard_off;
    size_t hi_t = ts->offset + ts->numel, hi_s = f->shard_off + f->shard_len;
    size_t hi = hi_t < hi_s ? hi_t : hi_s;
    if (hi <= lo) return *begin = 0, *local = 0, 0;
    *begin = lo - ts->offset;
    *local = lo - f->shard_off;
    return hi - lo;
}

double shard_clip_grads(ShardState *s, float max_norm) {
    double sumsq = 0.0;
    for (int u = 0; u < s->plan->nunits; u++) {
        FlatUnit *f = &s->units[u];
        sumsq += kern_sumsq(f->grads + f->shard_off, f->shard_len);
    }
    double norm = sqrt(sumsq);
    // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1
    double coef = max_norm / (norm + 1e-6);
    if (max_norm > 0 && coef < 1.0)
        for (int u = 0; u < s->plan->nunits; u++) kern_scale(s->units[u].grads, (float)coef, s->units[u].numel);
    return norm;
}

void shard_adamw_step(ShardState *s, const Config *cfg, float lr) {
    s->step++;
    for (int u = 0; u < s->plan->nunits; u++) {
        FlatUnit *f = &s->units[u];
        const UnitSpec *spec = &s->plan->units[u];
        for (int t = 0; t < spec->ntensors; t++) {
            size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
            if (!n) continue;
            float wd = spec->t[t].decay ? cfg->weight_decay : 0.0f;
            kern_adamw(f->master + local, f->grads + f->shard_off + local, f->exp_avg + local, f->exp_avg_sq + local, n,
                       lr, cfg->beta1, cfg->beta2, cfg->adam_eps, wd, s->step);
        }
    }
}
