// moe: the sparse MLP of a mixture of experts (moe.h), and the router losses over the global batch.
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "lora.h"

// What the router's statistics are for: evaluation (none), a training micro-batch that is the
// whole step (summed over the ranks in each layer's forward), a routing pass collecting a step's
// micro-batches (summed once, by model_router_fix), or the training passes after it (fixed).
typedef enum { MOE_OFF, MOE_MICRO, MOE_COLLECT, MOE_FIXED } MoeMode;
// a layer's statistics: tokens per expert, probability sums, the z sum, tokens, loss-bearing targets
#define STATS(E) (2 * (E) + 3)

struct MoeState {
    int E, K, L;
    size_t N;                 // tokens per batch at most
    int *count;               // (L, E) this rank's tokens per expert, from each layer's last forward
    int32_t *idx, *src, *slot;  // host scratch: (N, K), (M), (M)
    unsigned char *valid;     // (N) the loaded batch's tokens that bear loss: the router losses' tokens
    float *probs, *logits;    // host copies for the statistics (N, E)
    float *gaux, *zscale;     // (L, E), (L): the router losses' gradient constants of the micro-batch
    unsigned char *seen;      // (L) the layer's statistics are this micro-batch's (a recompute reuses them)
    MoeMode mode;
    double loss_tokens;       // this rank's loss-bearing targets in the micro-batch (MICRO) or the step so far (COLLECT)
    double *acc;              // COLLECT: (L, STATS) this rank's sums over the step's micro-batches so far
    double aux, z;            // sums over the layers of the global losses
    float aux_coef, z_coef, jitter;
    // expert parallelism (ep > 1)
    int ep;
    size_t Rc;                // rows this rank's experts can receive (moe_ep_rows)
    int *ccount;              // (L, ep, E) every ep rank's tokens per expert, from each layer's last forward
    double *exch;             // (ep, E) the counts' exchange
    int32_t *perm, *inv;      // (Rc) host: the received rows' permutation to the experts' order, and back
    // --capacity_factor (training): each expert takes at most `capacity` of the step's assignments,
    // in the global batch's token order (micro-batch, then rank, then token); the rest are dropped
    float capacity_factor;
    double capacity;          // per expert and layer in the step (model_router_step)
    double step_tokens;       // the step's token slots (the global batch x T)
    double *cum;              // (L, E) assignments of the step's earlier micro-batches, every rank's
    // the order's pieces on a rank: its tokens (1), or under context parallelism each row's two
    // chunks (2 B), which a cp group's ranks interleave in the sequence
    int pieces, T;            // the most a rank has, and a row's tokens here
    double *base;             // (L, pieces, E) the current micro-batch's first position of each piece, per expert
    double *cap_exch;         // (world, pieces, E) the exchange of the ranks' counts
    unsigned char *cap_seen;  // (L) the layer's positions are this micro-batch's (a recompute reuses them)
    unsigned char *kept;      // (M) host: the assignments within capacity (all of them when dropless)
};

size_t moe_ep_rows(const ModelConfig *c, int ep, size_t N) {
    size_t El = (size_t)(c->num_experts / ep), K = (size_t)c->num_experts_per_tok;
    return (size_t)ep * N * (K < El ? K : El);
}

