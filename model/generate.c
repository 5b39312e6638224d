// generate: prefill the prompt, then one token at a time against the KV cache.
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "../base/rng.h"

static double next_uniform(uint64_t *s) { return (double)(rng_splitmix64_next(s) >> 11) / 9007199254740992.0; }

typedef struct {
    float p;
    int32_t id;
} Cand;

static int by_prob_desc(const void *a, const void *b) {
    float pa = ((const Cand *)a)->p, pb = ((const Cand *)b)->p;
    return (pa < pb) - (pa > pb);
}

int32_t model_sample(float *logits, int V, float temperature, float top_p, uint64_t *rng, char *err, size_t errlen) {
    int32_t best = 0;
    for (int i = 0; i < V; i++) {
        if (!isfinite(logits[i]))
            return err_set(err, errlen, "generation: logit %d is %g: the weights are not finite or too large (a diverged checkpoint?)",
                           i, logits[i]);
        if (logits[i] > logits[best]) best = i;
    }
    if (temperature == 0.0f) return best;
    Cand *c = mallocCheck((size_t)V * sizeof(Cand));
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        c[i].p = expf((logits[i] - logits[best]) / temperature);
        c[i].id = i;
        sum += c[i].p;
    }
    qsort(c, V, sizeof(Cand), by_prob_desc);
    // keep the smallest prefix whose mass reaches top_p, then sample inside it
    double mass = 0.0;
    int keep = 0;
    do mass += c[keep++].p;
    while (keep < V && mass < top_p * sum);
    double r = next_uniform(rng) * mass;
    int32_t tok = c[keep - 1].id;
    for (int i = 0; i < keep; i++) {
        r -= c[i].p;
        if (r <= 0) {
            tok = c[i].id;
            break;
        }
    }
    free(c);
    return tok;
}

// Runs tokens [0, n) at positions pos0.. through the model; leaves the last position's logits
// in the host buffer `logits` (V): under tensor parallelism on the tp group's first rank, which
// gathers every rank's share of the vocabulary (the others' buffers hold only their own).
static float *forward_tokens(const ModelPlan *plan, const void *const *P, Activations *a, const int32_t *toks, int n,
                             int pos0, float *logits) {
    int L = plan->cfg.num_layers, V = a->V;  // V: this tp rank's share
    model_load_batch(a, toks, NULL, NULL, n, 0);
    model_embed_fwd(plan, P[plan->embed_unit], a, n, pos0);
    for (int l = 0; l < L; l++) {
        int units[MAX_BLOCK_UNITS], nb = model_block_gather(plan, l, units);
        const void *bp[MAX_BLOCK_UNITS];
        for (int i = 0; i < nb; i++) bp[i] = P[units[i]];
        model_block_fwd(plan, l, bp, a, n, pos0);
    }
    model_head_fwd_bwd(plan, P[plan->head_unit], NULL, a, 0, n, 0.0f);
    kern_act_download(logits, kern_act_at(a->logits, (size_t)(n - 1) * V), (size_t)V);
    if (plan->tp > 1) {  // the shares in rank order are the vocabulary in order
        char *all;
        size_t total;
        comm_gather_bytes(plan->tp_group, logits, (size_t)V * sizeof(float), &all, &total);
        if (all) memcpy(logits, all, total);
        free(all);
    }
    return logits;
}

// Under tensor parallelism the tp group's first rank samples and emits; every rank of the group
// takes its token and whether to go on, so all run the same forwards. 0 to stop, -1 (the line in
// err) when no token could be sampled.
static int next_token(const ModelPlan *plan, float *logits, float temperature, float top_p, uint64_t *rng,
                      int (*emit)(int32_t tok, void *ctx), void *ctx, int32_t *tok, char *err, size_t errlen) {
    int32_t msg[2] = {0, 0};  // the token, and 1 to go on (-1: none sampled)
    if (plan->tp < 2 || plan->tp_rank == 0) {
        msg[0] = model_sample(logits, plan->cfg.vocab_size, temperature, top_p, rng, err, errlen);
        msg[1] = msg[0] < 0 ? -1 : emit(msg[0], ctx) != 0;
    }
    if (plan->tp > 1) comm_bcast_bytes(plan->tp_group, msg, sizeof msg, 0);
    if (msg[1] < 0 && plan->tp > 1 && plan->tp_rank)
        err_set(err, errlen, "generation: the tensor-parallel group's first rank could not sample a token");
    *tok = msg[0];
    return msg[1];
}

int model_generate(const ModelPlan *plan, const void *const *P, const int32_t *prompt, int n, int num_tokens,
                   float temperature, float top_p, uint64_t seed, int (*emit)(int32_t tok, void *ctx), void *ctx, char *err,
                   size_t errlen) {
    const ModelConfig *c = &plan->cfg;
    int T = c->max_context_width;
    Activations a;
    model_acts_alloc(&a, plan, 1, T, 1, 0, 0);
    int32_t *window = mallocCheck((size_t)T * sizeof(int32_t));
    float *host_logits = mallocCheck((size_t)c->vocab_size * sizeof(float));
    // the context keeps the last tokens; when it fills up, it is refilled with its newer half
    int len = n < T ? n : T;
    memcpy(window, prompt + (n - len), (size_t)len * sizeof(int32_t));
    float *logits = forward_tokens(plan, P, &a, window, len, 0, host_logits);
    uint64_t rng = seed;
    int go = 1;
    for (int i = 0; i < num_tokens && go > 0; i++) {
        int32_t tok;
        if ((go = next_token(plan, logits, temperature, top_p, &rng, emit, ctx, &tok, err, errlen)) <= 0) break;
        if (len == T) {
            int keep = T / 2;
            memmove(window, window + (T - keep), (size_t)keep * sizeof(int32_t));
            window[keep] = tok;
            len = keep + 1;
            logits = forward_tokens(plan, P, &a, window, len, 0, host_logits);
        } else {
            window[len] = tok;
            logits = forward_tokens(plan, P, &a, window + len, 1, len, host_logits);
            len++;
        }
    }
    free(window);
    free(host_logits);
    model_acts_free(&a);
    return go < 0 ? -1 : 0;
}
