// train: the run driver: resume, the training loop (micro-batches, clipping, AdamW, schedule),
// logging, validation, checkpoints, and the closing sample.
#ifndef FSDPC_TRAIN_H
#define FSDPC_TRAIN_H

#include <stdint.h>

#include "../comm/comm.h"
#include "../data/tokenizer.h"
#include "../model/config.h"
#include "../model/model.h"
#include "../shard/shard.h"

// learning rate for 0-based step: linear warmup over `warmup` steps, then decay to min_lr
float train_lr(const Config *cfg, int step, int max_steps);
// exit status of a run stopped by a stop signal (after its checkpoint, when training had begun)
#define TRAIN_EXIT_PREEMPTED COMM_EXIT_STOPPED
// The start-up memory check's estimate of one rank's bytes for plan under c on layout dims: the
// host's share (device 0) or a GPU's (device 1), by kind into *e, activations into *acts, and the
// pinned host memory of offloaded activations into *acts_host (a GPU's, under
// --offload_activations; else 0). fsdpc plan calls it too, so the two never disagree.
double train_memory_estimate(const ModelPlan *plan, const Config *c, const ParallelDims *dims, int device,
                             ShardMemEstimate *e, double *acts, double *acts_host);
// Which blocks a run recomputes (model_acts_alloc's ckpt_every: 0 none, else every Nth) and its
// activation offloading horizon (0: none), on a GPU (gpu 1) or the CPU: --offload_activations
// offloads the checkpointed blocks' inputs, so on a GPU it turns checkpointing on; on the CPU it
// does nothing (activations live in host memory already).
int train_ckpt_every(const Config *c, int gpu);
int train_offload_horizon(const Config *c, int gpu);
// The model's vocabulary when no --vocab_size, --model_name or source fixed it: a real tokenizer's,
// else the largest one the HDF5 files of --train_data / --val_data record (a vocab_size or
// n_vocab attribute; file then names the file, else it is ""), else the byte tokenizer's 256.
int train_vocab_unfixed(const Config *c, const Tokenizer *tok, char *file, size_t filelen);
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
