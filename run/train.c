// train: the training run by phase: setup, the loop of steps, and the finish (see train.h).
#include "train.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/err.h"
#include "../base/log.h"
#include "../base/checked.h"
#include "../base/limits.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../comm/trace.h"
#include "../kernels/kernels.h"
#include "../model/lora.h"
#include "memory.h"
#include "flags.h"
#include "run.h"

// warm-up steps (below 1: a fraction of max_steps)
static int fraction_steps(float v, int max_steps) { return v < 1 ? (int)(v * max_steps + 0.5f) : (int)v; }

float train_lr(const Config *c, int step, int max_steps) {
    int warmup = fraction_steps(c->optim.warmup, max_steps);
    if (step < warmup) return c->optim.lr * (float)(step + 1) / (float)warmup;
    if (c->optim.lr_decay_style == LR_DECAY_CONSTANT) return c->optim.lr;
    // the decay runs from the end of warm-up (and of the plateau) to --lr_decay_iters (or the last step)
    int start = warmup + (c->optim.lr_decay_style == LR_DECAY_PLATEAU ? fraction_steps(c->optim.plateau, max_steps) : 0);
    int end = c->optim.lr_decay_iters > 0 ? c->optim.lr_decay_iters : max_steps;
    if (step < start) return c->optim.lr;
    if (end <= start) return step < end ? c->optim.lr : c->optim.min_lr;
    double progress = (double)(step - start) / (double)(end - start);
    if (progress > 1) progress = 1;
    double f;
    switch (c->optim.lr_decay_style) {
    case LR_DECAY_LINEAR: f = 1.0 - progress; break;
    case LR_DECAY_EXPONENTIAL: {  // Megatron's: halves over the decay, never below --min_lr
        double lr = c->optim.lr * pow(0.5, progress);
        return (float)(lr > c->optim.min_lr ? lr : c->optim.min_lr);
    }
    default: f = 0.5 * (1.0 + cos(M_PI * progress)); break;  // cosine, and the plateau's descent
    }
    return (float)(c->optim.min_lr + (c->optim.lr - c->optim.min_lr) * f);
}

// --use_nsys (the profiling recipe's nsys sbatch passes it): nsys profiles a process it starts,
// which fsdpc cannot do for itself, so a launch that is not under nsys is refused with the line
// that is. nsys shows in the environment of what it starts: NSYS_PROFILING_SESSION_ID, and
// NVTX_INJECTION64_PATH (how the NVTX ranges find its tracer).
static void check_nsys(const Config *c) {
    if (!c->run.use_nsys) return;
    int under = getenv("NSYS_PROFILING_SESSION_ID") || getenv("NVTX_INJECTION64_PATH");
    comm_check_all(under ? NULL
                         : "--use_nsys: this rank does not run under nsys, and fsdpc cannot start it itself: put nsys "
                           "between the launcher and fsdpc, a report per rank, e.g. srun --mpi=pmix nsys profile "
                           "--trace=cuda,nvtx,mpi -o fsdpc_%q{SLURM_PROCID} ./fsdpc ... (mpirun: -o "
                           "fsdpc_%q{OMPI_COMM_WORLD_RANK}); or drop --use_nsys");
    if (kern_on_gpu())
        log_msg("--use_nsys: under nsys; NVTX ranges mark each unit's forward, backward and recompute, the optimizer, and "
                "the issue of each NCCL collective\n");
    else
        log_msg("--use_nsys: under nsys, on the CPU device, where fsdpc marks no NVTX ranges (a GPU run does): the report "
                "shows MPI and OS calls\n");
}

// The plans of this rank's micro-batches of `step` (data/loader/pack.h).
static void plans_of(Run *r, int step) { pack_step_plans(&r->plans, &r->order, &r->train, (uint64_t)r->cfg->optim.seed, step); }

// Global sample g joins the skipped ones (kept ascending, each once): the order holds it no more.
static void skip_sample(Run *r, uint64_t g) {
    size_t i = r->nskipped;
    while (i > 0 && r->skipped[i - 1] > g) i--;
    if (i > 0 && r->skipped[i - 1] == g) return;
    r->skipped = realloc(r->skipped, (r->nskipped + 1) * sizeof *r->skipped);
    if (!r->skipped) err_fatal("out of memory");
    memmove(r->skipped + i + 1, r->skipped + i, (r->nskipped - i) * sizeof *r->skipped);
    r->skipped[i] = g;
    r->nskipped++;
    r->order.skipped = r->skipped, r->order.nskipped = r->nskipped;
    pack_plans_forget(&r->plans);  // the plans made so far may hold it
}

// Takes this rank's micro-batch of a step and starts reading `next` in the background.
static void load_batch(Run *r, int step, int micro, const DataPlan *next) {
    char what[32];
    snprintf(what, sizeof what, "step %d", step + 1);
    const char *bad = data_loader_next(r->train_loader, r->plans.plans[step & 1][micro], next, r->batch, what);
    if (bad) comm_fail_local("%s", bad);
}

// Takes this rank's micro-batch and starts reading the next one in the background.
static void fill_batch(Run *r, int step, int micro) {
    plans_of(r, step);
    int next_step = step, next_micro = micro + 1;
    if (next_micro == r->plans.nplans[step & 1]) next_step++, next_micro = 0;
    const DataPlan *next = NULL;
    if (next_step < r->max_steps) {
        plans_of(r, next_step);
        next = r->plans.plans[next_step & 1][next_micro];
    }
    load_batch(r, step, micro, next);
    r->truncated += r->batch->truncated;
    r->lost += r->batch->lost;
}

// profiler range "<phase> unit <u>" (NVTX on GPU), and its span in the trace
static void range(const char *phase, int u) {
    char name[48];
    snprintf(name, sizeof name, "%s unit %d", phase, u);
    kern_range_push(name);
    trace_begin(TRACE_COMPUTE, name, u);
}

static void range_pop(void) {
    trace_end(TRACE_COMPUTE);
    kern_range_pop();
}

// Block l's units, gathered (the first prefetching the next, the last prefetching `next`), into p;
// returns how many
static int gather_block(ShardState *s, int l, int next, const void **p, int *units) {
    int n = model_block_gather(shard_plan(s), l, units);
    for (int i = 0; i < n; i++) p[i] = shard_gather(s, units[i], i + 1 < n ? units[i + 1] : next);
    return n;
}

// the first unit of block l (-1 for none: l out of range), the one to prefetch before it
static int block_first(const ShardState *s, int l) {
    int units[MAX_BLOCK_UNITS];
    return l >= 0 && l < shard_plan(s)->cfg.num_layers ? (model_block_units(shard_plan(s), l, units), units[0]) : -1;
}

