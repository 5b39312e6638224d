// config: the one-line summary of the whole configuration.
#include "config.h"

#include <stdio.h>

void config_describe(const Config *c, const char *train_data, char *buf, int len) {
    const ModelConfig *m = &c->model;
    char extra[32] = "";
    if (m->sliding_window) snprintf(extra, sizeof extra, " window=%d", m->sliding_window);
    else if (m->hidden_act) snprintf(extra, sizeof extra, " act=%s", cli_choice_name(config_hidden_acts, m->hidden_act));
    snprintf(buf, len,
             "model=%s%s%s D=%d L=%d H=%d KV=%d F=%d T=%d V=%d%s sharding=%s precision=%s batch_size=%d grad_accum=%d "
             "max_steps=%d lr=%g min_lr=%g warmup=%g decay=%s wd=%g betas=%g,%g grad_clip=%g seed=%d train_data=%s",
             m->model_type, m->model_name[0] ? "/" : "", m->model_name, m->hidden_width, m->num_layers, m->num_heads, m->num_key_value_heads,
             m->intermediate_size, m->max_context_width, m->vocab_size, extra, shard_strategy_name(c->shard.sharding),
             shard_precision_name(c->shard.precision), c->optim.batch_size, c->optim.grad_accum, c->optim.max_steps, c->optim.lr, c->optim.min_lr, c->optim.warmup,
             shard_lr_decay_name(c->optim.lr_decay_style), c->optim.weight_decay, c->optim.beta1,
             c->optim.beta2, c->optim.grad_clip, c->optim.seed, train_data);
}
