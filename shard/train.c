// train: the loop around the model and the shard engine.
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/ckpt.h"
#include "../kernels/kernels.h"
#include "../comm/comm.h"
#include "../data/data.h"
#include "../model/generate.h"
#include "../model/llama.h"
#include "shard.h"

float train_lr(const Config *c, int step, int max_steps) {
    int warmup = c->warmup < 1 ? (int)(c->warmup * max_steps + 0.5f) : (int)c->warmup;
    if (step < warmup) return c->lr * (float)(step + 1) / (float)warmup;
    if (!strcmp(c->lr_decay_style, "constant") || max_steps <= warmup) return c->lr;
    double progress = (double)(step - warmup) / (double)(max_steps - warmup);
    if (progress > 1) progress = 1;
    double f = !strcmp(c->lr_decay_style, "cosine") ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return (float)(c->min_lr + (c->lr - c->min_lr) * f);
}

typedef struct {
    Config *cfg;
    ModelPlan plan;
    ShardState st;
    Activations acts;
    Dataset train, val;
    DataLoader *train_loader, *val_loader;
    int has_train, has_val;
    int32_t *inp, *tgt;  // (B, T)
    int global_batch;    // sequences per optimizer step, over all ranks and micro-batches
    int max_steps, start_step;
    double flops_per_token;
    FILE *metrics;
} Run;

static void open_data(Run *r) {
    Config *c = r->cfg;
    int T = c->model.max_context_width, V = c->model.vocab_size, B = c->batch_size;
    if (strcmp(c->tokenizer, "byte") != 0) comm_fail_all("--tokenizer %s is not supported; use byte", c->tokenizer);
    char bundled[1024];
    data_bundled_path(bundled, sizeof bundled);
    if (r->max_steps != 0) {
        r->has_train = 1;
        if (!c->train_data[0])
            data_open(&r->train, bundled, T, V, 0.0, 0.9);  // the last 10% is held out for validation
        else if (!strcmp(c->train_data, "synthetic"))
            data_open_synthetic(&r->train, T, V);
        else
            data_open(&r->train, c->train_data, T, V, 0.0, 1.0);
        r->train_loader = data_loader_new(&r->train, (uint64_t)c->seed, B, 1);
    }
    if (c->val_data[0] || !c->train_data[0]) {
        r->has_val = 1;
        if (c->val_data[0]) data_open(&r->val, c->val_data, T, V, 0.0, 1.0);
        else data_open(&r->val, bundled, T, V, 0.9, 1.0);
        r->val_loader = data_loader_new(&r->val, 0, B, 0);
    }
}

// First global sample of micro-batch `micro` of `step` on this rank: a slice of the step's
// global batch that depends only on the global sample index (DESIGN invariant 2).
static uint64_t batch_first(const Run *r, int step, int micro) {
    return (uint64_t)step * r->global_batch + (uint64_t)(micro * comm_info.world + comm_info.rank) * r->cfg->batch_size;
}

// Takes this rank's micro-batch and starts reading the next one in the background.
static void fill_batch(Run *r, int step, int micro) {
    int next_step = step, next_micro = micro + 1;
    if (next_micro == r->cfg->grad_accum) next_step++, next_micro = 0;
    uint64_t next = next_step < r->max_steps ? batch_first(r, next_step, next_micro) : UINT64_MAX;
    data_loader_next(r->train_loader, batch_first(r, step, micro), next, r->inp, r->tgt);
}

// profiler range "<phase> unit <u>" (NVTX on GPU)
static void range(const char *phase, int u) {
    char name[48];
    snprintf(name, sizeof name, "%s unit %d", phase, u);
    kern_range_push(name);
}