// The forward of the loaded batch through the embedding and the blocks, each prefetching the next
// unit (after the last: `after`), each entry of the residual stream rounded as training rounds it.
// fwd: how the units are released; offload: training's inputs head to the host once final.
static void forward_blocks(ShardState *s, Activations *a, const char *what, ShardPhase fwd, int offload, int after) {
    const ModelPlan *plan = shard_plan(s);
    int L = plan->cfg.num_layers, T = a->T, D = plan->cfg.hidden_width;
    size_t ND = model_res_numel(a, D, T);  // one residual-stream entry
    for (int l = -1; l < L; l++) {  // -1: the embedding
        int next = l + 1 < L ? block_first(s, l + 1) : after, units[MAX_BLOCK_UNITS], n = 1;
        const void *p[MAX_BLOCK_UNITS];
        range(what, l < 0 ? plan->embed_unit : block_first(s, l));
        if (l < 0) {
            units[0] = plan->embed_unit;
            model_embed_fwd(plan, shard_gather(s, units[0], next), a, T, 0);
        } else {
            n = gather_block(s, l, next, p, units);
            model_block_fwd(plan, l, p, a, T, 0);
        }
        for (int i = 0; i < n; i++) shard_release(s, units[i], fwd);
        float *x = model_res_f32(a, l + 1, D);
        if (x) shard_cast_activation(s, x, ND);
        if (offload) model_offload_fwd(a, l + 1);
        range_pop();
    }
}

void train_micro_step(ShardState *s, Activations *a, const int32_t *inp, const int32_t *tgt, const int32_t *kstart,
                      int rows, float dscale, int last_micro, int batch) {
    const ModelPlan *plan = shard_plan(s);
    int L = plan->cfg.num_layers, T = a->T, train = dscale != 0.0f, B = a->B;
    int embed = plan->embed_unit, head = plan->head_unit;
    if (!train) model_set_dropout(a, 0.0f, 0, 0, 0), model_router_train(a, -1.0);  // evaluation: no dropout, no router losses
    a->B = rows;  // a packed step's micro-batch may hold fewer rows: the buffers fit B, the kernels run rows
    model_load_batch(a, inp, tgt, kstart, rows * T * a->cp, batch);  // whole sequences: a cp rank keeps its chunks
    // forward: the embedding, then the blocks; the head's forward runs with its backward
    forward_blocks(s, a, "forward", train ? PHASE_FWD : PHASE_EVAL, train, head);
    range(train ? "forward+backward" : "forward", head);
    const void *ph = shard_gather(s, head, train && L > 0 ? block_first(s, L - 1) : -1);
    model_head_fwd_bwd(plan, ph, train ? shard_grad_buffer(s, head) : NULL, a, 1, T, dscale);
    shard_release(s, head, train ? PHASE_BWD : PHASE_EVAL);
    // a head that shares the embedding's unit (tied weights) collects the embedding's gradient too
    if (train && head != embed) shard_grad_ready(s, head, last_micro);
    range_pop();
    if (!train) {
        a->B = B;
        return;
    }
    // backward: blocks high to low, each prefetching the one below; the embedding needs no weights
    for (int l = L - 1; l >= 0; l--) {
        int units[MAX_BLOCK_UNITS];
        const void *p[MAX_BLOCK_UNITS];
        float *g[MAX_BLOCK_UNITS];
        range("backward", block_first(s, l));
        int n = gather_block(s, l, block_first(s, l - 1), p, units);
        if (a->recompute[l]) {  // activation checkpointing
            model_offload_fetch(a, l);  // an offloaded input back from the host
            range("recompute", units[0]);
            model_block_fwd(plan, l, p, a, T, 0);
            range_pop();
            model_offload_prefetch(a, l);  // the one `horizon` checkpointed blocks lower starts back
        }
        for (int i = 0; i < n; i++) g[i] = shard_grad_buffer(s, units[i]);
        model_block_bwd(plan, l, p, g, a);
        for (int i = 0; i < n; i++) shard_release(s, units[i], PHASE_BWD);
        for (int i = n - 1; i >= 0; i--) shard_grad_ready(s, units[i], last_micro);
        range_pop();
    }
    range("backward", embed);
    shard_release(s, embed, PHASE_BWD);
    model_embed_bwd(plan, shard_grad_buffer(s, embed), a);
    shard_grad_ready(s, embed, last_micro);
    range_pop();
    a->B = B;
}

// A mixture of experts' router losses over a step of several micro-batches need every micro-
// batch's routing before the first backward: each micro-batch's forward through the blocks (in
// training mode, so with the training pass's dropout, and the same routing), its statistics summed
// over the ranks once. About one forward more per step, only when the router losses train.
static void route_prepass(Run *r, int step, int nmicro) {
    ShardState *s = &r->st;
    Activations *a = &r->acts;
    int T = a->T, B = a->B;
    model_router_collect(a);
    model_router_step(a, (double)r->order.global_batch * T * a->cp);  // whole sequences' tokens
    for (int micro = 0; micro < nmicro; micro++) {
        trace_begin(TRACE_DATA, "data wait", -1);
        load_batch(r, step, micro, r->plans.plans[step & 1][micro + 1 < nmicro ? micro + 1 : 0]);  // then the training pass's first
        trace_end(TRACE_DATA);
        model_set_dropout(a, r->cfg->model.dropout, (uint64_t)r->cfg->optim.seed, pack_batch_first(&r->order, step, micro), 1);
        model_router_train(a, (double)r->batch->loss_tokens);
        int rows = r->plans.plans[step & 1][micro]->nrows;
        a->B = rows;
        model_load_batch(a, r->batch->inp, r->batch->tgt, r->batch->docs ? r->batch->kstart : NULL, rows * T * a->cp, micro);
        forward_blocks(s, a, "routing", PHASE_EVAL, 0, -1);
        a->B = B;
    }
    model_router_fix(shard_plan(s), a);
}

// --profile: wall time per phase of the step. The device is synchronised at each phase end so
// queued GPU work is charged to the phase that queued it (which costs some overlap).
enum { PROF_DATA, PROF_COMPUTE, PROF_REDUCE, PROF_OPTIM, PROF_EVAL, PROF_CKPT, PROF_N };
static const char *const prof_names[PROF_N] = {"data wait", "forward+backward", "gradient reduction",
                                               "clip+optimizer", "validation", "checkpoint"};
static double prof_sec[PROF_N], prof_t0;

static void prof_mark(const Run *r, int phase) {
    if (!r->cfg->run.profile) return;
    kern_sync();
    double now = clock_now_s();
    if (phase >= 0) prof_sec[phase] += now - prof_t0;
    prof_t0 = now;
}

static void prof_report(const Run *r, int steps) {
    if (!r->cfg->run.profile || steps <= 0) return;
    double total = 0.0;
    comm_allreduce_max_f64(comm_world(), prof_sec, PROF_N);  // the slowest rank per phase
    for (int i = 0; i < PROF_N; i++) total += prof_sec[i];
    log_msg("profile over %d steps (slowest rank per phase):\n", steps);
    for (int i = 0; i < PROF_N; i++)
        log_msg("  %-20s %9.3f s  %5.1f%%  %8.2f ms/step\n", prof_names[i], prof_sec[i],
                100.0 * prof_sec[i] / (total > 0 ? total : 1), 1e3 * prof_sec[i] / steps);
}