void moe_acts_alloc(Activations *a, const ModelConfig *c, size_t S, size_t N, int forward_only) {
    // F: a tp rank's share of each expert's width (w1 and w3 split by rows, w2 by columns)
    size_t E = c->num_experts, K = c->num_experts_per_tok, M = N * K, D = c->hidden_width, F = c->intermediate_size / a->tp;
    size_t Rc = a->ep > 1 ? moe_ep_rows(c, a->ep, N) : M;  // the rows this rank's experts compute
    a->rlogits = model_acts_buf(S * N * E);
    a->rprobs = model_acts_buf(S * N * E);
    a->ridx = (int32_t *)model_acts_buf(S * N * K);  // int32 in a float buffer of the same count
    a->rwts = model_acts_buf(S * N * K);
    a->rsrc = (int32_t *)model_acts_buf(S * M);
    a->rslot = (int32_t *)model_acts_buf(S * M);
    if (c->router_jitter_noise > 0.0f && !forward_only) a->rjit = model_acts_act(S * N * D);
    a->xe = model_acts_act(S * Rc * D);
    a->gue = model_acts_act(S * Rc * 2 * F);
    a->he = model_acts_act(S * Rc * F);
    a->ye = model_acts_buf(S * M * D);
    if (!forward_only) {
        a->dye = model_acts_buf(M * D);
        a->drwts = model_acts_buf(N * K);
        a->drlogits = model_acts_buf(N * E);
        a->rgaux = model_acts_buf(E);
        a->dhe = model_acts_act(Rc * F);
        a->dgue = model_acts_act(Rc * 2 * F);
        a->dxe = model_acts_act(Rc * D + 2);  // + the slack of zeroing a bf16 row as floats
    }
    if (a->ep > 1) {
        a->ep_act = model_acts_act(Rc * D);
        a->ep_f32 = model_acts_buf(Rc * D);
        a->ep_f32b = model_acts_buf(Rc * D);
        a->ep_ones = model_acts_buf(Rc);
        a->ep_perm = (int32_t *)model_acts_buf(Rc);
        a->ep_inv = (int32_t *)model_acts_buf(Rc);
    }
    if (!a->rlogits) return;  // only counting bytes (model_acts_bytes)
    MoeState *m = callocCheck(1, sizeof *m);
    int L = c->num_layers;
    *m = (MoeState){.E = (int)E, .K = (int)K, .L = L, .N = N, .aux_coef = c->router_aux_loss_coef, .z_coef = c->router_z_loss_coef,
                     .jitter = c->router_jitter_noise, .ep = a->ep, .Rc = Rc};
    m->count = callocCheck((size_t)L * E, sizeof(int));
    m->idx = mallocCheck(sizeof(int32_t) * M);
    m->src = mallocCheck(sizeof(int32_t) * M);
    m->slot = mallocCheck(sizeof(int32_t) * M);
    m->valid = mallocCheck(N);
    m->probs = mallocCheck(sizeof(float) * N * E);
    m->logits = mallocCheck(sizeof(float) * N * E);
    m->gaux = callocCheck((size_t)L * E, sizeof(float));
    m->zscale = callocCheck((size_t)L, sizeof(float));
    m->seen = callocCheck((size_t)L, 1);
    m->acc = callocCheck((size_t)L * STATS(E), sizeof(double));
    m->kept = mallocCheck(M);
    if (c->capacity_factor > 0.0f) {
        m->capacity_factor = c->capacity_factor;
        m->cum = callocCheck((size_t)L * E, sizeof(double));
        m->pieces = a->cp > 1 ? 2 * a->B : 1;
        m->T = a->T;
        m->base = callocCheck((size_t)L * m->pieces * E, sizeof(double));
        m->cap_exch = callocCheck((size_t)comm_info.world * m->pieces * E, sizeof(double));
        m->cap_seen = callocCheck((size_t)L, 1);
    }
    if (a->ep > 1) {
        m->ccount = callocCheck((size_t)L * a->ep * E, sizeof(int));
        m->exch = mallocCheck(sizeof(double) * a->ep * E);
        m->perm = mallocCheck(sizeof(int32_t) * Rc);
        m->inv = mallocCheck(sizeof(int32_t) * Rc);
        float *ones = mallocCheck(sizeof(float) * Rc);
        for (size_t r = 0; r < Rc; r++) ones[r] = 1.0f;
        kern_upload(a->ep_ones, ones, sizeof(float) * Rc);
        free(ones);
    }
    a->moe = m;
}

void moe_state_free(MoeState *m) {
    if (!m) return;
    free(m->count), free(m->idx), free(m->src), free(m->slot), free(m->valid), free(m->probs), free(m->logits);
    free(m->gaux), free(m->zscale), free(m->seen), free(m->acc), free(m->ccount), free(m->exch), free(m->perm), free(m->inv);
    free(m->kept), free(m->cum), free(m->base), free(m->cap_exch), free(m->cap_seen);
    free(m);
}

void moe_batch_loaded(Activations *a, const int32_t *targets, int ntok) {
    MoeState *m = a->moe;
    for (int t = 0; t < ntok; t++) m->valid[t] = !targets || targets[t] >= 0;
}

void model_router_step(Activations *a, double step_tokens) {
    MoeState *m = a->moe;
    if (!m || !m->cum) return;
    m->step_tokens = step_tokens;
    m->capacity = ceil(m->capacity_factor * m->K * step_tokens / m->E);
    memset(m->cum, 0, sizeof(double) * m->L * m->E);
}

