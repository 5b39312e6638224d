// context: context parallelism's attention. A cp group splits every sequence of cp * T tokens into
// 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r (a head and its mirrored tail, so every
// rank's causal work is the same). Attention runs as a ring: each rank starts from its own keys
// and values, and at each of cp steps computes its queries' part against the block it holds while
// the block moves on to the next rank; the parts merge by their log-sum-exp. Backward goes round
// again, each block carrying the gradients of its keys and values (sent on once computed, the keys
// and values themselves while the step computes), and one last step returns those to their rank.
// Host buffers (the CPU; a GPU run refuses cp > 1).
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "model.h"

size_t model_attention_saved(const Activations *a, int H) {
    if (a->cp > 1) return (size_t)a->B * H * a->T;  // each query's log-sum-exp
    return kern_attention_saved_floats(a->B, H, a->T, a->T);
}

float *model_attention_scratch(const Activations *a, int H) {
    return a->cp > 1 ? NULL : model_acts_buf(kern_attention_scratch_floats(a->B, H, a->T));  // the ring never reads it
}

const int32_t *model_positions(const Activations *a) { return a->docs || a->sp > 1 || a->cp > 1 ? a->pos : NULL; }

void model_cp_alloc(Activations *a, size_t kvd) {
    if (a->cp == 1) return;
    a->cp_ring = model_acts_buf((size_t)8 * a->B * a->T * kvd);
    if (!a->cp_ring) return;  // only counted (model_acts_bytes)
    const int T = a->T, c = T / 2;  // a chunk: half a rank's tokens
    a->cp_pos = mallocCheck(sizeof(int32_t) * (size_t)a->cp * T);
    for (int r = 0; r < a->cp; r++)
        for (int t = 0; t < T; t++) a->cp_pos[(size_t)r * T + t] = t < c ? r * c + t : (2 * a->cp - 1 - r) * c + t - c;
}

void model_attention_fwd(const ModelPlan *plan, Activations *a, void *out, float *saved, const void *q, const void *k,
                         const void *v, int H, int KV, int hd, int window, const KernDropout *drop) {
    const int B = a->B, T = a->T, n = a->cp, me = a->cp_rank;
    if (n == 1) {
        kern_attention_fwd(out, saved, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, a->docs ? a->kstart : NULL, window,
                           drop);
        return;
    }
    const size_t kv = (size_t)B * T * KV * hd;
    float *cur = a->cp_ring, *next = cur + 4 * kv;
    kern_copy(cur, k, kv);
    kern_copy(cur + kv, v, kv);
    for (int s = 0; s < n; s++) {  // step s: the block of rank me - s, while it moves on to me + 1
        CommRequest *r = s + 1 < n ? comm_ring_shift_start(plan->cp_group, cur, next, 2 * kv) : NULL;
        const int src = (me - s + n) % n;
        kern_attention_part_fwd(out, saved, q, cur, cur + kv, B, T, T, H, KV, hd, a->cp_pos + (size_t)me * T,
                                a->cp_pos + (size_t)src * T, a->docs ? a->kstart : NULL, window, s == 0, drop, n * T);
        comm_wait(r);
        float *t = cur;
        cur = next, next = t;
    }
}

void model_attention_bwd(const ModelPlan *plan, Activations *a, const void *out, const float *saved, const void *q,
                         const void *k, const void *v, int H, int KV, int hd, int window, const KernDropout *drop) {
    const int B = a->B, T = a->T, n = a->cp, me = a->cp_rank;
    if (n == 1) {
        kern_attention_bwd(a->dq, a->dk, a->dv, a->attn_scratch, a->datt, out, saved, q, k, v, B, T, H, KV, hd,
                           a->docs ? a->kstart : NULL, window, drop);
        return;
    }
    const size_t kv = (size_t)B * T * KV * hd;
    float *cur = a->cp_ring, *next = cur + 4 * kv;  // a block: its dk, dv, then its k, v
    kern_zero(cur, 2 * kv);
    kern_copy(cur + 2 * kv, k, kv);
    kern_copy(cur + 3 * kv, v, kv);
    kern_zero(a->dq, (size_t)B * T * H * hd);
    for (int s = 0; s < n; s++) {
        const int src = (me - s + n) % n;
        // the keys and values move on while this step reads them; their gradients once computed
        // (after the last step only those, which so reach their own rank)
        CommRequest *r = s + 1 < n ? comm_ring_shift_start(plan->cp_group, cur + 2 * kv, next + 2 * kv, 2 * kv) : NULL;
        kern_attention_part_bwd(a->dq, cur, cur + kv, a->datt, out, saved, q, cur + 2 * kv, cur + 3 * kv, B, T, T, H, KV, hd,
                                a->cp_pos + (size_t)me * T, a->cp_pos + (size_t)src * T, a->docs ? a->kstart : NULL, window,
                                drop, n * T);
        comm_wait(comm_ring_shift_start(plan->cp_group, cur, next, 2 * kv));
        comm_wait(r);
        float *t = cur;
        cur = next, next = t;
    }
    kern_copy(a->dk, cur, kv);
    kern_copy(a->dv, cur + kv, kv);
}
