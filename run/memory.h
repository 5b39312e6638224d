// memory: one rank's memory estimate for a run, shared by training's start-up check and fsdpc
// plan, so the two never disagree.
#ifndef FSDPC_MEMORY_H
#define FSDPC_MEMORY_H

#include "../model/model.h"
#include "../shard/shard.h"
#include "config.h"

// One rank's bytes for plan under c on layout dims: the host's share (device 0) or a GPU's
// (device 1), by kind into *e, activations into *acts, and the pinned host memory of offloaded
// activations into *acts_host (a GPU's, under --offload_activations; else 0).
double memory_estimate(const ModelPlan *plan, const Config *c, const ParallelDims *dims, int device, ShardMemEstimate *e,
                       double *acts, double *acts_host);
// Which blocks a run recomputes (model_acts_alloc's ckpt_every: 0 none, else every Nth) and its
// activation offloading horizon (0: none), on a GPU (gpu 1) or the CPU: --offload_activations
// offloads the checkpointed blocks' inputs, so on a GPU it turns checkpointing on; on the CPU it
// does nothing (activations live in host memory already).
int memory_ckpt_every(const Config *c, int gpu);
int memory_offload_horizon(const Config *c, int gpu);
// --async_checkpoint's staging buffer and --keep_snapshot's snapshot (one buffer when both are
// given) per rank for the estimate e (host memory; 0 without them), and the flags that ask for it
double memory_staging(const ShardMemEstimate *e, const Config *c);
const char *memory_staging_flags(const Config *c);
// Before allocating: this rank's estimated peak against what it may use; a run that cannot fit
// ends on every rank with what would fit. Collective.
void memory_check(const ModelPlan *plan, const Config *c, const ParallelDims *dims);

#endif