double model_router_dropped(const Activations *a) {
    const MoeState *m = a->moe;
    if (!m || !m->cum || !(m->step_tokens > 0)) return -1.0;
    double dropped = 0.0;
    for (int i = 0; i < m->L * m->E; i++) dropped += m->cum[i] > m->capacity ? m->cum[i] - m->capacity : 0.0;
    return dropped / ((double)m->L * m->K * m->step_tokens);
}

void model_router_train(Activations *a, double loss_tokens) {
    MoeState *m = a->moe;
    if (!m) return;
    memset(m->seen, 0, (size_t)m->L);
    if (m->cap_seen) memset(m->cap_seen, 0, (size_t)m->L);
    if (m->mode == MOE_COLLECT && loss_tokens >= 0) {
        m->loss_tokens += loss_tokens;
        return;
    }
    if (m->mode == MOE_FIXED && loss_tokens >= 0) return;
    m->mode = loss_tokens >= 0 ? MOE_MICRO : MOE_OFF;
    m->loss_tokens = loss_tokens;
    m->aux = m->z = 0.0;
}

int model_router_collects(const Activations *a) {
    const MoeState *m = a->moe;
    return m && (m->aux_coef > 0.0f || m->z_coef > 0.0f);
}

void model_router_collect(Activations *a) {
    MoeState *m = a->moe;
    if (!m) return;
    m->mode = MOE_COLLECT;
    m->loss_tokens = 0.0;
    memset(m->acc, 0, sizeof(double) * m->L * STATS(m->E));
}

void model_router_losses(const Activations *a, double *aux, double *z) {
    const MoeState *m = a->moe;
    *aux = m ? m->aux / m->L : 0.0;
    *z = m ? m->z / m->L : 0.0;
}

// Layer l's statistics on this rank's tokens that bear loss (padding, which packing spreads
// differently over each layout, does not count; nor do prompts) into s (STATS(E)): the tokens
// each expert got over the K choices (the balance loss's fractions f), the probability sums (its
// mean probabilities P), the sum of squared logsumexps (the z-loss) and the token count, in
// double and in token order.
static void router_local(const MoeState *m, int N, double *s) {
    int E = m->E, K = m->K;
    memset(s, 0, sizeof(double) * STATS(E));
    for (int t = 0; t < N; t++) {
        if (!m->valid[t]) continue;
        for (int k = 0; k < K; k++) s[m->idx[(size_t)t * K + k]]++;
        const float *p = m->probs + (size_t)t * E, *lg = m->logits + (size_t)t * E;
        double mx = lg[0], sum = 0.0;
        for (int e = 0; e < E; e++) s[E + e] += p[e], mx = lg[e] > mx ? lg[e] : mx;
        for (int e = 0; e < E; e++) sum += exp(lg[e] - mx);
        double lse = mx + log(sum);
        s[2 * E] += lse * lse;
        s[2 * E + 1]++;
    }
}

// Layer l's losses and gradient constants from its statistics summed over every rank (a tp group's
// ranks route the same tokens: counted once; a cp group's ranks route their own tokens, but each
// holds the group's loss-bearing count: that once). The losses add up over the layers; the
// constants are in the summed loss fsdpc trains on (the global loss-bearing count times the mean),
// so AdamW's division gives Hugging Face's mean loss plus coef x aux + z_coef x z.
static void router_finish(const ModelPlan *plan, MoeState *m, int l, const double *s) {
    int E = m->E;
    double tp = plan->tp > 1 ? plan->tp : 1, cp = plan->cp > 1 ? plan->cp : 1;
    double n = s[2 * E + 1] / tp, lb = s[2 * E + 2] / (tp * cp), aux = 0.0;
    if (!(n > 0)) n = INFINITY;  // no token bears loss anywhere: no router loss either
    for (int e = 0; e < E; e++) {
        double f = s[e] / tp / n;
        aux += f * (s[E + e] / tp / n);
        m->gaux[(size_t)l * E + e] = (float)(lb * m->aux_coef * E * f / (n * m->L));
    }
    m->aux += E * aux;
    m->z += s[2 * E] / tp / n;
    m->zscale[l] = (float)(lb * m->z_coef / (n * m->L));
}

void model_router_fix(const ModelPlan *plan, Activations *a) {
    MoeState *m = a->moe;
    if (!m) return;
    size_t n = (size_t)STATS(m->E);
    for (int l = 0; l < m->L; l++) m->acc[l * n + 2 * m->E + 2] = m->loss_tokens;  // the step's, on every layer
    comm_allreduce_sum_f64(comm_world(), m->acc, m->L * n);
    m->aux = m->z = 0.0;
    for (int l = 0; l < m->L; l++) router_finish(plan, m, l, m->acc + l * n);
    m->mode = MOE_FIXED;
}

