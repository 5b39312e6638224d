// offload: the bookkeeping of activation offloading (model.h's model_offload_*), for model.c,
// which lays out Activations.res by it: which residual entries leave the device, the ring slots
// they pass through, the copies in flight.
#ifndef FSDPC_OFFLOAD_H
#define FSDPC_OFFLOAD_H

#include "model.h"

struct ActOffload {
    int L, horizon;
    size_t D;      // the residual stream's width
    int n;         // entries offloaded: the inputs of the checkpointed blocks
    int ring;      // device slots they pass through: horizon + 1
    int *ordinal;  // (L+1) an entry's number among the offloaded (0 = lowest), or -1
    int *slot;     // (L+1) an entry's slot in Activations.res: kept entries first, then the ring
    int *ticket;   // (n) the copy of entry k in flight (down in forward, up in backward)
    void *host;    // (n - ring, N, D) pinned host copies of entries 0..n-ring-1, activation dtype
    size_t host_bytes;
};

// The offload of the inputs of the blocks recompute[] marks (L blocks) with this horizon, or NULL
// when it would save nothing (no more checkpointed blocks than ring slots).
struct ActOffload *offload_new(const int *recompute, int L, int horizon);
void offload_free(struct ActOffload *o);
// entries of the L + 1 that stay on the device: the kept ones and the ring
int offload_device_entries(const struct ActOffload *o);
// offloaded entries that make the round trip through host memory
int offload_host_entries(const struct ActOffload *o);

#endif