// A token id the device check replaced (kern_tokens_check) ends the run naming where it was:
// training step `step` (0-based), or with step < 0 the validation pass. Places are numbered
// across the step's (or pass's) batches, 2N per batch: inputs, then targets. (The loader checks
// file data; this catches what the device was given, and costs no sync: it came with the loss.)
static void check_token_ids(const Run *r, int step) {
    long long at;
    int id;
    if (!kern_token_error(&at, &id)) return;
    long long N = (long long)r->acts.B * r->acts.T, batch = at / (2 * N);
    int T = r->acts.T;
    at %= 2 * N;
    int target = at >= N;
    if (target) at -= N;
    uint64_t first = step >= 0 ? pack_batch_first(&r->order, step, (int)batch)
                               : ((uint64_t)batch * r->order.dp_world + r->order.dp_rank) * (uint64_t)r->acts.B;
    uint64_t sample = first + (uint64_t)(at / T);
    if (step >= 0) sample = pack_sample(&r->order, sample);  // a position of the order, as a global sample index
    long long pos = r->acts.cp > 1 ? r->acts.cp_pos[(size_t)r->acts.cp_rank * T + at % T] : at % T;  // in the sequence
    comm_fail_local("%s %lld: sample %llu holds token id %d at %s position %lld, not in [0, --vocab_size %d)",
               step >= 0 ? "step" : "validation batch", step >= 0 ? step + 1LL : batch + 1, (unsigned long long)sample,
               id, target ? "target" : "input", pos, r->acts.V);
}

// The tests' non-finite batch: FSDPC_TEST_NONFINITE=sample:G makes the loss sum of the rank whose
// micro-batches of the step hold global sample G NaN, before the step's reduction carries it to
// every rank (the tp ranks reading it too), so one rank alone sees the non-finite value.
static void test_nonfinite_sample(Run *r, int step) {
    const char *e = getenv("FSDPC_TEST_NONFINITE");
    unsigned long long g;
    if (!e || sscanf(e, "sample:%llu", &g) != 1) return;
    for (int m = 0; m < r->plans.nplans[step & 1]; m++) {
        const DataPlan *p = r->plans.plans[step & 1][m];
        for (int i = 0; i < p->first[p->nrows]; i++)
            if (p->samples[i] == g) {
                double nan = NAN;
                kern_upload(r->acts.loss, &nan, sizeof nan);
                return;
            }
    }
}

// One optimizer step. Its loss is the mean over the global batch's loss-bearing targets (the
// gradients add up the loss sums, and AdamW divides by the global count, so every layout, packing
// and --grad_accum give one mean). A non-finite loss or gradient norm skips the update, and so
// does a step without a loss-bearing target. A preemption signal on some rank rides on the step's
// one reduction (loss, flag, gradient norm), so every rank agrees at no extra cost. The loss stays
// on the device through the micro-batches and reaches the host with the gradient's sums of
// squares, in one wait per step.
static StepResult train_step(Run *r, int step, float lr) {
    Config *c = r->cfg;
    prof_mark(r, -1);
    shard_zero_grads(&r->st);
    model_loss_reset(&r->acts);
    double mine = 0.0;  // this rank's loss-bearing targets
    plans_of(r, step);
    int nmicro = r->plans.nplans[step & 1];
    // a mixture of experts: router losses that train need the step's routing before the first
    // backward (a routing pass when it has several micro-batches); logged alone, they are summed as
    // the micro-batches go and reduced once at the end
    int prepass = nmicro > 1 && model_router_collects(&r->acts), log_only = !model_router_collects(&r->acts);
    if (prepass) route_prepass(r, step, nmicro), prof_mark(r, PROF_COMPUTE);
    if (log_only) model_router_collect(&r->acts);
    model_router_step(&r->acts, (double)r->order.global_batch * c->model.max_context_width);  // capacity counts afresh
    char pause[24];  // the tests' stand-in for a compute kernel that does not return
    snprintf(pause, sizeof pause, "step%d", step + 1);
    clock_test_pause(pause);
    for (int micro = 0; micro < nmicro; micro++) {
        trace_begin(TRACE_DATA, "data wait", -1);
        fill_batch(r, step, micro);
        trace_end(TRACE_DATA);
        mine += r->tp_rank || r->cp_rank ? 0.0 : (double)r->batch->loss_tokens;  // a tp or cp group's tokens, once
        // masks keyed by the global sample index: equal for every layout, and on resume
        model_set_dropout(&r->acts, c->model.dropout, (uint64_t)c->optim.seed, pack_batch_first(&r->order, step, micro), 1);
        prof_mark(r, PROF_DATA);
        const DataPlan *p = r->plans.plans[step & 1][micro];
        model_router_train(&r->acts, (double)r->batch->loss_tokens);  // a mixture of experts: losses over the global batch
        train_micro_step(&r->st, &r->acts, r->batch->inp, r->batch->tgt, r->batch->docs ? r->batch->kstart : NULL, p->nrows,
                         1.0f, micro == nmicro - 1, micro);
        comm_stop_progress();
        prof_mark(r, PROF_COMPUTE);
    }
    shard_grads_finish(&r->st);
    test_nonfinite_sample(r, step);
    ShardStepStats st;
    // clipping's norm: per-unit sums of squares, the loss and the token count in one reduction (the scaling runs inside AdamW)
    trace_begin(TRACE_COMPUTE, "clip grad norm", -1);
    // the flag: preemption signals count 1 each, a failed metrics or events write (rank 0's) OUTPUT_FAILED
    double flag = (comm_stop_signal != 0) + (r->metrics_error[0] ? OUTPUT_FAILED : 0);
    shard_step_stats(&r->st, r->acts.loss, flag, mine, &st);  // reduced over all ranks: they agree
    trace_end(TRACE_COMPUTE);
    if (st.flag >= OUTPUT_FAILED)  // before this step's update: nothing after the failed line is trained or saved
        comm_fail_all("%s", r->metrics_error[0] ? r->metrics_error : "rank 0 could not write --metrics_file or --tensorboard_dir");
    StepResult out = {.preempt = st.flag > 0, .tokens = st.tokens};
    prof_mark(r, PROF_REDUCE);
    kern_range_push("optimizer");
    double inv = st.tokens > 0 ? 1.0 / st.tokens : 0.0;  // no loss-bearing target: loss 0, no update
    // the router losses (a mixture of experts) are in the gradients with their coefficients, so in the loss too
    if (log_only) model_router_fix(shard_plan(&r->st), &r->acts);
    model_router_losses(&r->acts, &out.router_aux, &out.router_z);
    out.router_dropped = model_router_dropped(&r->acts);
    model_router_train(&r->acts, -1.0);  // the step's router statistics end with it
    out.loss = st.loss * inv + c->model.router_aux_loss_coef * out.router_aux + c->model.router_z_loss_coef * out.router_z;
    check_token_ids(r, step);  // the stream was just waited for: one small copy
    trace_counter("loss", out.loss);
    if (kern_on_gpu()) trace_counter("device memory", kern_peak_mem_mib());
    out.gnorm = st.grad_norm * inv;
    // the tests' divergence, since no learning rate in --lr's range reliably makes one:
    // FSDPC_TEST_NONFINITE=N makes the loss and gradient norm of step N and every later step NaN
    // (on every rank; sample:G is test_nonfinite_sample's)
    const char *nonfinite = getenv("FSDPC_TEST_NONFINITE");
    if (nonfinite && isdigit((unsigned char)nonfinite[0]) && step + 1 >= atoi(nonfinite)) out.loss = out.gnorm = NAN;
    out.applied = isfinite(out.loss) && isfinite(out.gnorm);
    trace_begin(TRACE_COMPUTE, "optimizer", -1);
    if (!(st.tokens > 0)) {
        log_msg("step %d: no target in the global batch bears loss (all padding or prompts): update skipped\n", step + 1);
        shard_set_step(&r->st, shard_step(&r->st) + 1);
    } else if (out.applied) {
        ckpt_async_fence(r->async);  // the background checkpoint's copy of the shards is taken first
        shard_adamw_step(&r->st, &c->optim, lr, out.gnorm, inv);
    }
    else shard_set_step(&r->st, shard_step(&r->st) + 1);  // the schedule still moves on, so a resumed run counts steps alike
    trace_end(TRACE_COMPUTE);
    kern_range_pop();
    prof_mark(r, PROF_OPTIM);
    return out;
}

