// shard: the FSDP engine: one flat parameter buffer per unit, the rank's shard of it, gradient
// reduction, sharded AdamW and global-norm clipping.
#ifndef FSDPC_SHARD_H
#define FSDPC_SHARD_H

#include <stddef.h>

#include "../model/config.h"
#include "../model/llama.h"

typedef struct {
    size_t numel;                 // elements of the unit
    size_t shard_off, shard_len;  // this rank's slice of the flat buffer
    float *params;                // (numel) full parameters used by compute
    float *grads;                 // (numel) full gradients written by backward
    float *master;                // (shard_len) fp32 master shard updated by AdamW
    float *exp_avg, *exp_avg_sq;  // (shard_len) AdamW moments
} FlatUnit;

typedef struct {
    const ModelPlan *plan;
    FlatUnit *units;  // plan->nunits
    int step;         // optimizer steps taken
} ShardState;

// Allocates every unit and initialises the rank's shards from (seed, name, index).
void shard_init(ShardState *s, const ModelPlan *plan, const Config *cfg);
void shard_free(ShardState *s);
// Full parameters of unit u for compute, and its gradient buffer.
const float *shard_params(ShardState *s, int u);
float *shard_grads(ShardState *s, int u);
void shard_zero_grads(ShardState *s);
// Global L2 norm of all gradients; scales them to max_norm when above it (max_norm <= 0: no clip).
double shard_clip_grads(ShardState *s, float max_norm);
void shard_adamw_step(ShardState *s, const Config *cfg, float lr);

// The part of tensor t of unit u that this rank holds: elements [*begin, *begin + *count) of the
// flattened tensor, found at offset *local inside the unit's shard buffers. Returns *count.
size_t shard_tensor_slice(const ShardState *s, int u, int t, size_t *begin, size_t *local);

#endif
