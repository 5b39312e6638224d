// parallel: the run's rank layout, as torchtitan's ParallelDims: built once from the config and
// the world size, checked there, then read by the memory estimate and the shard engine.
// The mesh is replica x shard x tp: rank = (replica * shard_size + shard) * tp + tp rank, so a
// tensor-parallel group is tp consecutive ranks (inside a node), and the data-parallel ranks
// (world / tp of them, each group of tp ranks reading the same batch) form shard_size x replica_size.
// Context parallelism splits every sequence over cp consecutive data-parallel ranks (a cp group:
// ranks d / cp alike, same tp rank), so the mesh reads replica x shard x cp x tp where cp divides
// the shard group, or replica x cp x tp with shard groups inside a cp group. For the weights the
// cp ranks are data-parallel ranks like any other (their gradients are reduced together); only
// the data differs: a cp group reads one batch, each rank two mirrored chunks of each sequence.
#ifndef FSDPC_PARALLEL_H
#define FSDPC_PARALLEL_H

#include "../model/config.h"
#include "shard_config.h"

typedef struct {
    ShardStrategy strategy;
    int world;                  // ranks in the job
    int tp;                     // ranks that split each block's matmuls (1: none)
    int dp;                     // data-parallel ranks: world / tp
    int shard_size;             // data-parallel ranks of a shard group, which split every unit between them
    int replica_size;           // shard groups, each holding the same shards (dp = shard_size * replica_size)
    int reshard_after_forward;  // gathered parameters are freed after forward and gathered again for backward (ZeRO-3)
    int sequence_parallel;      // with tp > 1: norms and dropout on sequence shards
    // Expert parallelism (a mixture of experts): ep consecutive data-parallel ranks split the
    // experts, E/ep each, and send tokens to them by all-to-all; the ranks with the same experts
    // (dp/ep of them) shard them over expert_shard_size ranks (the ranks of a shard group with the
    // same place in their ep group) and replicate them expert_replica_size times. ep 1: one unit
    // holds a block's experts with the rest.
    int ep, expert_shard_size, expert_replica_size;
    int cp;  // ranks of a context-parallel group (1: none); dp / cp groups read different batches
} ParallelDims;

// Fills pd for cfg's --sharding, --shard_group_size and --tensor_parallel_degree and model m on `world`
// ranks, ranks_per_node of them per node (a hybrid strategy's shard group, when
// --shard_group_size is not given, is a node's data-parallel ranks: ranks_per_node / tp). The
// tp degree must divide the world, the heads, the key/value heads, the MLP width and the
// vocabulary. The ep degree must divide the experts and the data-parallel ranks, and fit the shard
// group (divide it, or be a multiple of it). The cp degree likewise divides the data-parallel ranks
// and nests with the shard group, and splits --max_context_width into 2 cp equal chunks (each a
// multiple of tp under --sequence_parallel). NULL, or why the layout does not fit (a static one-line message naming the numbers).
const char *parallel_dims_build(ParallelDims *pd, const ShardConfig *cfg, const ModelConfig *m, int world, int ranks_per_node);

#endif