// The mean validation loss (NAN when no target bore loss). A stop signal on any rank ends it at the
// next batch on every rank, returning NAN with *stopped set to the signal.
static double validate(Run *r, int *stopped) {
    Config *c = r->cfg;
    // a validation batch of --val_batch_size sequences per rank runs as micro-batches of at most
    // --batch_size rows, the size the activations were allocated for
    int B = c->optim.batch_size, Bv = c->data.val_batch_size > 0 ? c->data.val_batch_size : B, parts = (Bv + B - 1) / B;
    int n = c->data.validation_batches * parts;
    double sums[2] = {0.0, 0.0};  // loss sum, loss-bearing targets
    model_loss_reset(&r->acts);
    DataPlan *plan[2] = {r->plans.plans[0][0], r->plans.plans[1][0]};  // the training plans are rebuilt after validation
    r->plans.step[0] = r->plans.step[1] = -1;
    for (int k = 0; k <= n; k++) {  // plans k (and k+1, read ahead), then micro-batch k
        if (k < n) {
            int i = k / parts, j = k % parts, rows = Bv - j * B < B ? Bv - j * B : B;
            data_plan_rows(plan[k & 1], rows, ((uint64_t)i * r->order.dp_world + r->order.dp_rank) * Bv + (uint64_t)j * B);
        }
        if (k == 0) continue;
        int m = k - 1, i = m / parts;
        if ((*stopped = comm_stop_any())) {
            if (r->max_steps)  // training's: the step's checkpoint and line follow
                log_msg("Stopped by signal %d (%s) during validation, at batch %d of %d: no loss reported\n", *stopped,
                        comm_signal_name(*stopped), i + 1, c->data.validation_batches);
            else
                log_msg("Stopped by signal %d (%s) during validation, at batch %d of %d: no loss reported, nothing written; "
                        "exiting with status %d\n", *stopped, comm_signal_name(*stopped), i + 1, c->data.validation_batches,
                        TRAIN_EXIT_PREEMPTED);
            return NAN;
        }
        int rows = Bv - (m % parts) * B < B ? Bv - (m % parts) * B : B;
        const char *bad = data_loader_next(r->val_loader, plan[m & 1], k < n ? plan[k & 1] : NULL, r->batch, "validation");
        if (bad) comm_fail_local("%s", bad);
        train_micro_step(&r->st, &r->acts, r->batch->inp, r->batch->tgt, r->batch->docs ? r->batch->kstart : NULL, rows, 0.0f, 1, i);
        comm_stop_progress();
        sums[1] += r->tp_rank || r->cp_rank ? 0.0 : (double)r->batch->loss_tokens;  // a tp or cp group's tokens, once
    }
    sums[0] = model_loss_read(&r->acts);
    check_token_ids(r, -1);
    comm_allreduce_sum_f64(comm_world(), sums, 2);
    return sums[1] > 0 ? sums[0] / sums[1] : NAN;  // NAN: no target bore loss, nothing was validated
}

// A stop signal ends a validation at its next batch (*stopped set): a run that only validates
// exits, training writes the step's checkpoint and exits.
static double log_validation(Run *r, int step, int *stopped) {
    trace_begin(TRACE_COMPUTE, "validation", -1);
    comm_stop_watch("validation");
    double vl = validate(r, stopped);
    comm_stop_watch("training");
    trace_end(TRACE_COMPUTE);
    if (!*stopped && isnan(vl))
        log_msg("Batch %d Validation: nothing validated, no target in its %d batch(es) bears loss (every label -100 or "
                "attention mask 0)\n", step, r->cfg->data.validation_batches);
    else if (!*stopped) log_msg("Batch %d Validation loss: %.5f, perplexity: %.3f\n", step, vl, exp(vl));
    return vl;
}

// --async_checkpoint: the write in flight, waited for (one at a time). why: what waits, for the
// log when the wait took time.
static void save_wait(Run *r, const char *why) {
    if (!ckpt_async_busy(r->async)) return;
    double waited;
    char err[CKPT_ERR_LEN];
    trace_begin(TRACE_COMPUTE, "checkpoint wait", -1);
    int rc = ckpt_async_wait(r->async, &waited, err, sizeof err);
    trace_end(TRACE_COMPUTE);
    if (rc) comm_fail_all("%s", err);
    if (waited >= 0.01) log_msg("%s waited %.2f s for the previous checkpoint's background write\n", why, waited);
}

// --keep_snapshot: what the run has counted at the snapshot's step besides the shards
static void snapshot_counts(Run *r) {
    r->snap.tokens_seen = r->tokens_seen, r->snap.truncated = r->truncated, r->snap.lost = r->lost;
}

// sync: written before returning, even under --async_checkpoint (the last checkpoint of a run)
static void save(Run *r, int step, int sync) {
    Config *c = r->cfg;
    // nothing non-finite reaches the disk, whatever produced it
    double sumsq = 0.0;
    for (int u = 0; u < shard_num_units(&r->st); u++)  // QLoRA's packed units are bytes (and frozen): not summed
        if (!shard_unit_packed(&r->st, u)) sumsq += kern_sumsq(shard_device_master(&r->st, u), shard_unit_len(&r->st, u));
    comm_allreduce_sum_f64(comm_world(), &sumsq, 1);
    if (!isfinite(sumsq))
        comm_fail_all("step %d: the weights hold NaN or Inf; no checkpoint written (the last good one is kept)", step);
    CkptMeta meta = r->origin;
    meta.step = step;
    meta.tokens_seen = (uint64_t)r->tokens_seen;
    meta.data_position = pack_step_first(&r->order, step);
    meta.rng_state = (uint64_t)c->optim.seed;
    meta.skipped = r->skipped, meta.nskipped = r->nskipped;
    CkptSaved out;
    char err[CKPT_ERR_LEN], run[2048], what[64];
    config_describe(c, inputs_data_name(r), run, sizeof run);
    snprintf(what, sizeof what, "step %d's checkpoint", step);
    save_wait(r, what);  // one in flight: the next waits for the previous
    if (r->async && !sync) {
        trace_begin(TRACE_COMPUTE, "checkpoint staging", -1);
        if (ckpt_save_async(r->async, c->ckpt.checkpoint_dir, &r->st, &c->model, run, c->data.tokenizer, &meta, &r->source,
                            c->ckpt.num_kept_checkpoints, r->resume_file, err, sizeof err))
            comm_fail_all("%s", err);
        trace_end(TRACE_COMPUTE);
        snapshot_counts(r);  // the staged state is the snapshot (--keep_snapshot)
        return;
    }
    trace_begin(TRACE_COMPUTE, "checkpoint write", -1);
    if (ckpt_save(c->ckpt.checkpoint_dir, &r->st, &c->model, run, c->data.tokenizer, &meta, &r->source, &out, err, sizeof err))
        comm_fail_all("%s", err);
    trace_end(TRACE_COMPUTE);
    log_msg("Saved checkpoint %s in %.2f s (%.1f MB/s)\n", out.path, out.seconds,
            out.bytes / 1e6 / (out.seconds > 0 ? out.seconds : 1e-9));
    ckpt_prune(c->ckpt.checkpoint_dir, c->ckpt.num_kept_checkpoints, &meta, out.path, r->resume_file);
    free(out.path);
    if (r->snapshot && !sync) {  // a run that goes on keeps the state it just wrote
        ckpt_snapshot_take(r->snapshot, &r->st);
        snapshot_counts(r);
    }
}