// Layer l's statistics once per micro-batch (a recompute reuses them): summed over the ranks now
// when the micro-batch is the step, added to the step's when collecting
static void router_stats(const ModelPlan *plan, MoeState *m, int l, int N) {
    double s[STATS(CONFIG_MAX_EXPERTS)];
    router_local(m, N, s);
    if (m->mode == MOE_COLLECT) {  // the step's loss-bearing count is model_router_fix's
        for (int i = 0; i < STATS(m->E); i++) m->acc[(size_t)l * STATS(m->E) + i] += s[i];
        return;
    }
    s[2 * m->E + 2] = m->loss_tokens;
    comm_allreduce_sum_f64(comm_world(), s, STATS(m->E));
    router_finish(plan, m, l, s);
}

// The kept assignments' rows grouped by expert, in token order: src and slot from idx, counts per
// expert; returns the rows. A dropped assignment's slot is the row after them, which the caller
// zeroes in the experts' outputs (so it adds nothing and its weight gets no gradient) and in their
// input gradients.
static int group_rows(MoeState *m, int *count, int N) {
    int E = m->E, K = m->K, off[CONFIG_MAX_EXPERTS], rows = 0;
    memset(count, 0, sizeof(int) * E);
    for (size_t j = 0; j < (size_t)N * K; j++)
        if (m->kept[j]) count[m->idx[j]]++;
    for (int e = 0; e < E; e++) off[e] = rows, rows += count[e];
    for (size_t j = 0; j < (size_t)N * K; j++) {
        if (!m->kept[j]) {
            m->slot[j] = rows;
            continue;
        }
        int r = off[m->idx[j]]++;
        m->src[r] = (int32_t)(j / K);
        m->slot[j] = r;
    }
    return rows;
}

// --capacity_factor in training: layer l's assignments kept, those within each expert's capacity in
// the step's global token order. The ranks' counts per expert are exchanged once per micro-batch
// and layer (a recompute reuses its positions): this rank's come after the earlier micro-batches'
// and the lower data-parallel ranks' (pack.h: a step's micro-batch m holds the samples of every
// rank in rank order, after micro-batch m - 1's), so the rule is the same at every layout. Under
// context parallelism a cp group holds its samples' tokens in chunks: the order is the group's
// (rank / cp), then the row, then the chunk's place in the sequence (cp_pos: rank c holds chunks c
// and 2 cp - 1 - c), each chunk's tokens in order.
static double capacity_key(int r, int piece, int cp, int B) {
    if (cp == 1) return r;
    int c = r % cp, b = piece / 2, chunk = piece % 2 ? 2 * cp - 1 - c : c;
    return ((double)(r / cp) * B + b) * 2 * cp + chunk;
}

// the piece of token t: its row's head or tail chunk under cp, else the rank's one
static int capacity_piece(const MoeState *m, int t) { return m->pieces > 1 ? 2 * (t / m->T) + (t % m->T >= m->T / 2) : 0; }

static void capacity_keep(const ModelPlan *plan, MoeState *m, int l, int N) {
    int E = m->E, K = m->K, M = N * K, P = m->pieces, cp = P > 1 ? plan->cp : 1;
    if (!m->cum || m->mode == MOE_OFF || !(m->step_tokens > 0)) {  // dropless, evaluation, and no step begun
        memset(m->kept, 1, (size_t)M);
        return;
    }
    double *cum = m->cum + (size_t)l * E, *base = m->base + (size_t)l * P * E, pos[CONFIG_MAX_EXPERTS];
    if (!m->cap_seen[l]) {
        int tp = plan->tp > 1 ? plan->tp : 1, dp = comm_info.world / tp, me = comm_info.rank / tp;
        double *x = m->cap_exch;
        memset(x, 0, sizeof(double) * dp * P * E);
        if (comm_info.rank % tp == 0)  // a tp group routes the same tokens: counted once
            for (int j = 0; j < M; j++) x[((size_t)me * P + capacity_piece(m, j / K)) * E + m->idx[j]]++;
        comm_allreduce_sum_f64(comm_world(), x, (size_t)dp * P * E);
        for (int p = 0; p < P; p++) {
            double mine = capacity_key(me, p, cp, P / 2);
            for (int e = 0; e < E; e++) base[p * E + e] = cum[e];
            for (int r = 0; r < dp; r++)
                for (int q = 0; q < P; q++)
                    if (capacity_key(r, q, cp, P / 2) < mine)
                        for (int e = 0; e < E; e++) base[p * E + e] += x[((size_t)r * P + q) * E + e];
        }
        for (int i = 0; i < dp * P; i++)
            for (int e = 0; e < E; e++) cum[e] += x[(size_t)i * E + e];
        m->cap_seen[l] = 1;
    }
    for (int j = 0, p = -1; j < M; j++) {  // a piece's tokens are consecutive here and in the order
        if (capacity_piece(m, j / K) != p) p = capacity_piece(m, j / K), memcpy(pos, base + (size_t)p * E, sizeof(double) * E);
        m->kept[j] = pos[m->idx[j]]++ < m->capacity;
    }
}