double train_micro_step(ShardState *s, Activations *a, const int32_t *inp, const int32_t *tgt, float dscale,
                        int last_micro) {
    const ModelPlan *plan = s->plan;
    int L = plan->cfg.num_layers, T = a->T, head = L + 1, train = dscale != 0.0f;
    ShardPhase fwd = train ? PHASE_FWD : PHASE_EVAL;
    model_load_batch(a, inp, tgt, a->B * T);
    // forward: units 0..L, each prefetching the next; the head's forward runs with its backward
    size_t ND = (size_t)a->B * T * plan->cfg.hidden_width;
    range("forward", 0);
    model_embed_fwd(plan, shard_gather(s, 0, 1), a, T);
    shard_release(s, 0, fwd);
    shard_cast_activation(s, a->res, ND);
    kern_range_pop();
    for (int l = 0; l < L; l++) {
        range("forward", l + 1);
        model_block_fwd(plan, l, shard_gather(s, l + 1, l + 2), a, T, 0);
        shard_release(s, l + 1, fwd);
        shard_cast_activation(s, a->res + (l + 1) * ND, ND);
        kern_range_pop();
    }
    range(train ? "forward+backward" : "forward", head);
    const float *ph = shard_gather(s, head, train ? L : -1);
    double loss = model_head_fwd_bwd(plan, ph, train ? shard_grad_buffer(s, head) : NULL, a, 1, T, dscale);
    shard_release(s, head, train ? PHASE_BWD : PHASE_EVAL);
    if (train) shard_grad_ready(s, head, last_micro);
    kern_range_pop();
    if (!train) return loss;
    // backward: blocks high to low, each prefetching the one below; the embedding needs no weights
    for (int l = L - 1; l >= 0; l--) {
        range("backward", l + 1);
        const float *p = shard_gather(s, l + 1, l > 0 ? l : -1);
        if (a->recompute[l]) model_block_fwd(plan, l, p, a, T, 0);  // activation checkpointing
        model_block_bwd(plan, l, p, shard_grad_buffer(s, l + 1), a);
        shard_release(s, l + 1, PHASE_BWD);
        shard_grad_ready(s, l + 1, last_micro);
        kern_range_pop();
    }
    range("backward", 0);
    shard_release(s, 0, PHASE_BWD);
    model_embed_bwd(plan, shard_grad_buffer(s, 0), a);
    shard_grad_ready(s, 0, last_micro);
    kern_range_pop();
    return loss;
}

// --profile: wall time per phase of the step. The device is synchronised at each phase end so
// queued GPU work is charged to the phase that queued it (which costs some overlap).
enum { PROF_DATA, PROF_COMPUTE, PROF_REDUCE, PROF_OPTIM, PROF_EVAL, PROF_CKPT, PROF_N };
static const char *const prof_names[PROF_N] = {"data wait", "forward+backward", "gradient reduction",
                                               "clip+optimizer", "validation", "checkpoint"};
static double prof_sec[PROF_N], prof_t0;

static void prof_mark(const Run *r, int phase) {
    if (!r->cfg->profile) return;
    kern_sync();
    double now = comm_time();
    if (phase >= 0) prof_sec[phase] += now - prof_t0;
    prof_t0 = now;
}

static void prof_report(const Run *r, int steps) {
    if (!r->cfg->profile || steps <= 0) return;
    double total = 0.0;
    comm_allreduce_max_f64(comm_world(), prof_sec, PROF_N);  // the slowest rank per phase
    for (int i = 0; i < PROF_N; i++) total += prof_sec[i];
    comm_log("profile over %d steps (slowest rank per phase):\n", steps);
    for (int i = 0; i < PROF_N; i++)
        comm_log("  %-20s %9.3f s  %5.1f%%  %8.2f ms/step\n", prof_names[i], prof_sec[i],
                 100.0 * prof_sec[i] / (total > 0 ? total : 1), 1e3 * prof_sec[i] / steps);
}

// One optimizer step; returns the mean loss over the global batch and sets *gnorm.
static double train_step(Run *r, int step, float lr, double *gnorm) {
    Config *c = r->cfg;
    int T = c->model.max_context_width;
    float dscale = 1.0f / ((float)r->global_batch * T);  // gradient of the global mean loss
    double loss = 0.0;
    prof_mark(r, -1);
    shard_zero_grads(&r->st);
    for (int micro = 0; micro < c->grad_accum; micro++) {
        fill_batch(r, step, micro);
        prof_mark(r, PROF_DATA);
        loss += train_micro_step(&r->st, &r->acts, r->inp, r->tgt, dscale, micro == c->grad_accum - 1);
        prof_mark(r, PROF_COMPUTE);
    }
    shard_grads_finish(&r->st);
    comm_allreduce_sum_f64(comm_world(), &loss, 1);
    prof_mark(r, PROF_REDUCE);
    kern_range_push("optimizer");
    *gnorm = shard_clip_grads(&r->st, c->grad_clip);
    shard_adamw_step(&r->st, c, lr);
    kern_range_pop();
    prof_mark(r, PROF_OPTIM);
    return loss / ((double)r->global_batch * T);
}