// The layout: ranks, data-parallel place, global batch and the steps asked for.
static void setup_layout(Run *r) {
    Config *c = r->cfg;
    const char *sizes = flags_check_world(c, comm_info.world);
    if (sizes) comm_fail_all("%s", sizes);
    // the mesh puts a tp group on consecutive ranks (shard/parallel.h); parallel_dims_build later
    // refuses a degree that does not divide the world
    int tp = c->shard.tensor_parallel_degree > 1 && comm_info.world % c->shard.tensor_parallel_degree == 0 ? c->shard.tensor_parallel_degree : 1;
    // and a cp group on consecutive data-parallel ranks, which read one batch
    int cp = c->shard.context_parallel_degree > 1 && comm_info.world / tp % c->shard.context_parallel_degree == 0
                 ? c->shard.context_parallel_degree : 1;
    r->order = (PackLayout){.dp_world = comm_info.world / tp / cp, .dp_rank = comm_info.rank / tp / cp,
                            .batch_size = c->optim.batch_size, .grad_accum = c->optim.grad_accum, .packing = c->data.packing};
    r->tp_rank = comm_info.rank % tp;
    r->cp_rank = comm_info.rank / tp % cp;
    r->order.global_batch = c->optim.batch_size * r->order.dp_world * c->optim.grad_accum;
    r->max_steps = c->optim.max_epochs < 0 ? 0 : c->optim.max_steps;  // minimal_fsdp's evaluate-then-generate trains nothing
}

// Said now, not after the steps up to the first checkpoint (each rank writes into the file).
static void check_file_size(const Run *r) {
    const Config *c = r->cfg;
    double ckpt_bytes = ckpt_state_bytes(&r->plan), fmax = (double)limits_file_size();
    char fsize[400] = "";
    if (r->max_steps != 0 && c->ckpt.checkpoint_freq > 0 && fmax < ckpt_bytes)
        snprintf(fsize, sizeof fsize, "checkpoints of this model take %.1f MB but ulimit -f (file size) allows %.1f MB on rank %d: raise it "
                 "(ulimit -f unlimited) or pass --checkpoint_freq 0", ckpt_bytes / 1e6, fmax / 1e6, comm_info.rank);
    comm_check_all(fsize[0] ? fsize : NULL);
}

// The steps the run trains, once the data's size is known: --max_steps, or fewer by --max_epochs.
static void setup_steps(Run *r) {
    const Config *c = r->cfg;
    if (r->max_steps < 0) r->max_steps = 300;
    if (c->optim.max_epochs > 0 && !r->train.nchunks)
        log_msg("--max_epochs %d does not apply: synthetic data has no epochs, so --max_steps decides (%d steps)\n",
                c->optim.max_epochs, r->max_steps);
    if (c->optim.max_epochs > 0 && r->train.nchunks) {  // a synthetic dataset has no epochs
        uint64_t samples, steps;  // the steps --max_epochs passes over the data, saturating far above any run
        if (!checked_mul((uint64_t)c->optim.max_epochs, r->train.nchunks, &samples)) samples = UINT64_MAX - INT32_MAX;
        steps = (samples + (uint64_t)r->order.global_batch - 1) / (uint64_t)r->order.global_batch;
        int by_epochs = steps > INT32_MAX ? INT32_MAX : (int)steps;
        if (c->optim.max_steps >= 0)  // both given: the first reached ends the run, said once
            log_msg("--max_steps %d and --max_epochs %d (%d steps here): the run stops at whichever comes first, step %d (%s)\n",
                    c->optim.max_steps, c->optim.max_epochs, by_epochs, by_epochs < r->max_steps ? by_epochs : r->max_steps,
                    by_epochs < r->max_steps ? "--max_epochs" : "--max_steps");
        if (c->optim.max_steps < 0 || by_epochs < r->max_steps) r->max_steps = by_epochs;
    }
}

// The run's description in the log, and notes on flags that do little here (att: the attention
// kernel's note, or NULL).
static void log_setup(const Run *r, const char *att) {
    const Config *c = r->cfg;
    char desc[2048], origins[400];
    config_describe(c, inputs_data_name(r), desc, sizeof desc);
    flags_size_origins(c, origins, sizeof origins);
    log_msg("fsdpc: %d rank(s) on %s, %d thread(s)/rank, %.2fM parameters (%s)\n%s attention=%s\n", comm_info.world,
            kern_device_name(), c->run.num_threads, r->plan.num_params / 1e6, origins, desc, kern_attention_kernel());
    log_msg("fsdpc: CPU kernels: %s\n", kern_cpu_isa());
    if (c->recipe.recipe_line[0]) log_msg("%s\n", c->recipe.recipe_line);
    if (c->recipe.recipe_note[0]) log_msg("%s\n", c->recipe.recipe_note);
    if (kern_peak_flops() > 0) log_msg("MFU against %.0f TFLOP/s dense bf16 per GPU\n", kern_peak_flops() / 1e12);
    if (c->optim.grad_accum > 1 && c->model.num_experts && (c->model.router_aux_loss_coef > 0 || c->model.router_z_loss_coef > 0))
        log_msg("mixture of experts: the router losses span a step's micro-batches (--grad_accum %d), so a step of several "
                "runs a routing pass (their forward through the blocks) before its first backward\n", c->optim.grad_accum);
    int warmup = fraction_steps(c->optim.warmup, r->max_steps);
    if (r->max_steps > 0 && warmup > r->max_steps)  // a recipe's warm-up on a short smoke run: the loss barely moves
        log_msg("--warmup %d is longer than this run's %d steps: the learning rate rises only to %g (%.2g%% of --lr %g) by "
                "the last step, so the loss moves little (a warm-up below 1 is a fraction of --max_steps)\n", warmup,
                r->max_steps, (double)c->optim.lr * r->max_steps / warmup, 100.0 * r->max_steps / warmup, (double)c->optim.lr);
    if (att) log_msg("fsdpc: %s\n", att);
    if (c->shard.offload_activations && !kern_on_gpu())
        log_msg("--offload_activations: no effect on the CPU device (activations already live in host memory; "
                "checkpointing stays as the flags set it)\n");
    if (c->shard.cpu_offload && !kern_on_gpu())
        log_msg("--cpu_offload: no effect on the CPU device (parameters already live in host memory)\n");
    if (c->shard.cpu_offload && kern_on_gpu())
        log_msg("--cpu_offload: master shards and AdamW moments in pinned host memory, AdamW on %d CPU threads\n",
                c->run.num_threads);
}

