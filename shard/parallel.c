// parallel: the shard x replica layout of a strategy on a world.
#include "parallel.h"

#include <stdio.h>
#include <string.h>

const char *parallel_dims_build(ParallelDims *pd, const Config *cfg, int world, int ranks_per_node) {
    static char msg[256];
    memset(pd, 0, sizeof *pd);
    pd->strategy = cfg->sharding;
    pd->world = world;
    switch (cfg->sharding) {
    case SHARD_FULL:
    case SHARD_GRAD_OP:
        pd->shard_size = world;
        break;
    case SHARD_NONE:
        pd->shard_size = 1;
        break;
    case SHARD_HYBRID_FULL:
    case SHARD_HYBRID_GRAD_OP: {
        int g = cfg->shard_group_size > 0 ? cfg->shard_group_size : ranks_per_node;
        if (g <= 0 || g > world || world % g) {
            snprintf(msg, sizeof msg, "--sharding %s: world size %d is not a multiple of the shard group size %d (%s)",
                     config_sharding_name(cfg->sharding), world, g, cfg->shard_group_size > 0 ? "--shard_group_size" : "ranks per node");
            return msg;
        }
        pd->shard_size = g;
        break;
    }
    }
    pd->replica_size = world / pd->shard_size;
    pd->reshard_after_forward = cfg->sharding == SHARD_FULL || cfg->sharding == SHARD_HYBRID_FULL;
    return NULL;
}
