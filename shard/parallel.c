#include "../base/err.h"
// parallel: the replica x shard x tp layout of a strategy on a world.
#include "../base/err.h"
#include "parallel.h"
#include "../base/err.h"

#include "../base/err.h"
#include <stdio.h>
#include "../base/err.h"
#include <string.h>
#include "../base/err.h"

#include "../base/err.h"
// the sizes tensor parallelism splits: each must be a multiple of tp
#include "../base/err.h"
static const char *tp_fits(const ModelConfig *m, int tp) {
#include "../base/err.h"
    static char msg[256];
#include "../base/err.h"
    const struct {
#include "../base/err.h"
        const char *flag;
#include "../base/err.h"
        int n;
#include "../base/err.h"
    } split[] = {{"--num_heads", m->num_heads},
#include "../base/err.h"
                 {"--num_key_value_heads", m->num_key_value_heads},
#include "../base/err.h"
                 {"--intermediate_size", m->intermediate_size},
#include "../base/err.h"
                 {"--vocab_size", m->vocab_size}};
#include "../base/err.h"
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
#include "../base/err.h"
        if (split[i].n % tp) {
#include "../base/err.h"
            return err_text(msg, sizeof msg, "--tensor_parallel_degree %d does not divide %s %d: each tensor-parallel rank takes an equal share",
#include "../base/err.h"
                     tp, split[i].flag, split[i].n);
#include "../base/err.h"
        }
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
const char *parallel_dims_build(ParallelDims *pd, const ShardConfig *cfg, const ModelConfig *m, int world, int ranks_per_node) {
#include "../base/err.h"
    static char msg[256];
#include "../base/err.h"
    memset(pd, 0, sizeof *pd);
#include "../base/err.h"
    pd->strategy = cfg->sharding;
#include "../base/err.h"
    pd->world = world;
#include "../base/err.h"
    pd->tp = cfg->tensor_parallel_degree > 0 ? cfg->tensor_parallel_degree : 1;
#include "../base/err.h"
    pd->sequence_parallel = cfg->sequence_parallel;
#include "../base/err.h"
    if (world % pd->tp) {
#include "../base/err.h"
        return err_text(msg, sizeof msg, "--tensor_parallel_degree %d does not divide the world size %d", pd->tp, world);
#include "../base/err.h"
    }
#include "../base/err.h"
    if (pd->tp > 1 && ranks_per_node % pd->tp) {
#include "../base/err.h"
        return err_text(msg, sizeof msg, "--tensor_parallel_degree %d does not divide the %d ranks per node: a tensor-parallel group "
#include "../base/err.h"
                 "must sit inside one node", pd->tp, ranks_per_node);
#include "../base/err.h"
    }
#include "../base/err.h"
    const char *e = pd->tp > 1 ? tp_fits(m, pd->tp) : NULL;
#include "../base/err.h"
    if (e) return e;
#include "../base/err.h"
    // a rank's share of a batch's B*T rows is then whole for every B
#include "../base/err.h"
    if (pd->sequence_parallel && m->max_context_width % pd->tp) {
#include "../base/err.h"
        return err_text(msg, sizeof msg, "--sequence_parallel: --tensor_parallel_degree %d does not divide --max_context_width %d: "
#include "../base/err.h"
                 "each tensor-parallel rank takes an equal share of the batch's tokens", pd->tp, m->max_context_width);
#include "../base/err.h"
    }
#include "../base/err.h"
    pd->dp = world / pd->tp;
#include "../base/err.h"
    switch (cfg->sharding) {
#include "../base/err.h"
    case SHARD_FULL:
#include "../base/err.h"
    case SHARD_GRAD_OP:
#include "../base/err.h"
        pd->shard_size = pd->dp;
#include "../base/err.h"
        break;
#include "../base/err.h"
    case SHARD_NONE:
#include "../base/err.h"
        pd->shard_size = 1;
#include "../base/err.h"
        break;
#include "../base/err.h"
    case SHARD_HYBRID_FULL:
#include "../base/err.h"
    case SHARD_HYBRID_GRAD_OP: {
#include "../base/err.h"
        int node = ranks_per_node / pd->tp > 0 ? ranks_per_node / pd->tp : 1;
#include "../base/err.h"
        int g = cfg->shard_group_size > 0 ? cfg->shard_group_size : node;
#include "../base/err.h"
        if (g <= 0 || g > pd->dp || pd->dp % g) {
#include "../base/err.h"
            char ranks[96];
#include "../base/err.h"
            if (pd->tp > 1) snprintf(ranks, sizeof ranks, "the %d data-parallel ranks (world %d / --tensor_parallel_degree %d)", pd->dp, world, pd->tp);
#include "../base/err.h"
            else snprintf(ranks, sizeof ranks, "world size %d", world);
#include "../base/err.h"
            return err_text(msg, sizeof msg, "--sharding %s: %s is not a multiple of the shard group size %d (%s)",
#include "../base/err.h"
                     shard_strategy_name(cfg->sharding), ranks, g, cfg->shard_group_size > 0 ? "--shard_group_size" : "ranks per node");
#include "../base/err.h"
        }
#include "../base/err.h"
        pd->shard_size = g;
#include "../base/err.h"
        break;
#include "../base/err.h"
    }
#include "../base/err.h"
    }
#include "../base/err.h"
    pd->replica_size = pd->dp / pd->shard_size;
#include "../base/err.h"
    pd->reshard_after_forward = cfg->sharding == SHARD_FULL || cfg->sharding == SHARD_HYBRID_FULL;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
