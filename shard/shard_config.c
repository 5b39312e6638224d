// shard_config: the names of the sharding and optimizer sections' enumerated settings.
#include "shard_config.h"

#include <stddef.h>

// The names of each enumerated setting: the first entry of a value is its name, later ones
// other spellings accepted on the command line.
const CliChoice shard_strategy_names[] = {
    {"full-shard", SHARD_FULL}, {"grad-shard", SHARD_GRAD_OP}, {"no-shard", SHARD_NONE},
    {"hybrid-full-shard", SHARD_HYBRID_FULL}, {"hybrid-grad-shard", SHARD_HYBRID_GRAD_OP},
    {"hybrid-shard", SHARD_HYBRID_FULL},  // minimal_fsdp's spelling
    {NULL, 0}};
const CliChoice shard_precision_names[] = {{"float32", PRECISION_FP32}, {"bf16", PRECISION_BF16}, {NULL, 0}};
const CliChoice shard_lr_decay_names[] = {
    {"cosine", LR_DECAY_COSINE}, {"linear", LR_DECAY_LINEAR}, {"constant", LR_DECAY_CONSTANT},
    {"exponential", LR_DECAY_EXPONENTIAL}, {"plateau", LR_DECAY_PLATEAU}, {NULL, 0}};
const CliChoice shard_nonfinite_names[] = {
    {"stop", NONFINITE_STOP}, {"skip", NONFINITE_SKIP}, {"rollback", NONFINITE_ROLLBACK}, {NULL, 0}};

const char *shard_strategy_name(ShardStrategy s) { return cli_choice_name(shard_strategy_names, s); }
const char *shard_precision_name(Precision p) { return cli_choice_name(shard_precision_names, p); }
const char *shard_lr_decay_name(LrDecay d) { return cli_choice_name(shard_lr_decay_names, d); }

int shard_base_bf16(const ShardConfig *c) { return c->precision == PRECISION_BF16; }