static double validate(Run *r) {
    Config *c = r->cfg;
    int B = c->batch_size, T = c->model.max_context_width;
    double sums[2] = {0.0, 0.0};  // loss sum, token count
    for (int i = 0; i < c->validation_batches; i++) {
        uint64_t first = ((uint64_t)i * comm_info.world + comm_info.rank) * B;
        uint64_t next = i + 1 < c->validation_batches ? first + (uint64_t)comm_info.world * B : UINT64_MAX;
        data_loader_next(r->val_loader, first, next, r->inp, r->tgt);
        sums[0] += train_micro_step(&r->st, &r->acts, r->inp, r->tgt, 0.0f, 1);
        sums[1] += (double)B * T;
    }
    comm_allreduce_sum_f64(comm_world(), sums, 2);
    return sums[0] / sums[1];
}

static void log_validation(Run *r, int step) {
    double vl = validate(r);
    comm_log("Batch %d Validation loss: %.5f, perplexity: %.3f\n", step, vl, exp(vl));
}

static void save(Run *r, int step) {
    Config *c = r->cfg;
    CkptMeta meta = {.step = step,
                     .tokens_seen = (uint64_t)step * r->global_batch * c->model.max_context_width,
                     .data_position = (uint64_t)step * r->global_batch,
                     .rng_state = (uint64_t)c->seed};
    double bytes, sec = ckpt_save(c->checkpoint_dir, &r->st, c, &meta, &bytes);
    comm_log("Saved checkpoint %s/step_%08d.h5 in %.2f s (%.1f MB/s)\n", c->checkpoint_dir, step, sec,
             bytes / 1e6 / (sec > 0 ? sec : 1e-9));
    ckpt_prune(c->checkpoint_dir, c->num_kept_checkpoints);
}

static void resume(Run *r) {
    Config *c = r->cfg;
    if (!c->resume_from_checkpoint[0]) return;
    char file[1024];
    if (!ckpt_resolve(c->resume_from_checkpoint, file, sizeof file)) {
        const char *p = c->resume_from_checkpoint;
        size_t n = strlen(p);
        if (n > 3 && !strcmp(p + n - 3, ".h5")) comm_fail_all("checkpoint file '%s' does not exist", p);
        comm_log("No checkpoint found in %s, starting fresh\n", p);
        return;
    }
    CkptMeta meta;
    ckpt_load(file, &r->st, c, &meta);
    comm_log("Resumed from %s at step %d (%llu tokens seen)\n", file, meta.step, (unsigned long long)meta.tokens_seen);
}

static void emit_byte(int32_t tok, void *ctx) {
    (void)ctx;
    putchar(tok < 256 ? tok : '?');
}

static void sample(Run *r) {
    Config *c = r->cfg;
    // every rank helps gather the whole model; rank 0 generates
    int nu = r->plan.nunits;
    float *full[nu];
    const float *P[nu];
    for (int u = 0; u < nu; u++) {
        FlatUnit *f = &r->st.units[u];
        P[u] = full[u] = kern_alloc(f->padded * sizeof(float));
        comm_all_gather(r->st.shard_group, f->device_master, full[u], f->shard_len);
    }
    if (comm_info.rank != 0) {
        for (int u = 0; u < nu; u++) kern_free(full[u]);
        return;
    }
    int n = (int)strlen(c->prompt);
    int32_t *prompt = mallocCheck((size_t)(n + 1) * sizeof(int32_t));
    for (int i = 0; i < n; i++) prompt[i] = (unsigned char)c->prompt[i];
    if (!n) prompt[n++] = '\n';  // an empty prompt starts from a line break, not printed
    else fwrite(c->prompt, 1, n, stdout);
    model_generate(&r->plan, P, prompt, n, c->num_tokens, c->temperature, c->top_p, (uint64_t)c->seed, emit_byte, NULL);
    if (r->st.step > r->start_step) putchar('\n');  // a pure generate run prints the text and nothing else
    fflush(stdout);
    free(prompt);
    for (int u = 0; u < nu; u++) kern_free(full[u]);
}