#define WP(p, u, i) kern_param_at((p), (u)->t[i].offset)

// this rank's local expert le's tensor j (0: w1, with w3 after it; 2: w2): its index in unit ue,
// its weights and gradient
static int expert_t(const MoeParams *mp, int El, int le, int j) { return mp->ue->ntensors - 3 * El + 3 * le + j; }
static const void *expert_w(const MoeParams *mp, int El, int le, int j) { return WP(mp->pe, mp->ue, expert_t(mp, El, le, j)); }
static float *expert_g(const MoeParams *mp, int El, int le, int j) {
    return mp->ge ? mp->ge + mp->ue->t[expert_t(mp, El, le, j)].offset : NULL;  // frozen (LoRA): none
}

// bytes of one row of D activations
static size_t act_row(const void *base, int D) { return (size_t)((const char *)kern_act_at(base, (size_t)D) - (const char *)base); }

// Expert parallelism, layer l: every ep rank's tokens per expert (count: this rank's) into the
// layer's row of m->ccount, by one all-reduce over the ep group
static void ep_counts(const ModelPlan *plan, MoeState *m, int l, const int *count) {
    int E = m->E, n = m->ep * E;
    for (int i = 0; i < n; i++) m->exch[i] = 0.0;
    for (int e = 0; e < E; e++) m->exch[plan->ep_rank * E + e] = count[e];
    comm_allreduce_sum_f64(plan->ep_group, m->exch, (size_t)n);
    int *C = m->ccount + (size_t)l * n;
    for (int i = 0; i < n; i++) C[i] = (int)m->exch[i];
}

// From layer l's counts: send[j] the rows this rank sends ep rank j (its tokens for j's experts),
// recv[j] the rows j sends it, local[le] the rows of its local expert le; the permutation from the
// received order (by sending rank, then expert) to the experts' (by expert, then sending rank),
// perm[r2] = r, and its inverse, on the device. Returns the rows received.
static size_t ep_layout(const ModelPlan *plan, Activations *a, int l, size_t *send, size_t *recv, int *local) {
    MoeState *m = a->moe;
    int E = m->E, ep = m->ep, El = E / ep, me = plan->ep_rank;
    const int *C = m->ccount + (size_t)l * ep * E;
    size_t R = 0;
    for (int j = 0; j < ep; j++) {
        send[j] = recv[j] = 0;
        for (int le = 0; le < El; le++) send[j] += (size_t)C[me * E + j * El + le], recv[j] += (size_t)C[j * E + me * El + le];
        R += recv[j];
    }
    if (R > m->Rc) err_fatal("expert parallelism: %zu rows for this rank's experts, more than the %zu allocated", R, m->Rc);
    size_t r2 = 0;
    for (int le = 0; le < El; le++) {
        local[le] = 0;
        size_t src0 = 0;  // sending rank j's first row in the received order
        for (int j = 0; j < ep; j++) {
            size_t before = 0;  // j's rows for local experts below le
            for (int k = 0; k < le; k++) before += (size_t)C[j * E + me * El + k];
            int n = C[j * E + me * El + le];
            for (int i = 0; i < n; i++, r2++) {
                m->perm[r2] = (int32_t)(src0 + before + i);
                m->inv[src0 + before + i] = (int32_t)r2;
            }
            local[le] += n;
            src0 += recv[j];
        }
    }
    kern_upload(a->ep_perm, m->perm, sizeof(int32_t) * R);
    kern_upload(a->ep_inv, m->inv, sizeof(int32_t) * R);
    return R;
}

