// train: the loop around the model and the shard engine.
#include "train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ckpt/ckpt.h"
#include "../ckpt/hf.h"
#include "../kernels/kernels.h"
#include "../base/checked.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../base/limits.h"
#include "../comm/trace.h"
#include "../data/data.h"
#include "../model/family.h"
#include "../data/source/ident.h"
#include "../data/source/source.h"
#include "../data/rows/sft.h"
#include "../data/text/tokenizer.h"
#include "../model/generate.h"
#include "../model/model.h"
#include "../shard/shard.h"
#include "flags.h"
#include "tboard.h"

// warm-up steps (below 1: a fraction of max_steps)
static int fraction_steps(float v, int max_steps) { return v < 1 ? (int)(v * max_steps + 0.5f) : (int)v; }

float train_lr(const Config *c, int step, int max_steps) {
    int warmup = fraction_steps(c->warmup, max_steps);
    if (step < warmup) return c->lr * (float)(step + 1) / (float)warmup;
    if (c->lr_decay_style == LR_DECAY_CONSTANT) return c->lr;
    // the decay runs from the end of warm-up (and of the plateau) to --lr_decay_iters (or the last step)
    int start = warmup + (c->lr_decay_style == LR_DECAY_PLATEAU ? fraction_steps(c->plateau, max_steps) : 0);
    int end = c->lr_decay_iters > 0 ? c->lr_decay_iters : max_steps;
    if (step < start) return c->lr;
    if (end <= start) return step < end ? c->lr : c->min_lr;
    double progress = (double)(step - start) / (double)(end - start);
    if (progress > 1) progress = 1;
    double f;
    switch (c->lr_decay_style) {
    case LR_DECAY_LINEAR: f = 1.0 - progress; break;
    case LR_DECAY_EXPONENTIAL: {  // Megatron's: halves over the decay, never below --min_lr
        double lr = c->lr * pow(0.5, progress);
        return (float)(lr > c->min_lr ? lr : c->min_lr);
    }
    default: f = 0.5 * (1.0 + cos(M_PI * progress)); break;  // cosine, and the plateau's descent
    }
    return (float)(c->min_lr + (c->lr - c->min_lr) * f);
}

typedef struct {
    Config *cfg;
    ModelPlan plan;
    ParallelDims dims;
    ShardState st;
    Activations acts;
    Dataset train, val;
    DataLoader *train_loader, *val_loader;
    int has_train, has_val;
    DataBatch *batch;    // this rank's micro-batch
    // the micro-batches of a step on this rank ([step & 1]: the step's and the next one's), and their count
    DataPlan **plans[2];
    int nplans[2], plans_step[2];
    long long truncated, lost;  // rows cut at the context so far (and of them, those left with no loss)
    double tokens_seen;         // loss-bearing targets trained on since step 0 (checkpoints carry it)
    // the data position: global sample sample_base starts step base_step (a resumed checkpoint's
    // data_position and step), so a resume with another global batch neither skips nor repeats samples
    uint64_t sample_base;
    int base_step;
    int global_batch;    // sequences per optimizer step, over all ranks and micro-batches
    // data-parallel place: the tp ranks of a tensor-parallel group read the same samples
    int dp_rank, dp_world, tp_rank;
    int max_steps, start_step;
    double flops_per_token;
    FILE *metrics;
    TBoard *tb;                // rank 0's --tensorboard_dir events file
    // rank 0: why a metrics line or TensorBoard event could not be written; the run ends at the next step
    char metrics_error[1400];
    int metrics_newline;       // the file ends in a line cut short (a crash, a full disk): the next line starts afresh
    Tokenizer *tok;
    // an evaluation of a checkpoint that recorded no tokenizer (it was trained on token ids) takes
    // the --tokenizer given, which is then not compared with that record
    int tok_added;
    // the model's vocabulary is not the byte tokenizer's, and no tokenizer maps text to its ids
    int no_text;
    char resume_file[1024];  // the checkpoint this run continues, or ""
    CkptMeta origin;         // run_id, parent and lineage recorded in this run's checkpoints
    HfModel *hf;             // --init_from a Hugging Face source
    int init_h5;             // --init_from an fsdpc checkpoint file
    CkptSource source;       // that source's side files (config.json, tokenizer_config.json...), passed on
    // what defines the run besides its flags (data/ident.h): the tokenizer, the training and the
    // validation data (nfiles < 0: none), recorded in every checkpoint (CkptMeta.inputs); and the
    // resumed checkpoint's record of them ("": none to compare with)
    IdentSource inputs[3];
    char recorded[CKPT_INPUTS_LEN];
} Run;

enum { INPUT_TOKENIZER, INPUT_TRAIN, INPUT_VAL, INPUTS };
static const char *const input_keys[INPUTS] = {"tokenizer", "train", "val"};
static const char *const input_labels[INPUTS] = {"tokenizer", "training data", "validation data"};

// A resumed run's input i is now `now`: held against the checkpoint's record of it. A change is an
// error naming it, unless --allow_changed_inputs says it is meant (a warning then). A record
// without that input (a validation set added on resume) has nothing to compare.
static void compare_input(Run *r, int i, const IdentSource *now) {
    IdentSource was;
    char err[512], what[1400], msg[4096];
    if (!r->recorded[0] || ident_parse(r->recorded, input_keys[i], &was, err, sizeof err) != 1) return;
    static const IdentWords words = {"now", "then", "new", "gone"};
    int changed = ident_diff(now, &was, &words, what, sizeof what);
    if (changed && i == INPUT_TOKENIZER) {
        char a[700], b[700];
        ident_describe(now, a, sizeof a);
        ident_describe(&was, b, sizeof b);
        snprintf(msg, sizeof msg, "the tokenizer %s differs from the one checkpoint '%s' was trained with, %s", a, r->resume_file, b);
    } else if (changed) {
        snprintf(msg, sizeof msg, "the %s '%s' changed since checkpoint '%s' was written: %s", input_labels[i], now->spec,
                 r->resume_file, what);
    }
    ident_source_free(&was);
    if (!changed) return;
    if (!r->cfg->allow_changed_inputs)
        comm_fail_all("%s; resume with the inputs the run used, or pass --allow_changed_inputs if the change is meant", msg);
    log_msg("warning: %s; going on with it (--allow_changed_inputs)\n", msg);
}

// Input i of this run is id: every rank must see the same, and a resume the run's own.
static void input_found(Run *r, int i, const IdentSource *id) {
    const char *e = i == INPUT_TOKENIZER ? ident_check_ranks(id, "tokenizer files") : NULL;  // data_open checks the data
    if (e) comm_fail_all("%s", e);
    // an evaluation or generation of a checkpoint (--max_steps 0, minimal_fsdp's --max_epochs -1) may use other data
    if ((i == INPUT_TOKENIZER && !r->tok_added) || (i != INPUT_TOKENIZER && r->max_steps != 0)) compare_input(r, i, id);
    if (r->inputs[i].nfiles >= 0) ident_source_free(&r->inputs[i]);
    ident_source_copy(&r->inputs[i], id);
}

static void train_identified(const IdentSource *id, void *ctx) { input_found(ctx, INPUT_TRAIN, id); }
static void val_identified(const IdentSource *id, void *ctx) { input_found(ctx, INPUT_VAL, id); }

// The resumed checkpoint's record of its run's inputs, checked once: a file from before the
// record existed, or a record this fsdpc cannot read, is resumed without comparing (said once).
static void read_recorded_inputs(Run *r) {
    CkptMeta *meta = mallocCheck(sizeof *meta);
    comm_check_all(ckpt_read_meta(r->resume_file, meta));
    snprintf(r->recorded, sizeof r->recorded, "%s", meta->inputs);
    free(meta);
    IdentSource probe;
    char err[512], unknown[512];
    if (!r->recorded[0]) {
        log_msg("Note: checkpoint %s records no run inputs (written before fsdpc recorded them): its tokenizer and data are not "
                "compared with this run's\n", r->resume_file);
        return;
    }
    for (int i = 0; i < INPUTS; i++) {
        if (ident_parse(r->recorded, input_keys[i], &probe, err, sizeof err) < 0) {
            log_msg("warning: checkpoint %s: its run_inputs cannot be read (%s): its tokenizer and data are not compared with this "
                    "run's\n", r->resume_file, err);
            r->recorded[0] = 0;
            return;
        }
        ident_source_free(&probe);
    }
    if (ident_unknown_keys(r->recorded, input_keys, unknown, sizeof unknown) == 0 && unknown[0])
        log_msg("warning: checkpoint %s: its run_inputs record %s, which this fsdpc does not compare\n", r->resume_file, unknown);
}

// The tokenizer's identity: its file, or "byte".
static void tokenizer_found(Run *r) {
    IdentSource id;
    char err[1400], path[sizeof r->cfg->tokenizer], *file = path;
    snprintf(path, sizeof path, "%s", tok_path(r->tok));
    const char *e = ident_source(path, &file, !tok_is_byte(r->tok), &id, err, sizeof err) ? err : NULL;
    comm_check_all(e);
    input_found(r, INPUT_TOKENIZER, &id);
    ident_source_free(&id);
}

// Whether a checkpoint's run_inputs name this run's training data as it is given: what tells the
// run's own lineage from others in one folder (a requeue repeats its command line) before the
// data's files are read; the files themselves are compared once the resumed one is chosen.
static int names_our_data(const char *recorded, void *ctx) {
    const Config *c = ctx;
    char bundled[1024], err[256];
    data_bundled_path(bundled, sizeof bundled);
    int synthetic = !strcmp(c->train_data, "synthetic") || (!c->train_data[0] && c->dataset_type == DATASET_SYNTHETIC);
    const char *spec = synthetic ? "synthetic" : c->train_data[0] ? c->train_data : bundled;
    IdentSource was;
    if (ident_parse(recorded, input_keys[INPUT_TRAIN], &was, err, sizeof err) != 1) return 0;
    int same = was.spec && !strcmp(was.spec, spec);
    ident_source_free(&was);
    return same;
}

// The files a data spec resolves to, noted as inputs before the outputs are opened, so that an
// output which is one of them is refused as such (data_open resolves them again, notes them, and
// reports what cannot be resolved).
static void note_data(const char *spec, const char *config, const char *split, const char *what) {
    SourceFiles hf;
    char err[1024];
    memset(&hf, 0, sizeof hf);
    if (!spec[0] || !strcmp(spec, "synthetic")) return;
    int found = source_resolve(spec, config, split, &hf, err, sizeof err);
    if (!found && !strcmp(split, "validation")) found = source_resolve(spec, config, "train", &hf, err, sizeof err);  // as data_open falls back
    for (int i = 0; found > 0 && i < hf.nfiles; i++) io_input(hf.files[i], what);
    source_files_free(&hf);
}