// Which kernels compute the ring's blocks on a GPU, and why: cuDNN's SDPA takes the plain causal
// blocks where --attention chose cuDNN (kern_select_attention, run before this); per-token masks
// stay on the native part kernels.
static const char *ring_blocks_line(const Config *c) {
    static char line[300];
    const int cudnn = !strncmp(kern_attention_kernel(), "cudnn", 5);
    if (!cudnn)
        return "on the native part kernels (cuDNN does not run this model's attention: the attention line says why)";
    if (c->model.sliding_window > 0)
        return "on the native part kernels (a sliding window's mask is per token; cuDNN takes no such block)";
    snprintf(line, sizeof line, "through cuDNN's SDPA (a rank's own block causal, the others full rectangles, merged by "
             "log-sum-exp), the native part kernels for batches with document boundaries%s, under attention "
             "dropout and for a shape cuDNN refuses (said once)", c->data.document_masking ? " (--document_masking)" : "");
    return line;
}

// Context parallelism: the plan's place in its cp group, and the group (before the memory check,
// which counts a rank's share of each sequence).
static void setup_context(Run *r) {
    if (r->dims.cp == 1) return;
    r->plan.cp = r->dims.cp;
    r->plan.cp_rank = r->cp_rank;
    r->plan.cp_docs = r->cfg->data.document_masking;
    comm_make_cp_group(r->dims.tp, r->dims.cp, &r->plan.cp_group);
    int T = r->cfg->model.max_context_width;
    log_msg("context parallelism %d: each rank holds 2 chunks of %d tokens of every sequence of %d (rank r: chunks r and "
            "%d - r), attention by a ring over the group\n", r->dims.cp, T / (2 * r->dims.cp), T, 2 * r->dims.cp - 1);
    if (kern_on_gpu()) log_msg("context parallelism: the ring blocks %s; the ring's send/recv on NCCL's stream beside them\n",
                               ring_blocks_line(r->cfg));
}

// The mesh, the memory check, the shards, the activations and the data buffers.
static void setup_build(Run *r) {
    Config *c = r->cfg;
    // nodes may differ in ranks per node (a hybrid default): any rank's objection ends the job
    comm_check_all(parallel_dims_build(&r->dims, &c->shard, &c->model, comm_info.world, comm_info.local_world));
    comm_check_all(lora_check_layout(&r->plan, r->dims.tp));
    if (r->dims.tp > 1)  // the group comes with the mesh, in shard_init
        model_plan_tp(&r->plan, r->dims.tp, r->tp_rank, NULL, r->dims.sequence_parallel);
    if (r->dims.ep > 1)  // this rank's place in its ep group: consecutive data-parallel ranks (parallel.h)
        model_plan_ep(&r->plan, r->dims.ep, comm_info.rank / r->dims.tp % r->dims.ep, NULL);
    setup_context(r);
    memory_check(&r->plan, c, &r->dims);
    outputs_claim_checkpoint_dir(r);
    shard_init(&r->st, &r->plan, &c->shard, &r->dims, c->optim.grad_accum, c->optim.seed, !r->resume_file[0] && !r->init_h5 && !r->hf);
    r->plan.tp_group = r->st.tp_group;
    r->plan.ep_group = r->st.ep_group;
    log_msg("sharding %s: shard group %d x replica group %d\n", shard_strategy_name(r->dims.strategy), r->dims.shard_size,
            r->dims.replica_size);
    if (r->plan.lora0 >= 0) {
        size_t trained = lora_trained_params(&r->plan);
        log_msg("LoRA r=%d alpha=%g (scale %g%s) on %s%s: %.2fM adapter parameters train (%.3f%%); the other %.2fM are frozen\n",
                c->model.lora_rank, (double)c->model.lora_alpha, (double)r->plan.lora_scale, c->model.use_rslora ? ", rsLoRA" : "",
                r->plan.cfg.lora_target_modules, c->model.lora_dropout > 0 ? ", adapter dropout" : "", (double)trained / 1e6,
                100.0 * (double)trained / (double)r->plan.num_params, (double)(r->plan.num_params - trained) / 1e6);
    }
    if (r->dims.ep > 1)
        log_msg("expert parallelism %d: %d experts per rank, tokens to them by all-to-all; each rank's experts sharded over %d "
                "rank(s) x %d replica(s)\n", r->dims.ep, c->model.num_experts / r->dims.ep, r->dims.expert_shard_size,
                r->dims.expert_replica_size);
    model_acts_alloc(&r->acts, &r->plan, c->optim.batch_size, c->model.max_context_width, 0, memory_ckpt_every(c, kern_on_gpu()),
                     memory_offload_horizon(c, kern_on_gpu()));
    if (c->shard.offload_activations && kern_on_gpu()) {
        const char *how = model_offload_describe(&r->acts);
        log_msg("--offload_activations: %s%s\n", c->shard.activation_checkpoints ? "" : "activation checkpointing on (implied); ",
                how ? how
                    : "nothing to move: the checkpointed blocks are no more than --activation_loading_horizon + 1, all kept on "
                      "the device");
    }
    int nplans = c->data.packing ? c->optim.grad_accum : c->optim.grad_accum > 1 ? c->optim.grad_accum : 1;
    r->batch = data_batch_new(c->optim.batch_size, c->model.max_context_width);
    pack_plans_init(&r->plans, nplans, c->optim.batch_size, c->model.max_context_width);
}

// --async_checkpoint: the writer's communicator and the staging buffer, when the run will write
// checkpoints (the start-up memory check counted the buffer)
static void setup_async(Run *r) {
    const Config *c = r->cfg;
    if (!c->ckpt.async_checkpoint || c->ckpt.checkpoint_freq <= 0 || r->start_step >= r->max_steps) return;
    if (!comm_thread_multiple())
        comm_fail_all("--async_checkpoint: the MPI library does not provide MPI_THREAD_MULTIPLE, which the background writer needs "
                      "(it makes MPI-IO calls while training makes its own); use an MPI built with thread support, or drop "
                      "--async_checkpoint");
    r->async = ckpt_async_new(&r->st, r->snapshot);
    if (r->snapshot)
        log_msg("--async_checkpoint: each checkpoint is staged in --keep_snapshot's buffer and written in the background; the "
                "next checkpoint and the end of training wait for it\n");
    else
        log_msg("--async_checkpoint: each checkpoint is staged in %.1f MiB of %shost memory per rank (rank 0's part) and written in "
                "the background; the next checkpoint and the end of training wait for it\n", ckpt_stage_bytes(&r->st) / 1048576.0,
                kern_on_gpu() ? "pinned " : "");
}

// --keep_snapshot: the buffer, and the state the run starts from in it (the start-up memory check
// counted the buffer). The tests' FSDPC_TEST_SKIP_SAMPLES=G:N (a run whose data never held global
// samples G..G+N-1: the reference a rollback's losses are held against) adds to the skipped samples.
static void setup_snapshot(Run *r) {
    const Config *c = r->cfg;
    const char *hook = getenv("FSDPC_TEST_SKIP_SAMPLES");
    unsigned long long g, n;
    if (hook && sscanf(hook, "%llu:%llu", &g, &n) == 2)
        for (unsigned long long i = 0; i < n; i++) skip_sample(r, g + i);
    r->rolled_back = -1;
    if (!c->ckpt.keep_snapshot || r->start_step >= r->max_steps) return;
    r->snapshot = ckpt_snapshot_new(&r->st);
    ckpt_snapshot_take(r->snapshot, &r->st);
    snapshot_counts(r);
    log_msg("--keep_snapshot: the state of each checkpoint step (now the start's, step %d) is kept in %.1f MiB of %shost memory per "
            "rank (rank 0's), for --on_nonfinite rollback\n", r->start_step, ckpt_snapshot_bytes(&r->st) / 1048576.0,
            kern_on_gpu() ? "pinned " : "");
}