// The experts' forward over their rows x (grouped by expert, cnt[le] each): gue, he, and y (fp32),
// each product with its LoRA adapters
static void experts_fwd(const ModelPlan *plan, Activations *a, const MoeParams *mp, int El, const int *cnt, const void *x,
                        void *gue, void *he, float *y, int D, int F) {
    const void *w13[CONFIG_MAX_EXPERTS], *w2[CONFIG_MAX_EXPERTS];
    int t13[CONFIG_MAX_EXPERTS], t2[CONFIG_MAX_EXPERTS];
    size_t rows = 0;
    for (int le = 0; le < El; le++) {
        w13[le] = expert_w(mp, El, le, 0), w2[le] = expert_w(mp, El, le, 2);
        t13[le] = expert_t(mp, El, le, 0), t2[le] = expert_t(mp, El, le, 2);
        rows += (size_t)cnt[le];
    }
    kern_matmul_grouped_fwd(gue, KERN_ACT, x, w13, cnt, El, D, 2 * F);  // w1 | w3
    lora_grouped_fwd(plan, a, mp->ue, t13, 2, El, cnt, gue, KERN_ACT, x, D, 2 * F);
    kern_swiglu_fwd(he, gue, (int)rows, F);
    kern_matmul_grouped_fwd(y, KERN_F32, he, w2, cnt, El, F, D);  // w2
    lora_grouped_fwd(plan, a, mp->ue, t2, 1, El, cnt, y, KERN_F32, he, F, D);
}

// Their backward from dy (fp32): the experts' gradients (+=) and dx (act)
static void experts_bwd(const ModelPlan *plan, Activations *a, const MoeParams *mp, int El, const int *cnt, const void *x,
                        const void *gue, const void *he, const float *dy, void *dx, int D, int F) {
    const void *w13[CONFIG_MAX_EXPERTS], *w2[CONFIG_MAX_EXPERTS];
    float *g13[CONFIG_MAX_EXPERTS], *g2[CONFIG_MAX_EXPERTS];
    int t13[CONFIG_MAX_EXPERTS], t2[CONFIG_MAX_EXPERTS];
    size_t rows = 0;
    for (int le = 0; le < El; le++) {
        w13[le] = expert_w(mp, El, le, 0), w2[le] = expert_w(mp, El, le, 2);
        g13[le] = expert_g(mp, El, le, 0), g2[le] = expert_g(mp, El, le, 2);
        t13[le] = expert_t(mp, El, le, 0), t2[le] = expert_t(mp, El, le, 2);
        rows += (size_t)cnt[le];
    }
    kern_matmul_grouped_bwd(a->dhe, g2, dy, KERN_F32, he, w2, cnt, El, F, D, 0);
    lora_grouped_bwd(plan, a, mp->ue, t2, 1, El, cnt, a->dhe, dy, KERN_F32, he, F, D);
    kern_swiglu_bwd(a->dgue, a->dhe, gue, (int)rows, F);
    kern_matmul_grouped_bwd(dx, g13, a->dgue, KERN_ACT, x, w13, cnt, El, D, 2 * F, 0);
    lora_grouped_bwd(plan, a, mp->ue, t13, 2, El, cnt, dx, a->dgue, KERN_ACT, x, D, 2 * F);
}

// Training with jitter: layer l's MLP input times its noise (Mixtral's: the router and the experts
// both see it), into its slot of a->rjit, or x itself (the input: xn; its gradient, in place);
// else NULL. Each token's noise is that of its place in the whole sequence (a cp rank's chunks
// draw what the 1-rank run draws for them).
static void *jitter(const Activations *a, int l, void *dst, const void *x, int N, int D) {
    const MoeState *m = a->moe;
    if (!(m->jitter > 0.0f) || m->mode == MOE_OFF) return NULL;
    const size_t Tw = (size_t)a->T * a->cp;  // a row's tokens in the whole sequence
    const uint64_t key = model_dropout_key(a, l, DROP_ROUTER_JITTER);
    for (size_t n = 0, end, g; n < (size_t)N; n = end) {
        end = model_token_run(a, n, (size_t)N, &g);
        kern_jitter(kern_act_at(dst, n * D), kern_act_at(x, n * D), g * D, (end - n) * D, Tw * D, m->jitter, key, a->sample0);
    }
    return dst;
}

