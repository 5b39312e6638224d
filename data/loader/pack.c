// pack: the micro-batches of a training step (see pack.h).
#include "pack.h"

#include <stdlib.h>

#include "../../base/err.h"

uint64_t pack_step_first(const PackLayout *l, int step) {
    return l->sample_base + (uint64_t)(step - l->base_step) * l->global_batch;
}

uint64_t pack_batch_first(const PackLayout *l, int step, int micro) {
    return pack_step_first(l, step) + (uint64_t)(micro * l->dp_world + l->dp_rank) * l->batch_size;
}

uint64_t pack_sample(const PackLayout *l, uint64_t pos) {
    uint64_t g = pos;  // each skipped index at or below it moves it one further (ascending: one pass)
    for (size_t i = 0; i < l->nskipped && l->skipped[i] <= g; i++) g++;
    return g;
}

void pack_plans_init(PackPlans *p, int n, int B, int T) {
    p->n = n;
    for (int k = 0; k < 2; k++) {
        p->plans[k] = mallocCheck((size_t)n * sizeof(DataPlan *));
        for (int m = 0; m < n; m++) p->plans[k][m] = data_plan_new(B, T);
        p->step[k] = -1;
    }
}

void pack_plans_free(PackPlans *p) {
    for (int k = 0; k < 2; k++) {
        for (int m = 0; m < p->n; m++) data_plan_free(p->plans[k][m]);
        free(p->plans[k]);
    }
}

// --packing: the step's samples, in order, each into the first of its contexts with room (first
// fit), so a step holds the same samples packed or not. Contexts go to ranks round robin, then to
// micro-batches of up to B rows; every rank runs as many micro-batches as the busiest. Depends
// only on the step and the data: every rank computes the same packing.
static int pack_step(const PackLayout *l, const Dataset *d, uint64_t seed, int step, DataPlan **plans) {
    int G = l->global_batch, T = d->T, B = l->batch_size, W = l->dp_world, nrows = 0;
    uint64_t g0 = pack_step_first(l, step);
    int *row_of = mallocCheck((size_t)G * sizeof(int)), *room = mallocCheck((size_t)G * sizeof(int));
    for (int i = 0; i < G; i++) {
        int len = data_sample_len(d, seed, pack_sample(l, g0 + (uint64_t)i), 1), row = 0;
        while (row < nrows && room[row] < len) row++;
        if (row == nrows) room[nrows++] = T;
        room[row] -= len;
        row_of[i] = len ? row : -1;  // a row with nothing to predict needs no place
    }
    int mine = nrows / W + (l->dp_rank < nrows % W), most = (nrows + W - 1) / W;
    int nmicro = most ? (most + B - 1) / B : 1;
    for (int m = 0; m < nmicro; m++) {
        DataPlan *p = plans[m];
        int lo = m * B, hi = mine < lo + B ? mine : lo + B;  // this rank's rows of the micro-batch
        p->nrows = hi > lo ? hi - lo : 0;
        p->first[0] = 0;
        for (int k = 0; k < p->nrows; k++) {  // row k of the micro-batch is context (lo + k) * W + rank
            int ctx = (lo + k) * W + l->dp_rank, n = p->first[k];
            for (int i = 0; i < G; i++)
                if (row_of[i] == ctx) p->samples[n++] = pack_sample(l, g0 + (uint64_t)i);
            p->first[k + 1] = n;
        }
        if (!p->nrows) {  // no context left for this rank: one padding row, to keep step with the others
            p->nrows = 1;
            p->first[1] = 0;
        }
    }
    free(row_of);
    free(room);
    return nmicro;
}

void pack_step_plans(PackPlans *p, const PackLayout *l, const Dataset *d, uint64_t seed, int step) {
    int k = step & 1;
    if (p->step[k] == step) return;
    p->step[k] = step;
    if (l->packing) {
        p->nplans[k] = pack_step(l, d, seed, step, p->plans[k]);
        return;
    }
    p->nplans[k] = l->grad_accum;
    for (int m = 0; m < l->grad_accum; m++) {
        DataPlan *d = p->plans[k][m];
        data_plan_rows(d, l->batch_size, pack_batch_first(l, step, m));
        for (int b = 0; l->nskipped && b < l->batch_size; b++) d->samples[b] = pack_sample(l, d->samples[b]);
    }
}

void pack_plans_forget(PackPlans *p) { p->step[0] = p->step[1] = -1; }