// The vocabulary the run's token files record (the larger of training's and validation's), 0 when
// they record none or the data is text (the tokenizer then decides); the file that says so in file.
static int train_vocab_recorded(const Config *c, const Tokenizer *tok, char *file, size_t filelen) {
    char val_file[1024] = "";
    int recorded = 0, val = 0;
    file[0] = 0;
    if (!tok_is_byte(tok)) return 0;
    recorded = data_recorded_vocab(c->train_data, c->dataset_config_name, c->train_split[0] ? c->train_split : "train", file,
                                   filelen);
    val = data_recorded_vocab(c->val_data, c->dataset_config_name, c->val_split[0] ? c->val_split : "validation", val_file,
                              sizeof val_file);
    if (val > recorded) snprintf(file, filelen, "%s", val_file);
    return val > recorded ? val : recorded;
}

// Where the model comes from, before anything is built: the checkpoint being resumed (its config
// and tokenizer win, so a requeued finetune continues), else --init_from, else the flags. Then
// the tokenizer, which sets the vocabulary unless something fixed it.
static void resolve_sources(Run *r) {
    Config *c = r->cfg;
    char tok_from_source[1024] = "", what[1100], err[1400], line[CKPT_ERR_LEN];
    const char *tok_source = NULL;
    unsigned known = 0;
    int found = c->resume_from_checkpoint[0] ?
                    ckpt_resolve(c->resume_from_checkpoint, names_our_data, c, r->resume_file, sizeof r->resume_file, line, sizeof line)
                                               : 1;  // none asked for: none missing
    if (found < 0) comm_fail_all("%s", line);
    if (!found) {
        const char *p = c->resume_from_checkpoint;
        size_t n = strlen(p);
        if (n > 3 && !strcmp(p + n - 3, ".h5")) comm_fail_all("checkpoint file '%s' does not exist", p);
        log_msg("No checkpoint found in %s, starting fresh\n", p);
    }
    const char *init = c->init_from;
    size_t ni = strlen(init);
    r->init_h5 = !r->resume_file[0] && ni > 3 && !strcmp(init + ni - 3, ".h5");
    // the run's inputs, which no output may replace (io.h); Hugging Face sources note their own files
    io_input(r->resume_file, "the checkpoint being resumed");
    if (r->init_h5) io_input(init, "--init_from");
    note_data(c->train_data, c->dataset_config_name, "train", "the training data");
    note_data(c->val_data, c->dataset_config_name, "validation", "the validation data");
    if (r->resume_file[0] || r->init_h5) {
        const char *file = r->resume_file[0] ? r->resume_file : init;
        const char *other = ckpt_check_same_file(file);
        if (other) comm_fail_all("%s", other);
        if (r->resume_file[0]) read_recorded_inputs(r);
        ModelConfig m = c->model;
        comm_check_all(ckpt_read_config(file, &m, tok_from_source, sizeof tok_from_source));
        snprintf(what, sizeof what, "checkpoint '%s'", file);
        flags_adopt_model(c, &m, known = MODEL_ALL, what);
        comm_check_all(ckpt_source_read(file, &r->source));
        tok_source = what;
        if (r->resume_file[0] && init[0]) log_msg("Resuming %s: --init_from %s is not loaded again\n", file, init);
    } else if (init[0]) {
        r->hf = hf_open(init, err, sizeof err);
        comm_check_all(r->hf ? NULL : err);
        ModelConfig m = c->model;
        known = hf_model_config(r->hf, &m);
        snprintf(what, sizeof what, "'%s'", hf_source_path(r->hf));
        flags_adopt_model(c, &m, known, what);
        hf_take_source(r->hf, &r->source);
        if (hf_tokenizer_path(r->hf)) snprintf(tok_from_source, sizeof tok_from_source, "%s", hf_tokenizer_path(r->hf));
        tok_source = what;
    } else {
        flags_no_source(c);
    }
    ckpt_source_share(&r->source);
    int tok_given = flags_given("tokenizer");
    // a checkpoint trained on token ids records the byte tokenizer, which says nothing about them
    int recorded_none = r->resume_file[0] && (!tok_from_source[0] || !strcmp(tok_from_source, "byte"));
    r->tok_added = recorded_none && tok_given && r->max_steps == 0 && strcmp(c->tokenizer, "byte");
    if (!tok_given && tok_from_source[0]) snprintf(c->tokenizer, sizeof c->tokenizer, "%s", tok_from_source);
    r->tok = tok_open(c->tokenizer, err, sizeof err);
    if (!r->tok && !tok_given && tok_from_source[0])
        comm_fail_all("%s names tokenizer '%s', which cannot be opened (%s); pass --tokenizer", tok_source, tok_from_source, err);
    comm_check_all(r->tok ? NULL : err);
    snprintf(c->tokenizer, sizeof c->tokenizer, "%s", tok_path(r->tok));  // recorded in checkpoints
    tokenizer_found(r);
    if (strcmp(c->tokenizer, "byte")) io_input(c->tokenizer, "the tokenizer");
    int V = tok_vocab_size(r->tok);
    int named = tok_given || tok_from_source[0] || strcmp(c->tokenizer, "byte");  // strcmp: a recipe's default
    if (!named && (c->size_origin[SIZE_V] == SIZE_FAMILY || c->size_origin[SIZE_V] == SIZE_DEFAULT)) {
        char file[1024];
        int recorded = train_vocab_recorded(c, r->tok, file, sizeof file);
        if (recorded) {
            c->model.vocab_size = recorded;
            c->size_origin[SIZE_V] = SIZE_DATA;
            log_msg("vocabulary: %d, recorded by data file '%s'\n", recorded, file);
        }
    }
    comm_check_all(flags_take_tokenizer_vocab(c, V, named, c->tokenizer, tok_source));
    if (r->tok_added)
        log_msg("checkpoint %s records no tokenizer (its training data were token ids): this evaluation takes --tokenizer %s\n",
                r->resume_file, c->tokenizer);
    // bytes fed to a model of another vocabulary, and its ids read back as bytes, would be noise
    r->no_text = tok_is_byte(r->tok) && c->model.vocab_size != V;
    if (r->no_text && flags_given("prompt") && c->num_tokens > 0)
        comm_fail_all("--prompt: the model's vocabulary is %d tokens, not the byte tokenizer's %d, and no tokenizer was given%s%s: "
                      "pass --tokenizer with the one its ids come from (encoder.json + vocab.bpe, a tokenizer.json or tokenizer.model)",
                      c->model.vocab_size, V, tok_source ? " or recorded in " : "", tok_source ? tok_source : "");
}

// Weights after the shards exist: the resumed checkpoint (everything), or --init_from (weights
// only: fresh AdamW moments, step 0, this run's own warmup and decay).
static void load_state(Run *r) {
    Config *c = r->cfg;
    char err[CKPT_ERR_LEN];
    if (r->resume_file[0]) {
        CkptMeta meta;
        if (ckpt_load(r->resume_file, &r->st, c, &meta, err, sizeof err)) comm_fail_all("%s", err);
        ckpt_lineage_of(&meta, r->origin.lineage, sizeof r->origin.lineage);
        snprintf(r->origin.parent, sizeof r->origin.parent, "%s", r->resume_file);
        log_msg("Resumed from %s at step %d (%llu tokens seen)\n", r->resume_file, meta.step,
                (unsigned long long)meta.tokens_seen);
        r->tokens_seen = (double)meta.tokens_seen;
        r->sample_base = meta.data_position;
        r->base_step = meta.step;
        // the sample order and dropout follow the seed: the run's own, unless another is asked for by name
        if (meta.rng_state != (uint64_t)c->seed) {
            if (flags_given("seed"))
                comm_fail_all("--seed %d differs from the seed %llu that %s was trained with: resuming with another seed "
                              "changes its data order and dropout; drop --seed to continue the run", c->seed,
                              (unsigned long long)meta.rng_state, r->resume_file);
            c->seed = (int)meta.rng_state;
            if (r->train_loader) {  // built before the checkpoint was read: rebuilt for the run's order
                data_loader_free(r->train_loader);
                r->train_loader = data_loader_new(&r->train, (uint64_t)c->seed, c->batch_size, 1);
            }
        }
        if (meta.data_position != (uint64_t)meta.step * r->global_batch)
            log_msg("Resuming at global sample %llu (the checkpoint's data position) with a global batch of %d\n",
                    (unsigned long long)meta.data_position, r->global_batch);
    } else if (r->init_h5) {
        if (ckpt_load_weights(c->init_from, &r->st, c, err, sizeof err)) comm_fail_all("%s", err);
        snprintf(r->origin.parent, sizeof r->origin.parent, "%s", c->init_from);
        log_msg("Initialized weights from %s (fresh optimizer state, step 0)\n", c->init_from);
    } else if (r->hf) {
        if (hf_load(r->hf, &r->st, c->allow_unused_weights, err, sizeof err)) comm_fail_all("%s", err);
        snprintf(r->origin.parent, sizeof r->origin.parent, "%s", hf_source_path(r->hf));
        log_msg("Initialized weights from %s (fresh optimizer state, step 0)\n", hf_source_path(r->hf));
        hf_close(r->hf);
        r->hf = NULL;
    }
}

int train_offload_horizon(const Config *c, int gpu) {
    return gpu && c->offload_activations ? c->activation_loading_horizon : 0;
}

int train_ckpt_every(const Config *c, int gpu) {
    int on = c->activation_checkpoints || train_offload_horizon(c, gpu) > 0;
    return !on ? 0 : c->selective_checkpointing > 0 ? c->selective_checkpointing : 1;
}

// bytes per rank under config c: shard state by kind into *e, plus activations into *acts; the
// kinds are the memory tracker's categories
static double rank_bytes(const Run *r, const Config *c, ShardMemEstimate *e, double *acts) {
    int B = c->batch_size, T = c->model.max_context_width;
    shard_estimate(&r->plan, c, &r->dims, e);
    *acts = (double)model_acts_bytes(&r->plan, B, T, 0, train_ckpt_every(c, 0), 0, NULL);
    return e->params + e->gathered + e->grads + e->optimizer + e->buffers + *acts;
}

// the activations a GPU holds (offloaded ones in pinned host memory, *host)
static double gpu_acts_bytes(const Run *r, const Config *c, double *host) {
    size_t h;
    double d = (double)model_acts_bytes(&r->plan, c->batch_size, c->model.max_context_width, 0, train_ckpt_every(c, 1),
                                        train_offload_horizon(c, 1), &h);
    if (host) *host = (double)h;
    return d;
}