void moe_fwd(const ModelPlan *plan, Activations *a, int l, const MoeParams *mp, const void *xn, float *out, int T) {
    MoeState *m = a->moe;
    const ModelConfig *c = &plan->cfg;
    int E = m->E, K = m->K, N = a->B * T, M = N * K, D = c->hidden_width, F = c->intermediate_size / a->tp, ep = m->ep, El = E / ep;
    size_t i = a->slot[l], NE = (size_t)N * E, MS = m->N * K, RS = m->Rc;  // slot strides are the allocation's
    float *logits = a->rlogits + i * m->N * E, *probs = a->rprobs + i * m->N * E, *wts = a->rwts + i * MS;
    int32_t *idx = a->ridx + i * MS, *src = a->rsrc + i * MS, *slot = a->rslot + i * MS;
    void *xe = kern_act_at(a->xe, i * RS * D), *gue = kern_act_at(a->gue, i * RS * 2 * F), *he = kern_act_at(a->he, i * RS * F);
    float *ye = a->ye + i * MS * D;
    const void *xj = a->rjit ? jitter(a, l, kern_act_at(a->rjit, i * m->N * D), xn, N, D) : NULL;
    if (xj) xn = xj;
    model_proj_fwd(plan, a, l, mp->u, mp->router, 1, mp->p, logits, KERN_F32, xn, N, D, E);  // (N, E), with its adapter
    kern_moe_route(probs, idx, wts, logits, N, E, K);
    kern_download(m->idx, idx, sizeof(int32_t) * M);  // the GEMMs' row counts: the host waits for the router
    int *count = m->count + (size_t)l * E;
    capacity_keep(plan, m, l, N);
    int Mk = group_rows(m, count, N);  // the kept rows: M when dropless
    kern_upload(src, m->src, sizeof(int32_t) * M);
    kern_upload(slot, m->slot, sizeof(int32_t) * M);
    if (ep == 1) {
        kern_moe_gather(xe, xn, src, Mk, D);  // (Mk, D)
        experts_fwd(plan, a, mp, E, count, xe, gue, he, ye, D, F);
    } else {  // the rows to their experts' ranks (grouped by expert, they are grouped by rank) and back
        size_t send[CONFIG_MAX_EXPERTS], recv[CONFIG_MAX_EXPERTS];
        int local[CONFIG_MAX_EXPERTS];
        kern_moe_gather(a->ep_act, xn, src, Mk, D);
        ep_counts(plan, m, l, count);
        size_t R = ep_layout(plan, a, l, send, recv, local);
        comm_all_to_all(plan->ep_group, a->ep_act, send, a->ep_f32, recv, act_row(a->ep_act, D));  // received as activations
        kern_moe_gather(xe, a->ep_f32, a->ep_perm, (int)R, D);
        experts_fwd(plan, a, mp, El, local, xe, gue, he, a->ep_f32b, D, F);
        kern_moe_combine(a->ep_f32, a->ep_f32b, a->ep_inv, a->ep_ones, (int)R, 1, D);  // back in the received order
        comm_all_to_all(plan->ep_group, a->ep_f32, recv, ye, send, sizeof(float) * D);
    }
    if (Mk < M) kern_zero(ye + (size_t)Mk * D, D);  // the dropped assignments' row
    kern_moe_combine(out, ye, slot, wts, N, K, D);
    if ((m->mode == MOE_MICRO || m->mode == MOE_COLLECT) && !m->seen[l]) {
        kern_download(m->probs, probs, sizeof(float) * NE);
        kern_download(m->logits, logits, sizeof(float) * NE);
        router_stats(plan, m, l, N);
        m->seen[l] = 1;
    }
}

