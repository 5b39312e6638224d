// train: the run driver: resume, the training loop (micro-batches, clipping, AdamW, schedule),
// logging, validation, checkpoints, and the closing sample.
#ifndef FSDPC_TRAIN_H
#define FSDPC_TRAIN_H

#include "../model/config.h"

// learning rate for 0-based step: linear warmup over `warmup` steps, then decay to min_lr
float train_lr(const Config *cfg, int step, int max_steps);
void train_run(Config *cfg);

#endif