// The part of rank_bytes a GPU holds (*e becomes the device's share): not the whole model an
// unsharded start builds on the host before sharding it, nor, under --cpu_offload, the master
// shard and AdamW moments, which then live in host memory (the device keeps a copy of the master
// shard for the gathers, so that much stays).
static double device_bytes(const Run *r, const Config *c, ShardMemEstimate *e, double *acts) {
    rank_bytes(r, c, e, acts);
    *acts = gpu_acts_bytes(r, c, NULL);
    e->params = e->optimizer / 2;  // the master shard: each of AdamW's two moments is its size
    if (c->cpu_offload) e->optimizer = 0;
    return e->params + e->gathered + e->grads + e->optimizer + e->buffers + *acts;
}

double train_memory_estimate(const ModelPlan *plan, const Config *c, const ParallelDims *dims, int device,
                             ShardMemEstimate *e, double *acts, double *acts_host) {
    Run r = {.plan = *plan, .dims = *dims};  // the two fields the estimate reads
    *acts_host = 0;
    if (device) gpu_acts_bytes(&r, c, acts_host);
    return (device ? device_bytes : rank_bytes)(&r, c, e, acts);
}

// Before allocating: this rank's estimated peak (shard state and buffers from shard's layout
// rules, activations from the model's) against what it may use: on the CPU, times the ranks on
// this node, against the node's memory; on a GPU, the part the device holds against the GPU's
// free memory. A run that cannot fit stops at once with what would fit, instead of being killed
// (or failing a cudaMalloc) later.
static void check_memory(Run *r) {
    const Config *c = r->cfg;
    const double G = 1024.0 * 1024.0 * 1024.0, M = 1024.0 * 1024.0;
    int gpu = kern_on_gpu();
    double (*bytes)(const Run *, const Config *, ShardMemEstimate *, double *) = gpu ? device_bytes : rank_bytes;
    ShardMemEstimate e, e2;
    // each rank has a GPU of its own, while the node's ranks share its host memory
    double acts, acts2, n = gpu ? 1 : comm_info.local_world, need = n * bytes(r, c, &e, &acts), avail;
    char limit[320];
    int known;
    if (gpu) {
        size_t free_b, total_b;
        kern_mem_info(&free_b, &total_b);
        avail = (double)free_b, known = total_b > 0;
        snprintf(limit, sizeof limit, "%.2f GiB free on %s (of %.2f GiB)", avail / G, kern_device_name(), total_b / G);
    } else {
        const char *source;
        avail = comm_mem_available(&source);
        const char *hook = getenv("FSDPC_TEST_MEM_AVAILABLE");  // tests pose as a smaller node
        if (hook) avail = atof(hook), source = "FSDPC_TEST_MEM_AVAILABLE";
        known = avail > 0;
        snprintf(limit, sizeof limit, "%.2f GiB available (%s)", avail / G, source);
    }
    // logged, so fsdpc plan's figures and the measured mem: can be held against it
    double acts_host = 0;
    if (gpu) gpu_acts_bytes(r, c, &acts_host);
    char host[80] = "";
    if (acts_host > 0) snprintf(host, sizeof host, "; offloaded activations %.1f MiB in pinned host memory", acts_host / M);
    log_msg("memory estimate per rank: %.1f MiB%s (parameters %.1f, gathered %.1f, gradients %.1f, optimizer %.1f, "
             "activations %.1f, buffers %.1f MiB%s)\n", need / n / M, gpu ? " on the GPU" : "", e.params / M, e.gathered / M,
             e.grads / M, e.optimizer / M, acts / M, e.buffers / M, host);
    if (!known || need <= avail) {
        comm_check_all(NULL);
        return;
    }
    // what would fit, cheapest change first: a smaller batch, recomputation, then on a GPU the
    // optimizer state in host memory
    static Config alt;
    alt = *c;
    char fits[256];
    snprintf(fits, sizeof fits, "more ranks on more %s (sharding divides parameters, gradients and optimizer state)", gpu ? "GPUs" : "nodes");
    while (alt.batch_size > 1 && n * bytes(r, &alt, &e2, &acts2) > avail) alt.batch_size /= 2;
    if (n * bytes(r, &alt, &e2, &acts2) <= avail) {
        snprintf(fits, sizeof fits, "--batch_size %d (and --grad_accum to keep the global batch)", alt.batch_size);
    } else if ((alt.activation_checkpoints = 1, n * bytes(r, &alt, &e2, &acts2) <= avail)) {
        snprintf(fits, sizeof fits, "--activation_checkpoints --batch_size %d", alt.batch_size);
    } else if (gpu && !c->offload_activations && (alt.offload_activations = 1, n * bytes(r, &alt, &e2, &acts2) <= avail)) {
        snprintf(fits, sizeof fits, "--offload_activations --batch_size %d (checkpointed blocks' inputs in pinned host memory)",
                 alt.batch_size);
    } else if (gpu && !c->cpu_offload) {
        alt = *c;
        alt.cpu_offload = 1;
        if (n * bytes(r, &alt, &e2, &acts2) <= avail)
            snprintf(fits, sizeof fits, "--cpu_offload (master weights and AdamW moments in host memory)");
    }
    char ranks[64] = "";
    if (!gpu) snprintf(ranks, sizeof ranks, " x %d rank(s) on this node", (int)n);
    static char msg[1024];
    snprintf(msg, sizeof msg,
             "estimated peak %smemory %.2f GiB per rank (parameters %.2f, gathered %.2f, gradients %.2f, optimizer %.2f, "
             "activations %.2f, buffers %.2f GiB)%s exceeds the %s; would fit: %s",
             gpu ? "device " : "", need / n / G, e.params / G, e.gathered / G, e.grads / G, e.optimizer / G, acts / G,
             e.buffers / G, ranks, limit, fits);
    comm_check_all(msg);  // nodes and GPUs differ in what they have: any rank's verdict ends the job
}

// Appends one line to --metrics_file and flushes it, so a run's curves can be followed and
// survive a crash. A failed write (a full disk) is kept in metrics_error: the step's reduction
// carries it to every rank, and the run ends there (train_step).
static void metrics_put(Run *r, const char *line) {
    if (!r->metrics) return;
    if (r->metrics_newline) fputc('\n', r->metrics), r->metrics_newline = 0;
    fputs(line, r->metrics);
    char what[600];
    snprintf(what, sizeof what, "--metrics_file '%s'", r->cfg->metrics_file);
    const char *e = io_write_error(r->metrics, what);
    if (!e) return;
    snprintf(r->metrics_error, sizeof r->metrics_error, "%s (the run stops: no later step is trained or saved)", e);
    fclose(r->metrics);
    r->metrics = NULL;
}

// Flushes the step's TensorBoard events, as metrics_put does its line; a failure ends the run alike.
static void tboard_step_done(Run *r) {
    if (!r->tb) return;
    const char *e = tboard_flush(r->tb);
    if (!e) return;
    if (!r->metrics_error[0])
        snprintf(r->metrics_error, sizeof r->metrics_error, "%s (the run stops: no later step is trained or saved)", e);
    tboard_close(r->tb);
    r->tb = NULL;
}

static int metrics_line(const char *s, size_t n) { return n >= 9 && !memcmp(s, "{\"step\": ", 9); }

// Why an existing --metrics_file must not be appended to, or NULL: it is empty, or its first and
// last lines are metrics lines as metrics_put writes them (a resumed run goes on with its file).
// Anything else is some other file that appending would spoil.
static const char *metrics_file_problem(Run *r, const char *path) {
    static char msg[1400];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return NULL;  // new, empty, or a stream (/dev/null)
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(msg, sizeof msg, "cannot read --metrics_file '%s': %s", path, strerror(errno)), msg;
    char head[4096], tail[4097];
    size_t nh = fread(head, 1, sizeof head, f), nt = 0;
    long from = st.st_size > (off_t)(sizeof tail - 1) ? (long)(st.st_size - (off_t)(sizeof tail - 1)) : 0;
    if (fseek(f, from, SEEK_SET) == 0) nt = fread(tail, 1, sizeof tail - 1, f);
    fclose(f);
    const char *bad = metrics_line(head, nh) && !memchr(head, 0, nh) ? NULL : "its first line";
    if (!bad) {  // the last line: after the last line break that is not the file's final byte
        r->metrics_newline = nt > 0 && tail[nt - 1] != '\n';
        size_t end = nt - (nt > 0 && tail[nt - 1] == '\n'), start = end;
        while (start > 0 && tail[start - 1] != '\n') start--;
        if ((start == 0 && from > 0) || !metrics_line(tail + start, end - start) || memchr(tail, 0, nt)) bad = "its last line";
    }
    if (!bad) return NULL;
    snprintf(msg, sizeof msg, "--metrics_file '%s' exists and is not a metrics file (%s is not a line fsdpc writes): it is appended "
             "to only when it holds metrics lines or is empty; give another path, or remove the file", path, bad);
    return msg;
}

// Makes the folder `path` (with its parents) that `flag` names: NULL, or the error line.
static const char *make_folder(const char *path, const char *flag) {
    static char err[1400];
    const char *e = comm_folder_problem(path, flag);
    if (e) return snprintf(err, sizeof err, "%s: give a folder (it is made when missing)", e), err;
    char part[1024];
    snprintf(part, sizeof part, "%s", path);
    for (char *p = part + 1;; p++) {
        char keep = *p;
        if (keep && keep != '/') continue;
        *p = 0;
        if (mkdir(part, 0755) != 0 && errno != EEXIST)
            return snprintf(err, sizeof err, "cannot create %s '%s': %s", flag, part, comm_path_error(part, errno)), err;
        *p = keep;
        if (!keep) break;
    }
    if (access(path, W_OK | X_OK) != 0)
        return snprintf(err, sizeof err, "cannot write to %s '%s': %s", flag, path, comm_path_error(path, errno)), err;
    return NULL;
}

