// context: context parallelism's attention. A cp group splits every sequence of cp * T tokens into
// 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r (a head and its mirrored tail, so every
// rank's causal work is the same). Attention runs as a ring: each rank starts from its own keys
// and values, and at each of cp steps computes its queries' part against the block it holds while
// the block moves on to the next rank; the parts merge by their log-sum-exp. Backward goes round
// again, each block carrying the gradients of its keys and values (sent on once computed, the keys
// and values themselves while the step computes), and one last step returns those to their rank.
// The same code runs on either device: the blocks are activations in the ring buffer, moved by
// comm_ring_shift_start (MPI on the CPU, NCCL send/recv on the GPU's communication stream, where
// the current block's attention, queued first on the compute stream, runs while it moves).
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "family.h"
#include "model.h"

size_t model_attention_saved(const Activations *a, int H) {
    if (a->cp > 1) return (size_t)a->B * H * a->T;  // each query's log-sum-exp
    return kern_attention_saved_floats(a->B, H, a->T, a->T);
}

float *model_attention_scratch(const Activations *a, int H) {
    return a->cp > 1 ? NULL : model_acts_buf(kern_attention_scratch_floats(a->B, H, a->T));  // the ring never reads it
}

size_t model_cp_scratch(const ModelPlan *plan, int B, int T) {
    if (plan->cp <= 1) return 0;
    const ModelConfig *c = &plan->cfg;
    const int tp = plan->tp > 1 ? plan->tp : 1;
    // training's blocks under attention dropout stay native; evaluation's do not drop
    const int drops = plan->family->attn_dropout && c->dropout > 0.0f;
    return kern_ring_scratch_bytes(B, T / plan->cp, c->num_heads / tp, c->num_key_value_heads / tp, config_head_dim(c),
                                   plan->cp_docs, c->sliding_window, drops);
}

const int32_t *model_positions(const Activations *a) { return a->docs || a->sp > 1 || a->cp > 1 ? a->pos : NULL; }

// The ring's buffer: two halves, the block a step reads (cur) and the one arriving (next), each a
// slot of the block's dk, dv and a slot of its k, v (2 kv activations each). Slots start a page
// apart: a step's kernel and the shift touch different slots at once, and the emulator orders
// streams by page (test/gpu/emu); the padding is at most 4 pages.
static size_t cp_slot_bytes(const Activations *a, size_t kvd) {
    const size_t bytes = 2 * (size_t)a->B * a->T * kvd * kern_act_bytes(), page = 4096;
    return (bytes + page - 1) / page * page;
}

void model_cp_alloc(Activations *a, size_t kvd) {
    if (a->cp == 1) return;
    const int T = a->T, c = T / 2;  // a chunk: half a rank's tokens
    a->cp_ring = model_acts_buf(4 * cp_slot_bytes(a, kvd) / sizeof(float));
    a->cp_dpos = (int32_t *)model_acts_buf((size_t)a->cp * T);
    if (!a->cp_ring) return;  // only counted (model_acts_bytes)
    a->cp_pos = mallocCheck(sizeof(int32_t) * (size_t)a->cp * T);
    for (int r = 0; r < a->cp; r++)
        for (int t = 0; t < T; t++) a->cp_pos[(size_t)r * T + t] = t < c ? r * c + t : (2 * a->cp - 1 - r) * c + t - c;
    kern_upload(a->cp_dpos, a->cp_pos, sizeof(int32_t) * (size_t)a->cp * T);  // what the kernels read
}

// n activations as a count of floats, what comm moves and kern_zero clears (all-zero bits are 0.0
// in either dtype; n is even: a rank's tokens are two chunks)
static size_t cp_floats(size_t n) { return n * kern_act_bytes() / sizeof(float); }

// half h (0 or 1) of the ring: its dk (then dv) slot, and its k (then v) slot
static float *cp_grads(const Activations *a, int h, size_t kvd) { return (float *)((char *)a->cp_ring + 2 * h * cp_slot_bytes(a, kvd)); }
static float *cp_keys(const Activations *a, int h, size_t kvd) { return (float *)((char *)cp_grads(a, h, kvd) + cp_slot_bytes(a, kvd)); }

