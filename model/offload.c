// offload: activation offloading (see offload.h and model.h). Entry k of the n offloaded ones
// lives in ring slot k % ring on the device. Forward writes them bottom up: entry k goes down to
// the host while the blocks above compute, and the kernels writing entry k + ring first wait for
// that copy. The top `ring` entries are never copied: backward starts with them in place. Backward
// reads them top down: after block k's recompute, entry k - horizon comes back into the slot that
// recompute wrote last (entry k + 1's), so `horizon` entries are on their way while block k runs.
#include "offload.h"

#include <stdio.h>
#include <stdlib.h>

#include "../base/err.h"
#include "../kernels/kernels.h"

struct ActOffload *offload_new(const int *recompute, int L, int horizon) {
    int n = 0;
    for (int l = 0; l < L; l++) n += recompute[l] != 0;
    if (horizon <= 0 || n <= horizon + 1) return NULL;
    struct ActOffload *o = callocCheck(1, sizeof *o);
    o->L = L, o->horizon = horizon, o->n = n, o->ring = horizon + 1;
    o->ordinal = mallocCheck((size_t)(L + 1) * sizeof(int));
    o->slot = mallocCheck((size_t)(L + 1) * sizeof(int));
    o->ticket = callocCheck((size_t)n, sizeof(int));
    int kept = 0, k = 0, first = L + 1 - n;  // the ring's first slot
    for (int l = 0; l <= L; l++) {
        int off = l < L && recompute[l];
        o->ordinal[l] = off ? k++ : -1;
        o->slot[l] = off ? first + o->ordinal[l] % o->ring : kept++;
    }
    return o;
}

void offload_free(struct ActOffload *o) {
    if (!o) return;
    if (o->host) kern_free_host(o->host);
    free(o->ordinal);
    free(o->slot);
    free(o->ticket);
    free(o);
}

int offload_device_entries(const struct ActOffload *o) { return o->L + 1 - o->n + o->ring; }
int offload_host_entries(const struct ActOffload *o) { return o->n - o->ring; }

// entry l's place in Activations.res (as model.c lays it out) and entry k's host copy, and their
// size, for the current a->B rows (a packed micro-batch may run fewer)
static size_t entry_elems(const Activations *a) { return model_res_numel(a, (int)a->offload->D, a->T); }
static void *device_entry(const Activations *a, int l) { return kern_act_at(a->res, a->offload->slot[l] * entry_elems(a)); }
static void *host_entry(const Activations *a, int k) { return kern_act_at(a->offload->host, k * entry_elems(a)); }

void model_offload_fwd(Activations *a, int l) {
    struct ActOffload *o = a->offload;
    if (!o) return;
    int k = o->ordinal[l];
    if (k >= 0 && k < o->n - o->ring)
        o->ticket[k] = kern_download_async(host_entry(a, k), device_entry(a, l), entry_elems(a) * kern_act_bytes());
    int next = l < o->L ? o->ordinal[l + 1] : -1;
    if (next >= o->ring) kern_async_fence_to(o->ticket[next - o->ring]);  // its slot's last entry is on the host
}

void model_offload_fetch(Activations *a, int l) {
    struct ActOffload *o = a->offload;
    if (!o) return;
    int k = o->ordinal[l];
    if (k >= 0 && k < o->n - o->ring) kern_async_fence_to(o->ticket[k]);
}

void model_offload_prefetch(Activations *a, int l) {
    struct ActOffload *o = a->offload;
    if (!o || o->ordinal[l] < 0) return;
    int j = o->ordinal[l] - o->horizon;
    if (j < 0 || j >= o->n - o->ring) return;  // none left below, or still in the ring since forward
    int lj = 0;
    while (o->ordinal[lj] != j) lj++;
    kern_async_after_kernels();  // the recompute just queued wrote the slot last
    o->ticket[j] = kern_upload_async(device_entry(a, lj), host_entry(a, j), entry_elems(a) * kern_act_bytes());
}

const char *model_offload_describe(const Activations *a) {
    static char msg[320];
    const struct ActOffload *o = a->offload;
    if (!o) return NULL;
    return err_text(msg, sizeof msg,
             "the inputs of %d checkpointed blocks pass through %d device entries; %d of them wait in pinned host memory "
             "(%.2f MiB) from forward to backward, fetched %d block(s) ahead", o->n, o->ring, o->n - o->ring,
             o->host_bytes / (1024.0 * 1024.0), o->horizon);
}
