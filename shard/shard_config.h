// shard_config: the sharding and optimizer sections of the run's configuration (run/config.h holds
// the whole Config), with their enumerated settings and each one's list of names (flags, error
// messages, config_describe and logs all read it; the flag parser stores them as int).
#ifndef FSDPC_SHARD_CONFIG_H
#define FSDPC_SHARD_CONFIG_H

#include "../base/cli.h"

// --sharding, after torch's ShardingStrategy
typedef enum { SHARD_FULL, SHARD_GRAD_OP, SHARD_NONE, SHARD_HYBRID_FULL, SHARD_HYBRID_GRAD_OP } ShardStrategy;
typedef enum { PRECISION_FP32, PRECISION_BF16 } Precision;  // --precision, --reduce_dtype
typedef enum { LR_DECAY_COSINE, LR_DECAY_LINEAR, LR_DECAY_CONSTANT, LR_DECAY_EXPONENTIAL, LR_DECAY_PLATEAU } LrDecay;
// --on_nonfinite: what a step with a non-finite loss or gradient norm does (docs/flags.md)
typedef enum { NONFINITE_STOP, NONFINITE_SKIP, NONFINITE_ROLLBACK } NonfiniteAction;

// How parameters, gradients and optimizer state are split, and how a block's work is done
typedef struct {
    ShardStrategy sharding;
    int shard_group_size;
    int tensor_parallel_degree, sequence_parallel;  // the mesh's tp degree (parallel.h); --sequence_parallel
    int expert_parallel_degree;  // ranks the experts split over (1: every rank holds all of them)
    int context_parallel_degree;  // ranks that split every sequence, ring attention between them (1: none)
    Precision precision, reduce_dtype;
    int cpu_offload, activation_checkpoints, selective_checkpointing, meta_init;
    int accumulate_unsharded;  // --grad_accum > 1 keeps full gradients and reduces once a step (FSDP no_sync)
    int offload_activations, activation_loading_horizon;
    int shard_degree;  // SMP's hybrid shard degree (0: unset): --sharding hybrid-full-shard --shard_group_size N
} ShardConfig;

// How the model is optimised: AdamW and its learning-rate schedule, and the training part (the
// loop's batch counts, length and seed), as torchtitan's optimizer, lr_scheduler and training
// sections together
typedef struct {
    float lr, min_lr, warmup, weight_decay, beta1, beta2, grad_clip, adam_eps;
    LrDecay lr_decay_style;
    int lr_decay_iters;  // steps the decay spans after warm-up (0: to --max_steps); --min_lr after them
    float plateau;       // plateau schedule: steps (below 1: a fraction of --max_steps) held at --lr after warm-up
    // training
    int batch_size, grad_accum, max_steps, max_epochs, seed;
    int skip_nonfinite_steps;  // updates with a non-finite loss/grad norm skipped before the run stops
    NonfiniteAction on_nonfinite;
} OptimConfig;

// the names of the enumerated settings: their one list (the first entry of a value is its name,
// later ones other spellings the command line accepts), and a value's name
extern const CliChoice shard_strategy_names[], shard_precision_names[], shard_lr_decay_names[], shard_nonfinite_names[];
const char *shard_strategy_name(ShardStrategy s);
const char *shard_precision_name(Precision p);
const char *shard_lr_decay_name(LrDecay d);
// ModelConfig.base_bf16 under these settings: --precision bf16, whose gathers round the frozen
// base anyway
int shard_base_bf16(const ShardConfig *c);

#endif