// Everything before the first step; returns 0, or the exit status of a run stopped while its
// data cache was built.
static int train_setup(Run *r) {
    Config *c = r->cfg;
    const double t_start = clock_now_s();
    outputs_check_paths(c);
    inputs_init(r);
    // A stop signal while loading ends the process at once: nothing is half-written then (the
    // checkpoint folder and --metrics_file are only created; the writer lock is registered with
    // comm_stop_unlink). The data cache build, training, validation and generation poll instead.
    comm_stop_phase("loading (tokenizer, model, data, checkpoint)");
    setup_layout(r);
    ckpt_new_run_id(r->origin.run_id);
    inputs_resolve(r);  // first, so the outputs are compared with the inputs it notes
    outputs_open(r);
    check_nsys(c);
    char big[2400];
    if ((c->run.trace_file[0] || c->run.trace_dir[0]) && trace_open(c->run.trace_file, c->run.trace_dir, c->run.trace_steps[0], c->run.trace_steps[1], big, sizeof big))
        comm_fail_all("%s", big);
    comm_check_same(flags_hash(c), "model configuration or tokenizer after reading its sources (do the files differ between nodes?)");
    c->model.base_bf16 = shard_base_bf16(&c->shard);
    if (model_plan_build(&r->plan, &c->model, big, sizeof big)) comm_fail_all("%s", big);
    const char *sizes = model_check_sizes(&r->plan, c->optim.batch_size, c->model.max_context_width);
    if (sizes) comm_fail_all("%s", sizes);
    check_file_size(r);
    r->flops_per_token = model_flops_per_token(&r->plan, c->model.max_context_width);
    comm_stop_polled(1);
    if (inputs_open_data(r)) {
        log_msg("Preempted (signal) while building the data cache: nothing trained, no partial cache left; exiting with "
                "status %d so the job can be requeued\n", TRAIN_EXIT_PREEMPTED);
        return TRAIN_EXIT_PREEMPTED;
    }
    comm_stop_polled(0);
    inputs_record(r);
    setup_steps(r);
    int att_failed;  // the model's head dim is known only now
    const char *att = kern_select_attention(c->run.attention, c->shard.precision == PRECISION_BF16, config_head_dim(&c->model),
                                            &att_failed);
    // the data files inputs_open_data noted, against the outputs (rank 0's): refused before anything is written
    comm_check_all(att_failed ? att : io_conflict());
    log_setup(r, att);
    setup_build(r);
    inputs_load_state(r);
    comm_stop_polled(1);
    comm_stop_watch("training");  // a kernel that never returns must not keep a stop from being obeyed
    r->start_step = shard_step(&r->st);
    setup_snapshot(r);
    setup_async(r);
    if (r->start_step < r->max_steps)  // the model's initial values or checkpoint, the data and the device, before any step
        log_msg("start-up: %.1f s to the first step on %d host thread(s)\n", clock_now_s() - t_start, c->run.num_threads);
    return 0;
}

// A non-finite step counts against --skip_nonfinite_steps (unbounded under --on_nonfinite skip and
// rollback unless given): once they are spent the run stops, before the step's update.
static void nonfinite_count(Run *r, int done, const StepResult *s) {
    const Config *c = r->cfg;
    NonfiniteAction mode = c->optim.on_nonfinite;
    int budget = mode == NONFINITE_STOP || flags_given(c, "skip_nonfinite_steps") ? c->optim.skip_nonfinite_steps : INT_MAX;
    if (++r->nonfinite <= budget) return;
    char why[160] = "--skip_nonfinite_steps N skips up to N such steps; --on_nonfinite rollback skips their samples";
    if (mode != NONFINITE_STOP)
        snprintf(why, sizeof why, "--skip_nonfinite_steps %d: the run survived that many (--on_nonfinite %s)", budget,
                 cli_choice_name(shard_nonfinite_names, mode));
    comm_fail_all("step %d: non-finite %s (loss %g, gradient norm %g); stopped before the update, and no checkpoint "
                  "was written after it (%s)", done, isfinite(s->loss) ? "gradient norm" : "loss", s->loss, s->gnorm, why);
}

// n ascending sample indices as ranges "a-b, c" into out, cut with the count when long
static void show_samples(const uint64_t *g, size_t n, char *out, size_t len) {
    size_t at = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && at + 48 < len; i++) {
        size_t j = i;
        while (j + 1 < n && g[j + 1] == g[j] + 1) j++;
        at += (size_t)snprintf(out + at, len - at, "%s%llu", i ? ", " : "", (unsigned long long)g[i]);
        if (j > i) at += (size_t)snprintf(out + at, len - at, "-%llu", (unsigned long long)g[j]);
        if (j + 1 < n && at + 48 >= len) snprintf(out + at, len - at, ", ... (%zu in all)", n);
        i = j;
    }
}

// --on_nonfinite rollback at the non-finite step `step` (0-based; every rank saw it in the step's
// reduction): the snapshot goes back into the shards, the step's samples join the skipped ones,
// and the steps from the snapshot's on are trained again, those before `step` as before (not
// logged again), then `step` on the samples that follow. Returns the step to go on from. A step
// that is non-finite again after its samples were skipped, or while replayed, stops the run: the
// failure follows the weights, not the data, and rolling back again would repeat it.
static int rollback(Run *r, int step, const StepResult *s) {
    int done = step + 1, G = r->order.global_batch;
    if (step < r->replay_end)
        comm_fail_all("step %d: non-finite loss or gradient norm while it was trained again after a rollback, though it was "
                      "finite before: the replay is not deterministic here; stopped (resume from the last checkpoint)", done);
    if (step == r->rolled_back)
        comm_fail_all("step %d: non-finite again after a rollback skipped its samples: the failure follows the weights, not "
                      "the data; stopped (lower --lr, or resume from an earlier checkpoint)", done);
    nonfinite_count(r, done, s);
    uint64_t first = pack_step_first(&r->order, step), *g = mallocCheck((size_t)G * sizeof *g);
    for (int i = 0; i < G; i++) g[i] = pack_sample(&r->order, first + (uint64_t)i);  // before any joins the skipped
    for (int i = 0; i < G; i++) skip_sample(r, g[i]);
    char shown[400];
    show_samples(g, (size_t)G, shown, sizeof shown);
    free(g);
    int from = ckpt_snapshot_restore(r->snapshot, r->async, &r->st);
    r->tokens_seen = r->snap.tokens_seen, r->truncated = r->snap.truncated, r->lost = r->snap.lost;
    r->replay_end = step;
    r->rolled_back = step;
    log_msg("step %d: non-finite %s (loss %g, gradient norm %g): rolled back to step %d's snapshot; the step's %d samples "
            "(global indices %s of the data order) are skipped from now on, also by a resume; %s (rollback %d)\n", done,
            isfinite(s->loss) ? "gradient norm" : "loss", s->loss, s->gnorm, from, G, shown,
            from < step ? "the steps since are trained again" : "the step is trained again on the samples after them", r->nonfinite);
    return from;
}