// The block's mask as the host sees it from the positions, which lets the kernels take cuDNN for it
// (kernels.h kern_block_of); NULL under documents or a window, whose masks are per token.
static const KernBlock *cp_block(const Activations *a, int src, int window, KernBlock *blk) {
    if (a->docs || window > 0) return NULL;
    const int T = a->T;
    return kern_block_of(blk, a->cp_pos + (size_t)a->cp_rank * T, a->cp_pos + (size_t)src * T, T, T) ? blk : NULL;
}

void model_attention_fwd(const ModelPlan *plan, Activations *a, void *out, float *saved, const void *q, const void *k,
                         const void *v, int H, int KV, int hd, int window, const KernDropout *drop) {
    const int B = a->B, T = a->T, n = a->cp, me = a->cp_rank;
    if (n == 1) {
        kern_attention_fwd(out, saved, q, k, v, B, T, T, H, KV, hd, (size_t)T * KV * hd, a->docs ? a->kstart : NULL, window,
                           drop);
        return;
    }
    const size_t kvd = (size_t)KV * hd, kv = (size_t)B * T * kvd;
    kern_act_copy(cp_keys(a, 0, kvd), k, kv);
    kern_act_copy(kern_act_at(cp_keys(a, 0, kvd), kv), v, kv);
    KernBlock blk;
    for (int s = 0; s < n; s++) {  // step s: the block of rank me - s, while it moves on to me + 1
        float *cur = cp_keys(a, s % 2, kvd);
        CommRequest *r = s + 1 < n ? comm_ring_shift_start(plan->cp_group, cur, cp_keys(a, (s + 1) % 2, kvd), cp_floats(2 * kv)) : NULL;
        const int src = (me - s + n) % n;
        kern_attention_part_fwd(out, saved, q, cur, kern_act_at(cur, kv), B, T, T, H, KV, hd, a->cp_dpos + (size_t)me * T,
                                a->cp_dpos + (size_t)src * T, a->docs ? a->kstart : NULL, window, s == 0, drop, n * T,
                                cp_block(a, src, window, &blk));
        comm_wait(r);
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
    const size_t kvd = (size_t)KV * hd, kv = (size_t)B * T * kvd;
    kern_zero(cp_grads(a, 0, kvd), cp_floats(2 * kv));
    kern_act_copy(cp_keys(a, 0, kvd), k, kv);
    kern_act_copy(kern_act_at(cp_keys(a, 0, kvd), kv), v, kv);
    kern_zero(a->dq, cp_floats((size_t)B * T * H * hd));
    KernBlock blk;
    for (int s = 0; s < n; s++) {
        const int src = (me - s + n) % n, h = s % 2;
        float *keys = cp_keys(a, h, kvd), *grads = cp_grads(a, h, kvd);
        // the keys and values move on while this step reads them; their gradients once computed
        // (after the last step only those, which so reach their own rank)
        CommRequest *r = s + 1 < n ? comm_ring_shift_start(plan->cp_group, keys, cp_keys(a, !h, kvd), cp_floats(2 * kv)) : NULL;
        kern_attention_part_bwd(a->dq, grads, kern_act_at(grads, kv), a->datt, out, saved, q, keys, kern_act_at(keys, kv), B, T,
                                T, H, KV, hd, a->cp_dpos + (size_t)me * T, a->cp_dpos + (size_t)src * T,
                                a->docs ? a->kstart : NULL, window, drop, n * T, cp_block(a, src, window, &blk));
        comm_wait(comm_ring_shift_start(plan->cp_group, grads, cp_grads(a, !h, kvd), cp_floats(2 * kv)));
        comm_wait(r);
    }
    const float *back = cp_grads(a, n % 2, kvd);
    kern_act_copy(a->dk, back, kv);
    kern_act_copy(a->dv, kern_act_at(back, kv), kv);
}
