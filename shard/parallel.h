// parallel: the run's rank layout, as torchtitan's ParallelDims: built once from the config and
// the world size, checked there, then read by the memory estimate and the shard engine.
#ifndef FSDPC_PARALLEL_H
#define FSDPC_PARALLEL_H

#include "../model/config.h"

typedef struct {
    ShardStrategy strategy;
    int world;                  // ranks in the job
    int shard_size;             // ranks of a shard group, which split every unit between them
    int replica_size;           // shard groups, each holding the same shards (world = shard_size * replica_size)
    int reshard_after_forward;  // gathered parameters are freed after forward and gathered again for backward (ZeRO-3)
} ParallelDims;

// Fills pd for cfg's --sharding and --shard_group_size on `world` ranks, ranks_per_node of them
// per node (a hybrid strategy's shard group when --shard_group_size is not given). NULL, or why
// they do not fit (a static one-line message).
const char *parallel_dims_build(ParallelDims *pd, const Config *cfg, int world, int ranks_per_node);

#endif