// The stop after step `done` (a preemption signal): its checkpoint, unless saved already; exit 75.
static int stop_after(Run *r, int done, int saved) {
    const Config *c = r->cfg;
    if (c->ckpt.checkpoint_freq > 0 && !saved) save(r, done, 1);
    save_wait(r, "the stop");
    log_msg("Preempted (signal) after step %d: %s; exiting with status %d so the job can be requeued and resumed\n",
            done, c->ckpt.checkpoint_freq > 0 ? "checkpoint written" : "no checkpoint (--checkpoint_freq 0)", TRAIN_EXIT_PREEMPTED);
    r->max_steps = done;  // generation is skipped in train_finish
    return TRAIN_EXIT_PREEMPTED;
}

// The steps from start_step to max_steps; returns the exit status (a preemption's, or 0).
static int train_loop(Run *r) {
    Config *c = r->cfg;
    r->t_log = clock_now_s();
    for (int step = r->start_step; step < r->max_steps; step++) {
        const char *untraced = trace_step(step + 1);
        if (untraced) comm_fail_all("%s", untraced);
        float lr = train_lr(c, step, r->max_steps);
        char step_range[32];  // nsys picks steps by it: --capture-range=nvtx --nvtx-capture="step N"
        snprintf(step_range, sizeof step_range, "step %d", step + 1);
        kern_range_push(step_range);
        StepResult s = train_step(r, step, lr);
        kern_range_pop();
        int done = step + 1;
        if (!s.applied && c->optim.on_nonfinite == NONFINITE_ROLLBACK) {  // nothing of it is logged: it is trained again
            step = rollback(r, step, &s) - 1;
            continue;  // a stop signal in it is still set: the next step's reduction carries it
        }
        r->log_steps++;
        r->log_tokens += s.tokens;
        r->tokens_seen += s.tokens;
        if (step < r->replay_end) {  // trained again after a rollback, as before: logged then
            // a stop waits for the last of them (the signal stays set, each step's reduction carries
            // it): a checkpoint inside the replay would have a resume log the steps after it twice
            if (s.preempt && done == r->replay_end) return stop_after(r, done, 0);
            continue;
        }
        // the step's metrics line, written once its log point and validation have added theirs
        char line[4096];
        int len = outputs_step(r, done, lr, &s, line, sizeof line);
        if (!s.applied) {
            nonfinite_count(r, done, &s);
            if (c->optim.on_nonfinite == NONFINITE_STOP || flags_given(c, "skip_nonfinite_steps"))
                log_msg("step %d: non-finite loss or gradient norm (%g, %g): update skipped (%d of --skip_nonfinite_steps %d)\n",
                        done, s.loss, s.gnorm, r->nonfinite, c->optim.skip_nonfinite_steps);
            else
                log_msg("step %d: non-finite loss or gradient norm (%g, %g): update skipped (%d so far; --on_nonfinite skip)\n",
                        done, s.loss, s.gnorm, r->nonfinite);
        }
        if (done % c->run.logging_freq == 0 || done == r->max_steps || done == r->start_step + 1)
            outputs_log_point(r, done, lr, &s, line, sizeof line, &len);
        int do_val = r->has_val && c->data.validation_freq > 0 && done % c->data.validation_freq == 0;
        // a skipped update writes no periodic checkpoint, but the last step's is written all the same
        // (the weights are the last good step's): a run that ends 0 leaves its final state
        int do_ckpt = c->ckpt.checkpoint_freq > 0 && ((s.applied && done % c->ckpt.checkpoint_freq == 0) || done == r->max_steps);
        int val_stopped = 0;
        double vl = do_val ? log_validation(r, done, &val_stopped) : 0.0;
        if (do_val && !val_stopped) outputs_validation(r, done, vl, line, sizeof line, &len);
        if (val_stopped) s.preempt = 1;
        outputs_step_done(r, line, sizeof line, len);
        prof_mark(r, do_val ? PROF_EVAL : -1);
        // the run's last checkpoint is written before it ends; a stop's comes below
        if (do_ckpt) save(r, done, done == r->max_steps || s.preempt);
        prof_mark(r, do_ckpt ? PROF_CKPT : -1);
        if (do_val || do_ckpt) r->t_log = clock_now_s();  // keep evaluation and I/O out of Speed
        if (s.preempt && done < r->max_steps) return stop_after(r, done, do_ckpt);
    }
    save_wait(r, "the end of training");
    return 0;
}

// After the last step: outputs closed, a validation-only run's pass, the sample, and the frees.
static int train_finish(Run *r, int status) {
    Config *c = r->cfg;
    const char *untraced = trace_close();
    if (untraced) comm_fail_all("%s", untraced);
    ckpt_release_dir();  // no more checkpoints: the directory is free for the next run
    prof_report(r, shard_step(&r->st) - r->start_step);
    kern_timers_report();
    outputs_close(r);
    int val_stopped = 0;
    if (r->max_steps == 0 && r->has_val && c->data.val_data[0]) log_validation(r, shard_step(&r->st), &val_stopped);
    else if (r->max_steps == 0)  // an evaluation without data must say so, not end in silence
        log_msg("nothing evaluated: this run trains no step and has no --val_data\n");
    if (val_stopped) status = TRAIN_EXIT_PREEMPTED;
    int wants_sample = !status && c->gen.num_tokens > 0 && (c->gen.prompt[0] || shard_step(&r->st) > r->start_step || c->optim.max_epochs < 0);
    if (wants_sample && r->no_text) {  // an explicit --prompt was refused at start-up
        log_msg("no sample: no tokenizer for a vocabulary of %d (pass --tokenizer to generate from the checkpoint)\n",
                c->model.vocab_size);
        wants_sample = 0;
    }
    if (wants_sample) {
        comm_stop_watch("generation");
        const char *failed = sample_generate(r);
        double stopped = failed ? OUTPUT_FAILED : comm_stop_signal;  // rank 0 generates; every rank exits alike
        comm_allreduce_max_f64(comm_world(), &stopped, 1);
        if (stopped >= OUTPUT_FAILED) comm_fail_all("%s", failed ? failed : "rank 0 could not write the generated text");
        if (stopped) {
            log_msg("Stopped by signal %d (%s) during generation; exiting with status %d\n", (int)stopped,
                    comm_signal_name((int)stopped), TRAIN_EXIT_PREEMPTED);
            status = TRAIN_EXIT_PREEMPTED;
        }
    }
    data_batch_free(r->batch);
    pack_plans_free(&r->plans);
    model_acts_free(&r->acts);
    ckpt_async_free(r->async);
    ckpt_snapshot_free(r->snapshot);
    free(r->skipped);
    shard_free(&r->st);
    model_plan_free(&r->plan);
    inputs_free(r);
    return status;
}

int train_run(Config *c) {
    Run r = {.cfg = c};
    int status = train_setup(&r);
    if (status) return status;
    return train_finish(&r, train_loop(&r));
}
