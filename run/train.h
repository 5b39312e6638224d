// train: the run driver by phase: setup (inputs.c: sources, state, data; outputs.c: metrics,
// TensorBoard; memory.c: the memory check), the training loop (micro-batches, clipping, AdamW,
// schedule, validation, checkpoints) and the finish (sample.c: the closing sample).
#ifndef FSDPC_TRAIN_H
#define FSDPC_TRAIN_H

#include <stdint.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "../shard/shard.h"
#include "config.h"

// learning rate for 0-based step: linear warmup over `warmup` steps, then decay to min_lr
float train_lr(const Config *cfg, int step, int max_steps);
// exit status of a run stopped by a stop signal (after its checkpoint, when training had begun)
#define TRAIN_EXIT_PREEMPTED COMM_EXIT_STOPPED
// Trains / evaluates / generates as cfg says; returns the process exit status.
int train_run(Config *cfg);
// Forward (and, when dscale != 0, backward of dscale * loss sum) of one micro-batch of `rows`
// (<= a->B) sequences over every unit, gathering and freeing units as the strategy says; gradients
// are reduced into the shards on the last micro-batch. Adds this rank's summed loss to a->loss (on
// the device: model_loss_read). kstart: document starts (model_load_batch), or NULL. batch: which
// micro-batch of the step, or batch of the validation pass, this is (where a bad token id is reported).
void train_micro_step(ShardState *s, Activations *a, const int32_t *inp, const int32_t *tgt, const int32_t *kstart,
                      int rows, float dscale, int last_micro, int batch);

#endif
