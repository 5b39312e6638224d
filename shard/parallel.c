// parallel: the replica x shard (x cp) x tp layout of a strategy on a world.
#include "parallel.h"
#include "../base/err.h"

#include <stdio.h>
#include <string.h>

// the sizes tensor parallelism splits: each must be a multiple of tp
static const char *tp_fits(const ModelConfig *m, int tp) {
    static char msg[256];
    const struct {
        const char *flag;
        int n;
    } split[] = {{"--num_heads", m->num_heads},
                 {"--num_key_value_heads", m->num_key_value_heads},
                 {"--intermediate_size", m->intermediate_size},
                 {"--vocab_size", m->vocab_size}};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (split[i].n % tp) {
            return err_text(msg, sizeof msg, "--tensor_parallel_degree %d does not divide %s %d: each tensor-parallel rank takes an equal share",
                     tp, split[i].flag, split[i].n);
        }
    return NULL;
}

// Expert parallelism: ep splits the experts and the data-parallel ranks evenly, and an ep group
// lies inside a shard group (the experts then shard over the shard group's ranks with the same
// experts) or holds whole shard groups (each expert unsharded on its ranks: --sharding no_shard,
// or hybrid groups smaller than ep).
static const char *expert_dims(ParallelDims *pd, const ShardConfig *cfg, const ModelConfig *m) {
    static char msg[256];
    pd->ep = cfg->expert_parallel_degree > 0 ? cfg->expert_parallel_degree : 1;
    pd->expert_shard_size = pd->shard_size, pd->expert_replica_size = pd->replica_size;
    if (pd->ep == 1) return NULL;
    if (!m->num_experts)
        return err_text(msg, sizeof msg, "--expert_parallel_degree %d applies to a mixture of experts; this model has none", pd->ep);
    if (m->num_experts % pd->ep)
        return err_text(msg, sizeof msg, "--expert_parallel_degree %d does not divide --num_experts %d: each expert-parallel rank "
                        "holds an equal share of the experts", pd->ep, m->num_experts);
    if (pd->dp % pd->ep)
        return err_text(msg, sizeof msg, "--expert_parallel_degree %d does not divide the %d data-parallel ranks (world %d / "
                        "--tensor_parallel_degree %d)", pd->ep, pd->dp, pd->world, pd->tp);
    if (pd->shard_size % pd->ep && pd->ep % pd->shard_size)
        return err_text(msg, sizeof msg, "--expert_parallel_degree %d and the shard group of %d ranks (--sharding %s) do not nest: "
                        "one must divide the other", pd->ep, pd->shard_size, shard_strategy_name(cfg->sharding));
    pd->expert_shard_size = pd->shard_size % pd->ep ? 1 : pd->shard_size / pd->ep;
    pd->expert_replica_size = pd->dp / pd->ep / pd->expert_shard_size;
    return NULL;
}

// Context parallelism: cp consecutive data-parallel ranks split each sequence into 2 cp chunks,
// rank r holding chunks r and 2 cp - 1 - r (the causal work then evens out over the group).
static const char *context_dims(ParallelDims *pd, const ShardConfig *cfg, const ModelConfig *m) {
    static char msg[320];
    pd->cp = cfg->context_parallel_degree > 0 ? cfg->context_parallel_degree : 1;
    if (pd->cp == 1) return NULL;
    const int T = m->max_context_width;
    if (pd->dp % pd->cp)
        return err_text(msg, sizeof msg, "--context_parallel_degree %d does not divide the %d data-parallel ranks (world %d / "
                        "--tensor_parallel_degree %d)", pd->cp, pd->dp, pd->world, pd->tp);
    if (T % (2 * pd->cp))
        return err_text(msg, sizeof msg, "--context_parallel_degree %d: --max_context_width %d does not split into %d equal "
                        "chunks (each rank holds two, mirrored); make it a multiple of %d", pd->cp, T, 2 * pd->cp, 2 * pd->cp);
    if (pd->sequence_parallel && (T / pd->cp) % pd->tp)
        return err_text(msg, sizeof msg, "--sequence_parallel: --tensor_parallel_degree %d does not divide a context-parallel "
                        "rank's %d tokens (--max_context_width %d / --context_parallel_degree %d)", pd->tp, T / pd->cp, T, pd->cp);
    if (pd->shard_size % pd->cp && pd->cp % pd->shard_size)
        return err_text(msg, sizeof msg, "--context_parallel_degree %d and the shard group of %d ranks (--sharding %s) do not "
                        "nest: a context-parallel group must lie inside one shard group or hold whole ones", pd->cp,
                        pd->shard_size, shard_strategy_name(cfg->sharding));
    return NULL;
}

const char *parallel_dims_build(ParallelDims *pd, const ShardConfig *cfg, const ModelConfig *m, int world, int ranks_per_node) {
    static char msg[256];
    memset(pd, 0, sizeof *pd);
    pd->strategy = cfg->sharding;
    pd->world = world;
    pd->tp = cfg->tensor_parallel_degree > 0 ? cfg->tensor_parallel_degree : 1;
    pd->sequence_parallel = cfg->sequence_parallel;
    if (world % pd->tp) {
        return err_text(msg, sizeof msg, "--tensor_parallel_degree %d does not divide the world size %d", pd->tp, world);
    }
    if (pd->tp > 1 && ranks_per_node % pd->tp) {
        return err_text(msg, sizeof msg, "--tensor_parallel_degree %d does not divide the %d ranks per node: a tensor-parallel group "
                 "must sit inside one node", pd->tp, ranks_per_node);
    }
    const char *e = pd->tp > 1 ? tp_fits(m, pd->tp) : NULL;
    if (e) return e;
    // a rank's share of a batch's B*T rows is then whole for every B
    if (pd->sequence_parallel && m->max_context_width % pd->tp) {
        return err_text(msg, sizeof msg, "--sequence_parallel: --tensor_parallel_degree %d does not divide --max_context_width %d: "
                 "each tensor-parallel rank takes an equal share of the batch's tokens", pd->tp, m->max_context_width);
    }
    pd->dp = world / pd->tp;
    switch (cfg->sharding) {
    case SHARD_FULL:
    case SHARD_GRAD_OP:
        pd->shard_size = pd->dp;
        break;
    case SHARD_NONE:
        pd->shard_size = 1;
        break;
    case SHARD_HYBRID_FULL:
    case SHARD_HYBRID_GRAD_OP: {
        int node = ranks_per_node / pd->tp > 0 ? ranks_per_node / pd->tp : 1;
        int g = cfg->shard_group_size > 0 ? cfg->shard_group_size : node;
        if (g <= 0 || g > pd->dp || pd->dp % g) {
            char ranks[96];
            if (pd->tp > 1) snprintf(ranks, sizeof ranks, "the %d data-parallel ranks (world %d / --tensor_parallel_degree %d)", pd->dp, world, pd->tp);
            else snprintf(ranks, sizeof ranks, "world size %d", world);
            return err_text(msg, sizeof msg, "--sharding %s: %s is not a multiple of the shard group size %d (%s)",
                     shard_strategy_name(cfg->sharding), ranks, g, cfg->shard_group_size > 0 ? "--shard_group_size" : "ranks per node");
        }
        pd->shard_size = g;
        break;
    }
    }
    pd->replica_size = pd->dp / pd->shard_size;
    e = expert_dims(pd, cfg, m);
    if (!e) e = context_dims(pd, cfg, m);
    if (e) return e;
    pd->reshard_after_forward = cfg->sharding == SHARD_FULL || cfg->sharding == SHARD_HYBRID_FULL;
    return NULL;
}