void train_run(Config *c) {
    Run r = {.cfg = c};
    r.global_batch = c->batch_size * comm_info.world * c->grad_accum;
    r.max_steps = c->max_steps;
    model_plan_build(&r.plan, &c->model);
    // PaLM's count with H*hd = D: 6N + 12*L*D*T FLOPs per token (N: all parameters)
    r.flops_per_token = 6.0 * (double)r.plan.num_params +
                        12.0 * c->model.num_layers * c->model.hidden_width * c->model.max_context_width;
    open_data(&r);
    if (r.max_steps < 0) r.max_steps = 300;
    if (c->max_epochs > 0 && r.train.nchunks) {  // a synthetic dataset has no epochs
        int by_epochs = (int)(((uint64_t)c->max_epochs * r.train.nchunks + r.global_batch - 1) / r.global_batch);
        if (c->max_steps < 0 || by_epochs < r.max_steps) r.max_steps = by_epochs;
    }
    char desc[2048];
    config_describe(c, desc, sizeof desc);
    comm_log("fsdpc: %d rank(s) on %s, %d thread(s)/rank, %.2fM parameters\n%s\n", comm_info.world,
             kern_device_name(), c->num_threads, r.plan.num_params / 1e6, desc);
    if (c->cpu_offload && !kern_on_gpu())
        comm_log("--cpu_offload: no effect on the CPU device (parameters already live in host memory)\n");
    if (c->cpu_offload && kern_on_gpu())
        comm_log("--cpu_offload: master shards and AdamW moments in pinned host memory, AdamW on %d CPU threads\n",
                 c->num_threads);
    shard_init(&r.st, &r.plan, c);
    comm_log("sharding %s: shard group %d x replica group %d\n", c->sharding, r.st.shard_size, r.st.replica_size);
    int every = c->selective_checkpointing > 0 ? c->selective_checkpointing : c->activation_checkpoints ? 1 : 0;
    model_acts_alloc(&r.acts, &c->model, c->batch_size, c->model.max_context_width, 0, every);
    size_t bt = (size_t)c->batch_size * c->model.max_context_width;
    r.inp = mallocCheck(bt * sizeof(int32_t));
    r.tgt = mallocCheck(bt * sizeof(int32_t));
    resume(&r);
    if (c->metrics_file[0] && comm_info.rank == 0) r.metrics = fopenCheck(c->metrics_file, "a");

    int T = c->model.max_context_width, start = r.start_step = r.st.step;
    double t_log = comm_time();
    int steps_since_log = 0;
    for (int step = start; step < r.max_steps; step++) {
        float lr = train_lr(c, step, r.max_steps);
        double gnorm, loss = train_step(&r, step, lr, &gnorm);
        int done = step + 1;
        steps_since_log++;
        if (r.metrics)
            fprintf(r.metrics, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g}\n", done, loss, lr, gnorm);
        if (done % c->logging_freq == 0 || done == r.max_steps || done == start + 1) {
            double dt = comm_time() - t_log, samples = (double)steps_since_log * r.global_batch;
            // the largest rank's peak: device memory on a GPU, resident memory on the CPU
            double mem = kern_on_gpu() ? kern_peak_mem_mib() : comm_peak_mem_mib();
            comm_allreduce_max_f64(comm_world(), &mem, 1);
            char mfu[48] = "";
            double peak = kern_peak_flops();
            if (peak > 0)  // MFU against the dense bf16 peak
                snprintf(mfu, sizeof mfu, ", MFU: %.1f%%", 100.0 * samples * T / dt * r.flops_per_token / (peak * comm_info.world));
            comm_log("Batch %d Loss: %.5f, Speed: %.2f samples/sec, lr: %.6f, tokens/sec: %.0f%s, grad_norm: %.4f, mem: %.0f MiB\n",
                     done, loss, samples / dt, lr, samples * T / dt, mfu, gnorm, mem);
            t_log = comm_time();
            steps_since_log = 0;
        }
        int do_val = r.has_val && c->validation_freq > 0 && done % c->validation_freq == 0;
        int do_ckpt = c->checkpoint_dir[0] && c->checkpoint_freq > 0 && (done % c->checkpoint_freq == 0 || done == r.max_steps);
        if (do_val) log_validation(&r, done);
        prof_mark(&r, do_val ? PROF_EVAL : -1);
        if (do_ckpt) save(&r, done);
        prof_mark(&r, do_ckpt ? PROF_CKPT : -1);
        if (do_val || do_ckpt) t_log = comm_time();  // keep evaluation and I/O out of Speed
    }
    prof_report(&r, r.st.step - start);
    if (r.metrics) fclose(r.metrics);
    if (r.max_steps == 0 && r.has_val && c->val_data[0]) log_validation(&r, r.st.step);
    if (c->num_tokens > 0 && (c->prompt[0] || r.st.step > start)) sample(&r);
    free(r.inp);
    free(r.tgt);
    model_acts_free(&r.acts);
    shard_free(&r.st);
    if (r.has_train) {
        data_loader_free(r.train_loader);
        data_free(&r.train);
    }
    if (r.has_val) {
        data_loader_free(r.val_loader);
        data_free(&r.val);
    }
    model_plan_free(&r.plan);
}
