// pack: which global samples each micro-batch of a training step holds, on each rank: B samples a
// micro-batch, or (--packing) the step's samples packed first-fit into contexts. Depends only on
// the step, the layout and the data, so every rank computes the same order (DESIGN invariant 2).
#ifndef FSDPC_PACK_H
#define FSDPC_PACK_H

#include <stdint.h>

#include "../data.h"

// The order's layout: position sample_base starts step base_step (a resumed checkpoint's
// data_position and step), so a resume with another global batch neither skips nor repeats
// samples; the tp ranks of a tensor-parallel group share a dp_rank and read the same samples.
// Positions count the samples a run consumes; position p is the p-th global sample index of the
// seeded order that is not in `skipped` (the samples a rollback dropped), so the order holds them
// nowhere and every later sample moves up, as in a run whose data never held them.
typedef struct {
    uint64_t sample_base;
    int base_step;
    const uint64_t *skipped;  // ascending global sample indices (--on_nonfinite rollback), nskipped of them
    size_t nskipped;
    int global_batch;  // sequences per optimizer step, over all ranks and micro-batches
    int batch_size, grad_accum, packing;
    int dp_rank, dp_world;
} PackLayout;

// The micro-batches of a step on this rank ([step & 1]: the step's and the next one's), their
// count, and the step each pair holds (-1: none yet).
typedef struct {
    DataPlan **plans[2];
    int nplans[2], step[2];
    int n;  // plans allocated per step
} PackPlans;

// First position of `step`, and of micro-batch `micro` of `step` on this rank.
uint64_t pack_step_first(const PackLayout *l, int step);
uint64_t pack_batch_first(const PackLayout *l, int step, int micro);
// The global sample index at position pos (pos itself when nothing was skipped).
uint64_t pack_sample(const PackLayout *l, uint64_t pos);
// Plans for up to n micro-batches of B rows of T tokens per step.
void pack_plans_init(PackPlans *p, int n, int B, int T);
void pack_plans_free(PackPlans *p);
// The plans made so far are stale (the skipped samples changed): the next step's are made afresh.
void pack_plans_forget(PackPlans *p);
// Fills p's plans of `step` (once per step) for data d in the order of seed: packed, or B samples each.
void pack_step_plans(PackPlans *p, const PackLayout *l, const Dataset *d, uint64_t seed, int step);

#endif