void moe_bwd(const ModelPlan *plan, Activations *a, int l, const MoeParams *mp, const void *xn, const float *dout) {
    MoeState *m = a->moe;
    const ModelConfig *c = &plan->cfg;
    int E = m->E, K = m->K, N = a->B * a->T, D = c->hidden_width, F = c->intermediate_size / a->tp, ep = m->ep, El = E / ep;
    size_t i = a->slot[l], MS = m->N * K, RS = m->Rc;
    const float *logits = a->rlogits + i * m->N * E, *probs = a->rprobs + i * m->N * E, *wts = a->rwts + i * MS;
    const int32_t *idx = a->ridx + i * MS, *slot = a->rslot + i * MS;
    const void *xe = kern_act_at(a->xe, i * RS * D), *gue = kern_act_at(a->gue, i * RS * 2 * F), *he = kern_act_at(a->he, i * RS * F);
    const float *ye = a->ye + i * MS * D;
    const int *count = m->count + (size_t)l * E;
    int Mk = 0;
    for (int e = 0; e < E; e++) Mk += count[e];
    kern_moe_combine_bwd(a->dye, a->drwts, dout, ye, slot, wts, N, K, D);
    // tensor parallelism: each tp rank's outputs are its part of the experts' sums, and so are the
    // weights' gradients dout . ye: summed over the tp group before the router's backward
    if (plan->tp > 1) comm_wait(comm_allreduce_start(plan->tp_group, a->drwts, (size_t)N * K));
    if (ep == 1) {
        experts_bwd(plan, a, mp, E, count, xe, gue, he, a->dye, a->dxe, D, F);
    } else {  // the rows' gradients to their experts' ranks, the inputs' gradients back
        size_t send[CONFIG_MAX_EXPERTS], recv[CONFIG_MAX_EXPERTS];
        int local[CONFIG_MAX_EXPERTS];
        size_t R = ep_layout(plan, a, l, send, recv, local);
        comm_all_to_all(plan->ep_group, a->dye, send, a->ep_f32, recv, sizeof(float) * D);
        kern_moe_combine(a->ep_f32b, a->ep_f32, a->ep_perm, a->ep_ones, (int)R, 1, D);  // in the experts' order
        experts_bwd(plan, a, mp, El, local, xe, gue, he, a->ep_f32b, a->dxe, D, F);
        kern_moe_gather(a->ep_act, a->dxe, a->ep_inv, (int)R, D);
        comm_all_to_all(plan->ep_group, a->ep_act, recv, a->dxe, send, act_row(a->ep_act, D));
    }
    if (Mk < N * K)  // the dropped assignments' row adds nothing (whole floats: the buffer has the slack)
        kern_zero((float *)kern_act_at(a->dxe, (size_t)Mk * D), ((size_t)D * kern_act_bytes() + 3) / 4);
    kern_moe_gather_bwd(a->dxn, a->dxe, slot, N, K, D);
    const float *gaux = NULL;
    int train = m->mode == MOE_MICRO || m->mode == MOE_FIXED;
    if (train && m->aux_coef != 0.0f) {
        kern_upload(a->rgaux, m->gaux + (size_t)l * E, sizeof(float) * E);
        gaux = a->rgaux;
    }
    kern_moe_route_bwd(a->drlogits, a->drwts, probs, logits, idx, wts, a->targets, gaux, train ? m->zscale[l] : 0.0f, N, E, K);
    const void *xj = a->rjit && train && m->jitter > 0.0f ? kern_act_at(a->rjit, i * m->N * D) : NULL;  // forward's input
    // the router (and its adapter) is whole on every tp rank, its input gradient the same on each:
    // one adds it to the experts' parts, which the caller sums over the tp group; the adapter's
    // gradients are whole on every tp rank
    model_proj_bwd(plan, a, l, mp->u, mp->router, 1, mp->p, mp->g, plan->tp_rank == 0 ? a->dxn : NULL, 1, a->drlogits, KERN_F32,
                   xj ? xj : xn, N, D, E);
    if (xj) jitter(a, l, a->dxn, a->dxn, N, D);  // through the noise: dxn = noise x dloss/d(its product)
}

void moe_add_tensors(UnitSpec *u, int layer, const ModelConfig *c) {
    int D = c->hidden_width, F = c->intermediate_size;
    char name[80];
    snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.gate.weight", layer);
    model_add_tensor(u, name, c->num_experts, D, INIT_NORMAL, 1.0f, 1);
    static const char *const w[] = {"w1", "w3", "w2"};  // w1 and w3 adjacent: one (2F, D) GEMM
    for (int e = 0; e < c->num_experts; e++)
        for (int j = 0; j < 3; j++) {
            snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", layer, e, w[j]);
            // tensor parallelism would split w1 and w3 by rows and w2 by columns, as a dense MLP
            model_tensor_split(model_add_tensor(u, name, j < 2 ? F : D, j < 2 ? D : F, INIT_NORMAL, 1.0f, 1),
                               j < 2 ? TP_ROWS : TP_COLS, 1);
        }
}

double moe_inactive_params(const ModelConfig *c) {
    return (double)c->num_layers * (c->num_experts - c->num_experts_per_tok) * 3.0 * c->hidden_width * c->intermediate_size;
}