// Output paths are checked before any work, not when the first checkpoint is due: rank 0
// creates the checkpoint directory (with its parents), opens the metrics file and starts the
// TensorBoard events file. The files may not be one of the run's inputs (noted by
// resolve_sources) or the other's file.
static void open_outputs(Run *r) {
    Config *c = r->cfg;
    static char err[1400];
    const char *e = NULL;
    if (comm_info.rank == 0 && r->max_steps != 0 && c->checkpoint_freq > 0) e = make_folder(c->checkpoint_dir, "--checkpoint_dir");
    // generated text goes to stdout: a file there is an output like the others
    if (!e && comm_info.rank == 0) e = io_output("/dev/stdout", "standard output");
    if (!e && comm_info.rank == 0 && c->metrics_file[0]) e = comm_output_path_problem(c->metrics_file, "--metrics_file", 0);
    if (!e && comm_info.rank == 0 && c->metrics_file[0]) e = io_output(c->metrics_file, "--metrics_file");
    if (!e && comm_info.rank == 0 && c->metrics_file[0]) e = metrics_file_problem(r, c->metrics_file);
    if (!e && comm_info.rank == 0 && c->metrics_file[0] && !(r->metrics = fopen(c->metrics_file, "a")))
        e = (snprintf(err, sizeof err, "cannot open --metrics_file '%s' for appending: %s", c->metrics_file,
                      comm_path_error(c->metrics_file, errno)), err);
    // a new events file per run, so nothing of an earlier run's is ever rewritten
    if (!e && comm_info.rank == 0 && c->tensorboard_dir[0]) e = make_folder(c->tensorboard_dir, "--tensorboard_dir");
    if (!e && comm_info.rank == 0 && c->tensorboard_dir[0] && !(r->tb = tboard_open(c->tensorboard_dir, err, sizeof err))) e = err;
    // each rank writes its own --trace_dir file, so each makes the folder (it may be a node's own)
    if (!e && c->trace_dir[0]) e = make_folder(c->trace_dir, "--trace_dir");
    comm_check_all(e);
}

// --use_nsys (the profiling recipe's nsys sbatch passes it): nsys profiles a process it starts,
// which fsdpc cannot do for itself, so a launch that is not under nsys is refused with the line
// that is. nsys shows in the environment of what it starts: NSYS_PROFILING_SESSION_ID, and
// NVTX_INJECTION64_PATH (how the NVTX ranges find its tracer).
static void check_nsys(const Config *c) {
    if (!c->use_nsys) return;
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

// Before the model is built, rank 0 claims --checkpoint_dir for this run (ckpt_claim_dir): a
// second run writing there, or a run into checkpoints of another lineage, stops now rather than
// at its first checkpoint. A run that writes none needs no claim.
// Every rank then checks that it sees that lock: a folder that differs between ranks (a relative
// path from other working directories, node-local storage) would hang the first checkpoint.
static void claim_checkpoint_dir(Run *r) {
    Config *c = r->cfg;
    if (r->max_steps == 0 || c->checkpoint_freq <= 0) return;
    comm_check_all(comm_info.rank == 0 ? ckpt_claim_dir(c->checkpoint_dir, r->origin.run_id, r->resume_file,
                                                        r->init_h5 ? c->init_from : "", c->overwrite_checkpoints)
                                       : NULL);
    comm_check_all(ckpt_check_claim(c->checkpoint_dir, r->origin.run_id));
}


// data_open, its error line ending the job on the ranks that found it; -1: stopped by a signal
static int open_dataset(Dataset *d, const DataSource *src, int T, int V, double from, double to) {
    char err[2048];
    int rc = data_open(d, src, T, V, from, to, err, sizeof err);
    if (rc == -1) comm_fail_all("%s", err);
    return rc < 0 ? -1 : rc;
}

// A source of the run's data: what --train_data / --val_data name, read with the run's tokenizer.
static DataSource data_source(Run *r, const char *spec, const char *split, const char *label) {
    const Config *c = r->cfg;
    return (DataSource){.spec = spec, .config = c->dataset_config_name, .split = split, .tok = r->tok, .ctx = r,
                        .text_column = c->text_column, .explicit_column = flags_given("text_column"),
                        .cache_dir = c->data_cache_dir, .label = label, .stop = &comm_stop_signal, .format = c->data_format,
                        .chat_template = c->chat_template, .train_on_inputs = c->train_on_inputs,
                        .document_masking = c->document_masking};
}

// Returns 1 when a preemption signal stopped a data cache build (on every rank alike), else 0.
static int open_data(Run *r) {
    Config *c = r->cfg;
    int T = c->model.max_context_width, V = c->model.vocab_size, B = c->batch_size;
    char bundled[1024];
    data_bundled_path(bundled, sizeof bundled);
    // the bundled Tiny Shakespeare is bytes: the default data of the byte tokenizer only
    int bundled_ok = tok_is_byte(r->tok), synthetic = !strcmp(c->train_data, "synthetic") ||
                                                      (!c->train_data[0] && c->dataset_type == DATASET_SYNTHETIC);
    if (r->max_steps != 0 && !c->train_data[0] && !synthetic && c->recipe_no_data[0]) comm_fail_all("%s", c->recipe_no_data);
    if (r->max_steps != 0 && !c->train_data[0] && !bundled_ok && !synthetic)
        comm_fail_all("with --tokenizer %s, give --train_data (text, JSON Lines, Arrow, Parquet, a Hugging Face dataset "
                      "folder or hub name, or token shards): the bundled text is read as bytes", c->tokenizer);
    if (r->max_steps != 0) {
        r->has_train = 1;
        DataSource src = data_source(r, c->train_data[0] ? c->train_data : bundled, c->train_split[0] ? c->train_split : "train",
                                     "training data");
        src.identified = train_identified;
        if (synthetic) {  // no files: the identity is the name
            IdentSource none;
            char *no_files = NULL, err[64];
            ident_source("synthetic", &no_files, 0, &none, err, sizeof err);
            input_found(r, INPUT_TRAIN, &none);
            ident_source_free(&none);
            data_open_synthetic(&r->train, T, V);
        } else if (open_dataset(&r->train, &src, T, V, 0.0, c->train_data[0] ? 1.0 : 0.9) < 0) return 1;  // the bundled text's last 10% validates
        if (c->packing && !r->train.rows && !synthetic)
            comm_fail_all("--packing packs finetuning rows (input_ids with attention_mask or labels, prompt/completion, "
                          "Alpaca, chat), and the training data is a token stream, already packed: use --document_masking "
                          "to keep its documents apart");
        if ((c->packing || c->document_masking) && synthetic)
            comm_fail_all("--%s needs documents, and synthetic data has none", c->packing ? "packing" : "document_masking");
        r->train_loader = data_loader_new(&r->train, (uint64_t)c->seed, B, 1);
    }
    DataSource val = data_source(r, c->val_data, c->val_split[0] ? c->val_split : "validation", "validation data");
    val.optional = !c->val_split[0];  // a split the command line named must exist
    val.identified = val_identified;
    if (c->val_data[0] || (!c->train_data[0] && bundled_ok)) {
        // named validation data: its validation split when it has splits, else all of it
        double from = c->val_data[0] ? 0.0 : 0.9;  // the bundled text's last 10%
        if (!c->val_data[0]) val.spec = bundled;
        r->has_val = open_dataset(&r->val, &val, T, V, from, 1.0);
        if (!r->has_val && !c->val_split[0]) {
            val.split = "train";
            val.optional = 0;
            r->has_val = open_dataset(&r->val, &val, T, V, from, 1.0);
        }
    } else if (c->train_data[0] && !synthetic) {
        // a dataset with splits validates on its own: --dataset allenai/c4 reads c4-validation too
        val.spec = c->train_data;
        r->has_val = open_dataset(&r->val, &val, T, V, 0.0, 1.0);
    }
    if (r->has_val < 0) return r->has_val = 0, 1;
    if (r->has_val) r->val_loader = data_loader_new(&r->val, 0, B, 0);
    return 0;
}

// First global sample of micro-batch `micro` of `step` on this rank: a slice of the step's
// global batch that depends only on the global sample index (DESIGN invariant 2).
// First global sample of `step`.
static uint64_t step_first(const Run *r, int step) {
    return r->sample_base + (uint64_t)(step - r->base_step) * r->global_batch;
}

static uint64_t batch_first(const Run *r, int step, int micro) {
    return step_first(r, step) + (uint64_t)(micro * r->dp_world + r->dp_rank) * r->cfg->batch_size;
}

// --packing: the step's samples, in order, each into the first of its contexts with room (first
// fit), so a step holds the same samples packed or not. Contexts go to ranks round robin, then to
// micro-batches of up to B rows; every rank runs as many micro-batches as the busiest. Depends
// only on the step and the data: every rank computes the same packing.
static int pack_step(Run *r, int step, DataPlan **plans) {
    const Dataset *d = &r->train;
    int G = r->global_batch, T = d->T, B = r->cfg->batch_size, W = r->dp_world, nrows = 0;
    uint64_t g0 = step_first(r, step);
    int *row_of = mallocCheck((size_t)G * sizeof(int)), *room = mallocCheck((size_t)G * sizeof(int));
    for (int i = 0; i < G; i++) {
        int len = data_sample_len(d, (uint64_t)r->cfg->seed, g0 + (uint64_t)i, 1), row = 0;
        while (row < nrows && room[row] < len) row++;
        if (row == nrows) room[nrows++] = T;
        room[row] -= len;
        row_of[i] = len ? row : -1;  // a row with nothing to predict needs no place
    }
    int mine = nrows / W + (r->dp_rank < nrows % W), most = (nrows + W - 1) / W;
    int nmicro = most ? (most + B - 1) / B : 1;
    for (int m = 0; m < nmicro; m++) {
        DataPlan *p = plans[m];
        int lo = m * B, hi = mine < lo + B ? mine : lo + B;  // this rank's rows of the micro-batch
        p->nrows = hi > lo ? hi - lo : 0;
        p->first[0] = 0;
        for (int k = 0; k < p->nrows; k++) {  // row k of the micro-batch is context (lo + k) * W + rank
            int ctx = (lo + k) * W + r->dp_rank, n = p->first[k];
            for (int i = 0; i < G; i++)
                if (row_of[i] == ctx) p->samples[n++] = g0 + (uint64_t)i;
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

// The plans of this rank's micro-batches of `step`: packed, or B samples each.
static void step_plans(Run *r, int step) {
    int k = step & 1;
    if (r->plans_step[k] == step) return;
    r->plans_step[k] = step;
    if (r->cfg->packing) {
        r->nplans[k] = pack_step(r, step, r->plans[k]);
        return;
    }
    r->nplans[k] = r->cfg->grad_accum;
    for (int m = 0; m < r->cfg->grad_accum; m++) data_plan_rows(r->plans[k][m], r->cfg->batch_size, batch_first(r, step, m));
}

// Takes this rank's micro-batch and starts reading the next one in the background.
static void fill_batch(Run *r, int step, int micro) {
    step_plans(r, step);
    int next_step = step, next_micro = micro + 1;
    if (next_micro == r->nplans[step & 1]) next_step++, next_micro = 0;
    const DataPlan *next = NULL;
    if (next_step < r->max_steps) {
        step_plans(r, next_step);
        next = r->plans[next_step & 1][next_micro];
    }
    char what[32];
    snprintf(what, sizeof what, "step %d", step + 1);
    const char *bad = data_loader_next(r->train_loader, r->plans[step & 1][micro], next, r->batch, what);
    if (bad) comm_fail_local("%s", bad);
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

void train_micro_step(ShardState *s, Activations *a, const int32_t *inp, const int32_t *tgt, const int32_t *kstart,
                      int rows, float dscale, int last_micro, int batch) {
    const ModelPlan *plan = shard_plan(s);
    int L = plan->cfg.num_layers, T = a->T, train = dscale != 0.0f, B = a->B;
    int embed = plan->embed_unit, b0 = plan->block0, head = plan->head_unit;
    ShardPhase fwd = train ? PHASE_FWD : PHASE_EVAL;
    if (!train) model_set_dropout(a, 0.0f, 0, 0);  // evaluation runs without dropout
    a->B = rows;  // a packed step's micro-batch may hold fewer rows: the buffers fit B, the kernels run rows
    model_load_batch(a, inp, tgt, kstart, rows * T, batch);
    // forward: the embedding, then the blocks, each prefetching the next unit; the head's forward
    // runs with its backward
    size_t ND = model_res_numel(a, plan->cfg.hidden_width, T);  // one residual-stream entry
    range("forward", embed);
    model_embed_fwd(plan, shard_gather(s, embed, L > 0 ? b0 : head), a, T, 0);
    shard_release(s, embed, fwd);
    float *x0 = model_res_f32(a, 0, plan->cfg.hidden_width);
    if (x0) shard_cast_activation(s, x0, ND);
    if (train) model_offload_fwd(a, 0);  // offloaded inputs head to the host once final; evaluation keeps them
    range_pop();
    for (int l = 0; l < L; l++) {
        range("forward", b0 + l);
        model_block_fwd(plan, l, shard_gather(s, b0 + l, l + 1 < L ? b0 + l + 1 : head), a, T, 0);
        shard_release(s, b0 + l, fwd);
        float *x = model_res_f32(a, l + 1, plan->cfg.hidden_width);
        if (x) shard_cast_activation(s, x, ND);
        if (train) model_offload_fwd(a, l + 1);
        range_pop();
    }
    range(train ? "forward+backward" : "forward", head);
    const void *ph = shard_gather(s, head, train && L > 0 ? b0 + L - 1 : -1);
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
        range("backward", b0 + l);
        const void *p = shard_gather(s, b0 + l, l > 0 ? b0 + l - 1 : -1);
        if (a->recompute[l]) {  // activation checkpointing
            model_offload_fetch(a, l);  // an offloaded input back from the host
            range("recompute", b0 + l);
            model_block_fwd(plan, l, p, a, T, 0);
            range_pop();
            model_offload_prefetch(a, l);  // the one `horizon` checkpointed blocks lower starts back
        }
        model_block_bwd(plan, l, p, shard_grad_buffer(s, b0 + l), a);
        shard_release(s, b0 + l, PHASE_BWD);
        shard_grad_ready(s, b0 + l, last_micro);
        range_pop();
    }
    range("backward", embed);
    shard_release(s, embed, PHASE_BWD);
    model_embed_bwd(plan, shard_grad_buffer(s, embed), a);
    shard_grad_ready(s, embed, last_micro);
    range_pop();
    a->B = B;
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
    double now = clock_now_s();
    if (phase >= 0) prof_sec[phase] += now - prof_t0;
    prof_t0 = now;
}

static void prof_report(const Run *r, int steps) {
    if (!r->cfg->profile || steps <= 0) return;
    double total = 0.0;
    comm_allreduce_max_f64(comm_world(), prof_sec, PROF_N);  // the slowest rank per phase
    for (int i = 0; i < PROF_N; i++) total += prof_sec[i];
    log_msg("profile over %d steps (slowest rank per phase):\n", steps);
    for (int i = 0; i < PROF_N; i++)
        log_msg("  %-20s %9.3f s  %5.1f%%  %8.2f ms/step\n", prof_names[i], prof_sec[i],
                100.0 * prof_sec[i] / (total > 0 ? total : 1), 1e3 * prof_sec[i] / steps);
}

// An id outside the vocabulary reached the kernels (the loader checks file data; this catches
// what the device was given, and the note costs no sync: it came with the loss). `what` and
// `step` (1-based) name the batch; `first` is its first global sample.
// A token id the device check replaced (kern_tokens_check) ends the run naming where it was:
// training step `step` (0-based), or with step < 0 the validation pass. Places are numbered
// across the step's (or pass's) batches, 2N per batch: inputs, then targets.
static void check_token_ids(const Run *r, int step) {
    long long at;
    int id;
    if (!kern_token_error(&at, &id)) return;
    long long N = (long long)r->acts.B * r->acts.T, batch = at / (2 * N);
    int T = r->acts.T;
    at %= 2 * N;
    int target = at >= N;
    if (target) at -= N;
    uint64_t first = step >= 0 ? batch_first(r, step, (int)batch)
                               : ((uint64_t)batch * r->dp_world + r->dp_rank) * (uint64_t)r->acts.B;
    comm_fail_local("%s %lld: sample %llu holds token id %d at %s position %lld, not in [0, --vocab_size %d)",
               step >= 0 ? "step" : "validation batch", step >= 0 ? step + 1LL : batch + 1, (unsigned long long)(first + (uint64_t)(at / T)),
               id, target ? "target" : "input", at % T, r->acts.V);
}

// More than any count of ranks: a stop signal on every rank still sums below it.
#define OUTPUT_FAILED 16777216.0

// One optimizer step; returns the mean loss over the global batch's loss-bearing targets (the
// gradients add up the loss sums, and AdamW divides by the global count, so every layout, packing
// and --grad_accum give one mean) and sets *gnorm and *tokens (that count). A non-finite loss or
// gradient norm skips the update (*applied = 0), and so does a step without a loss-bearing target. *preempt tells that some rank got a
// preemption signal: the flag rides on the step's one reduction (loss, flag, gradient norm), so
// every rank agrees at no extra cost. The loss stays on the device through the micro-batches and
// reaches the host with the gradient's sums of squares, in one wait per step.
static double train_step(Run *r, int step, float lr, double *gnorm, double *tokens, int *applied, int *preempt) {
    Config *c = r->cfg;
    prof_mark(r, -1);
    shard_zero_grads(&r->st);
    model_loss_reset(&r->acts);
    double mine = 0.0;  // this rank's loss-bearing targets
    step_plans(r, step);
    int nmicro = r->nplans[step & 1];
    for (int micro = 0; micro < nmicro; micro++) {
        trace_begin(TRACE_DATA, "data wait", -1);
        fill_batch(r, step, micro);
        trace_end(TRACE_DATA);
        mine += r->tp_rank ? 0.0 : (double)r->batch->loss_tokens;  // a tp group's tokens, once
        // masks keyed by the global sample index: equal for every layout, and on resume
        model_set_dropout(&r->acts, c->model.dropout, (uint64_t)c->seed, batch_first(r, step, micro));
        prof_mark(r, PROF_DATA);
        const DataPlan *p = r->plans[step & 1][micro];
        train_micro_step(&r->st, &r->acts, r->batch->inp, r->batch->tgt, r->batch->docs ? r->batch->kstart : NULL, p->nrows,
                         1.0f, micro == nmicro - 1, micro);
        prof_mark(r, PROF_COMPUTE);
    }
    shard_grads_finish(&r->st);
    ShardStepStats st;
    // clipping's norm: per-unit sums of squares, the loss and the token count in one reduction (the scaling runs inside AdamW)
    trace_begin(TRACE_COMPUTE, "clip grad norm", -1);
    // the flag: preemption signals count 1 each, a failed metrics or events write (rank 0's) OUTPUT_FAILED
    double flag = (comm_stop_signal != 0) + (r->metrics_error[0] ? OUTPUT_FAILED : 0);
    shard_step_stats(&r->st, r->acts.loss, flag, mine, &st);  // reduced over all ranks: they agree
    trace_end(TRACE_COMPUTE);
    if (st.flag >= OUTPUT_FAILED)  // before this step's update: nothing after the failed line is trained or saved
        comm_fail_all("%s", r->metrics_error[0] ? r->metrics_error : "rank 0 could not write --metrics_file or --tensorboard_dir");
    *preempt = st.flag > 0;
    prof_mark(r, PROF_REDUCE);
    kern_range_push("optimizer");
    *tokens = st.tokens;
    double inv = st.tokens > 0 ? 1.0 / st.tokens : 0.0;  // no loss-bearing target: loss 0, no update
    double loss = st.loss * inv;
    check_token_ids(r, step);  // the stream was just waited for: one small copy
    trace_counter("loss", loss);
    if (kern_on_gpu()) trace_counter("device memory", kern_peak_mem_mib());
    *gnorm = st.grad_norm * inv;
    *applied = isfinite(loss) && isfinite(*gnorm);
    trace_begin(TRACE_COMPUTE, "optimizer", -1);
    if (!(st.tokens > 0)) {
        log_msg("step %d: no target in the global batch bears loss (all padding or prompts): update skipped\n", step + 1);
        shard_set_step(&r->st, shard_step(&r->st) + 1);
    } else if (*applied) shard_adamw_step(&r->st, c, lr, *gnorm, inv);
    else shard_set_step(&r->st, shard_step(&r->st) + 1);  // the schedule still moves on, so a resumed run counts steps alike
    trace_end(TRACE_COMPUTE);
    kern_range_pop();
    prof_mark(r, PROF_OPTIM);
    return loss;
}

enum { MEM_TOTAL = KERN_MEM_NCAT, MEM_HELD, MEM_HOST, MEM_ROWS, MEM_N = 2 * MEM_ROWS + 1 };

// "x" MiB when every rank agrees (to 0.1 MiB), else "min..max"
static int mib_range(char *out, size_t cap, double lo, double hi) {
    const double M = 1024.0 * 1024.0;
    if (hi - lo < 0.05 * M) return snprintf(out, cap, "%.1f", hi / M);
    return snprintf(out, cap, "%.1f..%.1f", lo / M, hi / M);
}

// The memory tracker at log steps: per category (kernels.h KernMem), the bytes each rank holds
// now and held at most, then the allocator's view (the process's resident memory on the CPU; on
// a GPU what the caching allocator holds, its cached part, and the host buffers). Rank 0 logs
// the min and max over ranks and appends the same figures, in bytes, to the metrics line as
// "mem": {name: [now min, now max, peak min, peak max]} ("cached": [min, max]).
static void log_memory(int step, char *line, size_t cap, int *len) {
    KernMemStats st;
    kern_mem_stats(&st);
    int gpu = kern_on_gpu(), rows = gpu ? MEM_ROWS : MEM_HOST;
    double v[2 * MEM_N];  // now and peak per row, then cached; negated copies give the minima
    for (int c = 0; c < KERN_MEM_NCAT; c++) v[2 * c] = st.now[c], v[2 * c + 1] = st.peak[c];
    v[2 * MEM_TOTAL] = st.total, v[2 * MEM_TOTAL + 1] = st.total_peak;
    v[2 * MEM_HELD] = st.held, v[2 * MEM_HELD + 1] = st.held_peak;
    v[2 * MEM_HOST] = st.host, v[2 * MEM_HOST + 1] = st.host_peak;
    v[MEM_N - 1] = st.cached;
    for (int i = 0; i < MEM_N; i++) v[MEM_N + i] = -v[i];
    comm_allreduce_max_f64(comm_world(), v, 2 * MEM_N);
    if (comm_info.rank != 0) return;
    const double *hi = v, *lo_neg = v + MEM_N;
    char text[1024];
    size_t n = (size_t)snprintf(text, sizeof text, "Batch %d memory (MiB now/peak, min..max over ranks when they differ):", step);
    for (int row = 0; row < rows; row++) {
        const char *name = row < KERN_MEM_NCAT ? kern_mem_name(row)
                           : row == MEM_TOTAL  ? "total"
                           : row == MEM_HELD   ? (gpu ? "reserved" : "rss")
                                               : "host";
        n += snprintf(text + n, sizeof text - n, "%s %s ", row >= MEM_HELD ? ";" : row ? "," : "", name);
        n += mib_range(text + n, sizeof text - n, -lo_neg[2 * row], hi[2 * row]);
        n += snprintf(text + n, sizeof text - n, "/");
        n += mib_range(text + n, sizeof text - n, -lo_neg[2 * row + 1], hi[2 * row + 1]);
        if (row == MEM_HELD && gpu) {
            n += snprintf(text + n, sizeof text - n, " (cached ");
            n += mib_range(text + n, sizeof text - n, -lo_neg[MEM_N - 1], hi[MEM_N - 1]);
            n += snprintf(text + n, sizeof text - n, ")");
        }
        if (*len)
            *len += snprintf(line + *len, cap - *len, "%s\"%s\": [%.0f, %.0f, %.0f, %.0f]", row ? ", " : ", \"mem\": {", name,
                             -lo_neg[2 * row], hi[2 * row], -lo_neg[2 * row + 1], hi[2 * row + 1]);
    }
    log_msg("%s\n", text);
    if (*len && gpu) *len += snprintf(line + *len, cap - *len, ", \"cached\": [%.0f, %.0f]", -lo_neg[MEM_N - 1], hi[MEM_N - 1]);
    if (*len) *len += snprintf(line + *len, cap - *len, "}");
}

// The mean validation loss. stoppable (a run that only validates): a stop signal on any rank ends
// it at the next batch on every rank, returning NAN with *stopped set to the signal.
static double validate(Run *r, int stoppable, int *stopped) {
    Config *c = r->cfg;
    // a validation batch of --val_batch_size sequences per rank runs as micro-batches of at most
    // --batch_size rows, the size the activations were allocated for
    int B = c->batch_size, Bv = c->val_batch_size > 0 ? c->val_batch_size : B, parts = (Bv + B - 1) / B;
    int n = c->validation_batches * parts;
    double sums[2] = {0.0, 0.0};  // loss sum, loss-bearing targets
    model_loss_reset(&r->acts);
    DataPlan *plan[2] = {r->plans[0][0], r->plans[1][0]};  // the training plans are rebuilt after validation
    r->plans_step[0] = r->plans_step[1] = -1;
    for (int k = 0; k <= n; k++) {  // plans k (and k+1, read ahead), then micro-batch k
        if (k < n) {
            int i = k / parts, j = k % parts, rows = Bv - j * B < B ? Bv - j * B : B;
            data_plan_rows(plan[k & 1], rows, ((uint64_t)i * r->dp_world + r->dp_rank) * Bv + (uint64_t)j * B);
        }
        if (k == 0) continue;
        int m = k - 1, i = m / parts;
        if (stoppable && (*stopped = comm_stop_any())) {
            log_msg("Stopped by signal %d (%s) during validation, at batch %d of %d: no loss reported, nothing written; "
                    "exiting with status %d\n", *stopped, comm_signal_name(*stopped), i + 1, c->validation_batches,
                    TRAIN_EXIT_PREEMPTED);
            return NAN;
        }
        int rows = Bv - (m % parts) * B < B ? Bv - (m % parts) * B : B;
        const char *bad = data_loader_next(r->val_loader, plan[m & 1], k < n ? plan[k & 1] : NULL, r->batch, "validation");
        if (bad) comm_fail_local("%s", bad);
        train_micro_step(&r->st, &r->acts, r->batch->inp, r->batch->tgt, r->batch->docs ? r->batch->kstart : NULL, rows, 0.0f, 1, i);
        sums[1] += r->tp_rank ? 0.0 : (double)r->batch->loss_tokens;  // a tp group's tokens, once
    }
    sums[0] = model_loss_read(&r->acts);
    check_token_ids(r, -1);
    comm_allreduce_sum_f64(comm_world(), sums, 2);
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

// Training's periodic validation runs to its end (a stop then ends the run at the next step, with
// a checkpoint); a run that only validates passes stoppable and gets *stopped.
static double log_validation(Run *r, int step, int stoppable, int *stopped) {
    int none = 0;
    if (!stopped) stopped = &none;
    trace_begin(TRACE_COMPUTE, "validation", -1);
    double vl = validate(r, stoppable, stopped);
    trace_end(TRACE_COMPUTE);
    if (!*stopped) log_msg("Batch %d Validation loss: %.5f, perplexity: %.3f\n", step, vl, exp(vl));
    return vl;
}

static void save(Run *r, int step) {
    Config *c = r->cfg;
    // nothing non-finite reaches the disk, whatever produced it
    double sumsq = 0.0;
    for (int u = 0; u < shard_num_units(&r->st); u++) sumsq += kern_sumsq(shard_device_master(&r->st, u), shard_unit_len(&r->st, u));
    comm_allreduce_sum_f64(comm_world(), &sumsq, 1);
    if (!isfinite(sumsq))
        comm_fail_all("step %d: the weights hold NaN or Inf; no checkpoint written (the last good one is kept)", step);
    CkptMeta meta = r->origin;
    meta.step = step;
    meta.tokens_seen = (uint64_t)r->tokens_seen;
    meta.data_position = step_first(r, step);
    meta.rng_state = (uint64_t)c->seed;
    CkptSaved out;
    char err[CKPT_ERR_LEN];
    trace_begin(TRACE_COMPUTE, "checkpoint write", -1);
    if (ckpt_save(c->checkpoint_dir, &r->st, c, &meta, &r->source, &out, err, sizeof err)) comm_fail_all("%s", err);
    trace_end(TRACE_COMPUTE);
    log_msg("Saved checkpoint %s in %.2f s (%.1f MB/s)\n", out.path, out.seconds,
            out.bytes / 1e6 / (out.seconds > 0 ? out.seconds : 1e-9));
    ckpt_prune(c->checkpoint_dir, c->num_kept_checkpoints, &meta, out.path, r->resume_file);
}

typedef struct {
    const Tokenizer *tok;
    int32_t stop;  // a template's end-of-turn token (ChatML's <|im_end|>), or -1
    int32_t prev;
    char *text;  // the sample when it goes to a log, else NULL (streamed)
    size_t len, cap;
    const char *failed;  // why stdout could not be written, or NULL
} Emitter;

// streams each token's text as it comes (flushed, so a reader sees it at once and a failed write
// stops generation at that token), or keeps it for print_for_log; the end-of-text token ends
// the sample
static int emit_token(int32_t tok, void *ctx) {
    Emitter *e = ctx;
    if (tok == tok_eos(e->tok) || tok == e->stop || comm_stop_signal) return 0;
    char buf[256];
    size_t n = tok_piece_bytes(e->tok, e->prev, tok, buf, sizeof buf);
    e->prev = tok;
    if (!e->text) {
        fwrite(buf, 1, n, stdout);
        e->failed = io_write_error(stdout, "standard output");
        return e->failed == NULL;
    }
    if (e->len + n > e->cap) {
        e->cap = 2 * (e->len + n);
        char *grown = realloc(e->text, e->cap);
        if (!grown) err_fatal("out of memory keeping the sample (%zu bytes)", e->cap);
        e->text = grown;
    }
    memcpy(e->text + e->len, buf, n);
    e->len += n;
    return 1;
}

// The sample that ends a training run lands in job logs (slurm-*.out), where raw bytes of an
// undertrained byte model make grep call the file binary: bytes that are not UTF-8 text, and
// control characters other than newline and tab, are written as \xNN.
static void print_for_log(const char *s, size_t n) {
    const uint8_t *b = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t len = tok_utf8_len(b + i, n - i);
        if (len == 1 && (b[i] >= 0x20 || b[i] == '\n' || b[i] == '\t') && b[i] != 0x7f) putchar(b[i]);
        else if (len > 1) fwrite(b + i, 1, len, stdout);
        else printf("\\x%02x", b[i]);
        i += len ? len : 1;
    }
}

// Rank 0: the prompt, then the continuation, on stdout. Returns NULL, or why stdout could not
// be written (generation stops at the first failed write).
static const char *generate_text(Run *r, const void *const *P) {
    Config *c = r->cfg;
    // the prompt is encoded after <s> when the tokenizer has one; the byte tokenizer starts an
    // empty prompt from a line break, not printed
    size_t n = 0, cap = 0, len = strlen(c->prompt);
    int32_t *prompt = NULL;
    // a tokenizer without BOS starts an empty prompt from its end-of-text token, the byte tokenizer from '\n'
    int32_t start = tok_bos(r->tok) >= 0 ? tok_bos(r->tok) : len ? -1 : tok_eos(r->tok) >= 0 ? tok_eos(r->tok) : '\n';
    if (start >= 0) {
        prompt = mallocCheck(16 * sizeof(int32_t));
        cap = 16;
        prompt[n++] = start;
    }
    int32_t stop = -1;
    if (flags_given("chat_template")) {  // the prompt as the user's turn, in the format the model was finetuned on
        SftRow row = {0};
        SftMessage m = {.role = "user", .role_len = 4, .content = c->prompt, .content_len = len};
        char err[512];
        comm_check_all(sft_chat_encode(r->tok, (ChatTemplate)c->chat_template, &m, 1, 1, &row, err, sizeof err) ? err : NULL);
        n = 0;
        for (size_t i = 0; i < row.len; i++) {
            if (n == cap) prompt = realloc(prompt, (cap = 2 * cap + 16) * sizeof(int32_t));
            if (!prompt) err_fatal("out of memory");
            prompt[n++] = row.ids[i];
        }
        sft_row_free(&row);
        if (c->chat_template == CHAT_NONE && n > 1 && prompt[n - 1] == tok_eos(r->tok)) n--;  // the answer follows, not a new text
        if (c->chat_template == CHAT_CHATML) {  // ChatML's generation prompt: the assistant's turn opens
            static const char opener[] = "assistant\n";
            if (n + 1 > cap) prompt = realloc(prompt, (cap = n + 16) * sizeof(int32_t));
            if (!prompt) err_fatal("out of memory");
            prompt[n++] = tok_piece_id(r->tok, "<|im_start|>");
            tok_encode(r->tok, opener, sizeof opener - 1, &prompt, &n, &cap);
            stop = tok_piece_id(r->tok, "<|im_end|>");
        }
    } else {
        tok_encode(r->tok, c->prompt, len, &prompt, &n, &cap);
    }
    // a pure generation run writes the exact bytes, and so does a terminal; the sample after
    // training, redirected, is for a log
    int for_log = shard_step(&r->st) > r->start_step && !isatty(fileno(stdout));
    // under tensor parallelism the tp group's other ranks run the same forwards and print nothing
    int speak = comm_info.rank == 0;
    Emitter e = {.tok = r->tok, .stop = stop, .prev = prompt[n - 1], .text = for_log ? mallocCheck(256) : NULL, .cap = 256};
    if (speak && for_log) print_for_log(c->prompt, len);
    else if (speak) fwrite(c->prompt, 1, len, stdout);
    e.failed = speak ? io_write_error(stdout, "standard output") : NULL;
    if ((int)n > c->model.max_context_width)
        log_msg("the prompt's %zu tokens exceed the context; its last %d are used\n", n, c->model.max_context_width);
    int go = !e.failed;
    if (r->dims.tp > 1) comm_bcast_bytes(r->plan.tp_group, &go, sizeof go, 0);  // rank 0's write decides for its tp group
    if (go)
        model_generate(&r->plan, P, prompt, (int)n, c->num_tokens, c->temperature, c->top_p, (uint64_t)c->seed, emit_token, &e);
    if (speak && for_log && !e.failed) print_for_log(e.text, e.len);
    free(e.text);
    if (speak && shard_step(&r->st) > r->start_step && !e.failed) putchar('\n');  // a pure generate run prints the text and nothing else
    if (speak && !e.failed) e.failed = io_write_error(stdout, "standard output");
    free(prompt);
    return e.failed;
}

// Collective; returns NULL, or rank 0's reason why the text could not be written.
static const char *sample(Run *r) {
    // every rank helps gather the whole model; rank 0 generates
    int nu = r->plan.nunits;
    void **P = mallocCheck((size_t)nu * sizeof *P);
    for (int u = 0; u < nu; u++) {
        size_t n = shard_unit_padded(&r->st, u);
        float *full = kern_alloc(n * sizeof(float), KERN_MEM_GATHERED);
        comm_all_gather(shard_group(&r->st), shard_device_master(&r->st, u), full, shard_unit_len(&r->st, u));
        P[u] = full;
        if (kern_params_bf16()) {  // the kernels' parameter dtype (a GPU under --precision bf16)
            P[u] = kern_alloc(n * sizeof(uint16_t), KERN_MEM_GATHERED);
            kern_f32_to_bf16(P[u], full, n);
            kern_free(full);
        }
    }
    // rank 0 generates, with the rest of its tp group (ranks 0 .. tp-1) under tensor parallelism
    const char *failed = comm_info.rank < r->dims.tp ? generate_text(r, (const void *const *)P) : NULL;
    for (int u = 0; u < nu; u++) kern_free(P[u]);
    free(P);
    return failed;
}

int train_run(Config *c) {
    Run r = {.cfg = c};
    const double t_start = clock_now_s();
    for (int i = 0; i < INPUTS; i++) r.inputs[i].nfiles = -1;
    // A stop signal while loading ends the process at once: nothing is half-written then (the
    // checkpoint folder and --metrics_file are only created; the writer lock is registered with
    // comm_stop_unlink). The data cache build, training, validation and generation poll instead.
    comm_stop_phase("loading (tokenizer, model, data, checkpoint)");
    const char *sizes = flags_check_world(c, comm_info.world);
    if (sizes) comm_fail_all("%s", sizes);
    // the mesh puts a tp group on consecutive ranks (shard/parallel.h); parallel_dims_build below
    // refuses a degree that does not divide the world
    int tp = c->tensor_parallel_degree > 1 && comm_info.world % c->tensor_parallel_degree == 0 ? c->tensor_parallel_degree : 1;
    r.dp_world = comm_info.world / tp;
    r.dp_rank = comm_info.rank / tp;
    r.tp_rank = comm_info.rank % tp;
    r.global_batch = c->batch_size * r.dp_world * c->grad_accum;
    r.max_steps = c->max_epochs < 0 ? 0 : c->max_steps;  // minimal_fsdp's evaluate-then-generate trains nothing
    ckpt_new_run_id(r.origin.run_id);
    resolve_sources(&r);  // first, so the outputs are compared with the inputs it notes
    open_outputs(&r);
    check_nsys(c);
    if (c->trace_file[0] || c->trace_dir[0]) trace_open(c->trace_file, c->trace_dir, c->trace_steps[0], c->trace_steps[1]);
    comm_check_same(flags_hash(c), "model configuration or tokenizer after reading its sources (do the files differ between nodes?)");
    char big[1024];
    if (model_plan_build(&r.plan, &c->model, big, sizeof big)) comm_fail_all("%s", big);
    if ((sizes = model_check_sizes(&r.plan, c->batch_size, c->model.max_context_width))) comm_fail_all("%s", sizes);
    // said now, not after the steps up to the first checkpoint (each rank writes into the file)
    double ckpt_bytes = 3.0 * sizeof(float) * (double)r.plan.num_params, fmax = (double)limits_file_size();
    char fsize[400] = "";
    if (r.max_steps != 0 && c->checkpoint_freq > 0 && fmax < ckpt_bytes)
        snprintf(fsize, sizeof fsize, "checkpoints of this model take %.1f MB but ulimit -f (file size) allows %.1f MB on rank %d: raise it "
                 "(ulimit -f unlimited) or pass --checkpoint_freq 0", ckpt_bytes / 1e6, fmax / 1e6, comm_info.rank);
    comm_check_all(fsize[0] ? fsize : NULL);
    r.flops_per_token = model_flops_per_token(&r.plan, c->model.max_context_width);
    comm_stop_polled(1);
    if (open_data(&r)) {
        log_msg("Preempted (signal) while building the data cache: nothing trained, no partial cache left; exiting with "
                "status %d so the job can be requeued\n", TRAIN_EXIT_PREEMPTED);
        return TRAIN_EXIT_PREEMPTED;
    }
    comm_stop_polled(0);
    const IdentSource *found[INPUTS];
    for (int i = 0; i < INPUTS; i++) found[i] = r.inputs[i].nfiles >= 0 ? &r.inputs[i] : NULL;
    ident_line(r.origin.inputs, sizeof r.origin.inputs, input_keys, found, INPUTS);
    if (r.max_steps < 0) r.max_steps = 300;
    if (c->max_epochs > 0 && r.train.nchunks) {  // a synthetic dataset has no epochs
        uint64_t samples, steps;  // the steps --max_epochs passes over the data, saturating far above any run
        if (!checked_mul((uint64_t)c->max_epochs, r.train.nchunks, &samples)) samples = UINT64_MAX - INT32_MAX;
        steps = (samples + (uint64_t)r.global_batch - 1) / (uint64_t)r.global_batch;
        int by_epochs = steps > INT32_MAX ? INT32_MAX : (int)steps;
        if (c->max_steps < 0 || by_epochs < r.max_steps) r.max_steps = by_epochs;
    }
    int att_failed;  // the model's head dim is known only now
    const char *att = kern_select_attention(c->attention, c->precision == PRECISION_BF16, config_head_dim(&c->model),
                                            &att_failed);
    // the data files open_data noted, against the outputs (rank 0's): refused before anything is written
    comm_check_all(att_failed ? att : io_conflict());
    char desc[2048], origins[400];
    config_describe(c, desc, sizeof desc);
    flags_size_origins(c, origins, sizeof origins);
    log_msg("fsdpc: %d rank(s) on %s, %d thread(s)/rank, %.2fM parameters (%s)\n%s attention=%s\n", comm_info.world,
            kern_device_name(), c->num_threads, r.plan.num_params / 1e6, origins, desc, kern_attention_kernel());
    if (c->recipe_line[0]) log_msg("%s\n", c->recipe_line);
    if (c->recipe_note[0]) log_msg("%s\n", c->recipe_note);
    if (kern_peak_flops() > 0) log_msg("MFU against %.0f TFLOP/s dense bf16 per GPU\n", kern_peak_flops() / 1e12);
    int warmup = fraction_steps(c->warmup, r.max_steps);
    if (r.max_steps > 0 && warmup > r.max_steps)  // a recipe's warm-up on a short smoke run: the loss barely moves
        log_msg("--warmup %d is longer than this run's %d steps: the learning rate rises only to %g (%.2g%% of --lr %g) by "
                "the last step, so the loss moves little (a warm-up below 1 is a fraction of --max_steps)\n", warmup,
                r.max_steps, (double)c->lr * r.max_steps / warmup, 100.0 * r.max_steps / warmup, (double)c->lr);
    if (att) log_msg("fsdpc: %s\n", att);
    if (c->offload_activations && !kern_on_gpu())
        log_msg("--offload_activations: no effect on the CPU device (activations already live in host memory; "
                "checkpointing stays as the flags set it)\n");
    if (c->cpu_offload && !kern_on_gpu())
        log_msg("--cpu_offload: no effect on the CPU device (parameters already live in host memory)\n");
    if (c->cpu_offload && kern_on_gpu())
        log_msg("--cpu_offload: master shards and AdamW moments in pinned host memory, AdamW on %d CPU threads\n",
                c->num_threads);
    // nodes may differ in ranks per node (a hybrid default): any rank's objection ends the job
    comm_check_all(parallel_dims_build(&r.dims, c, comm_info.world, comm_info.local_world));
    if (r.dims.tp > 1)  // the group comes with the mesh, in shard_init
        model_plan_tp(&r.plan, r.dims.tp, r.tp_rank, NULL, r.dims.sequence_parallel);
    check_memory(&r);
    claim_checkpoint_dir(&r);
    shard_init(&r.st, &r.plan, c, &r.dims, !r.resume_file[0] && !r.init_h5 && !r.hf);
    r.plan.tp_group = r.st.tp_group;
    log_msg("sharding %s: shard group %d x replica group %d\n", config_sharding_name(r.dims.strategy), r.dims.shard_size,
            r.dims.replica_size);
    model_acts_alloc(&r.acts, &r.plan, c->batch_size, c->model.max_context_width, 0, train_ckpt_every(c, kern_on_gpu()),
                     train_offload_horizon(c, kern_on_gpu()));
    if (c->offload_activations && kern_on_gpu()) {
        const char *how = model_offload_describe(&r.acts);
        log_msg("--offload_activations: %s%s\n", c->activation_checkpoints ? "" : "activation checkpointing on (implied); ",
                how ? how
                    : "nothing to move: the checkpointed blocks are no more than --activation_loading_horizon + 1, all kept on "
                      "the device");
    }
    int nplans = c->packing ? c->grad_accum : c->grad_accum > 1 ? c->grad_accum : 1;
    r.batch = data_batch_new(c->batch_size, c->model.max_context_width);
    for (int k = 0; k < 2; k++) {
        r.plans[k] = mallocCheck((size_t)nplans * sizeof(DataPlan *));
        for (int m = 0; m < nplans; m++) r.plans[k][m] = data_plan_new(c->batch_size, c->model.max_context_width);
        r.plans_step[k] = -1;
    }
    load_state(&r);
    comm_stop_polled(1);

    int T = c->model.max_context_width, start = r.start_step = shard_step(&r.st);
    if (start < r.max_steps)  // the model's initial values or checkpoint, the data and the device, before any step
        log_msg("start-up: %.1f s to the first step on %d host thread(s)\n", clock_now_s() - t_start, c->num_threads);
    double t_log = clock_now_s(), tokens_since_log = 0.0;
    int steps_since_log = 0;
    int skipped = 0, status = 0;
    for (int step = start; step < r.max_steps; step++) {
        trace_step(step + 1);
        float lr = train_lr(c, step, r.max_steps);
        int applied, preempt;
        char step_range[32];  // nsys picks steps by it: --capture-range=nvtx --nvtx-capture="step N"
        snprintf(step_range, sizeof step_range, "step %d", step + 1);
        kern_range_push(step_range);
        double gnorm, tokens, loss = train_step(&r, step, lr, &gnorm, &tokens, &applied, &preempt);
        kern_range_pop();
        int done = step + 1;
        steps_since_log++;
        tokens_since_log += tokens;
        r.tokens_seen += tokens;
        // the step's metrics line, written once its log point and validation have added theirs
        char line[4096];
        int len = 0;
        if (!applied) {
            snprintf(line, sizeof line, "{\"step\": %d, \"loss\": null, \"lr\": %.9g, \"grad_norm\": null, \"skipped\": true}\n",
                     done, lr);
            metrics_put(&r, line);
            if (r.tb) tboard_scalar(r.tb, "train/lr", done, lr), tboard_step_done(&r);  // before a stop just below
            if (++skipped > c->skip_nonfinite_steps)
                comm_fail_all("step %d: non-finite %s (loss %g, gradient norm %g); stopped before the update, and no checkpoint "
                              "was written after it (--skip_nonfinite_steps N skips up to N such steps)",
                              done, isfinite(loss) ? "gradient norm" : "loss", loss, gnorm);
            log_msg("step %d: non-finite loss or gradient norm (%g, %g): update skipped (%d of --skip_nonfinite_steps %d)\n",
                    done, loss, gnorm, skipped, c->skip_nonfinite_steps);
        } else if (r.metrics) {
            // tokens: loss-bearing targets, this step's and those since this run started
            len = snprintf(line, sizeof line, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %.0f, "
                           "\"loss_tokens\": %.0f", done, loss, lr, gnorm, r.tokens_seen, tokens);
        }
        if (applied && r.tb) {  // TensorBoard's scalars: the metrics line's figures (docs/observability.md)
            tboard_scalar(r.tb, "train/loss", done, loss);
            tboard_scalar(r.tb, "train/lr", done, lr);
            tboard_scalar(r.tb, "train/grad_norm", done, gnorm);
            tboard_scalar(r.tb, "train/tokens", done, r.tokens_seen);
        }
        if (done % c->logging_freq == 0 || done == r.max_steps || done == start + 1) {
            double dt = clock_now_s() - t_log, samples = (double)steps_since_log * r.global_batch;
            // the largest rank's peak: device memory on a GPU, resident memory on the CPU
            double mem = kern_on_gpu() ? kern_peak_mem_mib() : comm_peak_mem_mib();
            comm_allreduce_max_f64(comm_world(), &mem, 1);
            char mfu[48] = "";
            double peak = kern_peak_flops();
            if (peak > 0)  // MFU against the dense bf16 peak, over the positions computed
                snprintf(mfu, sizeof mfu, ", MFU: %.1f%%", 100.0 * samples * T / dt * r.flops_per_token / (peak * comm_info.world));
            // tokens/sec counts loss-bearing targets: padding and prompts are work, not progress
            log_msg("Batch %d Loss: %.5f, Speed: %.2f samples/sec, lr: %.6f, tokens/sec: %.0f%s, grad_norm: %.4f, loss tokens: %.0f, "
                    "mem: %.0f MiB\n", done, loss, samples / dt, lr, tokens_since_log / dt, mfu, gnorm, tokens, mem);
            double cut[2] = {(double)r.truncated, (double)r.lost};
            comm_allreduce_sum_f64(comm_world(), cut, 2);
            if (cut[0] > 0)
                log_msg("%lld row%s longer than the context were cut to %d+1 tokens so far (%lld of them left with no loss-bearing "
                         "target)\n", (long long)cut[0], cut[0] == 1 ? "" : "s", T, (long long)cut[1]);
            if (len)  // measured, unlike the rest of the line: byte-exact comparisons drop these
                len += snprintf(line + len, sizeof line - len, ", \"tokens_per_s\": %.6g, \"mem_mib\": %.0f", tokens_since_log / dt, mem);
            if (len && peak > 0)
                len += snprintf(line + len, sizeof line - len, ", \"mfu\": %.4g", samples * T / dt * r.flops_per_token / (peak * comm_info.world));
            if (r.tb && applied) {  // a skipped step's line has only lr (above)
                tboard_scalar(r.tb, "perf/tokens_per_s", done, tokens_since_log / dt);
                tboard_scalar(r.tb, "mem/peak_mib", done, mem);
                if (peak > 0) tboard_scalar(r.tb, "perf/mfu", done, samples * T / dt * r.flops_per_token / (peak * comm_info.world));
            }
            log_memory(done, line, sizeof line, &len);
            t_log = clock_now_s();
            steps_since_log = 0;
            tokens_since_log = 0.0;
        }
        int do_val = r.has_val && c->validation_freq > 0 && done % c->validation_freq == 0;
        // a skipped step's weights are the last good step's: its checkpoint would only replay the failure
        int do_ckpt = applied && c->checkpoint_freq > 0 && (done % c->checkpoint_freq == 0 || done == r.max_steps);
        if (do_val) {
            double vl = log_validation(&r, done, 0, NULL);
            if (len) len += snprintf(line + len, sizeof line - len, ", \"val_loss\": %.9g", vl);
            if (r.tb) tboard_scalar(r.tb, "val/loss", done, vl);
        }
        if (len) {
            snprintf(line + len, sizeof line - len, "}\n");
            metrics_put(&r, line);
        }
        tboard_step_done(&r);
        prof_mark(&r, do_val ? PROF_EVAL : -1);
        if (do_ckpt) save(&r, done);
        prof_mark(&r, do_ckpt ? PROF_CKPT : -1);
        if (do_val || do_ckpt) t_log = clock_now_s();  // keep evaluation and I/O out of Speed
        if (preempt && done < r.max_steps) {
            int write = c->checkpoint_freq > 0 && !do_ckpt;
            if (write) save(&r, done);
            log_msg("Preempted (signal) after step %d: %s; exiting with status %d so the job can be requeued and resumed\n",
                    done, c->checkpoint_freq > 0 ? "checkpoint written" : "no checkpoint (--checkpoint_freq 0)", TRAIN_EXIT_PREEMPTED);
            status = TRAIN_EXIT_PREEMPTED;
            r.max_steps = done;  // leaves the loop; generation is skipped below
            break;
        }
    }
    trace_close();
    ckpt_release_dir();  // no more checkpoints: the directory is free for the next run
    prof_report(&r, shard_step(&r.st) - start);
    kern_timers_report();
    if (r.metrics && fclose(r.metrics) != 0 && !r.metrics_error[0])
        snprintf(r.metrics_error, sizeof r.metrics_error, "cannot write --metrics_file '%s': %s", c->metrics_file, strerror(errno));
    const char *tb_failed = tboard_close(r.tb);
    if (tb_failed && !r.metrics_error[0])
        snprintf(r.metrics_error, sizeof r.metrics_error, "%s", tb_failed);
    r.tb = NULL;
    // the last step's line and events
    if (c->metrics_file[0] || c->tensorboard_dir[0]) comm_check_all(r.metrics_error[0] ? r.metrics_error : NULL);
    int val_stopped = 0;
    if (r.max_steps == 0 && r.has_val && c->val_data[0]) log_validation(&r, shard_step(&r.st), 1, &val_stopped);
    if (val_stopped) status = TRAIN_EXIT_PREEMPTED;
    int wants_sample = !status && c->num_tokens > 0 && (c->prompt[0] || shard_step(&r.st) > start || c->max_epochs < 0);
    if (wants_sample && r.no_text) {  // an explicit --prompt was refused at start-up
        log_msg("no sample: no tokenizer for a vocabulary of %d (pass --tokenizer to generate from the checkpoint)\n",
                c->model.vocab_size);
        wants_sample = 0;
    }
    if (wants_sample) {
        const char *failed = sample(&r);
        double stopped = failed ? OUTPUT_FAILED : comm_stop_signal;  // rank 0 generates; every rank exits alike
        comm_allreduce_max_f64(comm_world(), &stopped, 1);
        if (stopped >= OUTPUT_FAILED) comm_fail_all("%s", failed ? failed : "rank 0 could not write the generated text");
        if (stopped) {
            log_msg("Stopped by signal %d (%s) during generation; exiting with status %d\n", (int)stopped,
                    comm_signal_name((int)stopped), TRAIN_EXIT_PREEMPTED);
            status = TRAIN_EXIT_PREEMPTED;
        }
    }
    data_batch_free(r.batch);
    for (int k = 0; k < 2; k++) {
        for (int m = 0; m < nplans; m++) data_plan_free(r.plans[k][m]);
        free(r.plans[k]);
    }
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
    for (int i = 0; i < INPUTS; i++)
        if (r.inputs[i].nfiles >= 0) ident_source_free(&r.inputs[i]);
    tok_free(r.tok);
    ckpt_source_free(&r.source);
    return status;
}
